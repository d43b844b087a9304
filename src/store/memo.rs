//! [`EntryMemo`]: what a turn works out from a transcript entry's own fields, kept with the
//! entry so the next turn that shows it need not work it out again.
//!
//! The transcript tail cache shares one entry between every turn of its session, and every
//! turn shows each history entry: dedupe hashed each entry's message id (a cache miss on the
//! id's bytes per entry per turn) and sanitize scanned each entry's text. The memo is never
//! stored, starts empty when an entry is read or cloned (a clone may be edited), and does not
//! take part in comparisons.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

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

impl Clone for EntryMemo {
    /// Empty: the clone's fields may be edited.
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for EntryMemo {
    /// Always: the memo is derived from the fields, which are compared.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for EntryMemo {}

impl std::fmt::Debug for EntryMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EntryMemo")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_are_computed_once_and_not_cloned() {
        let memo = EntryMemo::default();
        assert_eq!(memo.id_hash(|| 42), 42);
        assert_eq!(memo.id_hash(|| unreachable!("computed twice")), 42);
        assert!(memo.text_flag(|| true));
        assert!(memo.text_flag(|| unreachable!("computed twice")));
        let clone = memo.clone();
        assert_eq!(clone.id_hash(|| 7), 7);
        assert!(!clone.text_flag(|| false));
        assert!(!clone.text_flag(|| unreachable!("computed twice")));
    }

    #[test]
    fn a_zero_hash_is_kept() {
        let memo = EntryMemo::default();
        assert_eq!(memo.id_hash(|| 0), 1);
        assert_eq!(memo.id_hash(|| unreachable!("computed twice")), 1);
    }
}
