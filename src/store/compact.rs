//! Replacing transcript entries by one summary entry, atomically: `compact_prefix` (a prefix,
//! guarded by `next_seq`; used by imports and the store model test) and `swap_summary` (the
//! compactor's swap: a chosen range and the previous summary, guarded by the session's
//! compaction epoch).
//!
//! Either way the summary takes the sequence of the newest entry it replaces, so it sits just
//! before the first kept entry and transcript order is kept; history reading, which stops at the
//! newest summary, then sees the summary followed by the kept entries.

use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;

use super::evict::TRANSCRIPT_KEY_BYTES;
use super::{decode, encode, keys, SessionRecord, Store, TranscriptEntry};
use crate::error::StoreError;

/// Most entries one compaction may replace (they are removed in one transaction).
pub(crate) const MAX_COMPACTED_ENTRIES: usize = 10_000;

impl Store {
    /// Replaces the entries of `key` with `seq <= through_seq` by `summary`. Returns the new
    /// record, or `None` if the session does not exist, has no such entries, or changed since
    /// `expected_next_seq`.
    pub fn compact_prefix(
        &self,
        key: &str,
        expected_next_seq: u64,
        through_seq: u64,
        summary: &TranscriptEntry,
    ) -> Result<Option<SessionRecord>, StoreError> {
        let Some(record) = self.session(key)? else {
            return Ok(None);
        };
        let replaced = self.transcript(record.id, 0, MAX_COMPACTED_ENTRIES)?;
        let replaced: Vec<(u64, u64, u32)> = replaced
            .into_iter()
            .take_while(|(seq, _)| *seq <= through_seq)
            .map(|(seq, e)| encode(&e).map(|b| (seq, b.len() as u64, e.tokens)))
            .collect::<Result<_, _>>()?;
        let Some(&(last_seq, _, _)) = replaced.last() else {
            return Ok(None);
        };
        let summary_bytes = encode(summary)?;
        let _write = self.write_gate();
        let inner = self.inner();
        let result = (&inner.sessions, &inner.transcript).transaction(|(sessions, transcript)| {
            let Some(bytes) = sessions.get(key)? else {
                return Ok(None);
            };
            let mut record: SessionRecord =
                decode("sessions", &bytes).map_err(ConflictableTransactionError::Abort)?;
            if record.next_seq != expected_next_seq {
                return Ok(None);
            }
            let before = record.clone();
            for (seq, len, tokens) in &replaced {
                transcript.remove(&keys::transcript_key(record.id, *seq))?;
                record.entries = record.entries.saturating_sub(1);
                record.bytes = record.bytes.saturating_sub(*len);
                record.tokens = record.tokens.saturating_sub(u64::from(*tokens));
            }
            transcript.insert(
                &keys::transcript_key(record.id, last_seq),
                summary_bytes.as_slice(),
            )?;
            record.entries += 1;
            record.bytes += summary_bytes.len() as u64;
            record.tokens += u64::from(summary.tokens);
            record.compaction_count = record.compaction_count.saturating_add(1);
            let encoded = encode(&record).map_err(ConflictableTransactionError::Abort)?;
            sessions.insert(key.as_bytes(), encoded)?;
            Ok(Some((before, record)))
        });
        let updated = match result {
            Ok(r) => r,
            Err(TransactionError::Abort(e)) => return Err(e),
            Err(TransactionError::Storage(source)) => {
                return Err(StoreError::Sled {
                    context: "compacting a transcript",
                    source,
                })
            }
        };
        if let Some((before, after)) = &updated {
            self.shared.totals.replace(Some(before), Some(after));
            let removed: u64 = replaced
                .iter()
                .map(|(_, len, _)| len + TRANSCRIPT_KEY_BYTES)
                .sum();
            self.shared.meter.sub(removed);
            self.shared
                .meter
                .add(summary_bytes.len() as u64 + TRANSCRIPT_KEY_BYTES);
        }
        Ok(updated.map(|(_, after)| after))
    }
}

/// One compaction's writes.
#[derive(Debug)]
pub struct SummarySwap<'a> {
    /// The session key.
    pub session_key: &'a str,
    /// The session id the range was read from.
    pub session_id: u64,
    /// The session's compaction epoch (its `compaction_count`) when the range was read; a
    /// concurrent compaction bumps it and makes this swap abort.
    pub epoch: u32,
    /// Sequences of the entries to remove (the previous summary included), oldest first.
    pub remove: &'a [u64],
    /// The new summary; stored at the newest removed sequence.
    pub summary: &'a TranscriptEntry,
}

/// What a swap did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SwapOutcome {
    /// Committed; the session record after it and the group-commit ticket.
    Done(SessionRecord, u64),
    /// The session changed (deleted, recreated, compacted or an entry of the range gone)
    /// since the range was read; nothing was written.
    Changed,
}

/// Why the transaction gave up.
enum Abort {
    Changed,
    Store(StoreError),
}

impl Store {
    /// Replaces the entries `swap.remove` with `swap.summary`, atomically. An empty range is
    /// [`SwapOutcome::Changed`] (there is nothing to replace).
    pub fn swap_summary(&self, swap: SummarySwap<'_>) -> Result<SwapOutcome, StoreError> {
        let Some(&at) = swap.remove.last() else {
            return Ok(SwapOutcome::Changed);
        };
        let summary_bytes = encode(swap.summary)?;
        let _write = self.write_gate();
        let inner = self.inner();
        let result = (&inner.sessions, &inner.transcript).transaction(|(sessions, transcript)| {
            let Some(bytes) = sessions.get(swap.session_key)? else {
                return Err(ConflictableTransactionError::Abort(Abort::Changed));
            };
            let mut record: SessionRecord = decode("sessions", &bytes)
                .map_err(|e| ConflictableTransactionError::Abort(Abort::Store(e)))?;
            if record.id != swap.session_id || record.compaction_count != swap.epoch {
                return Err(ConflictableTransactionError::Abort(Abort::Changed));
            }
            let before = record.clone();
            let (mut tokens, mut bytes_removed) = (0u64, 0u64);
            for &seq in swap.remove {
                let Some(old) = transcript.remove(&keys::transcript_key(swap.session_id, seq))?
                else {
                    return Err(ConflictableTransactionError::Abort(Abort::Changed));
                };
                let entry: TranscriptEntry = decode("transcript", &old)
                    .map_err(|e| ConflictableTransactionError::Abort(Abort::Store(e)))?;
                tokens += u64::from(entry.tokens);
                bytes_removed += old.len() as u64;
            }
            transcript.insert(
                &keys::transcript_key(swap.session_id, at),
                summary_bytes.as_slice(),
            )?;
            let removed = swap.remove.len() as u64;
            record.entries = record.entries.saturating_sub(removed) + 1;
            record.tokens = record.tokens.saturating_sub(tokens) + u64::from(swap.summary.tokens);
            record.bytes = record.bytes.saturating_sub(bytes_removed) + summary_bytes.len() as u64;
            record.compaction_count = record.compaction_count.saturating_add(1);
            let encoded = encode(&record)
                .map_err(|e| ConflictableTransactionError::Abort(Abort::Store(e)))?;
            sessions.insert(swap.session_key.as_bytes(), encoded)?;
            Ok((before, record, bytes_removed, removed))
        });
        match result {
            Ok((before, record, bytes_removed, removed)) => {
                self.shared.totals.replace(Some(&before), Some(&record));
                // Keep the janitor's live-byte meter in step with what the swap freed.
                self.shared
                    .meter
                    .sub(bytes_removed + removed * TRANSCRIPT_KEY_BYTES);
                self.shared
                    .meter
                    .add(summary_bytes.len() as u64 + TRANSCRIPT_KEY_BYTES);
                Ok(SwapOutcome::Done(record, inner.commit.ticket()))
            }
            Err(TransactionError::Abort(Abort::Changed)) => Ok(SwapOutcome::Changed),
            Err(TransactionError::Abort(Abort::Store(e))) => Err(e),
            Err(TransactionError::Storage(source)) => Err(StoreError::Sled {
                context: "committing a compaction",
                source,
            }),
        }
    }
}
