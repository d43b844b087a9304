//! The Discord channel: a bot on the gateway (twilight-gateway, one receive task per shard,
//! each owning its shard's stream) and REST (twilight-http, with its rate limiter).
//!
//! - `convert.rs`: messages to inbound messages with the seed's rules (chat kinds, threads,
//!   allowlists, mentions, commands, system events); plain functions.
//! - `events.rs`: the gateway payloads read besides messages, and the fatal close codes.
//! - `shard.rs`: one shard's task — resume from the saved session, catch-up after a new
//!   session, cursors saved after each message, a fatal close stops it.
//! - `pluralkit.rs`: PluralKit's proxied messages attributed to their member;
//!   `held.rs`: an account's message held until its proxy (or the wait) settles it.
//! - `starter.rs`: a thread's starter message, read once and kept with its session.
//! - `state.rs`: what a shard keeps durably (session, per-channel cursors) and the catch-up
//!   bounds.
//! - `rest.rs`: the REST calls, 429s and proxy HTML pages backed off.
//! - `chunk.rs`: replies in pieces of 2,000 characters, cut on lines and code fences.
//! - `outbound.rs`: the message body (reply reference, mentions that ping nobody else, nonce).
//! - `typing.rs`: the typing indicator while a turn runs.
//! - `preview.rs`: where a streaming reply's preview goes (a reply, then edits while the
//!   edit bucket has room; `stream_edits`, `edit_interval_ms`); the final reply edits it last.
//!
//! Delivery is this module's [`Channel`]: the reply goes to the thread or channel of the newest
//! message it answers, replying to it.

pub(super) mod chunk;
mod convert;
mod events;
mod held;
mod outbound;
mod pluralkit;
mod preview;
mod rest;
mod shard;
mod starter;
mod state;
mod typing;

use std::sync::Arc;
use std::time::Duration;

use turnstile_actors::Channel;
use twilight_gateway::queue::InMemoryQueue;
use twilight_gateway::ShardId;

use crate::channels::preview::{PreviewSettings, Previews, TextLimit};
use crate::channels::retry::pause_unless_stopped;
use crate::config::DiscordConfig;
use crate::error::Error;
use crate::metrics;
use crate::replies::{Reply, ReplyRoute, Serves};
use crate::runtime::{ChannelPort, DeltaTaker, Runtime};
use crate::secret::Secret;
use chunk::{split_message, MAX_MESSAGE_CHARS};
use pluralkit::PluralKit;
use rest::{Rest, RestError};
use typing::Typing;

/// The channel name Discord messages carry.
pub(crate) const DISCORD: &str = "discord";

/// Most shards one process runs (Discord recommends one per 1,000–2,500 guilds).
pub(crate) const MAX_SHARDS: u32 = 64;

/// The nonce index of a reply's streaming preview (its chunks count from 0).
const PREVIEW_NONCE_INDEX: usize = usize::MAX;

/// The Discord channel's delivery side.
#[derive(Debug)]
pub(crate) struct DiscordChannel {
    rest: Rest,
    config: DiscordConfig,
    typing: Arc<Typing>,
    /// The previews of streaming replies, when `stream_edits` is on.
    previews: Option<Arc<Previews<preview::Target>>>,
}

/// The channel or thread a reply to `route` goes to, if it is a Discord id.
fn target_of(route: &ReplyRoute) -> Option<u64> {
    route
        .thread_id
        .as_deref()
        .unwrap_or(&route.chat_id)
        .parse()
        .ok()
}

impl DiscordChannel {
    /// The channel for the bot behind `rest`.
    fn new(rest: Rest, config: DiscordConfig, typing: Arc<Typing>) -> Self {
        let previews = config.stream_edits.then(|| {
            let settings = PreviewSettings {
                interval: Duration::from_millis(config.edit_interval_ms),
                limit: TextLimit::Chars(MAX_MESSAGE_CHARS),
                call_timeout: rest::REQUEST_TIMEOUT,
            };
            let rest = rest.clone();
            let target = Box::new(move |route: &ReplyRoute| {
                let channel = target_of(route)?;
                let reply_to = route.message_id.parse::<u64>().ok();
                Some(preview::Target {
                    rest: rest.clone(),
                    channel,
                    reply_to,
                    nonce: outbound::nonce(
                        &route.chat_id,
                        reply_to.unwrap_or_default(),
                        PREVIEW_NONCE_INDEX,
                    ),
                })
            });
            Arc::new(Previews::new(config.account_id.clone(), settings, target))
        });
        Self {
            rest,
            config,
            typing,
            previews,
        }
    }

    /// Edits the preview `message` to the final `text`; false if that failed (the caller then
    /// sends the text as a new message). Waits on the edit bucket if it must.
    async fn edit_final(&self, channel: u64, message: u64, text: &str, replying: bool) -> bool {
        let body = serde_json::to_vec(&outbound::edit_body(text, replying)).unwrap_or_default();
        match self.rest.update_message(channel, message, &body).await {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(%error, "discord final edit failed; sending the reply anew");
                false
            }
        }
    }

    /// Sends one chunk, retrying rate limits and transient failures; the posted message's id,
    /// or `None` when it was given up.
    async fn send_chunk(&self, channel: u64, body: &[u8]) -> Option<u64> {
        let initial = Duration::from_millis(self.config.retry_backoff_ms);
        let max = Duration::from_millis(self.config.max_retry_backoff_ms);
        for attempt in 1..=self.config.send_attempts {
            let error = match self.rest.create_message(channel, body).await {
                Ok(id) => return Some(id),
                Err(e) => e,
            };
            if matches!(error, RestError::Final(_)) || attempt == self.config.send_attempts {
                tracing::error!(%error, attempts = attempt, "discord send gave up; the reply stays readable through the API");
                return None;
            }
            metrics::delivery_retry(DISCORD);
            let pause = match &error {
                RestError::RateLimited { retry_after } => {
                    self.rest.count_wait();
                    retry_after.map_or_else(
                        || crate::backoff::jittered(initial, max, attempt - 1),
                        |d| d.min(max),
                    )
                }
                _ => crate::backoff::jittered(initial, max, attempt - 1),
            };
            tracing::warn!(%error, attempt, "discord send failed; retrying (same nonce)");
            tokio::time::sleep(pause).await;
        }
        None
    }
}

impl Channel for DiscordChannel {
    type Reply = Arc<Reply>;

    fn name(&self) -> &str {
        DISCORD
    }

    async fn deliver(&self, reply: Arc<Reply>) {
        let Some(route) = &reply.route else { return };
        if route.account_id != self.config.account_id {
            tracing::debug!(account = %route.account_id, "reply for another discord account; not sent");
            return;
        }
        let Some(channel) = target_of(route) else {
            tracing::warn!(chat = %route.chat_id, "discord reply to a chat that is not a Discord id; not sent");
            metrics::delivery(DISCORD, false);
            return;
        };
        self.typing.stop(channel);
        let reply_to = route.message_id.parse::<u64>().ok();
        let preview = match &self.previews {
            Some(p) => p.finish(&reply.session_key, &reply.in_reply_to).await,
            None => None,
        };
        let mut ok = true;
        for (i, text) in split_message(&reply.text, MAX_MESSAGE_CHARS)
            .into_iter()
            .enumerate()
        {
            if let (0, Some(message)) = (i, preview) {
                // The preview becomes the first chunk (or the error notice).
                if self
                    .edit_final(channel, message, &text, reply_to.is_some())
                    .await
                {
                    continue;
                }
            }
            let nonce = outbound::nonce(&reply.session_key, reply.seq, i);
            let body = outbound::message_body(&text, reply_to.filter(|_| i == 0), &nonce);
            let body = serde_json::to_vec(&body).unwrap_or_default();
            if self.send_chunk(channel, &body).await.is_none() {
                ok = false;
                break;
            }
        }
        metrics::delivery(DISCORD, ok);
    }
}

/// Starts the Discord channel from `[channels.discord]`: the delivery actor, then (in the
/// background, retrying) the bot's identity, the gateway and one task per shard.
pub(crate) async fn start(runtime: &Runtime, config: DiscordConfig) -> Result<(), Error> {
    // twilight's TLS (rustls) takes the process's default provider: ring, the one the tree
    // builds. Another component may have installed it already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let token = Secret::require_env(&config.token_env, "channels.discord")?;
    let rest = Rest::new(&config.api_base, token.expose(), DISCORD);
    let typing = Arc::new(Typing::new(rest.clone()));
    let channel = DiscordChannel::new(rest.clone(), config.clone(), Arc::clone(&typing));
    let deltas = channel
        .previews
        .clone()
        .map(|p| Arc::new(p) as Arc<dyn DeltaTaker>);
    let port = runtime
        .add_streaming_channel(
            Arc::new(channel),
            Serves::Channels(vec![DISCORD.into()]),
            deltas,
        )
        .await?;
    let starter = Starter {
        port: port.clone(),
        config,
        token: token.expose().to_string(),
        rest,
        typing,
    };
    port.spawn(starter.run());
    tracing::info!("discord channel started");
    Ok(())
}

/// Finds the bot, the gateway and the shard count, then starts the shards.
struct Starter {
    port: ChannelPort<DiscordChannel>,
    config: DiscordConfig,
    token: String,
    rest: Rest,
    typing: Arc<Typing>,
}

impl Starter {
    fn pause(&self, failures: u32) -> Duration {
        crate::backoff::jittered(
            Duration::from_millis(self.config.retry_backoff_ms),
            Duration::from_millis(self.config.max_retry_backoff_ms),
            failures.saturating_sub(1),
        )
    }

    /// Retries `call` until it answers, the runtime stops (`None`) or Discord refuses it for
    /// good (the channel stops with the reason).
    async fn retry<T, F, Fut>(&self, what: &str, mut call: F) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, RestError>>,
    {
        let mut stop = self.port.stopping();
        let mut failures = 0u32;
        loop {
            let error = match call().await {
                Ok(v) => return Some(v),
                Err(e) => e,
            };
            if let RestError::Final(reason) = &error {
                let reason = format!("{what}: {reason}");
                tracing::error!(%reason, "discord channel stopped; fix the cause and restart");
                metrics::channel_connection(DISCORD, "stopped", &reason);
                return None;
            }
            failures += 1;
            if matches!(error, RestError::RateLimited { .. }) {
                self.rest.count_wait();
            }
            tracing::warn!(%error, "discord {what} failed; retrying");
            if !pause_unless_stopped(self.pause(failures), &mut stop).await {
                return None;
            }
        }
    }

    async fn run(self) {
        metrics::channel_connection(DISCORD, "connecting", "");
        let client = self.rest.client();
        let Some(bot_id) = self
            .retry("GET /users/@me", move || async move {
                let user = client
                    .current_user()
                    .await
                    .map_err(|e| rest::classify(&e))?
                    .model()
                    .await
                    .map_err(|e| RestError::Final(e.to_string()))?;
                Ok(user.id.get())
            })
            .await
        else {
            return;
        };
        if self.rest.has_message_content().await == Some(false) {
            tracing::error!(
                "the Message Content intent is not enabled for this bot: guild messages will \
                 arrive without text (enable it in the Developer Portal, Bot → Privileged \
                 Gateway Intents)"
            );
        }
        let (url, shards) = if self.config.gateway_url.is_empty() {
            match self.retry("GET /gateway/bot", || self.rest.gateway()).await {
                Some(found) => found,
                None => return,
            }
        } else {
            (self.config.gateway_url.clone(), 1)
        };
        let shards = shards.min(MAX_SHARDS);
        // One identify queue for every shard: IDENTIFYs paced as Discord allows.
        let queue = InMemoryQueue::default();
        let pluralkit = self
            .config
            .pluralkit
            .then(|| Arc::new(PluralKit::new(&self.config.pluralkit_api_base)));
        tracing::info!(shards, "discord gateway found; connecting");
        for n in 0..shards {
            let task = shard::ShardTask {
                shard: ShardId::new(n, shards),
                config: self.config.clone(),
                token: self.token.clone(),
                gateway_url: url.clone(),
                queue: queue.clone(),
                rest: self.rest.clone(),
                port: self.port.clone(),
                bot_id,
                typing: Arc::clone(&self.typing),
                pluralkit: pluralkit.clone(),
            };
            self.port.spawn(task.run());
        }
        // Typing indicators end with the runtime.
        let mut stop = self.port.stopping();
        let _ = stop.wait_for(|s| *s).await;
        self.typing.stop_all();
    }
}
