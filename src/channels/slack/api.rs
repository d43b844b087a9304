//! Slack's Web API over reqwest: the few methods the channel calls, each a POST of a form or
//! JSON body to `<api_base>/<method>` with a bearer token, answering `{"ok": …}`.
//!
//! A 429 carries `Retry-After` (seconds): the caller waits that long (capped) before the next
//! try, never a burst. `{"ok": false}` errors are sorted into those worth a retry (Slack's
//! own trouble) and final ones (a bad token, a missing scope, an unknown channel).

use std::time::Duration;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};
use serde::Deserialize;
use serde_json::Value;

use super::events::SlackMessage;
use super::SLACK;
use crate::metrics;
use crate::secret::Secret;

/// Timeout of one Web API request.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The `error` codes of `{"ok": false}` answers worth retrying after a back-off.
const TRANSIENT_ERRORS: [&str; 5] = [
    "internal_error",
    "fatal_error",
    "service_unavailable",
    "request_timeout",
    "ratelimited",
];

/// A failed call, with what a retry loop needs.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    /// Rate limited: wait `retry_after` (when the answer said) and try again.
    #[error("rate limited by Slack")]
    RateLimited {
        /// The wait Slack asked for (`Retry-After`).
        retry_after: Option<Duration>,
    },
    /// Worth retrying after a back-off: transport trouble, timeouts, 5xx, Slack's own errors.
    #[error("Slack unreachable or failing: {0}")]
    Transient(String),
    /// Not worth retrying: a bad token, a missing scope, an unknown channel, a bad answer.
    #[error("Slack refused the request: {0}")]
    Final(String),
}

/// Who the bot is (`auth.test`).
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Identity {
    /// The bot's user id (`U…`): mentions of it address the bot.
    #[serde(default)]
    pub user_id: String,
    /// The bot id (`B…`) its own messages carry.
    #[serde(default)]
    pub bot_id: Option<String>,
    /// The workspace.
    #[serde(default)]
    pub team_id: Option<String>,
}

/// One page of `conversations.history` or `conversations.replies`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct History {
    /// The messages, in Slack's order (newest first for history, oldest first for replies).
    #[serde(default)]
    pub messages: Vec<SlackMessage>,
    /// Whether there is more.
    #[serde(default)]
    pub has_more: bool,
    /// Where the next page starts (`next_cursor`, empty on the last page).
    #[serde(default)]
    pub response_metadata: PageMetadata,
}

/// The `response_metadata` of a page.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct PageMetadata {
    /// The `cursor` of the next page; empty when there is none.
    #[serde(default)]
    pub next_cursor: String,
}

impl History {
    /// The cursor of the next page, if Slack named one.
    pub(crate) fn next_cursor(&self) -> Option<&str> {
        Some(self.response_metadata.next_cursor.as_str()).filter(|c| !c.is_empty())
    }
}

/// Adds `cursor` (a previous page's `next_cursor`) to a request body.
fn with_cursor(mut body: Value, cursor: Option<&str>) -> Value {
    if let (Some(cursor), Some(map)) = (cursor, body.as_object_mut()) {
        map.insert("cursor".into(), Value::String(cursor.to_string()));
    }
    body
}

/// The Web API with one token.
#[derive(Clone)]
pub(crate) struct WebApi {
    client: reqwest::Client,
    base: String,
}

impl std::fmt::Debug for WebApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebApi")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl WebApi {
    /// A client for `base` (checked by the config).
    pub(crate) fn new(base: &str) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Self {
            client,
            base: base.trim_end_matches('/').to_string(),
        })
    }

    /// Calls `method` with `token` and a JSON `body` (a form when `form` is set, as
    /// `apps.connections.open` and the read methods take); the answer when it is `ok`.
    async fn call(
        &self,
        method: &str,
        token: &Secret,
        body: &Value,
        form: bool,
    ) -> Result<Value, ApiError> {
        let request = self
            .client
            .post(format!("{}/{method}", self.base))
            .header(AUTHORIZATION, format!("Bearer {}", token.expose()));
        let request = if form {
            let pairs: Vec<(String, String)> = body
                .as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| {
                            let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                            (k.clone(), v)
                        })
                        .collect()
                })
                .unwrap_or_default();
            request.form(&pairs)
        } else {
            request
                .header(CONTENT_TYPE, "application/json; charset=utf-8")
                .body(body.to_string())
        };
        let response = request
            .send()
            .await
            .map_err(|e| ApiError::Transient(e.without_url().to_string()))?;
        let status = response.status();
        if status.as_u16() == 429 {
            return Err(ApiError::RateLimited {
                retry_after: crate::backoff::retry_after(response.headers()),
            });
        }
        if status.is_server_error() {
            return Err(ApiError::Transient(format!("{method}: HTTP {status}")));
        }
        let answer: Value = response
            .json()
            .await
            .map_err(|e| ApiError::Final(format!("{method}: unreadable answer ({e})")))?;
        if answer["ok"] == Value::Bool(true) {
            return Ok(answer);
        }
        let error = answer["error"].as_str().unwrap_or("unknown_error");
        if error == "ratelimited" {
            return Err(ApiError::RateLimited { retry_after: None });
        }
        if TRANSIENT_ERRORS.contains(&error) {
            return Err(ApiError::Transient(format!("{method}: {error}")));
        }
        Err(ApiError::Final(format!("{method}: {error}")))
    }

    /// `auth.test` with the bot token.
    pub(crate) async fn auth_test(&self, bot: &Secret) -> Result<Identity, ApiError> {
        let answer = self
            .call("auth.test", bot, &Value::Object(Default::default()), true)
            .await?;
        let identity: Identity = serde_json::from_value(answer)
            .map_err(|e| ApiError::Final(format!("auth.test: {e}")))?;
        if identity.user_id.is_empty() {
            return Err(ApiError::Final("auth.test: no user_id".into()));
        }
        Ok(identity)
    }

    /// `apps.connections.open` with the app-level token: a Socket Mode websocket URL.
    pub(crate) async fn connections_open(&self, app: &Secret) -> Result<String, ApiError> {
        let answer = self
            .call(
                "apps.connections.open",
                app,
                &Value::Object(Default::default()),
                true,
            )
            .await?;
        match answer["url"].as_str() {
            Some(url) if url.starts_with("wss://") || url.starts_with("ws://") => {
                Ok(url.to_string())
            }
            _ => Err(ApiError::Final(
                "apps.connections.open: no websocket URL".into(),
            )),
        }
    }

    /// `chat.postMessage` with a prepared body; the new message's `ts`.
    pub(crate) async fn post_message(
        &self,
        bot: &Secret,
        body: &Value,
    ) -> Result<String, ApiError> {
        let answer = self.call("chat.postMessage", bot, body, false).await?;
        Ok(answer["ts"].as_str().unwrap_or_default().to_string())
    }

    /// `chat.update` with a prepared body (a streaming reply's message, edited).
    pub(crate) async fn update_message(&self, bot: &Secret, body: &Value) -> Result<(), ApiError> {
        self.call("chat.update", bot, body, false).await.map(drop)
    }

    /// `conversations.info`: the conversation's kind as a message's `channel_type` names it
    /// (`channel`, `group`, `mpim`, `im`).
    pub(crate) async fn conversation_type(
        &self,
        bot: &Secret,
        channel: &str,
    ) -> Result<String, ApiError> {
        let answer = self
            .call(
                "conversations.info",
                bot,
                &serde_json::json!({"channel": channel}),
                true,
            )
            .await?;
        let c = &answer["channel"];
        let flag = |k: &str| c[k].as_bool() == Some(true);
        Ok(if flag("is_im") {
            "im"
        } else if flag("is_mpim") {
            "mpim"
        } else if flag("is_private") || flag("is_group") {
            "group"
        } else {
            "channel"
        }
        .into())
    }

    /// One page of `conversations.history` of `channel` after `oldest` (exclusive), from
    /// `cursor` (none: the first page): at most `limit` messages, sorted oldest first. Slack
    /// pages newest first: the first page holds the newest messages and `next_cursor` leads
    /// to older ones.
    pub(crate) async fn history(
        &self,
        bot: &Secret,
        channel: &str,
        oldest: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<History, ApiError> {
        let body = serde_json::json!({
            "channel": channel, "oldest": oldest, "inclusive": "false", "limit": limit.to_string()
        });
        let body = with_cursor(body, cursor);
        let answer = self.call("conversations.history", bot, &body, true).await?;
        let mut page: History = serde_json::from_value(answer)
            .map_err(|e| ApiError::Final(format!("conversations.history: {e}")))?;
        page.messages.sort_by_key(|m| super::ts::key(&m.ts));
        Ok(page)
    }

    /// One page of `conversations.replies` of thread `thread_ts` in `channel` after
    /// `oldest` (exclusive), from `cursor` (none: the first page): at most `limit` replies,
    /// oldest first (the thread's first message left out). Slack pages replies oldest first:
    /// `next_cursor` leads to newer ones.
    pub(crate) async fn replies(
        &self,
        bot: &Secret,
        channel: &str,
        thread_ts: &str,
        oldest: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<History, ApiError> {
        let body = serde_json::json!({
            "channel": channel, "ts": thread_ts, "oldest": oldest, "inclusive": "false",
            "limit": limit.to_string()
        });
        let body = with_cursor(body, cursor);
        let answer = self.call("conversations.replies", bot, &body, true).await?;
        let mut page: History = serde_json::from_value(answer)
            .map_err(|e| ApiError::Final(format!("conversations.replies: {e}")))?;
        page.messages.retain(|m| m.ts != thread_ts);
        page.messages.sort_by_key(|m| super::ts::key(&m.ts));
        Ok(page)
    }

    /// `conversations.replies` of thread `thread_ts` in `channel` with `limit` 1: the
    /// thread's first message (a thread session's starter), `None` when Slack lists it not.
    pub(crate) async fn thread_parent(
        &self,
        bot: &Secret,
        channel: &str,
        thread_ts: &str,
    ) -> Result<Option<SlackMessage>, ApiError> {
        let body = serde_json::json!({"channel": channel, "ts": thread_ts, "limit": "1"});
        let answer = self.call("conversations.replies", bot, &body, true).await?;
        let page: History = serde_json::from_value(answer)
            .map_err(|e| ApiError::Final(format!("conversations.replies: {e}")))?;
        Ok(page.messages.into_iter().find(|m| m.ts == thread_ts))
    }

    /// Counts a rate-limit wait.
    pub(crate) fn count_wait(&self) {
        metrics::channel_rate_limit_wait(SLACK);
    }
}
