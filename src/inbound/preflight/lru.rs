//! A small least-recently-used map with a fixed capacity, for preflight's per-chat and
//! per-session buffers. Writing one is cheaper than a dependency: a `HashMap` for lookups and a
//! `BTreeMap` from a use counter to the key for finding the least recently used in O(log n).

use std::borrow::Borrow;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// A map holding at most `capacity` entries; inserting into a full map evicts the entry used
/// least recently. `get_mut` and `insert` count as uses.
#[derive(Debug)]
pub(crate) struct LruMap<K, V> {
    entries: HashMap<K, (V, u64)>,
    by_use: BTreeMap<u64, K>,
    clock: u64,
    capacity: usize,
}

impl<K: Hash + Eq + Clone, V> LruMap<K, V> {
    /// An empty map for at most `capacity` entries (at least 1).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            entries: HashMap::new(),
            by_use: BTreeMap::new(),
            clock: 0,
            capacity: capacity.max(1),
        }
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// The value of `key`, marked as just used.
    pub(crate) fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = self.tick();
        let (value, used) = self.entries.get_mut(key)?;
        let old = std::mem::replace(used, now);
        if let Some(k) = self.by_use.remove(&old) {
            self.by_use.insert(now, k);
        }
        Some(value)
    }

    /// The value of `key`, without marking it used (the tests' view of the map).
    #[cfg(test)]
    pub(crate) fn peek<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.entries.get(key).map(|(v, _)| v)
    }

    /// The value of `key`, inserting `make()` first if absent (evicting the least recently used
    /// entry when full); marked as just used.
    pub(crate) fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            if let Some((_, oldest)) = self.by_use.pop_first() {
                self.entries.remove(&oldest);
            }
        }
        let now = self.tick();
        match self.entries.entry(key) {
            Entry::Occupied(slot) => {
                let (value, used) = slot.into_mut();
                let old = std::mem::replace(used, now);
                if let Some(k) = self.by_use.remove(&old) {
                    self.by_use.insert(now, k);
                }
                value
            }
            Entry::Vacant(slot) => {
                self.by_use.insert(now, slot.key().clone());
                &mut slot.insert((make(), now)).0
            }
        }
    }

    /// Removes `key`, returning its value.
    #[cfg(test)]
    pub(crate) fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (value, used) = self.entries.remove(key)?;
        self.by_use.remove(&used);
        Some(value)
    }

    /// Number of entries.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_used() {
        let mut m = LruMap::new(2);
        *m.get_or_insert_with("a", || 0) += 1;
        *m.get_or_insert_with("b", || 0) += 1;
        // Touch `a`, so `b` is the least recently used.
        assert_eq!(m.get_mut(&"a").copied(), Some(1));
        *m.get_or_insert_with("c", || 0) += 1;
        assert_eq!(m.len(), 2);
        assert!(m.peek(&"b").is_none());
        assert_eq!(m.peek(&"a"), Some(&1));
        assert_eq!(m.remove(&"a"), Some(1));
        assert_eq!(m.len(), 1);
        *m.get_or_insert_with("d", || 5) += 1;
        *m.get_or_insert_with("e", || 7) += 1;
        assert_eq!(
            (m.peek(&"c"), m.peek(&"d"), m.peek(&"e")),
            (None, Some(&6), Some(&8))
        );
    }

    #[test]
    fn matches_a_model_under_random_use() {
        // A trivially correct model: a Vec ordered from least to most recently used.
        let mut m = LruMap::new(4);
        let mut model: Vec<(u8, u32)> = Vec::new();
        let mut x: u32 = 12345;
        for step in 0..5_000u32 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let key = ((x >> 16) % 7) as u8;
            match (x >> 8) % 3 {
                0 => {
                    *m.get_or_insert_with(key, || 0) += step;
                    if let Some(i) = model.iter().position(|(k, _)| *k == key) {
                        let (k, v) = model.remove(i);
                        model.push((k, v + step));
                    } else {
                        if model.len() == 4 {
                            model.remove(0);
                        }
                        model.push((key, step));
                    }
                }
                1 => {
                    let got = m.get_mut(&key).copied();
                    let want = model.iter().position(|(k, _)| *k == key).map(|i| {
                        let e = model.remove(i);
                        model.push(e);
                        e.1
                    });
                    assert_eq!(got, want);
                }
                _ => {
                    let got = m.remove(&key);
                    let want = model
                        .iter()
                        .position(|(k, _)| *k == key)
                        .map(|i| model.remove(i).1);
                    assert_eq!(got, want);
                }
            }
            assert_eq!(m.len(), model.len());
        }
    }
}
