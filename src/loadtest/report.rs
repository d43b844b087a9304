//! The load-test report, for people (text) and machines (JSON).

use std::collections::BTreeMap;
use std::fmt;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Percentiles of one latency, in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Maximum.
    pub max_ms: f64,
}

impl Latency {
    /// Summarises a histogram of microseconds.
    pub fn of(h: &Histogram<u64>) -> Self {
        let ms = |us: u64| us as f64 / 1_000.0;
        Self {
            count: h.len(),
            p50_ms: ms(h.value_at_quantile(0.50)),
            p90_ms: ms(h.value_at_quantile(0.90)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            max_ms: ms(h.max()),
        }
    }
}

/// What a load test measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// What was loaded (URL or in-process).
    pub target: String,
    /// Sessions.
    pub sessions: usize,
    /// Messages per session.
    pub messages_per_session: usize,
    /// Concurrent senders.
    pub concurrency: usize,
    /// Messages sent.
    pub sent: u64,
    /// Accepted (202 / `Ok(Ack)`).
    pub accepted: u64,
    /// Dropped by preflight.
    pub dropped: u64,
    /// Accepted messages whose reply arrived.
    pub replied: u64,
    /// Replies that answered messages of this run (one turn answers one message or, when
    /// messages queued meanwhile, several).
    pub turns: u64,
    /// Accepted messages whose reply did not arrive before the drain deadline.
    pub unanswered: u64,
    /// Errors by kind (HTTP status or error name).
    pub errors: BTreeMap<String, u64>,
    /// Time spent sending.
    pub send_seconds: f64,
    /// Time until the last reply (or the drain deadline).
    pub total_seconds: f64,
    /// Accepted messages per second while sending.
    pub accepted_per_second: f64,
    /// Answered messages per second over the whole run.
    pub replies_per_second: f64,
    /// Turns (replies) per second over the whole run.
    pub turns_per_second: f64,
    /// Submit → accepted.
    pub ack_latency: Latency,
    /// Submit → reply.
    pub turn_latency: Latency,
    /// Resident memory of the loaded process, when it could be read.
    pub rss_bytes: Option<u64>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "target        {}", self.target)?;
        writeln!(
            f,
            "load          {} sessions x {} messages, concurrency {}",
            self.sessions, self.messages_per_session, self.concurrency
        )?;
        writeln!(
            f,
            "messages      sent {}  accepted {}  dropped {}  replied {}  unanswered {}  turns {}",
            self.sent, self.accepted, self.dropped, self.replied, self.unanswered, self.turns
        )?;
        writeln!(
            f,
            "throughput    {:.0} accepted/s while sending ({:.2} s), {:.0} answered/s and {:.0} turns/s overall ({:.2} s)",
            self.accepted_per_second,
            self.send_seconds,
            self.replies_per_second,
            self.turns_per_second,
            self.total_seconds
        )?;
        writeln!(
            f,
            "latency (ms)  {:>10} {:>10} {:>10} {:>10} {:>10}",
            "count", "p50", "p90", "p99", "max"
        )?;
        for (name, l) in [("ack", &self.ack_latency), ("turn", &self.turn_latency)] {
            writeln!(
                f,
                "  {name:<11} {:>10} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
                l.count, l.p50_ms, l.p90_ms, l.p99_ms, l.max_ms
            )?;
        }
        if self.errors.is_empty() {
            writeln!(f, "errors        none")?;
        } else {
            let list: Vec<String> = self
                .errors
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect();
            writeln!(f, "errors        {}", list.join(", "))?;
        }
        match self.rss_bytes {
            Some(b) => writeln!(f, "rss           {:.1} MiB", b as f64 / (1024.0 * 1024.0)),
            None => writeln!(
                f,
                "rss           unknown (pass --server-pid for a local server)"
            ),
        }
    }
}
