//! The assembly cache: per session, the last assembly and what it was made from. A new
//! message (the transcript's next sequence or the turn's inbox items change), a changed
//! workspace file (a source's fingerprint) or age past `context.cache_max_age_ms` (TTL decay
//! moves with the clock) makes it stale. Serves context dumps (and a turn that follows a dump
//! unchanged); a turn's own assembly is not cached (`ContextEngine::assemble_for_turn`), and
//! the engine drops a session's entry when its turn commits.

use std::hash::RandomState;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lru::LruCache;
use serde::Serialize;

use super::dump::Assembly;
use crate::inbound::ChatKind;

/// What an assembly was made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CacheKey {
    /// The chat kind (picks the policy).
    pub chat_kind: ChatKind,
    /// The transcript's next sequence (0 for a session not stored yet).
    pub next_seq: u64,
    /// Inbox sequences of the messages the turn answers.
    pub batch: Vec<u64>,
    /// How they were queued.
    pub queue: super::session::QueueInfo,
    /// Each source's fingerprint.
    pub fingerprints: Vec<u64>,
}

/// Hits and misses since start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct CacheStats {
    /// Assemblies served from the cache.
    pub hits: u64,
    /// Assemblies computed.
    pub misses: u64,
}

impl CacheStats {
    /// hits / (hits + misses), 0 when nothing was asked yet.
    pub fn hit_rate(&self) -> f64 {
        let all = self.hits + self.misses;
        if all == 0 {
            0.0
        } else {
            self.hits as f64 / all as f64
        }
    }
}

struct Entry {
    key: CacheKey,
    assembly: Arc<Assembly>,
    at: Instant,
}

/// Session key → its last assembly, oldest insertion first: a lookup only peeks, so the entry
/// evicted from a full cache is the one stored longest ago. Std's randomly keyed hasher: the
/// keys come from clients.
type Entries = LruCache<String, Entry, RandomState>;

/// At most `capacity` sessions' last assemblies.
pub(crate) struct AssemblyCache {
    capacity: usize,
    max_age: Duration,
    entries: Mutex<Entries>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl AssemblyCache {
    /// A cache of at most `capacity` sessions (0 disables it), entries valid for `max_age`.
    pub(crate) fn new(capacity: usize, max_age: Duration) -> Self {
        Self {
            capacity,
            max_age,
            entries: Mutex::new(LruCache::with_hasher(
                NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN),
                RandomState::new(),
            )),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // Every critical section is a single map operation, so a poisoned map is consistent.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached assembly of `session` if it was made from `key`; counts a hit or a miss.
    pub(crate) fn get(&self, session: &str, key: &CacheKey) -> Option<Arc<Assembly>> {
        let found = self
            .lock()
            .peek(session)
            .filter(|e| e.key == *key && e.at.elapsed() <= self.max_age)
            .map(|e| Arc::clone(&e.assembly));
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Remembers `assembly` of `session`, made from `key`. When full, the oldest entry goes.
    pub(crate) fn insert(&self, session: &str, key: CacheKey, assembly: Arc<Assembly>) {
        if self.capacity == 0 {
            return;
        }
        let entry = Entry {
            key,
            assembly,
            at: Instant::now(),
        };
        // Dropped after the lock, like an invalidated one.
        let replaced = self.lock().push(session.to_string(), entry);
        drop(replaced);
    }

    /// Forgets `session` (its transcript changed).
    pub(crate) fn invalidate(&self, session: &str) {
        // Dropped after the lock: an assembly holds every block of a context.
        let removed = self.lock().pop(session);
        drop(removed);
    }

    /// Hits and misses so far.
    pub(crate) fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }
}
