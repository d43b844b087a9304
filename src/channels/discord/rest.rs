//! Discord's REST API through `twilight-http`: its client waits on each route's rate-limit
//! bucket from the headers before a request; what still comes back as a 429 (JSON with
//! `retry_after`, or a proxy's HTML page) is backed off here, never retried in a burst.
//!
//! `api_base` becomes twilight's proxy (host and port, plain HTTP for `http://`), so tests and
//! operators behind a proxy point the channel elsewhere.

use std::time::Duration;

use twilight_http::api_error::ApiError;
use twilight_http::error::{Error as HttpError, ErrorType};
use twilight_http::response::DeserializeBodyErrorType;
use twilight_http::Client;
use twilight_model::channel::message::Message;
use twilight_model::id::Id;

use crate::metrics;

/// Timeout of one REST request.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Application flags saying the Message Content intent is granted (verified bots, and bots in
/// fewer than 100 servers).
const MESSAGE_CONTENT_FLAGS: u64 = (1 << 18) | (1 << 19);

/// A failed REST call, with what the retry loop needs.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RestError {
    /// Rate limited: wait `retry_after` (when the answer said) and try again.
    #[error("rate limited by Discord")]
    RateLimited {
        /// The wait Discord asked for.
        retry_after: Option<Duration>,
    },
    /// Worth retrying after a back-off: transport trouble, timeouts, 5xx.
    #[error("Discord unreachable or failing: {0}")]
    Transient(String),
    /// Not worth retrying (4xx other than 429, a malformed answer).
    #[error("Discord refused the request: {0}")]
    Final(String),
}

/// What a twilight error means for a retry loop.
pub(crate) fn classify(error: &HttpError) -> RestError {
    RestError::of(error)
}

impl RestError {
    fn of(error: &HttpError) -> Self {
        match error.kind() {
            ErrorType::Response { status, error, .. } if status.get() == 429 => {
                let retry_after = match error {
                    ApiError::Ratelimited(r)
                        if r.retry_after.is_finite() && r.retry_after >= 0.0 =>
                    {
                        Some(Duration::from_secs_f64(r.retry_after))
                    }
                    _ => None,
                };
                RestError::RateLimited { retry_after }
            }
            ErrorType::Response { status, .. } if status.get() >= 500 => {
                RestError::Transient(format!("HTTP {}", status.get()))
            }
            ErrorType::Response { status, error, .. } => {
                RestError::Final(format!("HTTP {}: {error}", status.get()))
            }
            // An error body that is not Discord's JSON: a proxy's (Cloudflare's) HTML 429 page
            // or an outage page; back off as from a rate limit.
            ErrorType::Parsing { .. } => RestError::RateLimited { retry_after: None },
            ErrorType::RequestError | ErrorType::RequestTimedOut | ErrorType::RequestCanceled => {
                RestError::Transient(error.to_string())
            }
            _ => RestError::Final(error.to_string()),
        }
    }
}

/// The REST side of one bot.
#[derive(Debug, Clone)]
pub(crate) struct Rest {
    client: std::sync::Arc<Client>,
    /// The channel name, for metrics labels.
    channel: &'static str,
}

impl Rest {
    /// A client for `token` at `api_base` (`http(s)://host[:port]`, checked by the config).
    pub(crate) fn new(api_base: &str, token: &str, channel: &'static str) -> Self {
        let (plain, host) = match api_base.strip_prefix("http://") {
            Some(host) => (true, host),
            None => (false, api_base.strip_prefix("https://").unwrap_or(api_base)),
        };
        let host = host.trim_end_matches('/');
        let mut builder = Client::builder()
            .token(format!("Bot {token}"))
            .timeout(REQUEST_TIMEOUT)
            .remember_invalid_token(true);
        if plain || host != "discord.com" {
            builder = builder.proxy(host.to_string(), plain);
        }
        Self {
            client: std::sync::Arc::new(builder.build()),
            channel,
        }
    }

    /// The twilight client.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// `GET /gateway/bot`: the gateway URL and the recommended shard count.
    pub(crate) async fn gateway(&self) -> Result<(String, u32), RestError> {
        let info = self
            .client
            .gateway()
            .authed()
            .await
            .map_err(|e| RestError::of(&e))?
            .model()
            .await
            .map_err(|e| RestError::Final(e.to_string()))?;
        Ok((info.url, info.shards.max(1)))
    }

    /// Whether the application has the Message Content intent (`GET /applications/@me`);
    /// `None` when that could not be read.
    pub(crate) async fn has_message_content(&self) -> Option<bool> {
        let app = self
            .client
            .current_user_application()
            .await
            .ok()?
            .model()
            .await
            .ok()?;
        let flags = app.flags.map_or(0, |f| f.bits());
        Some(flags & MESSAGE_CONTENT_FLAGS != 0)
    }

    /// `POST /channels/{channel}/messages` with a prepared body; the new message's id.
    pub(crate) async fn create_message(&self, channel: u64, body: &[u8]) -> Result<u64, RestError> {
        let channel =
            Id::new_checked(channel).ok_or_else(|| RestError::Final("channel id 0".into()))?;
        let message = self
            .client
            .create_message(channel)
            .payload_json(body)
            .await
            .map_err(|e| RestError::of(&e))?
            .model()
            .await
            .map_err(|e| RestError::Final(e.to_string()))?;
        Ok(message.id.get())
    }

    /// `PATCH /channels/{channel}/messages/{message}` with a prepared body (a streaming
    /// reply's message, edited).
    pub(crate) async fn update_message(
        &self,
        channel: u64,
        message: u64,
        body: &[u8],
    ) -> Result<(), RestError> {
        let (Some(channel), Some(message)) = (Id::new_checked(channel), Id::new_checked(message))
        else {
            return Err(RestError::Final("id 0".into()));
        };
        self.client
            .update_message(channel, message)
            .payload_json(body)
            .await
            .map(drop)
            .map_err(|e| RestError::of(&e))
    }

    /// Whether the rate-limit bucket of editing `message` in `channel` has a request left
    /// now (or is not known yet): a streaming edit goes only then, so it never waits on the
    /// bucket, and the final edit finds room.
    pub(crate) async fn edit_has_room(&self, channel: u64, message: u64) -> bool {
        let Some(limiter) = self.client.ratelimiter() else {
            return true;
        };
        let endpoint = twilight_http_ratelimiting::Endpoint {
            method: twilight_http_ratelimiting::Method::Patch,
            path: format!("channels/{channel}/messages/{message}"),
        };
        limiter
            .bucket(endpoint)
            .await
            .is_none_or(|bucket| bucket.remaining > 1)
    }

    /// `POST /channels/{channel}/typing`.
    pub(crate) async fn typing(&self, channel: u64) -> Result<(), RestError> {
        let channel =
            Id::new_checked(channel).ok_or_else(|| RestError::Final("channel id 0".into()))?;
        self.client
            .create_typing_trigger(channel)
            .await
            .map(drop)
            .map_err(|e| RestError::of(&e))
    }

    /// `GET /channels/{channel}/messages?after=…&limit=…`, oldest first.
    pub(crate) async fn messages_after(
        &self,
        channel: u64,
        after: u64,
        limit: u16,
    ) -> Result<Vec<Message>, RestError> {
        let (Some(channel), Some(after)) = (Id::new_checked(channel), Id::new_checked(after))
        else {
            return Err(RestError::Final("id 0".into()));
        };
        let mut messages = self
            .client
            .channel_messages(channel)
            .after(after)
            .limit(limit)
            .await
            .map_err(|e| RestError::of(&e))?
            .models()
            .await
            .map_err(|e| RestError::Final(e.to_string()))?;
        messages.sort_by_key(|m| m.id.get());
        Ok(messages)
    }

    /// `GET /channels/{channel}/messages/{id}`: one message (a thread's starter).
    pub(crate) async fn message(&self, channel: u64, id: u64) -> Result<Message, RestError> {
        let (Some(channel), Some(id)) = (Id::new_checked(channel), Id::new_checked(id)) else {
            return Err(RestError::Final("id 0".into()));
        };
        self.client
            .message(channel, id)
            .await
            .map_err(|e| RestError::of(&e))?
            .model()
            .await
            .map_err(|e| RestError::Final(e.to_string()))
    }

    /// The parent of `channel` when it is a thread (`GET /channels/{channel}`). A body cut on
    /// the way is transient, like the request's own transport errors.
    pub(crate) async fn thread_parent(&self, channel: u64) -> Result<Option<u64>, RestError> {
        let id = Id::new_checked(channel).ok_or_else(|| RestError::Final("channel id 0".into()))?;
        let c = self
            .client
            .channel(id)
            .await
            .map_err(|e| RestError::of(&e))?
            .model()
            .await
            .map_err(|e| match e.kind() {
                // The body was cut on the way: transport trouble, worth asking again.
                DeserializeBodyErrorType::Chunking => RestError::Transient(e.to_string()),
                _ => RestError::Final(e.to_string()),
            })?;
        Ok(c.kind
            .is_thread()
            .then(|| c.parent_id.map(|p| p.get()))
            .flatten())
    }

    /// Counts a rate-limit wait of this channel.
    pub(crate) fn count_wait(&self) {
        metrics::channel_rate_limit_wait(self.channel);
    }
}
