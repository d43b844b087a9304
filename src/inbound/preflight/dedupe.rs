//! Dedupe (preflight step 1): a redelivered message is dropped as `duplicate`.
//!
//! Two layers. In memory, the last `dedupe_max_keys` keys seen within `dedupe_ttl_ms`, whatever
//! was decided about them (so a redelivered unaddressed group message does not enter the
//! pending history twice). On disk, the keys of accepted messages, written with their inbox
//! entry (`Store::enqueue_deduped`) and looked up on a memory miss, so a message that is
//! already in the inbox or already answered is not processed again after a restart.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::error::StoreError;
use crate::inbound::session_key::{channel_name, normalize_id};
use crate::inbound::InboundMessage;
use crate::store::Store;

/// The durable half of dedupe: has an accepted message with this key been stored?
pub trait DurableDedupe {
    /// True when `key` was remembered and has not expired at `now_ms`.
    fn seen(&self, key: &str, now_ms: u64) -> Result<bool, StoreError>;
}

impl DurableDedupe for Store {
    fn seen(&self, key: &str, now_ms: u64) -> Result<bool, StoreError> {
        self.dedupe_seen(key, now_ms)
    }
}

/// No durable layer: dedupe in memory only (tests, benches, callers without a store).
#[derive(Debug, Clone, Copy, Default)]
pub struct MemoryOnly;

impl DurableDedupe for MemoryOnly {
    fn seen(&self, _key: &str, _now_ms: u64) -> Result<bool, StoreError> {
        Ok(false)
    }
}

/// The dedupe key of `msg`: `channel|account|agent|peer|thread|message_id`, where the peer is
/// the chat id (a message id is unique within its chat) and `thread` is empty outside threads.
/// Channel and account are normalised as in session keys; the ids are only trimmed (platform
/// message ids may be case-sensitive).
pub fn dedupe_key(agent: &str, msg: &InboundMessage) -> String {
    format!(
        "{}|{}|{agent}|{}|{}|{}",
        channel_name(&msg.channel),
        normalize_id(&msg.account_id, "default"),
        msg.chat_id.trim(),
        msg.thread_id.as_deref().map(str::trim).unwrap_or(""),
        msg.message_id.trim(),
    )
}

/// Recently seen keys: a FIFO of (key, expiry) and a map from key to its newest expiry. Keys
/// are inserted in time order with one TTL, so the front of the queue is always the oldest.
#[derive(Debug)]
pub(super) struct DedupeCache {
    expiry: HashMap<Arc<str>, u64>,
    order: VecDeque<(Arc<str>, u64)>,
    ttl_ms: u64,
    max_keys: usize,
}

impl DedupeCache {
    pub(super) fn new(ttl_ms: u64, max_keys: usize) -> Self {
        Self {
            expiry: HashMap::new(),
            order: VecDeque::new(),
            ttl_ms,
            max_keys: max_keys.max(1),
        }
    }

    /// True when `key` was seen and has not expired at `now_ms`.
    pub(super) fn seen(&self, key: &str, now_ms: u64) -> bool {
        self.expiry.get(key).is_some_and(|e| *e > now_ms)
    }

    /// Remembers `key` as seen at `now_ms`, forgetting expired keys and, past `max_keys`, the
    /// oldest.
    pub(super) fn insert(&mut self, key: &str, now_ms: u64) {
        let expires = now_ms.saturating_add(self.ttl_ms);
        let key: Arc<str> = Arc::from(key);
        self.expiry.insert(Arc::clone(&key), expires);
        self.order.push_back((key, expires));
        while let Some((front, front_expiry)) = self.order.front() {
            if *front_expiry > now_ms && self.order.len() <= self.max_keys {
                break;
            }
            // Forget the key only if this queue entry is its newest one.
            if self.expiry.get(front) == Some(front_expiry) {
                self.expiry.remove(front);
            }
            self.order.pop_front();
        }
    }

    /// Keys remembered (expired ones not yet forgotten included).
    pub(super) fn len(&self) -> usize {
        self.expiry.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_within_ttl_and_capacity() {
        let mut c = DedupeCache::new(100, 3);
        c.insert("a", 0);
        assert!(c.seen("a", 99));
        assert!(!c.seen("a", 100), "expired at the TTL");
        assert!(!c.seen("b", 0));
        for (i, k) in ["b", "c", "d"].iter().enumerate() {
            c.insert(k, 10 + i as u64);
        }
        assert!(!c.seen("a", 20), "evicted past max_keys");
        assert!(c.seen("b", 20) && c.seen("d", 20));
        assert_eq!(c.len(), 3);
        // Expired keys are forgotten on the next insert.
        c.insert("e", 500);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn a_reinserted_key_keeps_its_newest_expiry() {
        let mut c = DedupeCache::new(100, 10);
        c.insert("a", 0);
        c.insert("a", 90);
        c.insert("x", 150);
        assert!(
            c.seen("a", 150),
            "the first entry's expiry must not forget the second"
        );
        assert!(!c.seen("a", 190));
    }
}
