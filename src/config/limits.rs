//! `[limits]`: admission limits on inbound messages.

use serde::{Deserialize, Serialize};

use super::{in_range, MAX_DURATION_MS};
use crate::error::ConfigError;

/// Largest `limits.max_inbound_chars`.
pub(crate) const MAX_INBOUND_CHARS: usize = 10_000_000;

/// `[limits]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Longest accepted message text, in characters. Default 32,000.
    pub max_inbound_chars: usize,
    /// How far in the future a message timestamp may lie, in ms (clock skew). Default 300,000.
    pub max_future_skew_ms: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_inbound_chars: 32_000,
            max_future_skew_ms: 300_000,
        }
    }
}

impl LimitsConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        in_range(
            "limits.max_inbound_chars",
            self.max_inbound_chars,
            1..=MAX_INBOUND_CHARS,
        )?;
        in_range(
            "limits.max_future_skew_ms",
            self.max_future_skew_ms,
            0..=MAX_DURATION_MS,
        )
    }
}
