//! `[lanes]`: session-lane behaviour (passivation, queues, retries).

use serde::{Deserialize, Serialize};

use super::{in_range, MAX_DURATION_MS};
use crate::error::ConfigError;

/// Largest `lanes.queue_cap`.
pub(crate) const MAX_LANE_QUEUE_CAP: usize = 1_000_000;

/// Largest `lanes.turn_retries`.
pub(crate) const MAX_TURN_RETRIES: u32 = 10;

/// Largest `lanes.max_concurrent_turns`, far below tokio's `Semaphore::MAX_PERMITS`.
pub(crate) const MAX_CONCURRENT_TURNS: usize = 100_000;

/// Largest `lanes.max_live_lanes`.
pub(crate) const MAX_LIVE_LANES: usize = 10_000_000;

/// `[lanes]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LanesConfig {
    /// A lane idle this long stops and frees its memory, in ms. Default 600,000 (10 min).
    pub idle_timeout_ms: u64,
    /// Items a lane holds in memory; more stay in the durable inbox until there is room.
    /// Default 1,000.
    pub queue_cap: usize,
    /// How often a failed or panicked turn is retried before an error reply. Default 1.
    pub turn_retries: u32,
    /// Most model calls running at once across all sessions. Real models take seconds per
    /// call, so this is sized for throughput against slow models (1,024 at 2 s a call is
    /// about 500 turns/s); what a provider accepts is the per-model limiter's job
    /// (`[model] requests_per_minute`, `tokens_per_minute`, back-off on 429). One in-flight
    /// turn holds its assembled context, the request body and the answer: about 4 bytes per
    /// context token twice (some 250 KiB at the 32,000-token default), plus the answer (a few
    /// KiB, capped at 8 MiB), so 1,024 in flight cost some 256 MiB to 512 MiB. Default
    /// 1,024.
    pub max_concurrent_turns: usize,
    /// Most live lanes; past it the least recently used idle lanes are passivated. Default
    /// 10,000.
    pub max_live_lanes: usize,
}

impl Default for LanesConfig {
    fn default() -> Self {
        Self {
            idle_timeout_ms: 600_000,
            queue_cap: 1_000,
            turn_retries: 1,
            max_concurrent_turns: 1_024,
            max_live_lanes: 10_000,
        }
    }
}

impl LanesConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        in_range(
            "lanes.idle_timeout_ms",
            self.idle_timeout_ms,
            1..=MAX_DURATION_MS,
        )?;
        in_range("lanes.queue_cap", self.queue_cap, 1..=MAX_LANE_QUEUE_CAP)?;
        in_range(
            "lanes.turn_retries",
            self.turn_retries,
            0..=MAX_TURN_RETRIES,
        )?;
        in_range(
            "lanes.max_concurrent_turns",
            self.max_concurrent_turns,
            1..=MAX_CONCURRENT_TURNS,
        )?;
        in_range(
            "lanes.max_live_lanes",
            self.max_live_lanes,
            1..=MAX_LIVE_LANES,
        )
    }
}
