//! The durable half of preflight's dedupe: the `dedupe` tree maps a dedupe key to the time it
//! expires (ms since the epoch). An accepted message's key is written right after its inbox
//! entry and before the acknowledgement's flush, so after a restart a redelivered message that
//! is still in the inbox, or was already answered, is recognised.
//!
//! The tree is bounded by the TTL: expired entries are removed on open (at most
//! [`DEDUPE_PRUNE_ON_OPEN`] visited) and a little at every write ([`DEDUPE_PRUNE_PER_WRITE`]
//! visited, resuming where the last prune stopped and wrapping around). Visiting more entries
//! per write than one write adds keeps the tree within a small factor of the live entries.

use std::sync::Arc;

use super::{decode, encode, keys, InboxItem, InboxRecord, Store};
use crate::error::StoreError;

/// Entries visited by the prune that runs when the store opens.
pub(crate) const DEDUPE_PRUNE_ON_OPEN: usize = 200_000;
/// Entries visited by the prune that follows each deduped write.
pub(crate) const DEDUPE_PRUNE_PER_WRITE: usize = 8;

/// A dedupe key to remember durably with an inbox write.
#[derive(Debug, Clone, Copy)]
pub struct DedupeMark<'a> {
    /// The preflight dedupe key.
    pub key: &'a str,
    /// When the entry expires, ms since the epoch.
    pub expires_at_ms: u64,
    /// Now, ms since the epoch (prunes entries expired before it).
    pub now_ms: u64,
}

impl Store {
    /// Like [`Store::enqueue`], and when `dedupe` is given, remembers its key too, before the
    /// group-commit ticket is taken (so the ticket covers both).
    pub fn enqueue_deduped(
        &self,
        session_key: &str,
        record: InboxRecord,
        dedupe: Option<DedupeMark<'_>>,
    ) -> Result<(InboxItem, u64), StoreError> {
        self.check_writable()?;
        // No thaw here: a cold session's turn thaws it. The cold lock (held only briefly by
        // a freeze or a thaw) orders the entry against a freeze's last check: the session
        // stays hot, or it is cold before the entry is written (see `cold::ColdLocks`).
        let _cold = self.shared.cold_locks.lock(session_key);
        let _write = self.write_gate();
        let inner = self.inner();
        // Sequences start at 1: lanes treat 0 as "nothing seen yet".
        let seq = inner
            .next_id()
            .map_err(|e| self.write_failed(e))?
            .saturating_add(1);
        let bytes = encode(&record)?;
        let inbox_key = keys::inbox_key(session_key, seq);
        let written = (inbox_key.len() + bytes.len()) as u64;
        match dedupe {
            None => {
                inner
                    .inbox
                    .insert(inbox_key, bytes)
                    .map_err(|e| self.write_failed(StoreError::sled("writing the inbox")(e)))?;
            }
            Some(mark) => {
                // Two plain inserts, inbox first, instead of one transaction: sled 0.34 writes
                // its log buffer out synchronously around every transaction, which made each
                // admission cost one disk write. sled recovers a prefix of its log, so a crash
                // leaves nothing, the inbox entry alone, or both; the first two were never
                // acknowledged (the ack waits for a flush covering both), and an inbox entry
                // without its mark gets it back on open (`restore_inbox_dedupe`).
                let expiry = encode(&mark.expires_at_ms)?;
                inner
                    .inbox
                    .insert(inbox_key, bytes)
                    .map_err(|e| self.write_failed(StoreError::sled("writing the inbox")(e)))?;
                inner
                    .dedupe
                    .insert(mark.key.as_bytes(), expiry)
                    .map_err(|e| {
                        self.write_failed(StoreError::sled("remembering a dedupe key")(e))
                    })?;
            }
        }
        self.shared
            .queued
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.owe_thaw(session_key);
        self.shared.meter.add_inbox(written);
        self.shared.ledger.enqueued();
        let ticket = inner.commit.ticket();
        if let Some(mark) = dedupe {
            if let Err(e) = self.prune_dedupe(mark.now_ms, DEDUPE_PRUNE_PER_WRITE) {
                tracing::warn!(error = %e, "pruning expired dedupe keys failed; retried on the next write");
            }
        }
        Ok((
            InboxItem {
                seq,
                record: Arc::new(record),
            },
            ticket,
        ))
    }

    /// True when `key` was remembered and has not expired at `now_ms`.
    pub fn dedupe_seen(&self, key: &str, now_ms: u64) -> Result<bool, StoreError> {
        let Some(bytes) = self
            .inner()
            .dedupe
            .get(key.as_bytes())
            .map_err(StoreError::sled("reading dedupe keys"))?
        else {
            return Ok(false);
        };
        let expires: u64 = decode("dedupe", &bytes)?;
        Ok(expires > now_ms)
    }

    /// Removes expired dedupe entries among the next `budget` entries after the prune cursor
    /// (wrapping around once at the end of the tree). Returns how many it removed.
    pub fn prune_dedupe(&self, now_ms: u64, budget: usize) -> Result<usize, StoreError> {
        let inner = self.inner();
        let mut cursor = self
            .shared
            .dedupe_cursor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut visited = 0;
        let mut removed = 0;
        let mut wrapped = cursor.is_empty();
        while visited < budget {
            let start: &[u8] = &cursor;
            let mut next = None;
            for kv in inner
                .dedupe
                .range::<&[u8], _>((std::ops::Bound::Excluded(start), std::ops::Bound::Unbounded))
                .take(budget - visited)
            {
                let (k, v) = kv.map_err(StoreError::sled("scanning dedupe keys"))?;
                visited += 1;
                // An undecodable value cannot say when it expires: drop it like an expired one.
                let expired = decode::<u64>("dedupe", &v).map_or(true, |t| t <= now_ms);
                if expired {
                    // Only if unchanged: a key re-remembered meanwhile stays.
                    let swapped = inner
                        .dedupe
                        .compare_and_swap(&k, Some(&v), None as Option<&[u8]>)
                        .map_err(StoreError::sled("pruning dedupe keys"))?;
                    if swapped.is_ok() {
                        removed += 1;
                    }
                }
                next = Some(k);
            }
            match next {
                Some(k) => *cursor = k.to_vec(),
                None if wrapped => break,
                None => {
                    // Reached the end: continue from the start, once.
                    cursor.clear();
                    wrapped = true;
                }
            }
        }
        Ok(removed)
    }

    /// Remembers the dedupe key of every unconsumed inbox entry that lacks one (a crash between
    /// the two inserts of [`Store::enqueue_deduped`]), expiring `ttl_ms` after its acceptance.
    /// Returns how many it restored. The inbox is bounded by `max_queued_messages`, so this is
    /// a bounded scan.
    pub fn restore_inbox_dedupe(
        &self,
        key_of: impl Fn(&InboxRecord) -> String,
        ttl_ms: u64,
    ) -> Result<usize, StoreError> {
        let _write = self.write_gate();
        let inner = self.inner();
        let mut restored = 0;
        for kv in inner.inbox.iter() {
            let (_, v) = kv.map_err(StoreError::sled("scanning the inbox"))?;
            // An undecodable entry is the doctor's business; it is not replayed either.
            let Ok(record) = decode::<InboxRecord>("inbox", &v) else {
                continue;
            };
            let key = key_of(&record);
            let present = inner
                .dedupe
                .contains_key(key.as_bytes())
                .map_err(StoreError::sled("reading dedupe keys"))?;
            if !present {
                let expiry = encode(&record.accepted_at_ms.saturating_add(ttl_ms))?;
                inner
                    .dedupe
                    .insert(key.as_bytes(), expiry)
                    .map_err(StoreError::sled("remembering a dedupe key"))?;
                restored += 1;
            }
        }
        Ok(restored)
    }

    /// Number of remembered dedupe keys (expired ones not yet pruned included).
    pub fn dedupe_len(&self) -> usize {
        self.inner().dedupe.len()
    }
}
