//! The API channel: messages submitted over HTTP (`POST /v1/messages`, the OpenAI-compatible
//! endpoint) or through the library's `Runtime::submit`. It is the runtime's own channel
//! actor, started by the builder, so it lives here rather than among the transports.

use std::sync::Arc;

use turnstile_actors::Channel;

use crate::replies::Reply;

/// The channel behind the HTTP API and the embedding API. API clients read replies from the
/// reply hub (`/v1/events`, reply waiters, subscriptions), so there is nothing to push.
#[derive(Debug, Default)]
pub(crate) struct ApiChannel;

impl Channel for ApiChannel {
    type Reply = Arc<Reply>;

    fn name(&self) -> &str {
        "api"
    }

    async fn deliver(&self, _reply: Arc<Reply>) {}
}
