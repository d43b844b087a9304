//! Streaming previews on Telegram (`channels/preview.rs` does the drafting and throttling):
//! the first preview is a `sendMessage` to the chat (and topic) quoting the message answered,
//! later ones `editMessageText`.

use serde_json::{json, Value};

use super::api::{ApiError, BotApi};
use crate::channels::preview::{PreviewApi, PreviewError};

/// Where a preview goes: a chat (and topic), quoting the message it answers.
#[derive(Debug, Clone)]
pub(super) struct Target {
    /// The Bot API client.
    pub api: BotApi,
    /// `chat_id` as the Bot API takes it.
    pub chat: Value,
    /// The forum topic, if any.
    pub topic: Option<i64>,
    /// The message answered.
    pub reply_to: Option<i64>,
}

impl From<ApiError> for PreviewError {
    fn from(error: ApiError) -> Self {
        match error {
            ApiError::Api {
                retry_after: Some(secs),
                ..
            } => PreviewError::RateLimited(Some(std::time::Duration::from_secs(secs))),
            other => PreviewError::Failed(other.to_string()),
        }
    }
}

impl PreviewApi for Target {
    type Id = i64;

    async fn send(&self, text: &str) -> Result<i64, PreviewError> {
        let body = super::message_body(&self.chat, self.topic, self.reply_to, text);
        Ok(self.api.send_message(&body).await?.message_id)
    }

    async fn edit(&self, message_id: &i64, text: &str) -> Result<(), PreviewError> {
        let body = json!({"chat_id": self.chat, "message_id": message_id, "text": text});
        Ok(self.api.edit_message_text(&body).await?)
    }
}
