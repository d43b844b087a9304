//! `[tools]`: limits of the tool loop.

use serde::{Deserialize, Serialize};

use super::invalid;
use crate::error::ConfigError;

/// `[tools]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// Most rounds of tool calls in one turn before the model must answer. Default 8.
    pub max_rounds: u32,
    /// Most tool calls run per round; further calls get an error result. Default 16.
    pub max_calls_per_round: usize,
    /// Tool results longer than this many characters are cut (head and tail kept) before they
    /// are stored. Default 40,000.
    pub max_result_chars: usize,
    /// How long one tool call may run, in ms. Default 60,000.
    pub timeout_ms: u64,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            max_rounds: 8,
            max_calls_per_round: 16,
            max_result_chars: 40_000,
            timeout_ms: 60_000,
        }
    }
}

impl ToolsConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.max_result_chars < 100 {
            return Err(invalid("tools.max_result_chars", "must be at least 100"));
        }
        Ok(())
    }
}
