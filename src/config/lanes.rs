//! `[lanes]`: session-lane behaviour (passivation, queues, retries).

use serde::{Deserialize, Serialize};

use super::invalid;
use crate::error::ConfigError;

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
    /// Most model calls running at once across all sessions. Default 64.
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
            max_concurrent_turns: 64,
            max_live_lanes: 10_000,
        }
    }
}

impl LanesConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.queue_cap == 0 {
            return Err(invalid("lanes.queue_cap", "must be at least 1"));
        }
        if self.max_live_lanes == 0 {
            return Err(invalid("lanes.max_live_lanes", "must be at least 1"));
        }
        if self.max_concurrent_turns == 0 {
            return Err(invalid("lanes.max_concurrent_turns", "must be at least 1"));
        }
        Ok(())
    }
}
