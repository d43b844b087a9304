//! `[limits]`: admission limits on inbound messages.

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

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
        Ok(())
    }
}
