//! `turnstile.toml`: every setting, its default, and why it exists.
//!
//! Unknown keys are an error (a typo must not silently fall back to a default). Secrets are
//! never written here: the file names environment variables that hold them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

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
    /// `[compaction]`: summarising old transcript spans.
    pub compaction: CompactionConfig,
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
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./turnstile-data"),
            cache_capacity_bytes: 64 * 1024 * 1024,
            durability: Durability::Strict,
            flush_every_ms: 100,
            max_queued_messages: 100_000,
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
    /// Total time one request attempt may take, in ms, including reading a streamed answer.
    /// Default 60,000.
    pub timeout_ms: u64,
    /// Time allowed to open a connection, in ms. Default 10,000.
    pub connect_timeout_ms: u64,
    /// Retries of one model after a 408/409/429/5xx answer or a connection error, with
    /// exponential back-off and jitter. Default 3 (at most 10).
    pub max_retries: u32,
    /// First back-off delay in ms; doubles per retry. Default 500.
    pub backoff_base_ms: u64,
    /// Longest back-off delay in ms. A `Retry-After` longer than this is not waited for: the
    /// next fallback model is tried instead. Default 20,000.
    pub backoff_max_ms: u64,
    /// Models tried in order when `model` still fails after its retries (not on a
    /// context overflow, which needs compaction instead). Default none (at most 8).
    pub fallbacks: Vec<String>,
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
            connect_timeout_ms: 10_000,
            max_retries: 3,
            backoff_base_ms: 500,
            backoff_max_ms: 20_000,
            fallbacks: Vec::new(),
        }
    }
}

/// Most retries `[model] max_retries` and `[compaction] max_retries` may ask for.
pub const MAX_MODEL_RETRIES: u32 = 10;

/// Most fallback models `[model] fallbacks` may name.
pub const MAX_FALLBACK_MODELS: usize = 8;

/// `[compaction]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompactionConfig {
    /// The summariser model, served by the `[model]` server (same `base_url` and key). Empty
    /// or `extractive` (default): the built-in extractive summariser, no network.
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
        }
    }
}

impl CompactionConfig {
    /// Whether summaries come from a model (rather than the built-in extractive summariser).
    pub fn uses_model(&self) -> bool {
        let m = self.model.trim();
        !m.is_empty() && m != "extractive"
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
            "openai" => self.validate_openai()?,
            other => {
                return bad(
                    "model.provider",
                    &format!("unknown provider {other:?} (expected \"echo\" or \"openai\")"),
                )
            }
        }
        self.validate_compaction()
    }

    fn validate_openai(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, why: &str| Err(ConfigError::Invalid(format!("{key}: {why}")));
        let m = &self.model;
        if m.base_url.is_empty() {
            return bad("model.base_url", "required for provider \"openai\"");
        }
        match reqwest::Url::parse(&m.base_url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            Ok(_) => return bad("model.base_url", "must be an http:// or https:// URL"),
            Err(e) => return bad("model.base_url", &format!("not a URL: {e}")),
        }
        if m.model.trim().is_empty() {
            return bad("model.model", "must not be empty");
        }
        if m.timeout_ms == 0 || m.connect_timeout_ms == 0 {
            return bad("model.timeout_ms", "timeouts must be at least 1 ms");
        }
        if m.max_retries > MAX_MODEL_RETRIES {
            return bad("model.max_retries", &format!("at most {MAX_MODEL_RETRIES}"));
        }
        if m.backoff_base_ms == 0 || m.backoff_base_ms > m.backoff_max_ms {
            return bad(
                "model.backoff_base_ms",
                "must be at least 1 and at most model.backoff_max_ms",
            );
        }
        if m.fallbacks.len() > MAX_FALLBACK_MODELS {
            return bad("model.fallbacks", &format!("at most {MAX_FALLBACK_MODELS}"));
        }
        if m.fallbacks.iter().any(|f| f.trim().is_empty()) {
            return bad("model.fallbacks", "names must not be empty");
        }
        Ok(())
    }

    fn validate_compaction(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, why: &str| Err(ConfigError::Invalid(format!("{key}: {why}")));
        let c = &self.compaction;
        if !(64..=32_768).contains(&c.summary_max_tokens) {
            return bad("compaction.summary_max_tokens", "must be in 64..=32768");
        }
        if !(c.keep_recent_ratio > 0.0 && c.keep_recent_ratio < 1.0) {
            return bad("compaction.keep_recent_ratio", "must be in (0, 1)");
        }
        if !(c.soft_threshold > 0.0 && c.soft_threshold <= 1.0) {
            return bad("compaction.soft_threshold", "must be in (0, 1]");
        }
        if c.max_retries > MAX_MODEL_RETRIES {
            return bad(
                "compaction.max_retries",
                &format!("at most {MAX_MODEL_RETRIES}"),
            );
        }
        if c.chunk_tokens < 1_024 {
            return bad("compaction.chunk_tokens", "must be at least 1024");
        }
        if c.uses_model() && self.model.provider != "openai" {
            return bad(
                "compaction.model",
                "a summariser model needs model.provider = \"openai\" (its server); \
                 leave it empty for the built-in extractive summariser",
            );
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
    }

    #[test]
    fn openai_settings_are_checked() {
        let ok = "[model]\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:8000/v1\"\n\
                  model = \"m\"\nfallbacks = [\"m2\"]\nmax_retries = 2\n";
        let c = Config::parse(ok).unwrap();
        assert_eq!(c.model.fallbacks, vec!["m2".to_string()]);
        assert_eq!(c.model.backoff_max_ms, 20_000);
        let bad_url = "[model]\nprovider = \"openai\"\nbase_url = \"nope\"\n";
        assert!(Config::parse(bad_url).is_err());
        let too_many = format!("{ok}max_retries = 99\n").replace("max_retries = 2\n", "");
        assert!(Config::parse(&too_many).is_err());
    }

    #[test]
    fn the_readme_config_block_is_valid_and_shows_the_defaults() {
        let readme = include_str!("../README.md");
        let block = readme
            .split("```toml\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .unwrap();
        let parsed = Config::parse(block).unwrap();
        let defaults = Config::default();
        assert_eq!(parsed.model.max_retries, defaults.model.max_retries);
        assert_eq!(parsed.model.backoff_max_ms, defaults.model.backoff_max_ms);
        assert_eq!(
            parsed.compaction.chunk_tokens,
            defaults.compaction.chunk_tokens
        );
        assert_eq!(
            parsed.compaction.summary_max_tokens,
            defaults.compaction.summary_max_tokens
        );
    }

    #[test]
    fn compaction_settings_are_checked() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.compaction.summary_max_tokens, 1_024);
        assert!(!c.compaction.uses_model());
        assert!(Config::parse("[compaction]\nkeep_recent_ratio = 1.5\n").is_err());
        assert!(Config::parse("[compaction]\nmodel = \"extractive\"\n").is_ok());
        // A summariser model needs an OpenAI-compatible server.
        assert!(Config::parse("[compaction]\nmodel = \"small\"\n").is_err());
    }
}
