//! `[channels]`: transports beyond the HTTP API (Telegram, Discord, Slack, webhook callbacks).

use serde::{Deserialize, Serialize};

use super::{in_range, invalid, MAX_DURATION_MS};
use crate::error::ConfigError;

use super::discord::DiscordConfig;
use super::slack::SlackConfig;

/// Longest `channels.telegram.poll_timeout_secs` (one long poll).
pub(crate) const MAX_POLL_TIMEOUT_SECS: u32 = 3_600;

/// Most attempts `channels.telegram.send_attempts` and `channels.callback.max_attempts` allow.
pub(crate) const MAX_ATTEMPTS: u32 = 100;

/// Shortest and longest `edit_interval_ms` of a channel (platforms limit edits per chat).
const EDIT_INTERVAL_MS: std::ops::RangeInclusive<u64> = 250..=60_000;

/// `[channels]`: optional transports. A section that is present turns its channel on.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChannelsConfig {
    /// `[channels.telegram]`: a Telegram bot (Bot API, long polling).
    pub telegram: Option<TelegramConfig>,
    /// `[channels.discord]`: a Discord bot (gateway websocket and REST, `twilight`).
    pub discord: Option<DiscordConfig>,
    /// `[channels.slack]`: a Slack app (Socket Mode or the HTTP Events API, and the Web API).
    pub slack: Option<SlackConfig>,
    /// `[channels.callback]`: replies POSTed to a URL, signed with HMAC-SHA256.
    pub callback: Option<CallbackConfig>,
}

/// `[channels.telegram]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelegramConfig {
    /// Name of the environment variable holding the bot token. Default
    /// `TURNSTILE_TELEGRAM_TOKEN`.
    pub bot_token_env: String,
    /// The Bot API base URL (tests point it at a fake server). Default
    /// `https://api.telegram.org`.
    pub api_base: String,
    /// The account id this bot's messages carry (session keys of direct messages may use
    /// it). Default `default`.
    pub account_id: String,
    /// How long one `getUpdates` long poll waits on the server, in seconds. Default 30.
    pub poll_timeout_secs: u32,
    /// Most updates fetched per poll (the Bot API allows 1–100). Default 100.
    pub poll_limit: u32,
    /// Pause after a failed poll, doubled per consecutive failure up to
    /// `max_retry_backoff_ms`, in ms. Default 1,000.
    pub retry_backoff_ms: u64,
    /// Longest pause between retries (polls and sends), in ms. Default 60,000.
    pub max_retry_backoff_ms: u64,
    /// How often one chunk of a reply is tried before it is given up (it stays readable in
    /// the transcript and on `/v1/events`). Default 5.
    pub send_attempts: u32,
    /// Show a reply while it streams: a first message with the text so far, edited as more
    /// arrives and a last time to the final text. Default true.
    pub stream_edits: bool,
    /// Shortest time between two edits of a streaming preview, in ms (250–60,000). Default
    /// 1,000.
    pub edit_interval_ms: u64,
}

impl Default for TelegramConfig {
    fn default() -> Self {
        Self {
            bot_token_env: "TURNSTILE_TELEGRAM_TOKEN".into(),
            api_base: "https://api.telegram.org".into(),
            account_id: "default".into(),
            poll_timeout_secs: 30,
            poll_limit: 100,
            retry_backoff_ms: 1_000,
            max_retry_backoff_ms: 60_000,
            send_attempts: 5,
            stream_edits: true,
            edit_interval_ms: 1_000,
        }
    }
}

/// `[channels.callback]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CallbackConfig {
    /// Where replies are POSTed (JSON). Required.
    pub url: String,
    /// Name of the environment variable holding the HMAC secret. Default
    /// `TURNSTILE_CALLBACK_SECRET`.
    pub secret_env: String,
    /// The message channels (the `channel` field of inbound messages) whose replies are posted;
    /// empty means every channel that no other configured channel serves. Default empty.
    pub channels: Vec<String>,
    /// Attempts per reply before it is given up (it stays readable in the transcript and on
    /// `/v1/events`). Default 5.
    pub max_attempts: u32,
    /// Pause before the first retry, doubled per attempt (with jitter), in ms. Default 500.
    pub initial_backoff_ms: u64,
    /// Longest pause between attempts, in ms (also caps a receiver's `Retry-After`). Default
    /// 30,000.
    pub max_backoff_ms: u64,
    /// Timeout of one attempt, in ms. Default 10,000.
    pub timeout_ms: u64,
}

impl Default for CallbackConfig {
    fn default() -> Self {
        Self {
            url: String::new(),
            secret_env: "TURNSTILE_CALLBACK_SECRET".into(),
            channels: Vec::new(),
            max_attempts: 5,
            initial_backoff_ms: 500,
            max_backoff_ms: 30_000,
            timeout_ms: 10_000,
        }
    }
}

impl ChannelsConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if let Some(t) = &self.telegram {
            t.validate()?;
        }
        if let Some(d) = &self.discord {
            d.validate()?;
        }
        if let Some(s) = &self.slack {
            s.validate()?;
        }
        if let Some(c) = &self.callback {
            c.validate()?;
        }
        Ok(())
    }
}

impl TelegramConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let key = |k: &str| format!("channels.telegram.{k}");
        in_range(
            &key("poll_timeout_secs"),
            self.poll_timeout_secs,
            0..=MAX_POLL_TIMEOUT_SECS,
        )?;
        in_range(&key("poll_limit"), self.poll_limit, 1..=100)?;
        check_backoff(&key, self.retry_backoff_ms, self.max_retry_backoff_ms)?;
        in_range(&key("send_attempts"), self.send_attempts, 1..=MAX_ATTEMPTS)?;
        check_edit_interval(&key("edit_interval_ms"), self.edit_interval_ms)?;
        if !(self.api_base.starts_with("http://") || self.api_base.starts_with("https://")) {
            return Err(invalid(&key("api_base"), "must be an http(s) URL"));
        }
        Ok(())
    }
}

/// Checks a channel's `edit_interval_ms`: within [`EDIT_INTERVAL_MS`].
pub(super) fn check_edit_interval(key: &str, value: u64) -> Result<(), ConfigError> {
    in_range(key, value, EDIT_INTERVAL_MS)
}

/// Checks a `send_attempts`-like key: 1 to [`MAX_ATTEMPTS`].
pub(super) fn check_attempts(key: &str, value: u32) -> Result<(), ConfigError> {
    in_range(key, value, 1..=MAX_ATTEMPTS)
}

/// A channel's `retry_backoff_ms` and `max_retry_backoff_ms` (`key` names a key of its
/// section): the cap within the longest duration, the first back-off within the cap.
pub(super) fn check_backoff(
    key: &dyn Fn(&str) -> String,
    retry_backoff_ms: u64,
    max_retry_backoff_ms: u64,
) -> Result<(), ConfigError> {
    in_range(
        &key("max_retry_backoff_ms"),
        max_retry_backoff_ms,
        1..=MAX_DURATION_MS,
    )?;
    in_range(
        &key("retry_backoff_ms"),
        retry_backoff_ms,
        1..=max_retry_backoff_ms,
    )
}

impl CallbackConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let key = |k: &str| format!("channels.callback.{k}");
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return Err(invalid(&key("url"), "required, an http(s) URL"));
        }
        in_range(&key("max_attempts"), self.max_attempts, 1..=MAX_ATTEMPTS)?;
        let max_backoff = self.max_backoff_ms;
        in_range(&key("max_backoff_ms"), max_backoff, 1..=MAX_DURATION_MS)?;
        in_range(
            &key("initial_backoff_ms"),
            self.initial_backoff_ms,
            1..=max_backoff,
        )?;
        in_range(&key("timeout_ms"), self.timeout_ms, 1..=MAX_DURATION_MS)
    }
}
