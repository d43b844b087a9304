//! What an [`OpenAiModel`](super::OpenAiModel) needs to know, and the API key that must never
//! be logged.

use std::fmt;
use std::time::Duration;

use crate::config::ModelConfig;

/// A secret API key. Its `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    pub(crate) fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key itself, for the `Authorization` header only.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Settings of an OpenAI-compatible client. `Debug` redacts the key.
#[derive(Debug, Clone)]
pub(crate) struct OpenAiSettings {
    /// Base URL, e.g. `http://127.0.0.1:11434/v1`; requests go to `{base_url}/chat/completions`.
    pub base_url: String,
    /// The primary model.
    pub model: String,
    /// Models tried in order when the primary still fails after its retries (not on overflow).
    pub fallbacks: Vec<String>,
    /// Sent as `Authorization: Bearer …` when present (local servers need none).
    pub api_key: Option<ApiKey>,
    /// Time allowed to connect.
    pub connect_timeout: Duration,
    /// Time allowed for one attempt, reading a streamed answer included.
    pub timeout: Duration,
    /// Retries of one model on 408/409/429/5xx and connection errors.
    pub max_retries: u32,
    /// The first back-off delay; doubles per retry.
    pub backoff_base: Duration,
    /// The longest back-off delay and the longest `Retry-After` waited for.
    pub backoff_max: Duration,
    /// Requests per minute to each model; 0 = no limit.
    pub requests_per_minute: u32,
    /// Tokens (prompt plus answer reserve) per minute to each model; 0 = no limit.
    pub tokens_per_minute: u64,
    /// Requests in flight to each model at once, and idle connections pooled.
    pub max_connections: u32,
}

impl OpenAiSettings {
    /// Settings for `model` at `base_url`, with the defaults of `[model]` and no key.
    #[cfg(test)]
    pub(crate) fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        let defaults = ModelConfig::default();
        let mut settings = Self::from_config_with_env(&defaults, |_| None);
        settings.base_url = base_url.into();
        settings.model = model.into();
        settings
    }

    /// Settings from `[model]`, reading the key from the environment variable it names.
    pub(crate) fn from_config(config: &ModelConfig) -> Self {
        Self::from_config_with_env(config, |name| std::env::var(name).ok())
    }

    /// Settings from `[model]`, looking the key up with `env` (testable without touching the
    /// process environment). An unset or empty variable means no key.
    pub(crate) fn from_config_with_env(
        config: &ModelConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Self {
        let name = config.api_key_env.trim();
        let api_key = (!name.is_empty())
            .then(|| env(name))
            .flatten()
            .map(|k| k.trim().to_string())
            .filter(|k| !k.is_empty())
            .map(ApiKey::new);
        Self {
            base_url: config.base_url.clone(),
            model: config.model.clone(),
            fallbacks: config.fallbacks.clone(),
            api_key,
            connect_timeout: Duration::from_millis(config.connect_timeout_ms),
            timeout: Duration::from_millis(config.timeout_ms),
            max_retries: config.max_retries,
            backoff_base: Duration::from_millis(config.backoff_base_ms),
            backoff_max: Duration::from_millis(config.backoff_max_ms),
            requests_per_minute: config.requests_per_minute,
            tokens_per_minute: config.tokens_per_minute,
            max_connections: config.max_connections,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_comes_from_the_named_variable_and_is_never_printed() {
        let mut config = ModelConfig {
            api_key_env: "MY_KEY".into(),
            ..ModelConfig::default()
        };
        let settings = OpenAiSettings::from_config_with_env(&config, |name| {
            (name == "MY_KEY").then(|| " sk-secret-123 ".to_string())
        });
        assert_eq!(settings.api_key.as_ref().unwrap().expose(), "sk-secret-123");
        let printed = format!("{settings:?} {}", settings.api_key.as_ref().unwrap());
        assert!(!printed.contains("sk-secret"), "{printed}");
        assert!(printed.contains("<redacted>"));
        config.api_key_env = String::new();
        let none = OpenAiSettings::from_config_with_env(&config, |_| Some("k".into()));
        assert!(none.api_key.is_none());
        let empty =
            OpenAiSettings::from_config_with_env(&ModelConfig::default(), |_| Some("  ".into()));
        assert!(empty.api_key.is_none());
    }
}
