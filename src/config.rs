//! `turnstile.toml`: every setting, its default, and why it exists.
//!
//! Unknown keys are an error (a typo must not silently fall back to a default). Secrets are
//! never written here: the file names environment variables that hold them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// The smallest accepted `storage.max_disk_bytes`: an empty sled database alone takes about a
/// megabyte.
pub const MIN_DISK_BYTES: u64 = 4 << 20;

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
    /// `[limits]`: admission limits on inbound messages.
    pub limits: LimitsConfig,
    /// `[model]`: which model answers turns.
    pub model: ModelConfig,
    /// `[context]`: how a turn's context is assembled.
    pub context: ContextConfig,
}

/// `[server]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on. Default `127.0.0.1:7878`.
    pub listen: SocketAddr,
    /// Largest accepted request body in bytes. Default 256 KiB.
    pub max_body_bytes: usize,
    /// How long an OpenAI-compatible request waits for its reply, in ms. Default 120,000.
    pub reply_timeout_ms: u64,
    /// Replies buffered for each `/v1/events` subscriber before a slow one misses some.
    /// Default 1,024.
    pub events_buffer: usize,
    /// How long graceful shutdown waits for running turns, in ms. Default 8,000.
    pub shutdown_grace_ms: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7878)),
            max_body_bytes: 256 * 1024,
            reply_timeout_ms: 120_000,
            events_buffer: 1_024,
            shutdown_grace_ms: 8_000,
        }
    }
}

/// When a write counts as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Flushed to disk before it is acknowledged (group commit: one flush covers every write
    /// waiting at that moment). Nothing acknowledged is lost on a crash.
    Strict,
    /// Acknowledged at once and flushed every `flush_every_ms`: a crash may lose what was
    /// acknowledged in the last interval.
    Batched,
}

/// `[storage]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// The data directory (the sled database lives in `<data_dir>/db`). Default
    /// `./turnstile-data`.
    pub data_dir: PathBuf,
    /// sled's page cache in bytes. sled's own default (1 GiB) is far too much for an embedded
    /// default. Default 64 MiB.
    pub cache_capacity_bytes: u64,
    /// `strict` (default) or `batched`.
    pub durability: Durability,
    /// Flush period for `batched` durability, in ms. Default 100.
    pub flush_every_ms: u64,
    /// Most unconsumed messages in the durable inbox across all sessions; past it submissions
    /// get 429. Default 100,000.
    pub max_queued_messages: usize,
    /// The disk budget for everything under `data_dir` (database, archives, exports, logs), in
    /// bytes, measured as blocks really allocated. Default 1 GiB.
    pub max_disk_bytes: u64,
    /// Fraction of `max_disk_bytes` above which the janitor frees space. Default 0.8.
    pub high_water: f64,
    /// How often the janitor measures the data dir, in ms (it also runs at once when writes
    /// may have crossed high water). Default 60,000.
    pub janitor_interval_ms: u64,
    /// `enforce` (default: archives are deleted and sessions evicted) or `warn` (only logged).
    pub janitor_mode: JanitorMode,
    /// Write an evicted session's transcript as gzip-compressed JSONL into
    /// `<data_dir>/archives` before evicting it. Archives count against the budget and are the
    /// first thing deleted. Default false.
    pub keep_archives: bool,
    /// Sessions not updated for this many days are evicted; 0 keeps them. Default 30.
    pub prune_after_days: u32,
    /// Most sessions kept; the oldest beyond it are evicted. Default: no limit.
    pub max_sessions: Option<u64>,
}

/// What the janitor does above high water.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JanitorMode {
    /// Delete archives, then evict sessions, until usage is below high water.
    Enforce,
    /// Only log (and report) what would be freed.
    Warn,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./turnstile-data"),
            cache_capacity_bytes: 64 * 1024 * 1024,
            durability: Durability::Strict,
            flush_every_ms: 100,
            max_queued_messages: 100_000,
            max_disk_bytes: 1 << 30,
            high_water: 0.8,
            janitor_interval_ms: 60_000,
            janitor_mode: JanitorMode::Enforce,
            keep_archives: false,
            prune_after_days: 30,
            max_sessions: None,
        }
    }
}

/// `[session]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionConfig {
    /// The agent id used in session keys. Default `main`.
    pub agent_id: String,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            agent_id: "main".into(),
        }
    }
}

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
}

impl Default for LanesConfig {
    fn default() -> Self {
        Self {
            idle_timeout_ms: 600_000,
            queue_cap: 1_000,
            turn_retries: 1,
            max_concurrent_turns: 64,
        }
    }
}

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

/// `[model]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// `echo` (built in, no network, default) or `openai` (any OpenAI-compatible server).
    pub provider: String,
    /// Base URL of an OpenAI-compatible server, e.g. `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    /// Model name sent to the server; also picks the tokenizer. Default `echo`.
    pub model: String,
    /// Name of the environment variable holding the API key. Default `OPENAI_API_KEY`.
    pub api_key_env: String,
    /// The model's context window in tokens. Default 128,000.
    pub context_window: u32,
    /// Request timeout in ms. Default 60,000.
    pub timeout_ms: u64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            provider: "echo".into(),
            base_url: String::new(),
            model: "echo".into(),
            api_key_env: "OPENAI_API_KEY".into(),
            context_window: 128_000,
            timeout_ms: 60_000,
        }
    }
}

/// `[context]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContextConfig {
    /// The system prompt (trusted).
    pub system_prompt: String,
    /// Most tokens a turn's context may use. Default 32,000.
    pub max_tokens: u32,
    /// Tokens kept free for the model's answer. Default 4,096.
    pub reserve_output_tokens: u32,
}

impl Default for ContextConfig {
    fn default() -> Self {
        Self {
            system_prompt: "You are a helpful assistant.".into(),
            max_tokens: 32_000,
            reserve_output_tokens: 4_096,
        }
    }
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

    /// Checks values a type cannot: ranges and combinations.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, why: &str| Err(ConfigError::Invalid(format!("{key}: {why}")));
        if self.lanes.queue_cap == 0 {
            return bad("lanes.queue_cap", "must be at least 1");
        }
        if self.lanes.max_concurrent_turns == 0 {
            return bad("lanes.max_concurrent_turns", "must be at least 1");
        }
        if self.storage.max_queued_messages == 0 {
            return bad("storage.max_queued_messages", "must be at least 1");
        }
        if !(self.storage.high_water > 0.0 && self.storage.high_water <= 1.0) {
            return bad("storage.high_water", "must be in (0, 1]");
        }
        if self.storage.max_disk_bytes < MIN_DISK_BYTES {
            return bad("storage.max_disk_bytes", "must be at least 4 MiB");
        }
        if self.storage.janitor_interval_ms == 0 {
            return bad("storage.janitor_interval_ms", "must be at least 1");
        }
        if self.server.events_buffer == 0 {
            return bad("server.events_buffer", "must be at least 1");
        }
        if self.context.max_tokens == 0 {
            return bad("context.max_tokens", "must be at least 1");
        }
        if self.model.context_window <= self.context.reserve_output_tokens {
            return bad(
                "model.context_window",
                "must be larger than context.reserve_output_tokens",
            );
        }
        match self.model.provider.as_str() {
            "echo" => {}
            "openai" if !self.model.base_url.is_empty() => {}
            "openai" => return bad("model.base_url", "required for provider \"openai\""),
            other => {
                return bad(
                    "model.provider",
                    &format!("unknown provider {other:?} (expected \"echo\" or \"openai\")"),
                )
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_defaults() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.server.listen.to_string(), "127.0.0.1:7878");
        assert_eq!(c.storage.durability, Durability::Strict);
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let err = Config::parse("[storage]\nmax_dsk_bytes = 3\n").unwrap_err();
        assert!(err.to_string().contains("max_dsk_bytes"), "{err}");
        assert!(Config::parse("[nope]\n").is_err());
    }

    #[test]
    fn values_are_checked() {
        assert!(Config::parse("[lanes]\nqueue_cap = 0\n").is_err());
        assert!(Config::parse("[model]\nprovider = \"openai\"\n").is_err());
        assert!(Config::parse("[storage]\ndurability = \"batched\"\n").is_ok());
        assert!(Config::parse("[storage]\nhigh_water = 1.5\n").is_err());
        assert!(Config::parse("[storage]\nmax_disk_bytes = 1000\n").is_err());
        let c = Config::parse("[storage]\njanitor_mode = \"warn\"\nmax_sessions = 5\n").unwrap();
        assert_eq!(c.storage.janitor_mode, JanitorMode::Warn);
        assert_eq!(c.storage.max_sessions, Some(5));
    }
}
