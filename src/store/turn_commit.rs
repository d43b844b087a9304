//! A turn's commit: its entries appended, its inbox items consumed, its chat messages
//! remembered and its session record updated, in one sled transaction.
//!
//! Several turns can be committed in one transaction ([`Store::commit_turns`]). sled 0.34 seals
//! its log buffer and writes it out around every transaction (`pin_log`), and a transaction
//! holds sled's global write lock meanwhile, so one transaction per turn costs one log write
//! per turn and stalls every other writer. Each turn stays atomic either way.

use sled::transaction::{ConflictableTransactionError, TransactionError, TransactionalTree};
use sled::Transactional;

use super::{by_updated, channel, decode, encode, keys, ChannelMessage, SessionRecord, Store};
use super::{replica, StoreInner, TailStamp, TranscriptEntry};
use crate::error::StoreError;

/// Most turns committed in one transaction: bounds the transaction's write set (and the time
/// other writers wait for sled's write lock).
pub(crate) const MAX_TURNS_PER_COMMIT: usize = 64;

/// What a turn writes.
#[derive(Debug, Clone)]
pub struct TurnCommit {
    /// The session key.
    pub session_key: String,
    /// Entries to append, in order.
    pub entries: Vec<TranscriptEntry>,
    /// Inbox sequences the turn consumed.
    pub consumed: Vec<u64>,
    /// Commit time, ms since the epoch.
    pub now_ms: u64,
    /// Chat messages to remember for reply threads (the turn's messages and the group history
    /// they carried).
    pub channel_messages: Vec<ChannelMessage>,
    /// Set in a cluster: where the turn stands in its partition's changelog, written in the
    /// same transaction (see [`ReplicaMarks`]).
    pub replica: Option<ReplicaMarks>,
}

/// What a turn replicated through a cluster's changelog also writes, atomically with its
/// entries: the changelog position this node has applied for the partition (so a restarted
/// follower neither skips nor repeats a turn) and a mark per message the turn answered (so
/// whichever node owns the partition next does not answer it again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaMarks {
    /// The session's partition.
    pub partition: u32,
    /// The turn's sequence in the changelog stream.
    pub log_seq: u64,
    /// Ids of the messages the turn answered.
    pub answered: Vec<String>,
    /// When the answered marks expire, ms since the epoch (they live in the `dedupe` tree and
    /// are pruned with it).
    pub expires_at_ms: u64,
}

/// What a committed turn got.
#[derive(Debug, Clone)]
pub struct Committed {
    /// The session record after the commit.
    pub record: SessionRecord,
    /// The sequence numbers the entries got, in order.
    pub seqs: Vec<u64>,
    /// The group-commit ticket to wait on before the turn counts as durable.
    pub ticket: u64,
}

/// A turn prepared outside the transaction (encoding and id allocation cannot fail inside it).
struct Prepared<'a> {
    turn: &'a TurnCommit,
    /// Used only if the session turns out to be new (it may have been evicted since the caller
    /// last saw it); an unused id is simply skipped.
    new_id: u64,
    encoded: Vec<(Vec<u8>, &'a TranscriptEntry)>,
    inbox_keys: Vec<Vec<u8>>,
    channel_writes: Vec<(Vec<u8>, Vec<u8>)>,
    /// The writes of [`TurnCommit::replica`].
    replica_writes: Option<ReplicaWrites>,
}

/// A key and its value.
type Write = (Vec<u8>, Vec<u8>);

/// What a replicated turn's marks write: the answered marks (`dedupe`) and the applied
/// position (`channel_state`).
struct ReplicaWrites {
    answered: Vec<Write>,
    applied: Write,
}

/// What the transaction did for one turn.
struct Applied {
    /// The session's stamp before the turn, `None` for a session the turn created.
    before: Option<TailStamp>,
    /// The record the turn replaced, for the store's totals.
    replaced: Option<SessionRecord>,
    record: SessionRecord,
    seqs: Vec<u64>,
    consumed: usize,
    inbox_freed: u64,
}

type Trees<'t> = (
    &'t TransactionalTree,
    &'t TransactionalTree,
    &'t TransactionalTree,
    &'t TransactionalTree,
    &'t TransactionalTree,
);

impl Store {
    /// Commits one turn atomically.
    pub fn commit_turn(&self, turn: &TurnCommit) -> Result<Committed, StoreError> {
        let mut done = self.commit_turns(std::slice::from_ref(turn))?;
        done.pop().ok_or(StoreError::Invariant(
            "a one-turn commit returned no result",
        ))
    }

    /// Commits `turns` in one transaction: all of them or none. Results are in input order.
    /// Two turns of one session are applied in order.
    pub fn commit_turns(&self, turns: &[TurnCommit]) -> Result<Vec<Committed>, StoreError> {
        if turns.is_empty() {
            return Ok(Vec::new());
        }
        self.check_writable()?;
        let _write = self.write_gate();
        let inner = self.inner();
        let prepared = turns
            .iter()
            .map(|turn| prepare(&inner, turn))
            .collect::<Result<Vec<_>, _>>()?;
        let storage_failed = |e: TransactionError<StoreError>| match e {
            TransactionError::Abort(e) => e,
            TransactionError::Storage(source) => self.write_failed(StoreError::Sled {
                context: "committing a turn",
                source,
            }),
        };
        // Only a cluster's turns touch the two extra trees: a single node's transaction keeps
        // its five.
        let applied = if prepared.iter().any(|p| p.replica_writes.is_some()) {
            (
                &inner.sessions,
                &inner.transcript,
                &inner.inbox,
                &inner.by_updated,
                &inner.channel_messages,
                &inner.dedupe,
                &inner.channel_state,
            )
                .transaction(
                    |(sessions, transcript, inbox, by_updated, channel_messages, dedupe, state)| {
                        let trees = (sessions, transcript, inbox, by_updated, channel_messages);
                        prepared
                            .iter()
                            .map(|p| {
                                apply_replica(dedupe, state, p)?;
                                apply(trees, p)
                            })
                            .collect::<Result<Vec<_>, _>>()
                    },
                )
                .map_err(storage_failed)?
        } else {
            (
                &inner.sessions,
                &inner.transcript,
                &inner.inbox,
                &inner.by_updated,
                &inner.channel_messages,
            )
                .transaction(
                    |(sessions, transcript, inbox, by_updated, channel_messages)| {
                        let trees = (sessions, transcript, inbox, by_updated, channel_messages);
                        prepared
                            .iter()
                            .map(|p| apply(trees, p))
                            .collect::<Result<Vec<_>, _>>()
                    },
                )
                .map_err(storage_failed)?
        };
        for (a, p) in applied.iter().zip(&prepared) {
            let written: Vec<_> = a.seqs.iter().copied().zip(p.turn.entries.iter()).collect();
            inner
                .tails
                .appended(a.before, TailStamp::of(&a.record), &written);
            self.shared
                .totals
                .replace(a.replaced.as_ref(), Some(&a.record));
        }
        self.shared.ledger.committed(turns.len());
        let consumed: usize = applied.iter().map(|a| a.consumed).sum();
        let queued = &self.shared.queued;
        queued.fetch_sub(
            consumed.min(queued.load(std::sync::atomic::Ordering::Relaxed)),
            std::sync::atomic::Ordering::Relaxed,
        );
        let inbox_freed = applied.iter().map(|a| a.inbox_freed).sum();
        self.shared.meter.sub_inbox(inbox_freed);
        self.shared
            .meter
            .add(prepared.iter().map(written_bytes).sum());
        let ticket = inner.commit.ticket();
        Ok(applied
            .into_iter()
            .map(|a| Committed {
                record: a.record,
                seqs: a.seqs,
                ticket,
            })
            .collect())
    }
}

fn prepare<'a>(inner: &StoreInner, turn: &'a TurnCommit) -> Result<Prepared<'a>, StoreError> {
    Ok(Prepared {
        turn,
        new_id: inner.next_id()?,
        encoded: turn
            .entries
            .iter()
            .map(|e| encode(e).map(|b| (b, e)))
            .collect::<Result<_, _>>()?,
        inbox_keys: turn
            .consumed
            .iter()
            .map(|s| keys::inbox_key(&turn.session_key, *s))
            .collect(),
        channel_writes: channel::writes(&turn.session_key, &turn.channel_messages)?,
        replica_writes: match &turn.replica {
            None => None,
            Some(r) => {
                let expiry = encode(&r.expires_at_ms)?;
                let answered = r
                    .answered
                    .iter()
                    .map(|id| {
                        (
                            replica::answered_key(&turn.session_key, id).into_bytes(),
                            expiry.clone(),
                        )
                    })
                    .collect();
                Some(ReplicaWrites {
                    answered,
                    applied: replica::applied_write(r.partition, r.log_seq),
                })
            }
        },
    })
}

/// Writes a replicated turn's marks (see [`ReplicaMarks`]).
fn apply_replica(
    dedupe: &TransactionalTree,
    state: &TransactionalTree,
    p: &Prepared<'_>,
) -> Result<(), ConflictableTransactionError<StoreError>> {
    if let Some(writes) = &p.replica_writes {
        for (k, v) in &writes.answered {
            dedupe.insert(k.as_slice(), v.as_slice())?;
        }
        let (k, v) = &writes.applied;
        state.insert(k.as_slice(), v.as_slice())?;
    }
    Ok(())
}

/// Bytes a turn adds to the live-byte meter (entries with their keys, chat messages).
fn written_bytes(p: &Prepared<'_>) -> u64 {
    p.encoded
        .iter()
        .map(|(b, _)| b.len() as u64 + 16)
        .sum::<u64>()
        + p.channel_writes
            .iter()
            .map(|(k, v)| (k.len() + v.len()) as u64)
            .sum::<u64>()
}

fn apply(
    (sessions, transcript, inbox, by_updated, channel_messages): Trees<'_>,
    p: &Prepared<'_>,
) -> Result<Applied, ConflictableTransactionError<StoreError>> {
    let key = p.turn.session_key.as_str();
    let now_ms = p.turn.now_ms;
    let stored = match sessions.get(key)? {
        Some(bytes) => Some(
            decode::<SessionRecord>("sessions", &bytes)
                .map_err(ConflictableTransactionError::Abort)?,
        ),
        None => None,
    };
    let before = stored.as_ref().map(TailStamp::of);
    let replaced = stored.clone();
    let mut record = match stored {
        Some(record) => record,
        None => SessionRecord {
            id: p.new_id,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            next_seq: 1,
            entries: 0,
            tokens: 0,
            bytes: 0,
            compaction_count: 0,
        },
    };
    let mut seqs = Vec::with_capacity(p.encoded.len());
    for (bytes, entry) in &p.encoded {
        let seq = record.next_seq;
        transcript.insert(&keys::transcript_key(record.id, seq), bytes.as_slice())?;
        record.next_seq += 1;
        record.entries += 1;
        record.tokens += u64::from(entry.tokens);
        record.bytes += bytes.len() as u64;
        seqs.push(seq);
    }
    let mut consumed = 0usize;
    let mut inbox_freed = 0u64;
    for k in &p.inbox_keys {
        if let Some(old) = inbox.remove(k.as_slice())? {
            consumed += 1;
            inbox_freed += (k.len() + old.len()) as u64;
        }
    }
    for (k, v) in &p.channel_writes {
        channel_messages.insert(k.as_slice(), v.as_slice())?;
    }
    // The index holds the minute (see `by_updated`): most turns leave the entry where it is.
    if before.is_none() {
        by_updated.insert(by_updated::key(now_ms, key), &[])?;
    } else if by_updated::moves(record.updated_at_ms, now_ms) {
        by_updated.remove(by_updated::key(record.updated_at_ms, key))?;
        by_updated.insert(by_updated::key(now_ms, key), &[])?;
    }
    record.updated_at_ms = now_ms;
    let bytes = encode(&record).map_err(ConflictableTransactionError::Abort)?;
    sessions.insert(key.as_bytes(), bytes)?;
    Ok(Applied {
        before,
        replaced,
        record,
        seqs,
        consumed,
        inbox_freed,
    })
}
