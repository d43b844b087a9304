//! Storage on sled: sessions, transcripts and the durable inbox, in one database per data dir.
//!
//! Trees: `sessions` (session key → [`SessionRecord`]), `transcript` (session id + seq →
//! [`TranscriptEntry`]), `inbox` (session key + NUL + inbox seq → [`InboxRecord`]), `meta`
//! (schema version), `dedupe` (preflight dedupe key → expiry ms, see `dedupe.rs`),
//! `channel_messages` (chat messages by id, time and parent, for reply threads; see
//! `channel.rs`). A turn's commit touches `sessions`, `transcript`, `inbox` and
//! `channel_messages` in one transaction, so a turn is either wholly stored and consumed or not
//! at all.

mod channel;
mod channel_state;
mod codec;
mod compact;
mod dedupe;
mod delete;
mod durability;
mod keys;
mod records;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;

pub use codec::{decode, encode, VALUE_VERSION};
pub use compact::{SummarySwap, SwapOutcome};
pub use dedupe::{DedupeMark, DEDUPE_PRUNE_ON_OPEN, DEDUPE_PRUNE_PER_WRITE};
pub use delete::SessionDeletion;
pub use durability::GroupCommit;
pub use records::{
    ChannelMessage, EntryKind, EntrySender, HistoryLine, InboxRecord, SessionRecord, SystemEvent,
    ToolInfo, TranscriptEntry,
};

use crate::config::StorageConfig;
use crate::error::StoreError;

/// The schema version this build writes.
pub const SCHEMA_VERSION: u8 = 1;
const SCHEMA_KEY: &[u8] = b"schema_version";

/// The sled database and its trees. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<StoreInner>,
}

struct StoreInner {
    db: sled::Db,
    sessions: sled::Tree,
    transcript: sled::Tree,
    inbox: sled::Tree,
    dedupe: sled::Tree,
    /// Where the incremental prune of `dedupe` continues (see `dedupe.rs`).
    dedupe_cursor: std::sync::Mutex<Vec<u8>>,
    channel_messages: sled::Tree,
    commit: GroupCommit,
    queued: AtomicUsize,
    data_dir: PathBuf,
}

/// One accepted inbox item, as handed to a lane.
#[derive(Debug, Clone)]
pub struct InboxItem {
    /// Position in the inbox (monotonic across the database).
    pub seq: u64,
    /// The stored record.
    pub record: Arc<InboxRecord>,
}

/// What a turn writes in one transaction.
#[derive(Debug)]
pub struct TurnCommit<'a> {
    /// The session key.
    pub session_key: &'a str,
    /// Entries to append, in order.
    pub entries: Vec<TranscriptEntry>,
    /// Inbox sequences the turn consumed.
    pub consumed: Vec<u64>,
    /// Commit time, ms since the epoch.
    pub now_ms: u64,
    /// Chat messages to remember for reply threads (the turn's messages and the group history
    /// they carried).
    pub channel_messages: Vec<ChannelMessage>,
}

impl Store {
    /// Opens (or creates) the database under `config.data_dir`. Must be called inside a tokio
    /// runtime (it starts the group-commit flusher).
    pub fn open(config: &StorageConfig) -> Result<Self, StoreError> {
        let data_dir = config.data_dir.clone();
        std::fs::create_dir_all(&data_dir).map_err(|source| StoreError::DataDir {
            path: data_dir.clone(),
            source,
        })?;
        let db = sled::Config::new()
            .path(data_dir.join("db"))
            .cache_capacity(config.cache_capacity_bytes)
            .flush_every_ms(Some(config.flush_every_ms.max(1)))
            .open()
            .map_err(StoreError::sled("opening the database"))?;
        let meta = db
            .open_tree("meta")
            .map_err(StoreError::sled("opening meta"))?;
        match meta
            .get(SCHEMA_KEY)
            .map_err(StoreError::sled("reading schema"))?
        {
            None => {
                meta.insert(SCHEMA_KEY, &[SCHEMA_VERSION])
                    .map_err(StoreError::sled("writing schema"))?;
            }
            Some(v) if v.first().copied().unwrap_or(0) > SCHEMA_VERSION => {
                return Err(StoreError::SchemaTooNew {
                    found: v[0],
                    supported: SCHEMA_VERSION,
                });
            }
            Some(_) => {}
        }
        let open = |name: &'static str| {
            db.open_tree(name)
                .map_err(StoreError::sled("opening a tree"))
        };
        let sessions = open("sessions")?;
        let transcript = open("transcript")?;
        let inbox = open("inbox")?;
        let dedupe = open("dedupe")?;
        let channel_messages = open("channel_messages")?;
        let queued = AtomicUsize::new(inbox.len());
        let commit = GroupCommit::start(
            db.clone(),
            config.durability,
            Duration::from_millis(config.flush_every_ms.max(1)),
        );
        let store = Self {
            inner: Arc::new(StoreInner {
                db,
                sessions,
                transcript,
                inbox,
                dedupe,
                dedupe_cursor: std::sync::Mutex::new(Vec::new()),
                channel_messages,
                commit,
                queued,
                data_dir,
            }),
        };
        store.prune_dedupe(dedupe::wall_clock_ms(), DEDUPE_PRUNE_ON_OPEN)?;
        Ok(store)
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.inner.data_dir
    }

    /// Group commit for this database.
    pub fn commit(&self) -> &GroupCommit {
        &self.inner.commit
    }

    /// Unconsumed inbox items across all sessions.
    pub fn queued(&self) -> usize {
        self.inner.queued.load(Ordering::Relaxed)
    }

    /// Writes an accepted message to the inbox (not yet flushed) and returns its item and the
    /// group-commit ticket to wait on before acknowledging.
    pub fn enqueue(
        &self,
        session_key: &str,
        record: InboxRecord,
    ) -> Result<(InboxItem, u64), StoreError> {
        self.enqueue_deduped(session_key, record, None)
    }

    /// Unconsumed inbox items of one session with `seq > after`, oldest first, at most `limit`.
    pub fn pending(
        &self,
        session_key: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<InboxItem>, StoreError> {
        let start = keys::inbox_key(session_key, after.saturating_add(1));
        let end = keys::inbox_key(session_key, u64::MAX);
        let mut out = Vec::new();
        for kv in self.inner.inbox.range(start..=end).take(limit) {
            let (k, v) = kv.map_err(StoreError::sled("reading the inbox"))?;
            let Some((_, seq)) = keys::split_inbox_key(&k) else {
                continue;
            };
            let record: InboxRecord = decode("inbox", &v)?;
            out.push(InboxItem {
                seq,
                record: Arc::new(record),
            });
        }
        Ok(out)
    }

    /// Session keys that have unconsumed inbox items (for replay after a restart).
    pub fn sessions_with_pending(&self) -> Result<Vec<String>, StoreError> {
        let mut keys = BTreeSet::new();
        for kv in self.inner.inbox.iter().keys() {
            let k = kv.map_err(StoreError::sled("scanning the inbox"))?;
            if let Some((session, _)) = keys::split_inbox_key(&k) {
                keys.insert(session.to_string());
            }
        }
        Ok(keys.into_iter().collect())
    }

    /// Appends a turn's entries, consumes its inbox items and updates the session, atomically.
    /// Returns the session record after the commit and the group-commit ticket.
    pub fn commit_turn(
        &self,
        turn: TurnCommit<'_>,
    ) -> Result<(SessionRecord, Vec<u64>, u64), StoreError> {
        let inner = &self.inner;
        let new_id = match inner
            .sessions
            .get(turn.session_key)
            .map_err(StoreError::sled("reading a session"))?
        {
            Some(_) => None,
            None => Some(
                inner
                    .db
                    .generate_id()
                    .map_err(StoreError::sled("allocating a session id"))?,
            ),
        };
        let encoded: Vec<(Vec<u8>, &TranscriptEntry)> = turn
            .entries
            .iter()
            .map(|e| encode(e).map(|b| (b, e)))
            .collect::<Result<_, _>>()?;
        let inbox_keys: Vec<Vec<u8>> = turn
            .consumed
            .iter()
            .map(|s| keys::inbox_key(turn.session_key, *s))
            .collect();
        let channel_writes = channel::writes(&turn.channel_messages)?;
        let result = (
            &inner.sessions,
            &inner.transcript,
            &inner.inbox,
            &inner.channel_messages,
        )
            .transaction(|(sessions, transcript, inbox, channel_messages)| {
                let mut record = match sessions.get(turn.session_key)? {
                    Some(bytes) => decode::<SessionRecord>("sessions", &bytes)
                        .map_err(ConflictableTransactionError::Abort)?,
                    None => SessionRecord {
                        id: new_id.unwrap_or_default(),
                        created_at_ms: turn.now_ms,
                        updated_at_ms: turn.now_ms,
                        next_seq: 1,
                        entries: 0,
                        tokens: 0,
                        bytes: 0,
                        compaction_count: 0,
                    },
                };
                let mut seqs = Vec::with_capacity(encoded.len());
                for (bytes, entry) in &encoded {
                    let seq = record.next_seq;
                    transcript.insert(&keys::transcript_key(record.id, seq), bytes.as_slice())?;
                    record.next_seq += 1;
                    record.entries += 1;
                    record.tokens += u64::from(entry.tokens);
                    record.bytes += bytes.len() as u64;
                    seqs.push(seq);
                }
                let mut consumed = 0usize;
                for k in &inbox_keys {
                    if inbox.remove(k.as_slice())?.is_some() {
                        consumed += 1;
                    }
                }
                for (k, v) in &channel_writes {
                    channel_messages.insert(k.as_slice(), v.as_slice())?;
                }
                record.updated_at_ms = turn.now_ms;
                let bytes = encode(&record).map_err(ConflictableTransactionError::Abort)?;
                sessions.insert(turn.session_key.as_bytes(), bytes)?;
                Ok((record, seqs, consumed))
            });
        let (record, seqs, consumed) = result.map_err(|e| match e {
            TransactionError::Abort(e) => e,
            TransactionError::Storage(source) => StoreError::Sled {
                context: "committing a turn",
                source,
            },
        })?;
        inner.queued.fetch_sub(
            consumed.min(inner.queued.load(Ordering::Relaxed)),
            Ordering::Relaxed,
        );
        Ok((record, seqs, inner.commit.ticket()))
    }

    /// The session stored under `key`.
    pub fn session(&self, key: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.inner
            .sessions
            .get(key)
            .map_err(StoreError::sled("reading a session"))?
            .map(|b| decode("sessions", &b))
            .transpose()
    }

    /// Sessions in key order, starting after `after`, at most `limit`.
    pub fn list_sessions(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, SessionRecord)>, StoreError> {
        let iter = match after {
            Some(a) => self.inner.sessions.range::<&[u8], _>((
                std::ops::Bound::Excluded(a.as_bytes()),
                std::ops::Bound::Unbounded,
            )),
            None => self.inner.sessions.iter(),
        };
        let mut out = Vec::new();
        for kv in iter.take(limit) {
            let (k, v) = kv.map_err(StoreError::sled("listing sessions"))?;
            let key = String::from_utf8_lossy(&k).into_owned();
            out.push((key, decode("sessions", &v)?));
        }
        Ok(out)
    }

    /// Number of stored sessions.
    pub fn session_count(&self) -> usize {
        self.inner.sessions.len()
    }

    /// A session's transcript entries with `seq > after`, oldest first, at most `limit`.
    pub fn transcript(
        &self,
        session_id: u64,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, TranscriptEntry)>, StoreError> {
        let start = keys::transcript_key(session_id, after.saturating_add(1));
        let end = keys::transcript_key(session_id, u64::MAX);
        let mut out = Vec::new();
        for kv in self.inner.transcript.range(start..=end).take(limit) {
            let (k, v) = kv.map_err(StoreError::sled("reading a transcript"))?;
            let seq = keys::transcript_seq(&k).unwrap_or_default();
            out.push((seq, decode("transcript", &v)?));
        }
        Ok(out)
    }

    /// The newest entries of a session, newest first, while `keep(entry)` says to continue.
    /// Assembly uses this to read only as much history as fits its budget.
    pub fn newest_entries(
        &self,
        session_id: u64,
        mut keep: impl FnMut(&TranscriptEntry) -> bool,
    ) -> Result<Vec<(u64, TranscriptEntry)>, StoreError> {
        let mut out = Vec::new();
        for kv in self
            .inner
            .transcript
            .scan_prefix(keys::transcript_prefix(session_id))
            .rev()
        {
            let (k, v) = kv.map_err(StoreError::sled("reading a transcript"))?;
            let entry: TranscriptEntry = decode("transcript", &v)?;
            if !keep(&entry) {
                break;
            }
            out.push((keys::transcript_seq(&k).unwrap_or_default(), entry));
        }
        Ok(out)
    }

    /// Flushes everything and stops the flusher.
    pub async fn close(&self) -> Result<(), StoreError> {
        self.inner.commit.close().await
    }
}

#[cfg(test)]
mod tests;
