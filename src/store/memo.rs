//! [`SharedEntry`]: a transcript entry as the transcript tail cache shares it between turns,
//! with an [`EntryMemo`] of what turns work out from it, so the next turn that shows it need
//! not work it out again.
//!
//! Every turn shows each history entry of its session: dedupe hashed each entry's message id
//! (a cache miss on the id's bytes per entry per turn) and sanitize scanned each entry's text.
//! The memo sits beside the entry, not in it: a [`TranscriptEntry`] is a plain record (its
//! `Clone` copies it, its `PartialEq` compares all of it, and a clone may be edited), while a
//! `SharedEntry` lends its entry only by shared reference, so the memo can never describe
//! fields that changed after it was worked out. The memo is never stored.

use std::ops::Deref;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use super::records::TranscriptEntry;

/// `text_flag` not worked out yet.
const UNKNOWN: u8 = 0;
const FALSE: u8 = 1;
const TRUE: u8 = 2;

/// Facts derived from an entry's fields, each worked out once by its one user (see the
/// methods). Relaxed atomics: a fact is a pure function of fields that never change while the
/// entry is shared, so two threads racing to fill it write the same value.
#[derive(Default)]
pub struct EntryMemo {
    /// The message id's hash; 0 while unknown.
    id_hash: AtomicU64,
    /// The text's flag: [`UNKNOWN`], [`FALSE`] or [`TRUE`].
    text_flag: AtomicU8,
}

impl EntryMemo {
    /// The hash of the entry's message id, `compute`d on first use. Dedupe's alone: every
    /// caller must compute it the same way.
    pub fn id_hash(&self, compute: impl FnOnce() -> u64) -> u64 {
        match self.id_hash.load(Ordering::Relaxed) {
            0 => {
                // 0 marks "unknown": a hash of 0 is kept as 1 (a hash only narrows a search).
                let h = compute().max(1);
                self.id_hash.store(h, Ordering::Relaxed);
                h
            }
            h => h,
        }
    }

    /// Whether the entry's text may change under sanitising, `compute`d on first use.
    /// Sanitize's alone: every caller must compute it the same way.
    pub fn text_flag(&self, compute: impl FnOnce() -> bool) -> bool {
        match self.text_flag.load(Ordering::Relaxed) {
            UNKNOWN => {
                let flag = compute();
                self.text_flag
                    .store(if flag { TRUE } else { FALSE }, Ordering::Relaxed);
                flag
            }
            f => f == TRUE,
        }
    }
}

impl std::fmt::Debug for EntryMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EntryMemo")
    }
}

/// A transcript entry shared between turns (the tail cache's, or one read for an assembly), with
/// the memo of what turns work out from it. Reads as its entry; the entry cannot be changed
/// through it (see the module doc).
#[derive(Debug)]
pub struct SharedEntry {
    entry: TranscriptEntry,
    memo: EntryMemo,
}

impl SharedEntry {
    /// The entry, with an empty memo.
    pub fn new(entry: TranscriptEntry) -> Self {
        Self {
            entry,
            memo: EntryMemo::default(),
        }
    }

    /// The entry.
    pub fn entry(&self) -> &TranscriptEntry {
        &self.entry
    }

    /// The entry of `shared`: moved out when no one else holds it, else copied.
    pub fn into_entry(shared: Arc<Self>) -> TranscriptEntry {
        Arc::try_unwrap(shared).map_or_else(|s| s.entry.clone(), |s| s.entry)
    }

    /// What turns worked out from the entry so far.
    pub fn memo(&self) -> &EntryMemo {
        &self.memo
    }
}

impl From<TranscriptEntry> for SharedEntry {
    fn from(entry: TranscriptEntry) -> Self {
        Self::new(entry)
    }
}

impl Deref for SharedEntry {
    type Target = TranscriptEntry;

    fn deref(&self) -> &TranscriptEntry {
        &self.entry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_are_computed_once() {
        let memo = EntryMemo::default();
        assert_eq!(memo.id_hash(|| 42), 42);
        assert_eq!(memo.id_hash(|| unreachable!("computed twice")), 42);
        assert!(memo.text_flag(|| true));
        assert!(memo.text_flag(|| unreachable!("computed twice")));
    }

    #[test]
    fn a_shared_entry_reads_as_its_entry_and_a_copy_of_it_is_a_plain_entry() {
        let shared = SharedEntry::new(TranscriptEntry::user("hello", 1, 0).with_message_id("m1"));
        assert_eq!(shared.memo().id_hash(|| 7), 7);
        assert_eq!(&*shared.text, "hello");
        // A copy of the entry is a plain record, equal to the one shared, that may be edited;
        // the memo stays with the shared one.
        let mut copy: TranscriptEntry = shared.entry().clone();
        assert_eq!(&copy, shared.entry());
        copy.message_id = None;
        assert_ne!(&copy, shared.entry());
        let again = SharedEntry::new(copy);
        assert_eq!(again.memo().id_hash(|| 9), 9);
        assert_eq!(shared.memo().id_hash(|| unreachable!("computed twice")), 7);
    }

    #[test]
    fn a_shared_entry_and_its_arc_counts_fit_two_cache_lines() {
        // Turns read every history entry of their session; see `TranscriptEntry`.
        assert!(2 * std::mem::size_of::<usize>() + std::mem::size_of::<SharedEntry>() <= 128);
    }

    #[test]
    fn a_zero_hash_is_kept() {
        let memo = EntryMemo::default();
        assert_eq!(memo.id_hash(|| 0), 1);
        assert_eq!(memo.id_hash(|| unreachable!("computed twice")), 1);
    }
}
