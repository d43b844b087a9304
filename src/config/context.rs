//! `[context]`: how a turn's context is assembled.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{in_range, invalid, MAX_DURATION_MS, MAX_TOKENS};
use crate::context::{
    default_processors, default_sources, ChatKindPresets, PresetConfig, StageSpec,
};
use crate::error::ConfigError;
use crate::inbound::ChatKind;

/// Largest `context.cache_max_sessions`.
pub(crate) const MAX_CACHED_SESSIONS: usize = 1_000_000;

/// Largest `max_messages` of a `[context.presets.<name>]`.
pub(crate) const MAX_PRESET_MESSAGES: usize = 100_000;

/// Largest magnitude of a source's fixed `weight`, far from overflowing a sum of weights.
pub(crate) const MAX_SOURCE_WEIGHT: i32 = 1_000_000;

/// `[context]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContextConfig {
    /// The system prompt (trusted).
    pub system_prompt: String,
    /// Most tokens any turn's context may use, whatever its preset says. Default 32,000.
    pub max_tokens: u32,
    /// Tokens kept free for the model's answer. Default 4,096.
    pub reserve_output_tokens: u32,
    /// Sessions whose last assembly is cached (for dumps and retried turns). 0 disables the
    /// cache. Default 256.
    pub cache_max_sessions: usize,
    /// Longest a cached assembly is reused, in ms (TTL decay moves with the clock). Default
    /// 30,000.
    pub cache_max_age_ms: u64,
    /// `[context.chat_kinds]`: the preset of each chat kind. Default direct → `assistant`,
    /// group and channel → `group`.
    pub chat_kinds: ChatKindPresets,
    /// `[context.presets.<name>]`: presets defined or overridden here (`max_messages`,
    /// `max_tokens`, `ttl`); built in: `assistant`, `support`, `group`. Default none.
    pub presets: BTreeMap<String, PresetConfig>,
    /// `[[context.sources]]`: the sources in collection order (`name`, `priority`, `weight`,
    /// `params`). Default: `system_prompt`, `current_message`, `bootstrap`, `skills`,
    /// `time_and_place`, `system_events`, `thread_starter`, `reply_thread`, `group_history`,
    /// `compaction_summary`, `memory_recall`, `history`, `chat_recall`.
    pub sources: Vec<StageSpec>,
    /// `[[context.processors]]`: the processors in order (`name`, `params`). Default: `dedupe`,
    /// `sanitize`, `message_count`, `ttl_decay`, `tool_result_guard`, `trim_to_budget`.
    pub processors: Vec<StageSpec>,
    /// The IANA time zone (e.g. `Europe/Berlin`) the `time_and_place` source shows the current
    /// time in, besides UTC: the model otherwise has no idea what "tomorrow morning" means to
    /// its users. An unknown name is an error at load. Default `UTC`.
    pub time_zone: String,
}

impl Default for ContextConfig {
    fn default() -> Self {
        Self {
            system_prompt: "You are a helpful assistant.".into(),
            max_tokens: 32_000,
            reserve_output_tokens: 4_096,
            cache_max_sessions: 256,
            cache_max_age_ms: 30_000,
            chat_kinds: ChatKindPresets::default(),
            presets: BTreeMap::new(),
            sources: default_sources(),
            processors: default_processors(),
            time_zone: "UTC".into(),
        }
    }
}

impl ContextConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        in_range("context.max_tokens", self.max_tokens, 1..=MAX_TOKENS)?;
        in_range(
            "context.reserve_output_tokens",
            self.reserve_output_tokens,
            0..=MAX_TOKENS,
        )?;
        in_range(
            "context.cache_max_sessions",
            self.cache_max_sessions,
            0..=MAX_CACHED_SESSIONS,
        )?;
        in_range(
            "context.cache_max_age_ms",
            self.cache_max_age_ms,
            0..=MAX_DURATION_MS,
        )?;
        for (name, preset) in &self.presets {
            if let Some(n) = preset.max_messages {
                let key = format!("context.presets.{name}.max_messages");
                in_range(&key, n, 1..=MAX_PRESET_MESSAGES)?;
            }
            if let Some(n) = preset.max_tokens {
                in_range(
                    &format!("context.presets.{name}.max_tokens"),
                    n,
                    1..=MAX_TOKENS,
                )?;
            }
        }
        for spec in &self.sources {
            if let Some(p) = spec.priority {
                in_range(
                    &format!("context.sources.{}.priority", spec.name),
                    p,
                    0..=100,
                )?;
            }
            if let Some(w) = spec.weight {
                let key = format!("context.sources.{}.weight", spec.name);
                in_range(&key, w, -MAX_SOURCE_WEIGHT..=MAX_SOURCE_WEIGHT)?;
            }
        }
        if let Err(e) = crate::context::sources::time_zone(&self.time_zone) {
            return Err(invalid("context.time_zone", e));
        }
        for kind in [ChatKind::Direct, ChatKind::Group, ChatKind::Channel] {
            crate::context::policy_for(kind, &self.chat_kinds, &self.presets)
                .map_err(|why| invalid("context.chat_kinds", why))?;
        }
        for name in self.presets.keys() {
            crate::context::resolve_preset(name, &self.presets)
                .map_err(|why| invalid("context.presets", why))?;
        }
        Ok(())
    }
}
