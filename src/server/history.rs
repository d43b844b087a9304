//! The recent past for the operator console: a bounded ring of samples (turns/s, turn latency
//! percentiles, model errors, compactions, evictions, lanes, queue), taken every
//! [`SAMPLE_INTERVAL`] by a task the server runs beside its router.
//!
//! Counters are cumulative (process or runtime totals); each sample stores the totals it saw so
//! the next one, and any window ([`History::recent`]), is a difference. The ring keeps
//! [`HISTORY_SAMPLES`] samples, so its memory is fixed whatever the traffic.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;

use crate::clock::now_ms;
use crate::metrics::{self, LatencySnapshot};
use crate::runtime::Runtime;

/// How often the server samples. The console refreshes at most this often, so a finer
/// sample would never be seen.
pub(crate) const SAMPLE_INTERVAL: Duration = Duration::from_secs(2);
/// Samples kept: 150 × 2 s = the last five minutes.
pub(crate) const HISTORY_SAMPLES: usize = 150;
/// The window of the `recent` figures of `/v1/stats`.
pub(crate) const RECENT_WINDOW: Duration = Duration::from_secs(60);

/// Cumulative figures at one moment.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reading {
    /// When (ms since the Unix epoch).
    pub(crate) at_ms: u64,
    /// Turns finished by this process.
    pub(crate) turns: u64,
    /// Their latencies.
    pub(crate) latency: LatencySnapshot,
    /// Failed model calls of this process.
    pub(crate) model_errors: u64,
    /// Compactions run by this process.
    pub(crate) compactions: u64,
    /// Sessions evicted by this runtime's janitor.
    pub(crate) evictions: u64,
    /// Live lanes now.
    pub(crate) live_lanes: u64,
    /// Unanswered messages now.
    pub(crate) queued_messages: u64,
}

impl Reading {
    /// Reads `runtime` and this process's counters now. `evictions` comes from the janitor
    /// (an actor call); pass what was known before for when it does not answer.
    pub(crate) async fn take(runtime: &Runtime, known_evictions: u64) -> Self {
        let evictions = match runtime.janitor_status().await {
            Ok(status) => status.totals.sessions_evicted,
            Err(_) => known_evictions,
        };
        Self::now(runtime, evictions)
    }

    /// Reads `runtime` and this process's counters now, with the janitor's eviction total
    /// already known.
    pub(crate) fn now(runtime: &Runtime, evictions: u64) -> Self {
        let process = metrics::process_stats();
        Self {
            at_ms: now_ms(),
            turns: process.turns,
            latency: metrics::turn_latency(),
            model_errors: process.model_errors,
            compactions: process.compactions,
            evictions,
            live_lanes: runtime.live_lanes() as u64,
            queued_messages: runtime.queued() as u64,
        }
    }
}

/// What happened between two readings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Recent {
    /// The interval's end (ms since the Unix epoch).
    pub(crate) at_ms: u64,
    /// Its length in seconds.
    pub(crate) window_seconds: f64,
    /// Turns finished in it.
    pub(crate) turns: u64,
    /// Turns per second.
    pub(crate) turns_per_second: f64,
    /// Median turn latency (ms); `None` without turns.
    pub(crate) turn_p50_ms: Option<f64>,
    /// 99th percentile turn latency (ms); `None` without turns.
    pub(crate) turn_p99_ms: Option<f64>,
    /// Failed model calls.
    pub(crate) model_errors: u64,
    /// Compactions.
    pub(crate) compactions: u64,
    /// Sessions evicted.
    pub(crate) evictions: u64,
    /// Live lanes at the end.
    pub(crate) live_lanes: u64,
    /// Unanswered messages at the end.
    pub(crate) queued_messages: u64,
}

impl Recent {
    /// From `earlier` to `later`.
    pub(crate) fn between(earlier: &Reading, later: &Reading) -> Self {
        let ms = later.at_ms.saturating_sub(earlier.at_ms);
        let seconds = ms as f64 / 1_000.0;
        let turns = later.turns.saturating_sub(earlier.turns);
        let latency = later.latency.since(&earlier.latency);
        Self {
            at_ms: later.at_ms,
            window_seconds: seconds,
            turns,
            turns_per_second: if seconds > 0.0 {
                turns as f64 / seconds
            } else {
                0.0
            },
            turn_p50_ms: latency.quantile_ms(0.50),
            turn_p99_ms: latency.quantile_ms(0.99),
            model_errors: later.model_errors.saturating_sub(earlier.model_errors),
            compactions: later.compactions.saturating_sub(earlier.compactions),
            evictions: later.evictions.saturating_sub(earlier.evictions),
            live_lanes: later.live_lanes,
            queued_messages: later.queued_messages,
        }
    }
}

/// The ring of samples of one server.
#[derive(Debug, Default)]
pub(crate) struct History {
    ring: Mutex<Ring>,
}

#[derive(Debug, Default)]
struct Ring {
    /// The readings, oldest first, at most [`HISTORY_SAMPLES`] + 1 (the extra one is the
    /// start of the oldest sample's interval).
    readings: VecDeque<Reading>,
    /// `samples[i]` is the interval ending at `readings[i + 1]`.
    samples: VecDeque<Recent>,
}

impl History {
    /// Adds a reading (and the sample ending at it), dropping the oldest past the bound.
    pub(crate) fn record(&self, reading: Reading) {
        let Ok(mut ring) = self.ring.lock() else {
            return;
        };
        if let Some(last) = ring.readings.back() {
            let sample = Recent::between(last, &reading);
            ring.samples.push_back(sample);
        }
        ring.readings.push_back(reading);
        while ring.samples.len() > HISTORY_SAMPLES {
            ring.samples.pop_front();
        }
        while ring.readings.len() > ring.samples.len() + 1 {
            ring.readings.pop_front();
        }
    }

    /// The samples newer than `after_ms`, oldest first.
    pub(crate) fn samples_after(&self, after_ms: u64) -> Vec<Recent> {
        self.ring
            .lock()
            .map(|r| {
                // Newest last: count back from the end, so a refresh copies only what is new.
                let new = r
                    .samples
                    .iter()
                    .rev()
                    .take_while(|s| s.at_ms > after_ms)
                    .count();
                r.samples
                    .iter()
                    .skip(r.samples.len() - new)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every sample, oldest first.
    #[cfg(test)]
    fn samples(&self) -> Vec<Recent> {
        self.samples_after(0)
    }

    /// The newest known eviction total (carried over when the janitor does not answer).
    pub(crate) fn last_evictions(&self) -> u64 {
        self.ring
            .lock()
            .ok()
            .and_then(|r| r.readings.back().map(|x| x.evictions))
            .unwrap_or(0)
    }

    /// From the newest reading at or before `now − window` (so the whole window is covered;
    /// the oldest reading when history is younger than the window) to `now`. `None` before
    /// the first reading.
    pub(crate) fn recent(&self, now: &Reading, window: Duration) -> Option<Recent> {
        let ring = self.ring.lock().ok()?;
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        let since = now.at_ms.saturating_sub(window_ms);
        // The newest reading at or before the window's start; else the oldest there is.
        let start = ring
            .readings
            .iter()
            .rev()
            .find(|r| r.at_ms <= since)
            .or_else(|| ring.readings.front())?;
        Some(Recent::between(start, now))
    }
}

/// Samples `runtime` into `history` every [`SAMPLE_INTERVAL`] until `closing` turns true (or
/// its sender is gone).
pub(super) async fn run(
    runtime: Runtime,
    history: Arc<History>,
    mut closing: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let closed = tokio::select! {
            _ = tick.tick() => false,
            // `Ref` is not `Send`: map it to a bool inside the branch.
            c = closing.wait_for(|c| *c) => { let _ = c.map(|_| ()); true }
        };
        if closed {
            return;
        }
        let reading = Reading::take(&runtime, history.last_evictions()).await;
        history.record(reading);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(at_s: u64, turns: u64, evictions: u64) -> Reading {
        Reading {
            at_ms: at_s * 1_000,
            turns,
            evictions,
            ..Reading::default()
        }
    }

    #[test]
    fn samples_are_differences_and_the_ring_is_bounded() {
        let h = History::default();
        assert!(h.samples().is_empty());
        for i in 0..(HISTORY_SAMPLES as u64 + 10) {
            h.record(reading(i * 2, i * 10, i / 50));
        }
        let samples = h.samples();
        assert_eq!(samples.len(), HISTORY_SAMPLES);
        assert!(samples.iter().all(|s| s.turns == 10));
        assert!(samples
            .iter()
            .all(|s| (s.turns_per_second - 5.0).abs() < 1e-9));
        // The kept samples span readings 10..=159: evictions went from 10/50 to 159/50.
        assert_eq!(samples.iter().map(|s| s.evictions).sum::<u64>(), 3);
        let newest = samples.last().unwrap().at_ms;
        assert!(h.samples_after(newest).is_empty());
        let two = h.samples_after(samples[samples.len() - 3].at_ms);
        assert_eq!(two, samples[samples.len() - 2..].to_vec());
        let ring = h.ring.lock().unwrap();
        assert_eq!(ring.readings.len(), HISTORY_SAMPLES + 1);
    }

    #[test]
    fn the_recent_window_starts_at_or_before_its_edge() {
        let h = History::default();
        assert!(h.recent(&reading(100, 0, 0), RECENT_WINDOW).is_none());
        for s in [0u64, 30, 50, 70, 90] {
            h.record(reading(s, s, 0));
        }
        // now = 100 s: the window starts at 40 s, covered from the reading at 30 s.
        let r = h.recent(&reading(100, 100, 0), RECENT_WINDOW).unwrap();
        assert_eq!(r.turns, 70);
        assert!((r.window_seconds - 70.0).abs() < 1e-9);
        // Young history: from the oldest reading.
        let young = History::default();
        young.record(reading(90, 90, 0));
        let r = young.recent(&reading(100, 100, 0), RECENT_WINDOW).unwrap();
        assert_eq!(r.turns, 10);
        assert_eq!(r.turn_p50_ms, None, "no latencies recorded");
    }
}
