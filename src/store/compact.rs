//! The compaction swap: a summary entry replaces a compacted transcript range, and the session
//! record is updated, in one transaction guarded by the session's compaction epoch.
//!
//! Key layout: the summary is written at the sequence of the newest compacted entry (a key
//! the swap frees), so it sits just before the first kept entry; history reading, which stops
//! at the newest summary, then sees the summary followed by the kept entries.

use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;

use super::{decode, encode, keys, SessionRecord, Store, TranscriptEntry};
use crate::error::StoreError;

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
        let inner = &self.inner;
        let result = (&inner.sessions, &inner.transcript).transaction(|(sessions, transcript)| {
            let Some(bytes) = sessions.get(swap.session_key)? else {
                return Err(ConflictableTransactionError::Abort(Abort::Changed));
            };
            let mut record: SessionRecord = decode("sessions", &bytes)
                .map_err(|e| ConflictableTransactionError::Abort(Abort::Store(e)))?;
            if record.id != swap.session_id || record.compaction_count != swap.epoch {
                return Err(ConflictableTransactionError::Abort(Abort::Changed));
            }
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
            Ok(record)
        });
        match result {
            Ok(record) => Ok(SwapOutcome::Done(record, inner.commit.ticket())),
            Err(TransactionError::Abort(Abort::Changed)) => Ok(SwapOutcome::Changed),
            Err(TransactionError::Abort(Abort::Store(e))) => Err(e),
            Err(TransactionError::Storage(source)) => Err(StoreError::Sled {
                context: "committing a compaction",
                source,
            }),
        }
    }
}
