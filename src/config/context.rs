//! `[context]`: how a turn's context is assembled.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::invalid;
use crate::context::{
    default_processors, default_sources, ChatKindPresets, PresetConfig, StageSpec,
};
use crate::error::ConfigError;
use crate::inbound::ChatKind;

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
    /// `time_and_place`, `system_events`, `reply_thread`, `group_history`, `compaction_summary`,
    /// `memory_recall`, `history`.
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
        if self.max_tokens == 0 {
            return Err(invalid("context.max_tokens", "must be at least 1"));
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
