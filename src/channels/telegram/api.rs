//! A small Bot API client over reqwest: the three methods the channel uses (`getMe`,
//! `getUpdates`, `sendMessage`) and the fields of the types it reads. The bot token is part of
//! every URL, so errors are stripped of their URL before anyone can log them.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Extra time a `getUpdates` request may take beyond its long-poll timeout.
const POLL_GRACE: Duration = Duration::from_secs(10);
/// Timeout of a `sendMessage` or `getMe` request.
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A failed Bot API call.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum ApiError {
    /// The request did not complete (connection, timeout).
    #[error("Bot API unreachable: {0}")]
    Transport(String),
    /// The Bot API answered `ok: false`.
    #[error("Bot API error {code}: {description}")]
    Api {
        /// `error_code` (an HTTP status).
        code: u16,
        /// `description`.
        description: String,
        /// `parameters.retry_after`, in seconds, on 429.
        retry_after: Option<u64>,
    },
    /// The answer could not be read.
    #[error("unexpected Bot API answer: {0}")]
    Protocol(String),
}

impl ApiError {
    /// Whether this is an edit's "message is not modified": the text is already shown.
    pub(crate) fn is_not_modified(&self) -> bool {
        matches!(self, ApiError::Api { code: 400, description, .. }
            if description.contains("message is not modified"))
    }

    /// Worth retrying: transport trouble, 429 and 5xx.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            ApiError::Transport(_) => true,
            ApiError::Api { code, .. } => *code == 429 || *code >= 500,
            ApiError::Protocol(_) => false,
        }
    }
}

#[derive(Debug, Deserialize)]
struct Envelope<T> {
    ok: bool,
    result: Option<T>,
    #[serde(default)]
    error_code: Option<u16>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<ResponseParameters>,
}

#[derive(Debug, Deserialize)]
struct ResponseParameters {
    #[serde(default)]
    retry_after: Option<u64>,
}

/// A Telegram user or bot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct User {
    /// Id.
    pub id: i64,
    /// Is a bot.
    #[serde(default)]
    pub is_bot: bool,
    /// First name.
    #[serde(default)]
    pub first_name: String,
    /// Last name.
    #[serde(default)]
    pub last_name: Option<String>,
    /// Username, without `@`.
    #[serde(default)]
    pub username: Option<String>,
}

/// A chat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Chat {
    /// Id (negative for groups).
    pub id: i64,
    /// `private`, `group`, `supergroup` or `channel`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Title of groups and channels.
    #[serde(default)]
    pub title: Option<String>,
    /// True for supergroups with topics.
    #[serde(default)]
    pub is_forum: Option<bool>,
}

/// A formatting entity in a text (offsets and lengths in UTF-16 code units).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MessageEntity {
    /// `mention`, `text_mention`, `bot_command`…
    #[serde(rename = "type")]
    pub kind: String,
    /// Start, in UTF-16 code units.
    pub offset: usize,
    /// Length, in UTF-16 code units.
    pub length: usize,
    /// The user of a `text_mention`.
    #[serde(default)]
    pub user: Option<User>,
}

/// A document attachment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Document {
    /// File name.
    #[serde(default)]
    pub file_name: Option<String>,
    /// MIME type.
    #[serde(default)]
    pub mime_type: Option<String>,
    /// Size in bytes.
    #[serde(default)]
    pub file_size: Option<u64>,
}

/// A message (only the fields the channel reads).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Message {
    /// Id, unique per chat.
    pub message_id: i64,
    /// Forum topic (or reply thread) id.
    #[serde(default)]
    pub message_thread_id: Option<i64>,
    /// True when the message belongs to a forum topic.
    #[serde(default)]
    pub is_topic_message: Option<bool>,
    /// Sender (absent in channels).
    #[serde(default)]
    pub from: Option<User>,
    /// Sender chat (channel posts, anonymous admins).
    #[serde(default)]
    pub sender_chat: Option<Chat>,
    /// Unix seconds.
    pub date: i64,
    /// The chat.
    pub chat: Chat,
    /// The message replied to.
    #[serde(default)]
    pub reply_to_message: Option<Box<Message>>,
    /// Text.
    #[serde(default)]
    pub text: Option<String>,
    /// Entities of `text`.
    #[serde(default)]
    pub entities: Vec<MessageEntity>,
    /// Caption of media.
    #[serde(default)]
    pub caption: Option<String>,
    /// Entities of `caption`.
    #[serde(default)]
    pub caption_entities: Vec<MessageEntity>,
    /// A document.
    #[serde(default)]
    pub document: Option<Document>,
    /// Photo sizes (metadata only is read).
    #[serde(default)]
    pub photo: Vec<Value>,
}

/// One update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Update {
    /// Its id; the next poll's offset is the largest seen plus one.
    pub update_id: i64,
    /// A new message.
    #[serde(default)]
    pub message: Option<Message>,
    /// A new channel post.
    #[serde(default)]
    pub channel_post: Option<Message>,
}

/// The Bot API of one bot.
#[derive(Clone)]
pub(crate) struct BotApi {
    client: reqwest::Client,
    /// `<api_base>/bot<token>`: secret, never logged.
    base: String,
}

impl std::fmt::Debug for BotApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BotApi([redacted])")
    }
}

impl BotApi {
    /// A client for the bot with `token` at `api_base`.
    pub(crate) fn new(api_base: &str, token: &str) -> Result<Self, ApiError> {
        let client = reqwest::Client::builder()
            .build()
            .map_err(|e| ApiError::Transport(e.without_url().to_string()))?;
        Ok(Self {
            client,
            base: format!("{}/bot{token}", api_base.trim_end_matches('/')),
        })
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<T, ApiError> {
        let response = self
            .client
            .post(format!("{}/{method}", self.base))
            .json(body)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| ApiError::Transport(e.without_url().to_string()))?;
        let status = response.status().as_u16();
        let envelope: Envelope<T> = response
            .json()
            .await
            .map_err(|e| ApiError::Protocol(format!("{method}: {}", e.without_url())))?;
        match (envelope.ok, envelope.result) {
            (true, Some(result)) => Ok(result),
            (true, None) => Err(ApiError::Protocol(format!("{method}: ok without result"))),
            (false, _) => Err(ApiError::Api {
                code: envelope.error_code.unwrap_or(status),
                description: envelope.description.unwrap_or_default(),
                retry_after: envelope.parameters.and_then(|p| p.retry_after),
            }),
        }
    }

    /// `getMe`: the bot itself.
    pub(crate) async fn get_me(&self) -> Result<User, ApiError> {
        self.call("getMe", &serde_json::json!({}), CALL_TIMEOUT)
            .await
    }

    /// `getUpdates` long poll from `offset`, waiting up to `timeout_secs` for updates.
    pub(crate) async fn get_updates(
        &self,
        offset: i64,
        limit: u32,
        timeout_secs: u32,
    ) -> Result<Vec<Update>, ApiError> {
        let body = serde_json::json!({
            "offset": offset,
            "limit": limit,
            "timeout": timeout_secs,
            "allowed_updates": ["message", "channel_post"],
        });
        let timeout = Duration::from_secs(u64::from(timeout_secs)) + POLL_GRACE;
        self.call("getUpdates", &body, timeout).await
    }

    /// `sendMessage` with a prepared body.
    pub(crate) async fn send_message(&self, body: &Value) -> Result<Message, ApiError> {
        self.call("sendMessage", body, CALL_TIMEOUT).await
    }

    /// `editMessageText` with a prepared body. Telegram's 400 "message is not modified" (the
    /// text is already shown) counts as done.
    pub(crate) async fn edit_message_text(&self, body: &Value) -> Result<(), ApiError> {
        match self
            .call::<Value>("editMessageText", body, CALL_TIMEOUT)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_modified() => Ok(()),
            Err(e) => Err(e),
        }
    }
}
