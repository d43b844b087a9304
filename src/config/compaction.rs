//! `[compaction]`: summarising old transcript spans.

use serde::{Deserialize, Serialize};

use super::model::MAX_MODEL_RETRIES;
use super::{fraction, in_range, MAX_TOKENS};
use crate::error::ConfigError;

/// `[compaction]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompactionConfig {
    /// The summariser model, served by the `[model]` server (same `base_url` and key).
    /// `extractive`: the built-in extractive summariser, no network. Empty (default): the
    /// answering model when `[model]` is a real server (`provider = "openai"`), else the
    /// extractive summariser — a model writes what was said, an extract can only pick lines.
    pub model: String,
    /// Longest summary in tokens, `Exact identifiers` included. Default 1,024.
    pub summary_max_tokens: u32,
    /// Share of the budget kept verbatim (newest history) when compacting. Default 0.25.
    pub keep_recent_ratio: f64,
    /// Share of the budget that history may fill before background compaction starts.
    /// Default 0.7.
    pub soft_threshold: f64,
    /// Retries of a failed summariser call before falling back to the extractive summariser.
    /// Default 3 (at most 10).
    pub max_retries: u32,
    /// Most tokens of transcript sent to the summariser model in one call; a larger span is
    /// summarised chunk by chunk, each chunk rolling the previous summary forward. Must leave
    /// room in the summariser's window for the prompt, the previous summary and the answer.
    /// Default 12,000.
    pub chunk_tokens: u32,
    /// Compactions the Compactor actor runs at once, across sessions. Default 2.
    pub max_concurrent: usize,
    /// Sessions waiting for a compaction at most; further requests are refused (a background
    /// one is skipped, a waiting turn answers with an error). Default 1,024.
    pub max_pending: usize,
    /// In group and channel chats, compact as soon as the history window leaves stored
    /// entries out (the message limit is short there, long before the token threshold), so
    /// what the window no longer shows is in the rolling summary. Default true.
    pub window_trigger: bool,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self {
            model: String::new(),
            summary_max_tokens: 1_024,
            keep_recent_ratio: 0.25,
            soft_threshold: 0.7,
            max_retries: 3,
            chunk_tokens: 12_000,
            max_concurrent: 2,
            max_pending: 1_024,
            window_trigger: true,
        }
    }
}

impl CompactionConfig {
    /// Whether summaries come from a model (rather than the built-in extractive summariser).
    pub fn uses_model(&self) -> bool {
        let m = self.model.trim();
        !m.is_empty() && m != "extractive"
    }

    /// The model that writes summaries, if any (see [`Self::model`]).
    pub fn summarizer_model(&self, answering: &super::ModelConfig) -> Option<String> {
        let m = self.model.trim();
        match m {
            "extractive" => None,
            "" if answering.provider == "openai" => Some(answering.model.trim().to_string()),
            "" => None,
            named => Some(named.to_string()),
        }
    }
}

impl CompactionConfig {
    /// The section's own ranges; that a summariser model needs an OpenAI server is checked by
    /// [`super::Config::validate`].
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        in_range(
            "compaction.summary_max_tokens",
            self.summary_max_tokens,
            64..=32_768,
        )?;
        fraction(
            "compaction.keep_recent_ratio",
            self.keep_recent_ratio,
            false,
        )?;
        fraction("compaction.soft_threshold", self.soft_threshold, true)?;
        in_range(
            "compaction.max_retries",
            self.max_retries,
            0..=MAX_MODEL_RETRIES,
        )?;
        in_range(
            "compaction.chunk_tokens",
            self.chunk_tokens,
            1_024..=MAX_TOKENS,
        )?;
        in_range("compaction.max_concurrent", self.max_concurrent, 1..=64)?;
        in_range("compaction.max_pending", self.max_pending, 1..=1_000_000)
    }
}
