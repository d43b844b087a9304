//! Streaming previews on Discord (`channels/preview.rs` does the drafting and throttling): the
//! first preview is a message replying to the one answered, later ones edit it — only while
//! the edit route's rate-limit bucket has room, so an edit never waits on the bucket.

use super::outbound;
use super::rest::{Rest, RestError};
use crate::channels::preview::{PreviewApi, PreviewError};

/// Where a preview goes: a channel or thread, replying to the message answered.
#[derive(Debug, Clone)]
pub(super) struct Target {
    pub rest: Rest,
    pub channel: u64,
    pub reply_to: Option<u64>,
    /// The first send's nonce (a send retried inside Discord's window is not posted twice).
    pub nonce: String,
}

impl From<RestError> for PreviewError {
    fn from(error: RestError) -> Self {
        match error {
            RestError::RateLimited { retry_after } => PreviewError::RateLimited(retry_after),
            other => PreviewError::Failed(other.to_string()),
        }
    }
}

impl PreviewApi for Target {
    type Id = u64;

    async fn send(&self, text: &str) -> Result<u64, PreviewError> {
        let body = outbound::message_body(text, self.reply_to, &self.nonce);
        let body = serde_json::to_vec(&body).map_err(|e| PreviewError::Failed(e.to_string()))?;
        Ok(self.rest.create_message(self.channel, &body).await?)
    }

    async fn edit(&self, message: &u64, text: &str) -> Result<(), PreviewError> {
        let body = outbound::edit_body(text, self.reply_to.is_some());
        let body = serde_json::to_vec(&body).map_err(|e| PreviewError::Failed(e.to_string()))?;
        Ok(self
            .rest
            .update_message(self.channel, *message, &body)
            .await?)
    }

    async fn has_room(&self, message: &u64) -> bool {
        self.rest.edit_has_room(self.channel, *message).await
    }
}
