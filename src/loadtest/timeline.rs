//! Turn latency over the run's time, for `turnstile loadtest --plot`: a bounded, evenly thinned
//! record of `(seconds since the start, latency)` points.
//!
//! A run may answer millions of messages; keeping every point would grow without bound. When
//! [`MAX_POINTS`] are held, every other one is dropped and from then on only every
//! `stride`-th new point is kept, so the record always spans the whole run evenly.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Most points a timeline holds (16 bytes each).
pub(crate) const MAX_POINTS: usize = 20_000;

/// One reply's latency at the moment its message was sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Seconds from the start of the run to the send.
    pub at_seconds: f64,
    /// Send → reply, in milliseconds.
    pub latency_ms: f64,
}

/// The latencies of one run, for plotting.
#[derive(Debug, Clone)]
pub struct Timeline {
    points: Vec<Point>,
    /// Keep one point in `stride` (doubles each time the record is thinned).
    stride: u64,
    seen: u64,
    /// Every turn latency (µs), unthinned.
    histogram: Histogram<u64>,
}

impl Timeline {
    /// An empty record whose histogram matches the report's (µs, 3 significant digits).
    pub(super) fn new(histogram: Histogram<u64>) -> Self {
        Self {
            points: Vec::new(),
            stride: 1,
            seen: 0,
            histogram,
        }
    }

    /// Records a reply to a message sent `at` after the start that took `latency`.
    pub(super) fn record(&mut self, at: Duration, latency: Duration) {
        let us = u64::try_from(latency.as_micros())
            .unwrap_or(u64::MAX)
            .clamp(1, self.histogram.high());
        let _ = self.histogram.record(us);
        self.seen += 1;
        if !self.seen.is_multiple_of(self.stride) {
            return;
        }
        if self.points.len() >= MAX_POINTS {
            let mut i = 0;
            self.points.retain(|_| {
                let keep = i % 2 == 0;
                i += 1;
                keep
            });
            self.stride = self.stride.saturating_mul(2);
        }
        self.points.push(Point {
            at_seconds: at.as_secs_f64(),
            latency_ms: latency.as_secs_f64() * 1_000.0,
        });
    }

    /// The kept points, in reply order.
    pub fn points(&self) -> &[Point] {
        &self.points
    }

    /// Every latency recorded (µs).
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.histogram
    }

    /// Replies recorded (kept or not).
    pub fn replies(&self) -> u64 {
        self.seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_is_bounded_and_spans_the_run() {
        let mut t = Timeline::new(super::super::histogram());
        let n = MAX_POINTS as u64 * 5 + 7;
        for i in 0..n {
            t.record(Duration::from_millis(i), Duration::from_millis(1 + i % 100));
        }
        assert!(t.points().len() <= MAX_POINTS, "{}", t.points().len());
        assert!(t.points().len() >= MAX_POINTS / 4, "{}", t.points().len());
        assert_eq!(t.replies(), n);
        assert_eq!(t.histogram().len(), n, "the histogram is not thinned");
        let last = t.points().last().unwrap().at_seconds;
        assert!(last > (n as f64 / 1_000.0) * 0.9, "covers the end: {last}");
        let first = t.points()[0].at_seconds;
        assert!(
            first < (n as f64 / 1_000.0) * 0.1,
            "covers the start: {first}"
        );
    }
}
