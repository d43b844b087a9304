//! `turnstile.toml`: every setting, its default, and why it exists.
//!
//! Unknown keys are an error (a typo must not silently fall back to a default). Secrets are
//! never written here: the file names environment variables that hold them.
//!
//! One file per section, each with its own validation; [`Config::validate`] runs them all and
//! then the checks that span sections. Every numeric key has a range (its bounds are the
//! `MIN_*`/`MAX_*` constants beside its section): a value outside it is refused at load with
//! the key, the value and the range, so no value can panic or allocate without bound later.

mod agent;
mod agents;
mod channels;
mod cluster;
mod compaction;
mod context;
mod discord;
mod lanes;
mod limits;
mod mcp;
mod model;
mod preflight;
mod queue;
mod quotas;
pub mod reload;
mod schedules;
mod server;
mod session;
mod slack;
mod storage;
mod tools;

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

pub use agent::AgentConfig;
pub(crate) use agents::default_agent_id;
pub use agents::{AgentPresets, AgentSection, BindingConfig};
pub use channels::{CallbackConfig, ChannelsConfig, TelegramConfig};
pub use cluster::ClusterConfig;
pub use compaction::CompactionConfig;
pub use context::ContextConfig;
pub use discord::{DiscordChatConfig, DiscordChatSettings, DiscordConfig, DiscordGuildConfig};
pub use lanes::LanesConfig;
pub use limits::LimitsConfig;
pub use mcp::{McpServerConfig, MAX_MCP_SERVERS, MAX_MCP_SERVER_NAME_CHARS};
pub use model::ModelConfig;
#[cfg(test)]
use model::{MAX_REQUESTS_PER_MINUTE, MAX_TOKENS_PER_MINUTE, MIN_CONTEXT_WINDOW};
pub use preflight::{AccessPolicy, AllowBots, PreflightConfig, PreflightOverride};
pub use queue::{DropSetting, QueueConfig, QueueModeSetting, QueueOverride};
pub(crate) use quotas::QuotaKind;
pub use quotas::{OverQuota, QuotaMatch, QuotaRule};
pub use reload::{ConfigFile, ReloadPlan};
pub use schedules::{Missed, ScheduleConfig, MAX_SCHEDULES};
pub use server::{RateLimitBy, RateLimitConfig, ServerConfig};
pub use session::{DmScope, SessionConfig, SessionScope};
pub use slack::{SlackChatConfig, SlackChatSettings, SlackConfig, SlackMode};
pub use storage::{Durability, JanitorMode, StorageConfig};
pub use tools::ToolsConfig;

/// The whole configuration. Every section and key is optional.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[server]`: the HTTP listener.
    pub server: ServerConfig,
    /// `[storage]`: the sled database and durability.
    pub storage: StorageConfig,
    /// `[session]`: session-key derivation.
    pub session: SessionConfig,
    /// `[lanes]`: session-lane behaviour (passivation, queues, retries).
    pub lanes: LanesConfig,
    /// `[queue]`: what happens to messages that arrive while a turn runs.
    pub queue: QueueConfig,
    /// `[limits]`: admission limits on inbound messages.
    pub limits: LimitsConfig,
    /// `[model]`: which model answers turns.
    pub model: ModelConfig,
    /// `[context]`: how a turn's context is assembled.
    pub context: ContextConfig,
    /// `[preflight]`: which inbound messages become turns.
    pub preflight: PreflightConfig,
    /// `[compaction]`: summarising old transcript spans.
    pub compaction: CompactionConfig,
    /// `[agent]`: the agent's workspace (bootstrap files, skills, memory notes).
    pub agent: AgentConfig,
    /// `[tools]`: limits of the tool loop (for applications that register tools).
    pub tools: ToolsConfig,
    /// `[channels]`: transports beyond the HTTP API (Telegram, Discord, Slack, webhook callbacks).
    pub channels: ChannelsConfig,
    /// `[mcp_servers.<name>]`: MCP servers (stdio or streamable HTTP) whose tools the model
    /// may call, as `<name>__<tool>`.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub mcp_servers: std::collections::BTreeMap<String, McpServerConfig>,
    /// `[cluster]`: several nodes over NATS JetStream (feature `cluster`). Absent, the node
    /// runs alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterConfig>,
    /// `[agents.<id>]`: agents besides (or overriding) the default one, `[session] agent_id`.
    /// Default none: one agent, configured by `[context]`, `[model]` and `[agent]`.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub agents: std::collections::BTreeMap<String, AgentSection>,
    /// `[[bindings]]`: which inbound messages go to which agent (most specific first; what
    /// none matches goes to the default agent). Default none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bindings: Vec<BindingConfig>,
    /// `[[quotas]]`: limits per sender, chat, account or agent (none by default).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub quotas: Vec<QuotaRule>,
    /// `[[schedules]]`: turns run on a cron expression or an interval (none by default;
    /// `POST /v1/schedules` adds more).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schedules: Vec<ScheduleConfig>,
}

impl Config {
    /// Reads and validates a TOML file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text)
    }

    /// Parses and validates TOML text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// Checks values a type cannot: ranges (in each section) and combinations (here).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.server.validate()?;
        self.storage.validate()?;
        self.session.validate()?;
        self.lanes.validate()?;
        self.queue.validate()?;
        self.limits.validate()?;
        self.model.validate()?;
        self.context.validate()?;
        self.preflight.validate()?;
        self.compaction.validate()?;
        self.tools.validate()?;
        self.channels.validate()?;
        agents::validate(self)?;
        quotas::validate(&self.quotas)?;
        schedules::validate(self)?;
        mcp::validate(&self.mcp_servers)?;
        if let Some(cluster) = &self.cluster {
            // A node built without the feature must not run alone on a cluster's config.
            if !cfg!(feature = "cluster") {
                return Err(invalid(
                    "cluster",
                    "this turnstile was built without the `cluster` feature; \
                     rebuild with `--features cluster` or remove the [cluster] section",
                ));
            }
            cluster.validate()?;
        }
        if self.compaction.uses_model() && self.model.provider != "openai" {
            return Err(invalid(
                "compaction.model",
                "a summariser model needs model.provider = \"openai\" (its server); \
                 leave it empty for the built-in extractive summariser",
            ));
        }
        Ok(())
    }

    /// A config for tests and examples: data in `dir`, everything else default.
    pub fn with_data_dir(dir: impl Into<PathBuf>) -> Self {
        let mut c = Self::default();
        c.storage.data_dir = dir.into();
        c
    }

    /// The lane idle timeout.
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.lanes.idle_timeout_ms)
    }
}

/// The one shape of a validation error: the key, then why.
fn invalid(key: &str, why: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid(format!("{key}: {why}"))
}

/// Longest duration any `*_ms` key may ask for: 30 days. Nothing waits that long on purpose,
/// and it keeps every `Instant + Duration` far from overflowing.
pub const MAX_DURATION_MS: u64 = 30 * 24 * 60 * 60 * 1_000;

/// Most tokens any token-count key may name (context windows, budgets, chunks).
pub const MAX_TOKENS: u32 = 1_000_000_000;

/// Checks that `key`'s `value` lies within `allowed`; the error names the key, the value and
/// the range, so that a bad value is refused at load instead of panicking (or allocating
/// without bound) later.
fn in_range<T: PartialOrd + std::fmt::Display>(
    key: &str,
    value: T,
    allowed: RangeInclusive<T>,
) -> Result<(), ConfigError> {
    if allowed.contains(&value) {
        return Ok(());
    }
    Err(invalid(
        key,
        format!(
            "{value} is out of range (allowed {}..={})",
            allowed.start(),
            allowed.end()
        ),
    ))
}

/// Checks that the fraction `value` lies in `(0, 1]` (or `(0, 1)` when `one_allowed` is
/// false); NaN is out of range too.
fn fraction(key: &str, value: f64, one_allowed: bool) -> Result<(), ConfigError> {
    let ok = value > 0.0 && (value < 1.0 || (one_allowed && value == 1.0));
    if ok {
        return Ok(());
    }
    let allowed = if one_allowed { "(0, 1]" } else { "(0, 1)" };
    Err(invalid(
        key,
        format!("{value:?} is out of range (allowed {allowed})"),
    ))
}

#[cfg(test)]
mod tests;
