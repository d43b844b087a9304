//! [`Changes`]: the keys written to a database while a rewrite copies it.
//!
//! One watcher thread per tree holds a sled subscriber and puts the key of every event in that
//! tree's set. A watcher never calls sled: a sled transaction hands its events to subscribers
//! while it holds sled's process-wide lock, and a watcher that waited on sled could wait on that
//! writer for ever. The subscriber's channel is bounded (sled's 1,024 events); a writer waits
//! only while a watcher, which does nothing but insert into a set, catches up.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::StoreError;

/// Most keys held as written at once; past it the rewrite gives up rather than copy them all
/// again under the write gate (bounds the watchers' memory: keys are tens of bytes).
pub(super) const MAX_CHANGED_KEYS: usize = 500_000;
/// How long a watcher sleeps at most between looks at its subscriber and its stop flag (a
/// write wakes it sooner). Under the write gate no writer is left, so stopping costs a
/// rewrite's pause at most about this much.
const WATCH_POLL: Duration = Duration::from_millis(2);

/// The keys written to the watched trees since [`Changes::watch`], per tree, in key order.
pub(super) struct Changes {
    shared: Arc<Shared>,
    watchers: Vec<JoinHandle<()>>,
}

struct Shared {
    /// One set per watched tree, in the order of the trees given to `watch`.
    keys: Vec<Mutex<BTreeSet<sled::IVec>>>,
    held: AtomicUsize,
    overflowed: AtomicBool,
    stop: AtomicBool,
}

impl Shared {
    fn mark(&self, tree: usize, key: sled::IVec) {
        if self.overflowed.load(Ordering::Relaxed) {
            return;
        }
        let Some(set) = self.keys.get(tree) else {
            return;
        };
        let added = set
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key);
        if added && self.held.fetch_add(1, Ordering::Relaxed) + 1 > MAX_CHANGED_KEYS {
            self.overflowed.store(true, Ordering::Relaxed);
        }
    }
}

/// Wakes a watcher parked on its subscriber.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// A watcher's loop: every event's key into the set, until told to stop and nothing is left.
///
/// The subscriber is polled as a future, not read through `Subscriber::next_timeout`: that
/// one keeps returning an error for ever once it meets the event of a write that sled gave
/// up and retried (a dropped reservation), and it reports a writer still writing as an error
/// too. Polled, a dropped reservation is skipped, and `Pending` with writes held off means
/// the channel is empty.
fn watch(mut events: sled::Subscriber, tree: usize, shared: &Shared) {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        match Pin::new(&mut events).poll(&mut cx) {
            Poll::Ready(Some(event)) => shared.mark(tree, event.key().clone()),
            // The database is gone.
            Poll::Ready(None) => return,
            Poll::Pending => {
                if shared.stop.load(Ordering::Acquire) {
                    return;
                }
                std::thread::park_timeout(WATCH_POLL);
            }
        }
    }
}

impl Changes {
    /// Starts watching `trees` (every key of each).
    pub(super) fn watch(trees: &[sled::Tree]) -> Result<Self, StoreError> {
        let shared = Arc::new(Shared {
            keys: trees.iter().map(|_| Mutex::default()).collect(),
            held: AtomicUsize::new(0),
            overflowed: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let mut changes = Changes {
            shared: Arc::clone(&shared),
            watchers: Vec::with_capacity(trees.len()),
        };
        for (index, tree) in trees.iter().enumerate() {
            let events = tree.watch_prefix(Vec::<u8>::new());
            let shared = Arc::clone(&shared);
            let watcher = std::thread::Builder::new()
                .name("rewrite watch".into())
                .spawn(move || watch(events, index, &shared))
                .map_err(|e| StoreError::Flush(format!("cannot start a rewrite watcher: {e}")))?;
            changes.watchers.push(watcher);
        }
        Ok(changes)
    }

    /// Marks `key` of tree `tree` as written (a key the copy's check found missing or extra).
    pub(super) fn mark(&self, tree: usize, key: sled::IVec) {
        self.shared.mark(tree, key);
    }

    /// The keys written since the last call, per tree; they are forgotten here. An error once
    /// more than [`MAX_CHANGED_KEYS`] were held at once.
    pub(super) fn take(&self) -> Result<Vec<BTreeSet<sled::IVec>>, StoreError> {
        if self.shared.overflowed.load(Ordering::Relaxed) {
            return Err(StoreError::Invariant(
                "more keys were written during a rewrite than it can track",
            ));
        }
        let taken: Vec<_> = self
            .shared
            .keys
            .iter()
            .map(|set| std::mem::take(&mut *set.lock().unwrap_or_else(PoisonError::into_inner)))
            .collect();
        let n: usize = taken.iter().map(BTreeSet::len).sum();
        self.shared.held.fetch_sub(n, Ordering::Relaxed);
        Ok(taken)
    }

    /// Stops the watchers once their channels are empty and returns the keys left. Call it
    /// with writes held off, so that every write is in the result.
    pub(super) fn finish(mut self) -> Result<Vec<BTreeSet<sled::IVec>>, StoreError> {
        self.stop_watchers();
        self.take()
    }

    fn stop_watchers(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        for watcher in self.watchers.drain(..) {
            let _ = watcher.join();
        }
    }
}

impl Drop for Changes {
    fn drop(&mut self) {
        self.stop_watchers();
    }
}

#[cfg(test)]
mod tests {
    use sled::Transactional;

    use super::*;

    #[test]
    fn every_key_written_while_watching_is_reported_once() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let a = db.open_tree("a").unwrap();
        let b = db.open_tree("b").unwrap();
        a.insert(b"before", b"x").unwrap();
        let changes = Changes::watch(&[a.clone(), b.clone()]).unwrap();
        a.insert(b"k1", b"1").unwrap();
        a.insert(b"k1", b"2").unwrap();
        b.remove(b"gone").unwrap();
        b.insert(b"k2", b"x").unwrap();
        (&a, &b)
            .transaction(|(a, b)| {
                a.insert(b"t1".as_slice(), b"x".as_slice())?;
                b.remove(b"k2".as_slice())?;
                Ok::<_, sled::transaction::ConflictableTransactionError<()>>(())
            })
            .unwrap();
        let keys = changes.finish().unwrap();
        let names = |set: &BTreeSet<sled::IVec>| -> Vec<Vec<u8>> {
            set.iter().map(|k| k.to_vec()).collect()
        };
        assert_eq!(names(&keys[0]), [b"k1".to_vec(), b"t1".to_vec()]);
        assert!(names(&keys[1]).contains(&b"k2".to_vec()), "{:?}", keys[1]);
    }

    #[test]
    fn keys_taken_are_forgotten() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let a = db.open_tree("a").unwrap();
        let changes = Changes::watch(std::slice::from_ref(&a)).unwrap();
        changes.mark(0, sled::IVec::from(b"m".as_slice()));
        let first = changes.take().unwrap();
        assert_eq!(first[0].len(), 1);
        assert!(changes.finish().unwrap()[0].is_empty());
    }
}
