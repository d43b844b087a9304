//! The pipeline as configured in TOML: `[[context.sources]]` and `[[context.processors]]`, each
//! a registered name with its priority, weight and parameters, in order.

use super::error::StageError;
use serde::{Deserialize, Serialize};

/// One stage of the pipeline: a registered source or processor and its settings.
///
/// ```toml
/// [[context.sources]]
/// name = "memory_recall"
/// priority = 45          # optional: the source's own default otherwise
/// weight = 0             # optional: the source's weight(session) otherwise
/// params = { top_n = 3 } # optional: the source's parameters
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageSpec {
    /// The registered name.
    pub name: String,
    /// Sources only: 0–100, the priority of the blocks it produces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// Sources only: a fixed weight instead of the source's `weight(session)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    /// Parameters, checked by the stage (unknown keys are an error).
    #[serde(default, skip_serializing_if = "toml::Table::is_empty")]
    pub params: toml::Table,
}

impl StageSpec {
    /// A stage with default settings.
    pub fn named(name: &str) -> Self {
        Self {
            name: name.to_string(),
            priority: None,
            weight: None,
            params: toml::Table::new(),
        }
    }
}

/// The built-in sources in their default collection order. A source collected earlier claims
/// its share of the budget first: the system prompt and the current message before anything
/// else, then the stable prefix (bootstrap, skills) and the clock line, then the recent
/// conversation, and chat recall last: it fills what the turn leaves.
pub(crate) fn default_sources() -> Vec<StageSpec> {
    BUILTIN_SOURCES.into_iter().map(StageSpec::named).collect()
}

/// The built-in sources, in their default order.
pub(crate) const BUILTIN_SOURCES: [&str; 13] = [
    "system_prompt",
    "current_message",
    "bootstrap",
    "skills",
    "time_and_place",
    "system_events",
    "thread_starter",
    "reply_thread",
    "group_history",
    "compaction_summary",
    "memory_recall",
    "history",
    "chat_recall",
];

/// The built-in processors in their default order. `trim_to_budget` comes last; the pipeline
/// always repairs tool pairing and enforces the budget after the configured processors.
pub(crate) fn default_processors() -> Vec<StageSpec> {
    BUILTIN_PROCESSORS
        .into_iter()
        .map(StageSpec::named)
        .collect()
}

/// The built-in processors, in their default order.
pub(crate) const BUILTIN_PROCESSORS: [&str; 6] = [
    "dedupe",
    "sanitize",
    "message_count",
    "ttl_decay",
    "tool_result_guard",
    "trim_to_budget",
];

/// Parses a stage's parameters into `T` (whose unknown keys are an error).
pub(crate) fn parse_params<T: serde::de::DeserializeOwned>(
    stage: &str,
    params: &toml::Table,
) -> Result<T, StageError> {
    T::deserialize(toml::Value::Table(params.clone()))
        .map_err(|e| StageError(format!("context stage {stage:?}: {e}")))
}
