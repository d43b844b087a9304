//! `[model]`: which model answers turns, and how it is called.

use serde::{Deserialize, Serialize};

use super::{in_range, invalid, MAX_DURATION_MS, MAX_TOKENS};
use crate::error::ConfigError;
use crate::model::MIN_PLAUSIBLE_WINDOW;

/// Smallest `model.context_window`: no chat model works in less (the same bound below which a
/// window stated by an overflow error is not believed).
pub(crate) const MIN_CONTEXT_WINDOW: u32 = MIN_PLAUSIBLE_WINDOW;

/// Largest `model.requests_per_minute`.
pub(crate) const MAX_REQUESTS_PER_MINUTE: u32 = 10_000_000;

/// Largest `model.max_connections` (the adaptive limit's ceiling).
pub(crate) const MAX_MODEL_CONNECTIONS: u32 = 100_000;

/// Largest `model.tokens_per_minute`.
pub(crate) const MAX_TOKENS_PER_MINUTE: u64 = 100_000_000_000;

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
    /// The model's context window in tokens (at least 256). A smaller real window stated by
    /// an overflow error lowers it for that model; the answer's reserve
    /// (`context.reserve_output_tokens`) shrinks to a quarter of a small window. Default
    /// 128,000.
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
    /// Requests per minute sent to each model (primary and fallbacks count separately),
    /// shared by every session; past it requests wait their turn. Set it to the provider's
    /// quota. 0 = no limit (default).
    pub requests_per_minute: u32,
    /// Tokens per minute sent to each model, counted as the prompt plus the answer's reserve
    /// (how providers count a quota); past it requests wait. 0 = no limit (default).
    pub tokens_per_minute: u64,
    /// Requests in flight to each model at once, and idle keep-alive connections kept to its
    /// server: one request holds one connection, so this bounds the connections the server
    /// sees. Past it requests wait their turn (queued, never refused), so a model server that
    /// accepts fewer connections than `lanes.max_concurrent_turns` is served by setting this
    /// to what it accepts. Default 1,024.
    pub max_connections: u32,
    /// The model accepts images: image attachments of the current message that carry a URL
    /// are sent as `image_url` parts of the user message (a text-only model rejects such
    /// parts, hence off by default). Their text lines are sent either way. Default false.
    pub vision: bool,
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
            requests_per_minute: 0,
            tokens_per_minute: 0,
            max_connections: 1_024,
            vision: false,
        }
    }
}

/// Most retries `[model] max_retries` and `[compaction] max_retries` may ask for.
pub(crate) const MAX_MODEL_RETRIES: u32 = 10;

/// Most fallback models `[model] fallbacks` may name.
pub(crate) const MAX_FALLBACK_MODELS: usize = 8;

impl ModelConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        in_range(
            "model.context_window",
            self.context_window,
            MIN_CONTEXT_WINDOW..=MAX_TOKENS,
        )?;
        in_range(
            "model.requests_per_minute",
            self.requests_per_minute,
            0..=MAX_REQUESTS_PER_MINUTE,
        )?;
        in_range(
            "model.tokens_per_minute",
            self.tokens_per_minute,
            0..=MAX_TOKENS_PER_MINUTE,
        )?;
        in_range(
            "model.max_connections",
            self.max_connections,
            1..=MAX_MODEL_CONNECTIONS,
        )?;
        in_range("model.timeout_ms", self.timeout_ms, 1..=MAX_DURATION_MS)?;
        in_range(
            "model.connect_timeout_ms",
            self.connect_timeout_ms,
            1..=MAX_DURATION_MS,
        )?;
        in_range("model.max_retries", self.max_retries, 0..=MAX_MODEL_RETRIES)?;
        in_range(
            "model.backoff_max_ms",
            self.backoff_max_ms,
            1..=MAX_DURATION_MS,
        )?;
        in_range(
            "model.backoff_base_ms",
            self.backoff_base_ms,
            1..=self.backoff_max_ms,
        )?;
        match self.provider.as_str() {
            "echo" => Ok(()),
            "openai" => self.validate_openai(),
            other => Err(invalid(
                "model.provider",
                format!("unknown provider {other:?} (expected \"echo\" or \"openai\")"),
            )),
        }
    }

    fn validate_openai(&self) -> Result<(), ConfigError> {
        if self.base_url.is_empty() {
            return Err(invalid(
                "model.base_url",
                "required for provider \"openai\"",
            ));
        }
        match reqwest::Url::parse(&self.base_url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            Ok(_) => {
                return Err(invalid(
                    "model.base_url",
                    "must be an http:// or https:// URL",
                ))
            }
            Err(e) => return Err(invalid("model.base_url", format!("not a URL: {e}"))),
        }
        if self.model.trim().is_empty() {
            return Err(invalid("model.model", "must not be empty"));
        }
        if self.timeout_ms == 0 || self.connect_timeout_ms == 0 {
            return Err(invalid(
                "model.timeout_ms",
                "timeouts must be at least 1 ms",
            ));
        }
        if self.max_retries > MAX_MODEL_RETRIES {
            return Err(invalid(
                "model.max_retries",
                format!("at most {MAX_MODEL_RETRIES}"),
            ));
        }
        if self.backoff_base_ms == 0 || self.backoff_base_ms > self.backoff_max_ms {
            return Err(invalid(
                "model.backoff_base_ms",
                "must be at least 1 and at most model.backoff_max_ms",
            ));
        }
        if self.fallbacks.len() > MAX_FALLBACK_MODELS {
            return Err(invalid(
                "model.fallbacks",
                format!("at most {MAX_FALLBACK_MODELS}"),
            ));
        }
        if self.fallbacks.iter().any(|f| f.trim().is_empty()) {
            return Err(invalid("model.fallbacks", "names must not be empty"));
        }
        Ok(())
    }
}
