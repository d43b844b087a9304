//! The transcript tail cache: per session, the newest transcript entries in memory, so a turn's
//! assembly does not scan and decode its history out of sled again (a reverse scan was about a
//! tenth of a turn's CPU over HTTP).
//!
//! A tail is tagged with the [`TailStamp`] of the session record it matches (id, next sequence,
//! entry count, compaction count). Every change to a transcript changes the record's stamp in
//! the same sled transaction, so a reader holding a record uses a tail only if the stamps are
//! equal, and a tail can never match a later record once the transcript moved on. A turn's
//! commit extends the tail it continues; anything else (compaction, deletion, eviction) just
//! leaves a stale tail behind, never used and evicted in turn; each database generation (a
//! rewrite, a recovery) starts with an empty cache. A tail read from sled is kept
//! only if the session's record did not change during the read (see [`Store::window_entries`]).
//!
//! Bounded by `storage.transcript_cache_bytes` (least recently used tails go first) and by
//! [`MAX_TAIL_ENTRIES`] per session. Entries are shared (`Arc`), so a replay copies pointers,
//! not texts.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use lru::LruCache;

use super::{EntrySender, SessionRecord, SharedEntry, ToolInfo, TranscriptEntry};

/// Most entries kept per session: more than any assembly window of the default policies reads.
pub(crate) const MAX_TAIL_ENTRIES: usize = 512;

/// What a tail was read or extended against: changes with every change to the transcript.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailStamp {
    /// The session's numeric id.
    pub id: u64,
    /// The sequence the next entry gets.
    pub next_seq: u64,
    /// Entries stored.
    pub entries: u64,
    /// Compactions so far (a compaction may leave the other two unchanged).
    pub compaction_count: u32,
}

impl TailStamp {
    /// The stamp of `record`.
    pub fn of(record: &SessionRecord) -> Self {
        Self {
            id: record.id,
            next_seq: record.next_seq,
            entries: record.entries,
            compaction_count: record.compaction_count,
        }
    }
}

struct Tail {
    stamp: TailStamp,
    /// Oldest first, contiguous up to the newest entry.
    entries: VecDeque<(u64, Arc<SharedEntry>)>,
    /// No older entry exists.
    complete: bool,
    bytes: u64,
}

struct Tails {
    /// By session id, least recently used first. Bounded in bytes, not in tails:
    /// [`Tails::shrink`] drops the least recently used until `bytes` fits.
    by_id: LruCache<u64, Tail>,
    bytes: u64,
}

impl Default for Tails {
    fn default() -> Self {
        Self {
            by_id: LruCache::unbounded(),
            bytes: 0,
        }
    }
}

/// What [`TailCache::replay`] found.
#[derive(Debug)]
pub(super) enum Replay {
    /// No tail matches: read sled (`keep` was not called).
    Miss,
    /// The tail answered: the entries `keep` took, newest first.
    Done(Vec<(u64, Arc<SharedEntry>)>),
    /// `keep` took every cached entry and wants older ones: continue in sled below the
    /// sequence given.
    Partial(Vec<(u64, Arc<SharedEntry>)>, u64),
}

/// The cache. Every critical section is one map operation plus copying entries out.
pub(super) struct TailCache {
    max_bytes: u64,
    tails: Mutex<Tails>,
}

/// What a tail holds of an entry, roughly: its strings, the entry behind its `Arc` and the
/// boxed parts it has.
fn entry_bytes(e: &TranscriptEntry) -> u64 {
    use std::mem::size_of;
    let strings = e.text.len()
        + e.message_id.as_ref().map_or(0, String::len)
        + e.sender
            .as_ref()
            .map_or(0, |s| size_of::<EntrySender>() + s.id.len() + s.name.len())
        + e.tool.as_ref().map_or(0, |t| {
            size_of::<ToolInfo>() + t.call_id.len() + t.name.len() + t.arguments.len()
        });
    // The `Arc`'s two counts, the entry with its memo, and the slot in the tail's list.
    let fixed =
        2 * size_of::<usize>() + size_of::<SharedEntry>() + size_of::<(u64, Arc<SharedEntry>)>();
    (strings + fixed) as u64
}

impl TailCache {
    /// A cache of at most `max_bytes` of entries (0 disables it).
    pub(super) fn new(max_bytes: u64) -> Self {
        Self {
            max_bytes,
            tails: Mutex::new(Tails::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tails> {
        // Every critical section leaves the map consistent before anything can panic.
        self.tails.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replays `keep` over the tail of the session of `stamp`, newest first, as
    /// [`super::Store::newest_entries`] would over sled. `keep` is called only if the tail
    /// matches `stamp`.
    pub(super) fn replay(
        &self,
        stamp: TailStamp,
        keep: &mut dyn FnMut(&TranscriptEntry) -> bool,
    ) -> Replay {
        if self.max_bytes == 0 {
            return Replay::Miss;
        }
        let mut guard = self.lock();
        let tails = &mut *guard;
        let Some(tail) = tails.by_id.peek_mut(&stamp.id) else {
            return Replay::Miss;
        };
        if tail.stamp != stamp {
            return Replay::Miss;
        }
        // Sized once while the cache's lock is held: the window is most often the whole tail
        // (at most `MAX_TAIL_ENTRIES`).
        let mut out = Vec::with_capacity(tail.entries.len());
        let mut stopped = false;
        for (seq, e) in tail.entries.iter().rev() {
            if !keep(e) {
                stopped = true;
                break;
            }
            out.push((*seq, Arc::clone(e)));
        }
        let oldest = tail.entries.front().map_or(stamp.next_seq, |(seq, _)| *seq);
        let complete = tail.complete;
        tails.by_id.promote(&stamp.id);
        if stopped || complete {
            Replay::Done(out)
        } else {
            Replay::Partial(out, oldest)
        }
    }

    /// The oldest entry of the session of `stamp` when its tail matches and holds the whole
    /// transcript (`Some(None)`: it is empty); `None` when only sled can say.
    pub(super) fn oldest(&self, stamp: TailStamp) -> Option<Option<(u64, Arc<SharedEntry>)>> {
        if self.max_bytes == 0 {
            return None;
        }
        let tails = self.lock();
        let tail = tails.by_id.peek(&stamp.id)?;
        (tail.stamp == stamp && tail.complete).then(|| tail.entries.front().cloned())
    }

    /// Remembers `newest_first`, the newest entries of the session of `stamp` as read from
    /// sled (`complete`: all of them).
    pub(super) fn fill(
        &self,
        stamp: TailStamp,
        newest_first: &[(u64, Arc<SharedEntry>)],
        complete: bool,
    ) {
        if self.max_bytes == 0 {
            return;
        }
        let entries: VecDeque<_> = newest_first
            .iter()
            .take(MAX_TAIL_ENTRIES)
            .rev()
            .cloned()
            .collect();
        let complete = complete && newest_first.len() <= MAX_TAIL_ENTRIES;
        let mut tails = self.lock();
        tails.put(stamp, entries, complete, self.max_bytes);
    }

    /// A committed turn moved the session from `before` to `after` by appending
    /// `appended` (`before` is `None` for a session the turn created).
    pub(super) fn appended(
        &self,
        before: Option<TailStamp>,
        after: TailStamp,
        appended: &[(u64, &TranscriptEntry)],
    ) {
        if self.max_bytes == 0 {
            return;
        }
        let mut guard = self.lock();
        let tails = &mut *guard;
        let Some(before) = before else {
            // A new session's transcript is exactly what its first turn wrote.
            let entries = appended
                .iter()
                .map(|(s, e)| (*s, Arc::new((*e).clone().into())))
                .collect();
            tails.put(after, entries, true, self.max_bytes);
            return;
        };
        let Some(tail) = tails.by_id.peek_mut(&after.id) else {
            return;
        };
        if tail.stamp != before {
            // Stale, or read after this commit already: dropped either way, so no tail can
            // outlive a history its stamp might reach again (a store recovered after a loss).
            tails.remove(after.id);
            return;
        }
        for (seq, e) in appended {
            tail.bytes += entry_bytes(e);
            tails.bytes += entry_bytes(e);
            tail.entries
                .push_back((*seq, Arc::new((*e).clone().into())));
        }
        while tail.entries.len() > MAX_TAIL_ENTRIES {
            if let Some((_, old)) = tail.entries.pop_front() {
                tail.bytes -= entry_bytes(&old);
                tails.bytes -= entry_bytes(&old);
                tail.complete = false;
            }
        }
        tail.stamp = after;
        tails.shrink(self.max_bytes);
    }

    /// Sessions with a tail now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().by_id.len()
    }

    /// True when no tail is cached.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Tails {
    fn put(
        &mut self,
        stamp: TailStamp,
        entries: VecDeque<(u64, Arc<SharedEntry>)>,
        complete: bool,
        max_bytes: u64,
    ) {
        self.remove(stamp.id);
        let bytes: u64 = entries.iter().map(|(_, e)| entry_bytes(e)).sum();
        if bytes > max_bytes {
            return;
        }
        self.bytes += bytes;
        self.by_id.push(
            stamp.id,
            Tail {
                stamp,
                entries,
                complete,
                bytes,
            },
        );
        self.shrink(max_bytes);
    }

    fn remove(&mut self, id: u64) {
        if let Some(old) = self.by_id.pop(&id) {
            self.bytes -= old.bytes;
        }
    }

    /// Drops least recently used tails until the cache fits `max_bytes`.
    fn shrink(&mut self, max_bytes: u64) {
        while self.bytes > max_bytes {
            let Some((_, old)) = self.by_id.pop_lru() else {
                break;
            };
            self.bytes -= old.bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(text: &str) -> Arc<SharedEntry> {
        Arc::new(TranscriptEntry::user(text, 1, 1).into())
    }

    fn stamp(id: u64, next_seq: u64) -> TailStamp {
        TailStamp {
            id,
            next_seq,
            entries: next_seq - 1,
            compaction_count: 0,
        }
    }

    fn seqs(v: Vec<(u64, Arc<SharedEntry>)>) -> Vec<u64> {
        v.into_iter().map(|(seq, _)| seq).collect()
    }

    /// The sequences a complete read gets from the tail alone, if it can.
    fn all(c: &TailCache, s: TailStamp) -> Option<Vec<u64>> {
        match c.replay(s, &mut |_| true) {
            Replay::Done(v) => Some(seqs(v)),
            _ => None,
        }
    }

    #[test]
    fn a_tail_serves_only_the_record_it_matches() {
        let c = TailCache::new(1 << 20);
        let read = vec![(2, entry("b")), (1, entry("a"))];
        c.fill(stamp(7, 3), &read, true);
        assert_eq!(all(&c, stamp(7, 3)), Some(vec![2, 1]));
        assert_eq!(all(&c, stamp(7, 4)), None, "a later record");
        let compacted = TailStamp {
            compaction_count: 1,
            ..stamp(7, 3)
        };
        assert_eq!(all(&c, compacted), None, "a compaction");
    }

    #[test]
    fn a_commit_extends_the_tail_it_continues_and_drops_a_stale_one() {
        let c = TailCache::new(1 << 20);
        c.fill(stamp(7, 2), &[(1, entry("a"))], true);
        let (u, a) = (entry("u"), entry("r"));
        c.appended(Some(stamp(7, 2)), stamp(7, 4), &[(2, &*u), (3, &*a)]);
        assert_eq!(all(&c, stamp(7, 4)), Some(vec![3, 2, 1]));
        c.appended(Some(stamp(7, 9)), stamp(7, 11), &[(9, &*u), (10, &*a)]);
        assert_eq!(all(&c, stamp(7, 4)), None, "a gap drops the tail");
        c.appended(None, stamp(8, 3), &[(1, &*u), (2, &*a)]);
        assert_eq!(all(&c, stamp(8, 3)), Some(vec![2, 1]), "a new session");
    }

    #[test]
    fn an_incomplete_tail_answers_only_when_the_reader_stops_inside_it() {
        let c = TailCache::new(1 << 20);
        c.fill(stamp(7, 11), &[(10, entry("j")), (9, entry("i"))], false);
        let mut n = 0;
        let got = c.replay(stamp(7, 11), &mut |_| {
            n += 1;
            n <= 1
        });
        assert!(matches!(got, Replay::Done(v) if v.len() == 1 && v[0].0 == 10));
        let got = c.replay(stamp(7, 11), &mut |_| true);
        assert!(
            matches!(got, Replay::Partial(v, 9) if v.iter().map(|(s, _)| *s).eq([10, 9])),
            "continues below the oldest cached entry"
        );
    }

    #[test]
    fn the_byte_budget_evicts_the_least_recently_used() {
        let big = "x".repeat(400);
        let c = TailCache::new(1_100);
        c.fill(stamp(1, 2), &[(1, entry(&big))], true);
        c.fill(stamp(2, 2), &[(1, entry(&big))], true);
        assert!(all(&c, stamp(1, 2)).is_some());
        c.fill(stamp(3, 2), &[(1, entry(&big))], true);
        assert_eq!(c.len(), 2);
        assert!(all(&c, stamp(2, 2)).is_none(), "least recently used");
        assert!(all(&c, stamp(1, 2)).is_some());
        let c = TailCache::new(0);
        c.fill(stamp(1, 2), &[(1, entry("a"))], true);
        assert!(c.is_empty(), "0 disables it");
    }

    #[test]
    fn a_tail_keeps_at_most_its_entry_bound() {
        let c = TailCache::new(1 << 30);
        let e = entry("a");
        c.fill(stamp(1, 1), &[], true);
        let appended: Vec<_> = (1..=MAX_TAIL_ENTRIES as u64 + 5)
            .map(|s| (s, e.entry()))
            .collect();
        let next = MAX_TAIL_ENTRIES as u64 + 6;
        c.appended(Some(stamp(1, 1)), stamp(1, next), &appended);
        assert!(all(&c, stamp(1, next)).is_none(), "the oldest were dropped");
        let mut n = 0;
        let got = c.replay(stamp(1, next), &mut |_| {
            n += 1;
            n <= 10
        });
        assert!(matches!(got, Replay::Done(v) if v.len() == 10 && v[0].0 == next - 1));
    }
}
