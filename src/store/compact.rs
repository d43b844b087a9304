//! Replacing a prefix of a session's transcript by one summary entry, atomically.
//!
//! This is the storage half of compaction: the summary takes the sequence number of the last
//! entry it replaces, so transcript order is kept, and the record's counters and
//! `compaction_count` change in the same transaction. It is guarded by the record's
//! `next_seq`: if a turn appended meanwhile, nothing is changed and `None` is returned.

use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;

use super::evict::TRANSCRIPT_KEY_BYTES;
use super::{decode, encode, keys, SessionRecord, Store, TranscriptEntry};
use crate::error::StoreError;

/// Most entries one compaction may replace (they are removed in one transaction).
pub const MAX_COMPACTED_ENTRIES: usize = 10_000;

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
            Ok(Some(record))
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
        if updated.is_some() {
            let removed: u64 = replaced
                .iter()
                .map(|(_, len, _)| len + TRANSCRIPT_KEY_BYTES)
                .sum();
            self.shared.meter.sub(removed);
            self.shared
                .meter
                .add(summary_bytes.len() as u64 + TRANSCRIPT_KEY_BYTES);
        }
        Ok(updated)
    }
}
