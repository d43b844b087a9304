//! Removing whole sessions: the janitor's eviction and explicit deletes.
//!
//! The session record and its index entry go in one transaction, which is the commit point:
//! after it the session no longer exists for anyone (a new message starts a fresh session
//! with a new id, so no stale transcript is ever read back). The transcript is then deleted
//! in bounded batches; a crash in between leaves orphan transcript entries, which the doctor
//! finds by their session id and deletes.

use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;

use super::cold_index::{self, ColdEntry};
use super::{by_updated, decode, keys, SessionRecord, Store};
use crate::error::StoreError;

/// Transcript keys removed per sled batch when a session is deleted; bounds the memory a
/// deletion holds at once.
const DELETE_BATCH: usize = 1_000;

/// Key bytes counted per transcript entry in the live-byte meter (the 16-byte key).
pub(super) const TRANSCRIPT_KEY_BYTES: u64 = 16;

/// What an eviction removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evicted {
    /// The session as it was.
    pub record: SessionRecord,
    /// Transcript entries deleted.
    pub entries_deleted: u64,
    /// Live logical bytes released.
    pub bytes: u64,
}

/// A session in eviction order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Candidate {
    /// Its `by_updated` key (the cursor for the next page).
    pub(super) index_key: Vec<u8>,
    pub(super) updated_at_ms: u64,
    pub(super) session_key: String,
}

impl Store {
    /// Live logical bytes (transcript and inbox keys and values), as the janitor counts them.
    pub fn live_bytes(&self) -> u64 {
        self.shared.meter.live()
    }

    /// Installs the function called when live bytes reach the janitor's trigger (see
    /// [`Store::set_janitor_trigger`]). It runs on the writing thread: it must be cheap and
    /// must not block. Only the first call has an effect.
    pub fn set_janitor_hook(&self, hook: impl Fn() + Send + Sync + 'static) {
        if !self.shared.meter.set_hook(Box::new(hook)) {
            tracing::warn!("janitor hook already installed; ignoring another");
        }
    }

    /// Sets the live-byte level at which the janitor hook fires.
    pub fn set_janitor_trigger(&self, live_bytes: u64) {
        self.shared.meter.set_trigger(live_bytes);
    }

    /// Up to `limit` sessions in `updated_at` order (by minute, then key), starting after the
    /// index key `after`. Each candidate carries its record's exact `updated_at_ms`, which
    /// the eviction checks against; an index entry without a record carries its minute (and
    /// is then not evicted: there is nothing to evict).
    pub(super) fn oldest_sessions(
        &self,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Candidate>, StoreError> {
        let iter = match after {
            Some(a) => self
                .inner()
                .by_updated
                .range::<&[u8], _>((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded)),
            None => self.inner().by_updated.iter(),
        };
        let mut out = Vec::new();
        for k in iter.keys().take(limit) {
            let k = k.map_err(StoreError::sled("reading by_updated"))?;
            let Some((minute, session_key)) = by_updated::split(&k) else {
                // Not a key we write; the doctor reports it.
                continue;
            };
            let updated_at_ms = self
                .inner()
                .sessions
                .get(session_key)
                .map_err(StoreError::sled("reading a session"))?
                .and_then(|v| decode::<SessionRecord>("sessions", &v).ok())
                .map_or(minute, |r| r.updated_at_ms);
            out.push(Candidate {
                session_key: session_key.to_string(),
                updated_at_ms,
                index_key: k.to_vec(),
            });
        }
        Ok(out)
    }

    /// Removes the session `key` and its transcript. With `expected_updated_at`, only if the
    /// session was not updated since (a turn that committed meanwhile wins). Returns `None`
    /// if nothing was removed. A stale cold copy of the session goes with it.
    pub fn evict_session(
        &self,
        key: &str,
        expected_updated_at: Option<u64>,
    ) -> Result<Option<Evicted>, StoreError> {
        let cold = self.shared.cold_locks.lock(key);
        let removed = self.evict_records(key, expected_updated_at, None)?;
        drop(cold);
        match removed {
            Some(record) => self.after_eviction(key, record).map(Some),
            None => Ok(None),
        }
    }

    /// The commit point of an eviction: the session's record and index entry go in one
    /// transaction with its cold index entry — set to `cold` (a freeze), or removed (a
    /// stale cold copy must not outlive an eviction). Returns the record removed. The caller
    /// holds the session's cold lock.
    pub(super) fn evict_records(
        &self,
        key: &str,
        expected_updated_at: Option<u64>,
        cold: Option<&ColdEntry>,
    ) -> Result<Option<SessionRecord>, StoreError> {
        let _write = self.write_gate();
        let inner = self.inner();
        let removed = (&inner.sessions, &inner.by_updated, &inner.cold).transaction(
            |(sessions, index, cold_tree)| {
                let Some(bytes) = sessions.get(key)? else {
                    return Ok(None);
                };
                let record: SessionRecord =
                    decode("sessions", &bytes).map_err(ConflictableTransactionError::Abort)?;
                if expected_updated_at.is_some_and(|t| t != record.updated_at_ms) {
                    return Ok(None);
                }
                // A freeze's frame was copied from `entry.record`'s transcript: any change
                // since (a compaction keeps `updated_at_ms`; one half-applied while the copy
                // read the transcript commits before this transaction) keeps it hot.
                if cold.is_some_and(|entry| entry.record != record) {
                    return Ok(None);
                }
                sessions.remove(key.as_bytes())?;
                index.remove(by_updated::key(record.updated_at_ms, key))?;
                match cold {
                    Some(entry) => cold_index::tx_insert(cold_tree, key, entry)?,
                    None => {
                        cold_index::tx_remove(cold_tree, key)?;
                    }
                }
                Ok(Some(record))
            },
        );
        match removed {
            Ok(r) => Ok(r),
            Err(TransactionError::Abort(e)) => Err(e),
            Err(TransactionError::Storage(source)) => Err(StoreError::Sled {
                context: "evicting a session",
                source,
            }),
        }
    }

    /// What follows an eviction's commit point: the totals, the transcript and chat records
    /// (in bounded batches), the live-byte meter.
    pub(super) fn after_eviction(
        &self,
        key: &str,
        record: SessionRecord,
    ) -> Result<Evicted, StoreError> {
        self.shared.totals.replace(Some(&record), None);
        let entries_deleted = self.delete_transcript(record.id)?;
        let chat_bytes = self.delete_channel_messages(key)?;
        let bytes = record.bytes + record.entries * TRANSCRIPT_KEY_BYTES + chat_bytes;
        self.shared.meter.sub(bytes);
        Ok(Evicted {
            record,
            entries_deleted,
            bytes,
        })
    }

    /// Deletes every transcript entry of session `id`, in bounded batches.
    pub(super) fn delete_transcript(&self, id: u64) -> Result<u64, StoreError> {
        let mut deleted = 0u64;
        loop {
            let _write = self.write_gate();
            let inner = self.inner();
            let mut batch = sled::Batch::default();
            let mut n = 0usize;
            for k in inner
                .transcript
                .scan_prefix(keys::transcript_prefix(id))
                .keys()
                .take(DELETE_BATCH)
            {
                batch.remove(k.map_err(StoreError::sled("scanning a transcript"))?);
                n += 1;
            }
            if n == 0 {
                return Ok(deleted);
            }
            inner
                .transcript
                .apply_batch(batch)
                .map_err(StoreError::sled("deleting a transcript"))?;
            deleted += n as u64;
        }
    }
}
