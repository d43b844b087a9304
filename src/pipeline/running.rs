//! Which sessions have a turn running right now. Deleting a session is refused while one does,
//! and the registry of live lanes cannot tell (an idle lane stays live until it passivates).

use std::sync::Arc;

use std::sync::atomic::{AtomicUsize, Ordering};

use dashmap::DashMap;

/// Sessions with a running turn (a count per key: a retried turn may overlap its predecessor's
/// guard by a moment).
#[derive(Debug, Default)]
pub(crate) struct RunningTurns {
    keys: DashMap<Arc<str>, usize>,
    /// Turns running now, over all sessions (what a drain waits for and reports).
    total: AtomicUsize,
}

/// Marks a session as running a turn until dropped.
#[derive(Debug)]
pub(crate) struct RunningGuard<'a> {
    turns: &'a RunningTurns,
    key: Arc<str>,
}

impl RunningTurns {
    /// Marks `key` as running a turn until the guard drops.
    pub(crate) fn enter(&self, key: &Arc<str>) -> RunningGuard<'_> {
        *self.keys.entry(Arc::clone(key)).or_insert(0) += 1;
        self.total.fetch_add(1, Ordering::SeqCst);
        RunningGuard {
            turns: self,
            key: Arc::clone(key),
        }
    }

    /// Turns running now.
    pub(crate) fn count(&self) -> usize {
        self.total.load(Ordering::SeqCst)
    }

    /// True while a turn of `key` runs.
    pub(crate) fn is_running(&self, key: &str) -> bool {
        self.keys.contains_key(key)
    }
}

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.turns.total.fetch_sub(1, Ordering::SeqCst);
        self.turns.keys.remove_if_mut(&self.key, |_, n| {
            *n = n.saturating_sub(1);
            *n == 0
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_nest_and_release() {
        let turns = RunningTurns::default();
        let key: Arc<str> = "k".into();
        let a = turns.enter(&key);
        let b = turns.enter(&key);
        drop(a);
        assert!(turns.is_running("k"));
        drop(b);
        assert!(!turns.is_running("k"));
    }
}
