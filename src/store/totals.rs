//! [`Totals`]: sessions, transcript entries, tokens, bytes and compactions across the store,
//! kept as records are written, so that `/v1/stats`, `/metrics` and the janitor read them in
//! constant time instead of walking every session.
//!
//! Each write of a session record applies the difference between the record it replaced and
//! the one it wrote ([`TotalsMeter::replace`]). The start-up checks, which read every record
//! once anyway, set the figures exactly ([`TotalsMeter::set`]); a record written while that
//! walk runs may be counted in both until the next start. A clean stop keeps the totals in
//! `meta`, and a serving start shows them until its checks have counted again.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use serde::Serialize;

use super::SessionRecord;

/// The store's totals at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// Sessions in the database (cold ones are counted by the cold tier).
    pub sessions: u64,
    /// Transcript entries of those sessions.
    pub entries: u64,
    /// Tokens of those entries.
    pub tokens: u64,
    /// Encoded bytes of those entries.
    pub bytes: u64,
    /// Compactions those sessions went through.
    pub compactions: u64,
    /// The most tokens one session held, as of the start-up count or written since (it does
    /// not come down when that session shrinks or leaves).
    pub max_session_tokens: u64,
}

/// The running totals (atomics: every commit adds to them).
#[derive(Debug, Default)]
pub(super) struct TotalsMeter {
    sessions: AtomicI64,
    entries: AtomicI64,
    tokens: AtomicI64,
    bytes: AtomicI64,
    compactions: AtomicI64,
    max_session_tokens: AtomicU64,
}

/// A record's share of the totals, as signed figures.
fn share(record: Option<&SessionRecord>) -> [i64; 5] {
    let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    match record {
        None => [0; 5],
        Some(r) => [
            1,
            signed(r.entries),
            signed(r.tokens),
            signed(r.bytes),
            i64::from(r.compaction_count),
        ],
    }
}

impl TotalsMeter {
    fn cells(&self) -> [&AtomicI64; 5] {
        [
            &self.sessions,
            &self.entries,
            &self.tokens,
            &self.bytes,
            &self.compactions,
        ]
    }

    /// `before` (the record replaced, if any) was replaced by `after` (none: removed).
    pub(super) fn replace(&self, before: Option<&SessionRecord>, after: Option<&SessionRecord>) {
        let (old, new) = (share(before), share(after));
        for ((cell, o), n) in self.cells().into_iter().zip(old).zip(new) {
            if n != o {
                cell.fetch_add(n.saturating_sub(o), Ordering::Relaxed);
            }
        }
        if let Some(after) = after {
            self.max_session_tokens
                .fetch_max(after.tokens, Ordering::Relaxed);
        }
    }

    /// Sets the totals exactly (from a walk of every record).
    pub(super) fn set(&self, totals: &Totals) {
        let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let values = [
            totals.sessions,
            totals.entries,
            totals.tokens,
            totals.bytes,
            totals.compactions,
        ];
        for (cell, v) in self.cells().into_iter().zip(values) {
            cell.store(signed(v), Ordering::Relaxed);
        }
        self.max_session_tokens
            .store(totals.max_session_tokens, Ordering::Relaxed);
    }

    /// The totals now (a figure that a race took below zero reads as zero).
    pub(super) fn get(&self) -> Totals {
        let read = |cell: &AtomicI64| u64::try_from(cell.load(Ordering::Relaxed)).unwrap_or(0);
        Totals {
            sessions: read(&self.sessions),
            entries: read(&self.entries),
            tokens: read(&self.tokens),
            bytes: read(&self.bytes),
            compactions: read(&self.compactions),
            max_session_tokens: self.max_session_tokens.load(Ordering::Relaxed),
        }
    }
}

impl Totals {
    /// Six big-endian u64s, as kept in `meta` at a clean stop.
    pub(super) fn to_bytes(self) -> Vec<u8> {
        [
            self.sessions,
            self.entries,
            self.tokens,
            self.bytes,
            self.compactions,
            self.max_session_tokens,
        ]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect()
    }

    /// What [`Totals::to_bytes`] wrote; `None` for anything else.
    pub(super) fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let mut v = bytes
            .chunks_exact(8)
            .map(|c| c.try_into().ok().map(u64::from_be_bytes));
        let totals = Totals {
            sessions: v.next()??,
            entries: v.next()??,
            tokens: v.next()??,
            bytes: v.next()??,
            compactions: v.next()??,
            max_session_tokens: v.next()??,
        };
        (bytes.len() == 48).then_some(totals)
    }

    /// Adds `record` (a walk's step).
    pub(super) fn add(&mut self, record: &SessionRecord) {
        self.sessions += 1;
        self.entries += record.entries;
        self.tokens += record.tokens;
        self.bytes += record.bytes;
        self.compactions += u64::from(record.compaction_count);
        self.max_session_tokens = self.max_session_tokens.max(record.tokens);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(entries: u64, tokens: u64) -> SessionRecord {
        SessionRecord {
            id: 1,
            created_at_ms: 0,
            updated_at_ms: 0,
            next_seq: entries + 1,
            entries,
            tokens,
            bytes: entries * 10,
            compaction_count: 0,
        }
    }

    #[test]
    fn replacements_add_up_to_what_a_walk_counts() {
        let meter = TotalsMeter::default();
        let (a1, a2) = (record(2, 20), record(4, 45));
        let b = record(1, 7);
        meter.replace(None, Some(&a1));
        meter.replace(Some(&a1), Some(&a2));
        meter.replace(None, Some(&b));
        let mut compacted = a2.clone();
        compacted.entries = 1;
        compacted.tokens = 9;
        compacted.compaction_count = 1;
        meter.replace(Some(&a2), Some(&compacted));
        meter.replace(Some(&b), None);
        let mut walked = Totals::default();
        walked.add(&compacted);
        let got = meter.get();
        assert_eq!(
            (
                got.sessions,
                got.entries,
                got.tokens,
                got.bytes,
                got.compactions
            ),
            (1, 1, 9, 40, 1)
        );
        assert_eq!(
            got.max_session_tokens, 45,
            "the most seen, not the most now"
        );
        meter.set(&walked);
        assert_eq!(meter.get(), walked);
        assert_eq!(Totals::from_bytes(&walked.to_bytes()), Some(walked));
        assert_eq!(Totals::from_bytes(b"short"), None);
    }
}
