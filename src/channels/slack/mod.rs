//! The Slack channel: an app on Socket Mode (default) or the HTTP Events API, answering over
//! the Web API. Socket Mode is spoken directly (`tokio-websockets`, the websocket client
//! twilight already builds, and `reqwest`), not through `slack-morphism`: its listener
//! acknowledges an envelope only after the handler returns and only when its typed models
//! read it (an event they cannot read is never acknowledged nor seen), hands the handler
//! neither the envelope id nor the connection's `hello`, and reconnects on a fixed
//! whole-second timer over two connections of its own — no dedupe on envelope ids, no
//! catch-up hook, no back-off of ours.
//!
//! - `api.rs`: the Web API calls (`auth.test`, `apps.connections.open`, `chat.postMessage`,
//!   `conversations.info`/`history`/`replies`), 429s with their `Retry-After`.
//! - `socket.rs`: the Socket Mode connection — envelopes acknowledged at once and queued,
//!   `hello`/`disconnect`, reconnects under back-off, one connection at a time.
//! - `http.rs`: the HTTP Events API route's half — the signature check and the hand-over.
//! - `receiver.rs`: the channel's one ordered task — dedupe, catch-up, submission, cursors.
//! - `events.rs`: what Slack sends, read leniently. `convert.rs`: messages to inbound
//!   messages with the seed's rules. `starter.rs`: a thread's first message, read once as
//!   its session's starter. `state.rs`: the durable cursors and the catch-up bounds.
//!   `ts.rs`: message timestamps.
//! - `outbound.rs`: the reply body (escaped so nothing pings, in thread).
//! - `preview.rs`: where a streaming reply's preview goes (`chat.postMessage`, then
//!   `chat.update`; `stream_edits`, `edit_interval_ms`); the final reply edits it last.
//!
//! Delivery is this module's [`Channel`]: the reply goes to the conversation of the newest
//! message it answers, in its thread (or a new one under it), in pieces of 4,000 characters.

mod api;
mod convert;
mod events;
pub(crate) mod http;
mod outbound;
mod preview;
mod receiver;
mod socket;
mod starter;
mod state;
mod ts;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use turnstile_actors::Channel;

use crate::channels::discord::chunk::split_message;
use crate::channels::preview::{PreviewSettings, Previews, TextLimit};
use crate::channels::retry::pause_unless_stopped;
use crate::config::{SlackConfig, SlackMode};
use crate::error::{ConfigError, Error};
use crate::inbound::ChatKind;
use crate::metrics;
use crate::replies::{Reply, ReplyRoute, Serves};
use crate::runtime::{ChannelPort, DeltaTaker, Runtime};
use crate::secret::Secret;
use api::{ApiError, WebApi};
use outbound::MAX_MESSAGE_CHARS;
use socket::Inbound;

/// The channel name Slack messages carry.
pub(crate) const SLACK: &str = "slack";

/// Envelopes queued between the socket task (or the HTTP route) and the receiver; when full,
/// reading (and so acknowledging) waits, and Slack redelivers what it does not see
/// acknowledged.
pub(crate) const QUEUE_CAPACITY: usize = 1_000;

/// The Slack channel's delivery side.
#[derive(Debug)]
pub(crate) struct SlackChannel {
    api: WebApi,
    bot_token: Secret,
    config: SlackConfig,
    /// The previews of streaming replies, when `stream_edits` is on.
    previews: Option<Arc<Previews<preview::Target>>>,
}

/// The thread a reply to `route` goes in: the message's own thread; else, in channels, a new
/// thread under the message answered (`reply_in_thread`); in a DM, none.
fn thread_of(config: &SlackConfig, route: &ReplyRoute) -> Option<String> {
    route.thread_id.clone().or_else(|| {
        (config.reply_in_thread && route.chat_kind != ChatKind::Direct)
            .then(|| route.message_id.clone())
            .filter(|ts| ts::valid(ts))
    })
}

impl SlackChannel {
    /// The channel for the bot behind `api`.
    fn new(api: WebApi, bot_token: Secret, config: SlackConfig) -> Self {
        let previews = config.stream_edits.then(|| {
            let settings = PreviewSettings {
                interval: Duration::from_millis(config.edit_interval_ms),
                limit: TextLimit::Chars(MAX_MESSAGE_CHARS),
                call_timeout: api::REQUEST_TIMEOUT,
            };
            let account_id = config.account_id.clone();
            let (api, bot, config) = (api.clone(), bot_token.clone(), config.clone());
            let target = Box::new(move |route: &ReplyRoute| {
                Some(preview::Target {
                    api: api.clone(),
                    bot: bot.clone(),
                    channel: route.chat_id.clone(),
                    thread_ts: thread_of(&config, route),
                })
            });
            Arc::new(Previews::new(account_id, settings, target))
        });
        Self {
            api,
            bot_token,
            config,
            previews,
        }
    }

    /// Edits the preview `ts` to the final `text`; false if that failed (the caller then
    /// sends the text as a new message).
    async fn edit_final(&self, channel: &str, ts: &str, text: &str) -> bool {
        let body = outbound::update_body(channel, ts, text);
        match self.api.update_message(&self.bot_token, &body).await {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(%error, "slack final chat.update failed; sending the reply anew");
                false
            }
        }
    }

    /// Sends one piece, retrying rate limits and transient failures; false when it was
    /// given up.
    async fn send_chunk(&self, body: &serde_json::Value) -> bool {
        let initial = Duration::from_millis(self.config.retry_backoff_ms);
        let max = Duration::from_millis(self.config.max_retry_backoff_ms);
        for attempt in 1..=self.config.send_attempts {
            let error = match self.api.post_message(&self.bot_token, body).await {
                Ok(_) => return true,
                Err(e) => e,
            };
            if matches!(error, ApiError::Final(_)) || attempt == self.config.send_attempts {
                tracing::error!(%error, attempts = attempt, "slack chat.postMessage gave up; the reply stays readable through the API");
                return false;
            }
            metrics::delivery_retry(SLACK);
            let pause = match &error {
                ApiError::RateLimited { retry_after } => {
                    self.api.count_wait();
                    retry_after.map_or_else(
                        || crate::backoff::jittered(initial, max, attempt - 1),
                        |d| d.min(max),
                    )
                }
                _ => crate::backoff::jittered(initial, max, attempt - 1),
            };
            tracing::warn!(%error, attempt, "slack chat.postMessage failed; retrying");
            tokio::time::sleep(pause).await;
        }
        false
    }
}

impl Channel for SlackChannel {
    type Reply = Arc<Reply>;

    fn name(&self) -> &str {
        SLACK
    }

    async fn deliver(&self, reply: Arc<Reply>) {
        let Some(route) = &reply.route else { return };
        if route.account_id != self.config.account_id {
            tracing::debug!(account = %route.account_id, "reply for another slack account; not sent");
            return;
        }
        let thread_ts = thread_of(&self.config, route);
        let preview = match &self.previews {
            Some(p) => p.finish(&reply.session_key, &reply.in_reply_to).await,
            None => None,
        };
        let mut ok = true;
        for (i, text) in split_message(&reply.text, MAX_MESSAGE_CHARS)
            .into_iter()
            .enumerate()
        {
            if let (0, Some(ts)) = (i, &preview) {
                // The preview becomes the first piece (or the error notice).
                if self.edit_final(&route.chat_id, ts, &text).await {
                    continue;
                }
            }
            let body = outbound::message_body(&route.chat_id, &text, thread_ts.as_deref());
            if !self.send_chunk(&body).await {
                ok = false;
                break;
            }
        }
        metrics::delivery(SLACK, ok);
    }
}

/// Starts the Slack channel from `[channels.slack]`: the tokens are checked now (a missing
/// or swapped one stops the start with a clear error), then the delivery actor and, in the
/// background, the bot's identity, the receiver and the Socket Mode connection (or the HTTP
/// route's hand-over).
pub(crate) async fn start(runtime: &Runtime, config: SlackConfig) -> Result<(), Error> {
    // The websocket's TLS (rustls) takes the process's default provider: ring, the one the
    // tree builds. Another component may have installed it already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let bot_token = Secret::require_env(&config.bot_token_env, "channels.slack")?;
    if bot_token.expose().starts_with("xapp-") {
        return Err(ConfigError::Invalid(format!(
            "channels.slack.bot_token_env: {} holds an app-level token (xapp-…); it needs the \
             bot token (xoxb-…, OAuth & Permissions)",
            config.bot_token_env
        ))
        .into());
    }
    let app_token = match config.mode {
        SlackMode::Socket => {
            let token =
                Secret::require_env(&config.app_token_env, "channels.slack (mode = \"socket\")")?;
            if !token.expose().starts_with("xapp-") {
                return Err(ConfigError::Invalid(format!(
                    "channels.slack.app_token_env: {} does not hold an app-level token \
                     (xapp-…, Basic Information → App-Level Tokens, scope connections:write)",
                    config.app_token_env
                ))
                .into());
            }
            Some(token)
        }
        SlackMode::Http => None,
    };
    let signing_secret = match config.mode {
        SlackMode::Http => Some(Secret::require_env(
            &config.signing_secret_env,
            "channels.slack (mode = \"http\")",
        )?),
        SlackMode::Socket => None,
    };
    let api = WebApi::new(&config.api_base)
        .map_err(|e| ConfigError::Invalid(format!("channels.slack: {e}")))?;
    let channel = SlackChannel::new(api.clone(), bot_token.clone(), config.clone());
    let deltas = channel
        .previews
        .clone()
        .map(|p| Arc::new(p) as Arc<dyn DeltaTaker>);
    let port = runtime
        .add_streaming_channel(
            Arc::new(channel),
            Serves::Channels(vec![SLACK.into()]),
            deltas,
        )
        .await?;
    let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
    if let Some(secret) = signing_secret {
        runtime.set_slack_events(http::SlackEvents::new(secret, tx.clone()));
    }
    let starter = Starter {
        port: port.clone(),
        config,
        api,
        bot_token,
        app_token,
        tx,
    };
    port.spawn(starter.run(rx));
    tracing::info!("slack channel started");
    Ok(())
}

/// Finds the bot, then runs the receiver and the connection.
struct Starter {
    port: ChannelPort<SlackChannel>,
    config: SlackConfig,
    api: WebApi,
    bot_token: Secret,
    app_token: Option<Secret>,
    tx: mpsc::Sender<Inbound>,
}

impl Starter {
    async fn run(self, rx: mpsc::Receiver<Inbound>) {
        metrics::channel_connection(SLACK, "connecting", "");
        let mut stop = self.port.stopping();
        let mut failures = 0u32;
        let identity = loop {
            let error = match self.api.auth_test(&self.bot_token).await {
                Ok(identity) => break identity,
                Err(e) => e,
            };
            if let ApiError::Final(reason) = &error {
                let reason = format!("auth.test: {reason} (check the bot token)");
                tracing::error!(%reason, "slack channel stopped; fix the cause and restart");
                metrics::channel_connection(SLACK, "stopped", &reason);
                return;
            }
            failures += 1;
            let pause = match &error {
                ApiError::RateLimited {
                    retry_after: Some(d),
                } => {
                    self.api.count_wait();
                    (*d).min(Duration::from_millis(self.config.max_retry_backoff_ms))
                }
                _ => crate::backoff::jittered(
                    Duration::from_millis(self.config.retry_backoff_ms),
                    Duration::from_millis(self.config.max_retry_backoff_ms),
                    failures - 1,
                ),
            };
            tracing::warn!(%error, "slack auth.test failed; retrying");
            if !pause_unless_stopped(pause, &mut stop).await {
                return;
            }
        };
        tracing::info!(bot = %identity.user_id, "slack bot found");
        let receiver = receiver::Receiver::new(
            self.port.clone(),
            self.config.clone(),
            self.api.clone(),
            self.bot_token.clone(),
            identity,
        );
        match self.app_token {
            Some(app_token) => {
                let task = socket::SocketTask {
                    api: self.api.clone(),
                    app_token,
                    config: self.config.clone(),
                    tx: self.tx.clone(),
                    stop: self.port.stopping(),
                };
                self.port.spawn(task.run());
            }
            None => {
                // Nothing to wait for in `http` mode: catch up on what was said while the
                // server was down, then take what the route hands over.
                let _ = self.tx.send(Inbound::Connected).await;
            }
        }
        drop(self.tx);
        receiver.run(rx).await;
    }
}
