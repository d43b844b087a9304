//! `[tools]`: limits of the tool loop.

use serde::{Deserialize, Serialize};

use super::{in_range, MAX_DURATION_MS};
use crate::error::ConfigError;

/// Largest `tools.max_rounds`.
pub(crate) const MAX_TOOL_ROUNDS: u32 = 1_000;

/// Largest `tools.max_calls_per_round`.
pub(crate) const MAX_TOOL_CALLS_PER_ROUND: usize = 1_000;

/// Largest `tools.max_result_chars`.
pub(crate) const MAX_TOOL_RESULT_CHARS: usize = 10_000_000;

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
        in_range("tools.max_rounds", self.max_rounds, 0..=MAX_TOOL_ROUNDS)?;
        let calls = self.max_calls_per_round;
        in_range(
            "tools.max_calls_per_round",
            calls,
            0..=MAX_TOOL_CALLS_PER_ROUND,
        )?;
        let chars = self.max_result_chars;
        in_range("tools.max_result_chars", chars, 100..=MAX_TOOL_RESULT_CHARS)?;
        in_range("tools.timeout_ms", self.timeout_ms, 1..=MAX_DURATION_MS)
    }
}
