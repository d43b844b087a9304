//! A latency histogram that can be read back: fixed log-linear buckets of atomic counters.
//!
//! The Prometheus recorder cannot be queried, and the operator console wants turn latency
//! percentiles over the last minutes. Recording is one relaxed `fetch_add`, so the turn path
//! pays nothing measurable; readers take a [`LatencySnapshot`] (cumulative counts) and
//! subtract an older one to get the distribution of an interval.
//!
//! Buckets: exact for 0–3 µs, then 4 per power of two (each at most 25% wide), up to
//! 2^[`MAX_OCTAVE`] µs (about 19 hours); longer values land in the last bucket. A percentile
//! is reported as its bucket's midpoint, so it is within ±12.5% of the true value.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Sub-buckets per power of two.
const SUB_BUCKETS: usize = 4;
/// The highest power of two (in µs) with buckets of its own.
const MAX_OCTAVE: u32 = 36;
/// Number of buckets: 4 exact ones below 4 µs, then [`SUB_BUCKETS`] per octave 2..=MAX_OCTAVE.
const BUCKETS: usize = SUB_BUCKETS + (MAX_OCTAVE as usize - 1) * SUB_BUCKETS;

/// The bucket of a latency of `us` microseconds.
fn bucket_of(us: u64) -> usize {
    if us < SUB_BUCKETS as u64 {
        return us as usize;
    }
    let octave = 63 - us.leading_zeros(); // >= 2
    if octave > MAX_OCTAVE {
        return BUCKETS - 1;
    }
    let sub = ((us >> (octave - 2)) & 3) as usize;
    SUB_BUCKETS + (octave as usize - 2) * SUB_BUCKETS + sub
}

/// The range `[low, high)` of bucket `i`, in microseconds.
fn bucket_range(i: usize) -> (u64, u64) {
    if i < SUB_BUCKETS {
        return (i as u64, i as u64 + 1);
    }
    let octave = ((i - SUB_BUCKETS) / SUB_BUCKETS + 2) as u32;
    let sub = ((i - SUB_BUCKETS) % SUB_BUCKETS) as u64;
    let shift = octave - 2;
    ((4 + sub) << shift, (5 + sub) << shift)
}

/// A histogram of latencies, shared by all threads of the process.
#[derive(Debug)]
pub struct LatencyBuckets {
    counts: [AtomicU64; BUCKETS],
}

impl Default for LatencyBuckets {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyBuckets {
    /// An empty histogram (usable in a `static`).
    pub const fn new() -> Self {
        Self {
            counts: [const { AtomicU64::new(0) }; BUCKETS],
        }
    }

    /// Counts one latency.
    pub fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.counts[bucket_of(us)].fetch_add(1, Ordering::Relaxed);
    }

    /// The cumulative counts now.
    pub fn snapshot(&self) -> LatencySnapshot {
        let mut counts = Box::new([0u64; BUCKETS]);
        for (c, a) in counts.iter_mut().zip(self.counts.iter()) {
            *c = a.load(Ordering::Relaxed);
        }
        LatencySnapshot { counts }
    }
}

/// Bucket counts at one moment (cumulative since the process started), or of an interval
/// (the difference of two snapshots).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatencySnapshot {
    counts: Box<[u64; BUCKETS]>,
}

impl Default for LatencySnapshot {
    fn default() -> Self {
        Self {
            counts: Box::new([0; BUCKETS]),
        }
    }
}

impl LatencySnapshot {
    /// What was recorded after `earlier` (counts never decrease; a smaller count reads as 0).
    pub fn since(&self, earlier: &LatencySnapshot) -> LatencySnapshot {
        let mut counts = Box::new([0u64; BUCKETS]);
        for (i, c) in counts.iter_mut().enumerate() {
            *c = self.counts[i].saturating_sub(earlier.counts[i]);
        }
        LatencySnapshot { counts }
    }

    /// Latencies counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The `q` quantile (0..=1) in milliseconds (its bucket's midpoint), or `None` when
    /// nothing was counted.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        // The smallest bucket whose cumulative count reaches ceil(q × total), at least 1.
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (low, high) = bucket_range(i);
                return Some((low + high) as f64 / 2.0 / 1_000.0);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order() {
        let mut previous = 0;
        for us in [
            0u64,
            1,
            3,
            4,
            5,
            7,
            8,
            9,
            1_000,
            65_535,
            1 << 36,
            (1 << 37) - 1,
        ] {
            let b = bucket_of(us);
            assert!(b >= previous, "bucket of {us} went backwards");
            assert!(b < BUCKETS);
            let (low, high) = bucket_range(b);
            assert!(low <= us && us < high, "{us} not in [{low}, {high})");
            previous = b;
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        for i in 1..BUCKETS {
            assert_eq!(bucket_range(i - 1).1, bucket_range(i).0, "gap before {i}");
        }
    }

    #[test]
    fn quantiles_are_within_an_eighth_of_the_truth() {
        let h = LatencyBuckets::new();
        // 1..=1000 ms, one each: p50 = 500 ms, p99 = 990 ms.
        for ms in 1..=1_000u64 {
            h.record(Duration::from_millis(ms));
        }
        let s = h.snapshot();
        assert_eq!(s.count(), 1_000);
        for (q, truth) in [(0.5, 500.0), (0.99, 990.0), (0.0, 1.0), (1.0, 1_000.0)] {
            let got = s.quantile_ms(q).unwrap();
            assert!(
                (got - truth).abs() <= truth * 0.125,
                "q{q}: {got} vs {truth}"
            );
        }
    }

    #[test]
    fn intervals_are_differences_of_snapshots() {
        let h = LatencyBuckets::new();
        h.record(Duration::from_secs(10));
        let before = h.snapshot();
        for _ in 0..9 {
            h.record(Duration::from_millis(2));
        }
        let interval = h.snapshot().since(&before);
        assert_eq!(interval.count(), 9);
        let p99 = interval.quantile_ms(0.99).unwrap();
        assert!((1.75..=2.5).contains(&p99), "{p99}");
        assert_eq!(LatencySnapshot::default().quantile_ms(0.5), None);
        assert_eq!(before.since(&h.snapshot()).count(), 0, "never negative");
    }
}
