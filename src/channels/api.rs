//! The API channel: messages submitted over HTTP (`POST /v1/messages`, the OpenAI-compatible
//! endpoint) or through the library's `Runtime::submit`.

use std::sync::Arc;

use turnstile_actors::Channel;

use crate::runtime::Reply;

/// The channel behind the HTTP API and the embedding API. API clients read replies from the
/// reply hub (`/v1/events`, reply waiters, subscriptions), so there is nothing to push.
#[derive(Debug, Default)]
pub struct ApiChannel;

impl Channel for ApiChannel {
    type Reply = Arc<Reply>;

    fn name(&self) -> &str {
        "api"
    }

    async fn deliver(&self, _reply: Arc<Reply>) {}
}
