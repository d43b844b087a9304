//! Streaming previews on Slack (`channels/preview.rs` does the drafting and throttling): the
//! first preview is a `chat.postMessage` where the reply goes (its thread), later ones
//! `chat.update` of that message.

use super::api::{ApiError, WebApi};
use super::outbound;
use crate::channels::preview::{PreviewApi, PreviewError};
use crate::secret::Secret;

/// Where a preview goes: a conversation, in a thread when the reply goes in one.
#[derive(Debug, Clone)]
pub(super) struct Target {
    pub api: WebApi,
    pub bot: Secret,
    pub channel: String,
    pub thread_ts: Option<String>,
}

impl From<ApiError> for PreviewError {
    fn from(error: ApiError) -> Self {
        match error {
            ApiError::RateLimited { retry_after } => PreviewError::RateLimited(retry_after),
            other => PreviewError::Failed(other.to_string()),
        }
    }
}

impl PreviewApi for Target {
    type Id = String;

    async fn send(&self, text: &str) -> Result<String, PreviewError> {
        let body = outbound::message_body(&self.channel, text, self.thread_ts.as_deref());
        Ok(self.api.post_message(&self.bot, &body).await?)
    }

    async fn edit(&self, ts: &String, text: &str) -> Result<(), PreviewError> {
        let body = outbound::update_body(&self.channel, ts, text);
        Ok(self.api.update_message(&self.bot, &body).await?)
    }
}
