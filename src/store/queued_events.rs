//! Platform events (join, rename, pin…) queued for a session's next turn, kept durably so a
//! restart does not lose them. They live in the `channel_messages` tree under their own lead
//! byte: `0xFE` + session key + NUL + id (big-endian) → [`SystemEvent`]; the next accepted
//! message of the session carries them on its inbox record and removes them.

use super::{decode, encode, Store, StoreError, SystemEvent};

/// Leads the keys of queued events (chat keys start with a channel name, the per-session
/// chat index with `0xFF`).
const QUEUED_EVENTS: u8 = 0xFE;

fn prefix(session_key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(session_key.len() + 2);
    k.push(QUEUED_EVENTS);
    k.extend_from_slice(session_key.as_bytes());
    k.push(0);
    k
}

/// Queued events read back: their keys (to remove them) and the events, oldest first.
pub(crate) type QueuedEvents = (Vec<Vec<u8>>, Vec<SystemEvent>);

impl Store {
    /// Adjusts the count of queued events by `added − removed`; counts them first if that was
    /// not done yet. Returns the count.
    fn count_events(&self, added: usize, removed: usize) -> Result<usize, StoreError> {
        let mut count = self
            .shared
            .queued_events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = match *count {
            Some(n) => n,
            None => {
                let mut n = 0usize;
                for k in self
                    .inner()
                    .channel_messages
                    .scan_prefix([QUEUED_EVENTS])
                    .keys()
                {
                    k.map_err(StoreError::sled("counting queued events"))?;
                    n += 1;
                }
                n
            }
        };
        let n = n.saturating_add(added).saturating_sub(removed);
        *count = Some(n);
        Ok(n)
    }

    /// Queues `event` for `session_key`'s next turn, keeping at most `max` (the oldest go
    /// first). Durable with the next group-commit flush.
    pub fn queue_system_event(
        &self,
        session_key: &str,
        event: &SystemEvent,
        max: usize,
    ) -> Result<(), StoreError> {
        let _write = self.write_gate();
        let inner = self.inner();
        let prefix = prefix(session_key);
        let mut key = prefix.clone();
        key.extend_from_slice(&inner.next_id()?.to_be_bytes());
        let value = encode(event)?;
        let mut batch = sled::Batch::default();
        let queued: Vec<sled::IVec> = inner
            .channel_messages
            .scan_prefix(&prefix)
            .keys()
            .take(max.saturating_add(1))
            .collect::<Result<_, _>>()
            .map_err(StoreError::sled("reading queued events"))?;
        let over = (queued.len() + 1).saturating_sub(max.max(1));
        for k in queued.into_iter().take(over) {
            batch.remove(k);
        }
        self.shared.meter.add((key.len() + value.len()) as u64);
        batch.insert(key, value);
        inner
            .channel_messages
            .apply_batch(batch)
            .map_err(StoreError::sled("queueing a system event"))?;
        self.count_events(1, over)?;
        Ok(())
    }

    /// The events queued for `session_key`, at most `max`, oldest first (left in place).
    pub fn queued_system_events(
        &self,
        session_key: &str,
        max: usize,
    ) -> Result<QueuedEvents, StoreError> {
        let mut keys = Vec::new();
        let mut events = Vec::new();
        if self.count_events(0, 0)? == 0 {
            return Ok((keys, events));
        }
        for kv in self
            .inner()
            .channel_messages
            .scan_prefix(prefix(session_key))
            .take(max)
        {
            let (k, v) = kv.map_err(StoreError::sled("reading queued events"))?;
            match decode::<SystemEvent>("channel_messages", &v) {
                Ok(e) => events.push(e),
                Err(e) => {
                    tracing::warn!(session_key, error = %e, "an undecodable queued system event is skipped")
                }
            }
            keys.push(k.to_vec());
        }
        Ok((keys, events))
    }

    /// Removes queued events (they went to a turn), by the keys
    /// [`Store::queued_system_events`] returned.
    pub fn remove_system_events(&self, keys: Vec<Vec<u8>>) -> Result<(), StoreError> {
        if keys.is_empty() {
            return Ok(());
        }
        let _write = self.write_gate();
        let n = keys.len();
        let mut batch = sled::Batch::default();
        for k in keys {
            batch.remove(k);
        }
        self.inner()
            .channel_messages
            .apply_batch(batch)
            .map_err(StoreError::sled("removing queued events"))?;
        self.count_events(0, n)?;
        Ok(())
    }

    /// Removes every event queued for `session_key` (the session is deleted or evicted).
    /// Returns the bytes freed.
    pub(super) fn delete_system_events(&self, session_key: &str) -> Result<u64, StoreError> {
        let (keys, _) = self.queued_system_events(session_key, usize::MAX)?;
        let freed = keys.iter().map(|k| k.len() as u64).sum();
        self.remove_system_events(keys)?;
        Ok(freed)
    }
}
