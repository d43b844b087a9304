//! The Telegram channel: a bot on the Bot API, long polling `getUpdates` for messages and
//! answering with `sendMessage`.
//!
//! - `api.rs`: the Bot API client (reqwest); `api_base` is configurable so tests use a fake.
//! - `convert.rs`: updates to inbound messages (chat kinds, forum topics, mentions).
//! - `chunk.rs`: replies longer than 4,096 UTF-16 units become several messages.
//! - `preview.rs`: where a streaming preview goes (`sendMessage`, then `editMessageText`);
//!   `channels/preview.rs` drafts and throttles it (`stream_edits`, `edit_interval_ms`); the
//!   final reply edits it last.
//! - `poller.rs`: the long-poll loop; the next offset is stored durably after the updates
//!   before it are durably accepted, so a restart neither skips nor (beyond the last batch)
//!   repeats updates.
//!
//! Replies go to the chat of the newest message they answer, quoting it; in forum topics they
//! go to the topic.

mod api;
mod chunk;
mod convert;
mod poller;
mod preview;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use turnstile_actors::Channel;

pub(super) use api::{ApiError, BotApi};
pub(super) use chunk::{split_message, MAX_MESSAGE_UTF16};
pub(super) use convert::{split_chat_id, TELEGRAM};

use crate::channels::preview::{PreviewSettings, Previews, TextLimit};
use crate::config::TelegramConfig;
use crate::error::{ConfigError, Error};
use crate::metrics;
use crate::replies::Reply;
use crate::replies::Serves;
use crate::runtime::{DeltaTaker, Runtime};
use crate::secret::Secret;
use preview::Target;

/// The Telegram channel's delivery side.
#[derive(Debug)]
pub(crate) struct TelegramChannel {
    api: BotApi,
    config: TelegramConfig,
    /// The previews of streaming replies, when `stream_edits` is on.
    previews: Option<Arc<Previews<Target>>>,
}

/// A chat id as the Bot API takes it: a number when it is one, else a `@channel` name.
fn chat_value(chat: &str) -> Value {
    chat.parse::<i64>()
        .map_or_else(|_| json!(chat), |n| json!(n))
}

/// A `sendMessage` body: to `chat` (in forum `topic`), quoting `reply_to` when given.
fn message_body(chat: &Value, topic: Option<i64>, reply_to: Option<i64>, text: &str) -> Value {
    let mut body = json!({"chat_id": chat, "text": text});
    if let Some(topic) = topic {
        body["message_thread_id"] = json!(topic);
    }
    if let Some(id) = reply_to {
        body["reply_parameters"] = json!({"message_id": id, "allow_sending_without_reply": true});
    }
    body
}

impl TelegramChannel {
    /// The channel for the bot behind `api`.
    pub(crate) fn new(api: BotApi, config: TelegramConfig) -> Self {
        let previews = config.stream_edits.then(|| {
            let settings = PreviewSettings {
                interval: Duration::from_millis(config.edit_interval_ms),
                limit: TextLimit::Utf16(MAX_MESSAGE_UTF16),
                call_timeout: api::CALL_TIMEOUT,
            };
            let api = api.clone();
            let target = Box::new(move |route: &crate::replies::ReplyRoute| {
                let (chat, topic) = split_chat_id(&route.chat_id);
                Some(Target {
                    api: api.clone(),
                    chat: chat_value(chat),
                    topic: topic.and_then(|t| t.parse().ok()),
                    reply_to: route.message_id.parse().ok(),
                })
            });
            Arc::new(Previews::new(config.account_id.clone(), settings, target))
        });
        Self {
            api,
            config,
            previews,
        }
    }

    /// Edits the preview `message_id` to the final `text`; false if that failed (the caller
    /// then sends the text as a new message).
    async fn edit_final(&self, chat: &Value, message_id: i64, text: &str) -> bool {
        let body = json!({"chat_id": chat, "message_id": message_id, "text": text});
        match self.api.edit_message_text(&body).await {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(%error, "telegram final edit failed; sending the reply anew");
                false
            }
        }
    }

    /// Sends one chunk, retrying transient failures. Returns false if it was given up.
    async fn send_chunk(&self, body: &Value) -> bool {
        let initial = Duration::from_millis(self.config.retry_backoff_ms);
        let max = Duration::from_millis(self.config.max_retry_backoff_ms);
        for attempt in 1..=self.config.send_attempts {
            let error = match self.api.send_message(body).await {
                Ok(_) => return true,
                Err(e) => e,
            };
            if !error.is_transient() || attempt == self.config.send_attempts {
                tracing::error!(%error, attempts = attempt, "telegram sendMessage gave up; the reply stays readable through the API");
                return false;
            }
            metrics::delivery_retry(TELEGRAM);
            tracing::warn!(%error, attempt, "telegram sendMessage failed; retrying");
            let pause = match &error {
                ApiError::Api {
                    retry_after: Some(secs),
                    ..
                } => Duration::from_secs(*secs).min(max),
                _ => crate::backoff::jittered(initial, max, attempt - 1),
            };
            tokio::time::sleep(pause).await;
        }
        false
    }
}

impl Channel for TelegramChannel {
    type Reply = Arc<Reply>;

    fn name(&self) -> &str {
        TELEGRAM
    }

    async fn deliver(&self, reply: Arc<Reply>) {
        let Some(route) = &reply.route else { return };
        if route.account_id != self.config.account_id {
            tracing::debug!(account = %route.account_id, "reply for another telegram account; not sent");
            return;
        }
        let (chat, topic) = split_chat_id(&route.chat_id);
        let chat = chat_value(chat);
        let topic = topic.and_then(|t| t.parse::<i64>().ok());
        let reply_to = route.message_id.parse::<i64>().ok();
        let preview = match &self.previews {
            Some(p) => p.finish(&reply.session_key, &reply.in_reply_to).await,
            None => None,
        };
        let mut ok = true;
        for (i, text) in split_message(&reply.text, MAX_MESSAGE_UTF16)
            .into_iter()
            .enumerate()
        {
            if let (0, Some(id)) = (i, preview) {
                // The preview becomes the first chunk (or the error notice).
                if self.edit_final(&chat, id, &text).await {
                    continue;
                }
            }
            let body = message_body(&chat, topic, reply_to.filter(|_| i == 0), &text);
            if !self.send_chunk(&body).await {
                ok = false;
                break;
            }
        }
        metrics::delivery(TELEGRAM, ok);
    }
}

/// Starts the Telegram channel from `[channels.telegram]`: the delivery actor and the poller.
pub(crate) async fn start(runtime: &Runtime, config: TelegramConfig) -> Result<(), Error> {
    let token = Secret::require_env(&config.bot_token_env, "channels.telegram")?;
    let api = BotApi::new(&config.api_base, token.expose())
        .map_err(|e| ConfigError::Invalid(format!("channels.telegram: {e}")))?;
    let channel = TelegramChannel::new(api.clone(), config.clone());
    let deltas = channel
        .previews
        .clone()
        .map(|p| Arc::new(p) as Arc<dyn DeltaTaker>);
    let port = runtime
        .add_streaming_channel(
            Arc::new(channel),
            Serves::Channels(vec![TELEGRAM.into()]),
            deltas,
        )
        .await?;
    let poller = poller::Poller::new(api, config, port.clone());
    port.spawn(poller.run());
    tracing::info!("telegram channel started");
    Ok(())
}
