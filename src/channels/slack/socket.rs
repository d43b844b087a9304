//! Socket Mode: one connection at a time, opened with `apps.connections.open` (the app-level
//! token) and read by this task, which only acknowledges and hands over — every envelope is
//! acknowledged (`{"envelope_id": …}`) the moment it is read and then queued for the
//! receiver (`receiver.rs`), which does the rest in order.
//!
//! - `hello` opens a connection's life: the receiver is told, and catches up before the
//!   events that follow it.
//! - `disconnect` (`refresh_requested`, or any other reason but `link_disabled`) closes the
//!   connection and opens the next one at once (after the back-off when the connection lived
//!   less than [`MIN_HEALTHY_CONNECTION`]); a lost connection (closed, failed, no frame
//!   for [`ZOMBIE_AFTER`] although pinged, no `hello` within [`HELLO_TIMEOUT`]) is counted as
//!   a failure and the next open waits out the back-off (`retry_backoff_ms` doubled, jittered,
//!   up to `max_retry_backoff_ms`; a 429's `Retry-After` when Slack said).
//! - `link_disabled` (Socket Mode turned off for the app) and a refused app token stop the
//!   channel with the reason: no retry loop.
//! - Slack allows [`SLACK_MAX_CONNECTIONS`] open connections per app; this task holds at most
//!   one (the old one is closed before the next is opened), so any number of reconnects, and
//!   several processes sharing the app, stay under the cap.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_websockets::{ClientBuilder, CloseCode, Message};

use super::api::{ApiError, WebApi};
use super::events::{Frame, LINK_DISABLED};
use super::SLACK;
use crate::channels::retry::pause_unless_stopped;
use crate::config::SlackConfig;
use crate::metrics;
use crate::secret::Secret;

/// Slack's limit of open Socket Mode connections per app.
pub(crate) const SLACK_MAX_CONNECTIONS: usize = 10;

/// Connections this task holds open at once.
pub(crate) const OPEN_CONNECTIONS: usize = 1;

const _: () = assert!(OPEN_CONNECTIONS <= SLACK_MAX_CONNECTIONS);

/// Longest wait for the websocket handshake.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest wait for `hello` after the handshake.
pub(crate) const HELLO_TIMEOUT: Duration = Duration::from_secs(30);

/// A ping is sent after this long without a frame from Slack.
pub(crate) const PING_AFTER: Duration = Duration::from_secs(30);

/// A connection with no frame from Slack for this long (pings unanswered) is a zombie:
/// closed and opened again (OpenClaw's "looks healthy while receiving nothing").
pub(crate) const ZOMBIE_AFTER: Duration = Duration::from_secs(90);

/// A connection that Slack refreshes sooner than this after opening it counts as a failure
/// (the next one waits out the back-off), so a refresh loop cannot spin.
pub(crate) const MIN_HEALTHY_CONNECTION: Duration = Duration::from_secs(10);

/// What the receiver is handed.
#[derive(Debug)]
pub(crate) enum Inbound {
    /// A connection said `hello` (or, in `http` mode, the channel started): catch up.
    Connected,
    /// An acknowledged envelope (`events_api`, `slash_commands`, `interactive`), or an
    /// Events API callback POSTed in `http` mode (no envelope id).
    Envelope {
        /// Its id, when it came over Socket Mode.
        id: Option<String>,
        /// `events_api`, `slash_commands`, `interactive`.
        kind: String,
        /// The payload.
        payload: Value,
    },
}

/// How a connection ended.
enum Ended {
    /// The runtime is stopping.
    Stopping,
    /// Slack asked for a new connection after `hello`: open it at once (unless this one
    /// lived less than [`MIN_HEALTHY_CONNECTION`]).
    Refresh {
        /// How long the connection was open.
        lived: Duration,
    },
    /// Lost, for this reason: back off, then open another.
    Lost(String),
    /// Stop the channel, for this reason.
    Fatal(String),
}

/// The Socket Mode task.
pub(crate) struct SocketTask {
    pub(crate) api: WebApi,
    pub(crate) app_token: Secret,
    pub(crate) config: SlackConfig,
    pub(crate) tx: mpsc::Sender<Inbound>,
    pub(crate) stop: watch::Receiver<bool>,
}

impl SocketTask {
    fn pause(&self, failures: u32) -> Duration {
        crate::backoff::jittered(
            Duration::from_millis(self.config.retry_backoff_ms),
            Duration::from_millis(self.config.max_retry_backoff_ms),
            failures.saturating_sub(1),
        )
    }

    /// Runs until the runtime stops or Slack refuses the app for good.
    pub(crate) async fn run(mut self) {
        let mut stop = self.stop.clone();
        let mut failures = 0u32;
        let mut first = true;
        loop {
            if *stop.borrow() {
                return;
            }
            metrics::channel_connection(SLACK, "connecting", "");
            let url = match self.api.connections_open(&self.app_token).await {
                Ok(url) => url,
                Err(ApiError::Final(reason)) => {
                    return stopped(&format!(
                        "{reason} (the app-level token needs connections:write, and Socket \
                         Mode must be on)"
                    ))
                }
                Err(error) => {
                    failures += 1;
                    let pause = match &error {
                        ApiError::RateLimited { retry_after } => {
                            self.api.count_wait();
                            retry_after.map_or_else(
                                || self.pause(failures),
                                |d| d.min(Duration::from_millis(self.config.max_retry_backoff_ms)),
                            )
                        }
                        _ => self.pause(failures),
                    };
                    tracing::warn!(%error, "slack apps.connections.open failed; retrying");
                    if !pause_unless_stopped(pause, &mut stop).await {
                        return;
                    }
                    continue;
                }
            };
            if !first {
                metrics::channel_reconnect(SLACK);
            }
            first = false;
            match self.connection(&url, &mut failures).await {
                Ended::Stopping => return,
                Ended::Fatal(reason) => return stopped(&reason),
                Ended::Refresh { lived } => {
                    tracing::info!("slack asked for a new socket mode connection; reconnecting");
                    if lived < MIN_HEALTHY_CONNECTION {
                        failures += 1;
                        if !pause_unless_stopped(self.pause(failures), &mut stop).await {
                            return;
                        }
                    }
                }
                Ended::Lost(why) => {
                    failures += 1;
                    tracing::warn!(reason = %why, failures, "slack socket mode connection lost; reconnecting");
                    if !pause_unless_stopped(self.pause(failures), &mut stop).await {
                        return;
                    }
                }
            }
        }
    }

    /// Opens `url` and reads it until it ends. A `hello` resets `failures`.
    async fn connection(&mut self, url: &str, failures: &mut u32) -> Ended {
        let uri = match url.parse::<http::Uri>() {
            Ok(u) => u,
            Err(e) => return Ended::Lost(format!("bad websocket URL from Slack: {e}")),
        };
        let builder = ClientBuilder::from_uri(uri);
        let mut ws = match tokio::time::timeout(CONNECT_TIMEOUT, builder.connect()).await {
            Ok(Ok((ws, _))) => ws,
            Ok(Err(e)) => return Ended::Lost(format!("websocket connect failed: {e}")),
            Err(_) => return Ended::Lost("websocket connect timed out".into()),
        };
        let opened = Instant::now();
        let mut last_frame = Instant::now();
        let mut last_ping = Instant::now();
        let mut hello = false;
        let mut ticker = tokio::time::interval(Duration::from_secs(1).min(PING_AFTER));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut stop = self.stop.clone();
        loop {
            let stopping = *stop.borrow();
            if stopping {
                let _ = ws
                    .send(Message::close(Some(CloseCode::NORMAL_CLOSURE), "stopping"))
                    .await;
                return Ended::Stopping;
            }
            let frame = tokio::select! {
                changed = stop.changed() => {
                    if changed.is_err() {
                        return Ended::Stopping;
                    }
                    continue;
                }
                _ = ticker.tick() => {
                    let quiet = last_frame.elapsed();
                    if !hello && opened.elapsed() >= HELLO_TIMEOUT {
                        return Ended::Lost("no hello from Slack".into());
                    }
                    if quiet >= ZOMBIE_AFTER {
                        let _ = ws.send(Message::close(Some(CloseCode::NORMAL_CLOSURE), "")).await;
                        return Ended::Lost(format!(
                            "nothing from Slack for {} s although pinged", quiet.as_secs()
                        ));
                    }
                    if quiet >= PING_AFTER && last_ping.elapsed() >= PING_AFTER {
                        last_ping = Instant::now();
                        if ws.send(Message::ping("turnstile")).await.is_err() {
                            return Ended::Lost("ping failed".into());
                        }
                    }
                    continue;
                }
                frame = ws.next() => frame,
            };
            let message = match frame {
                None => return Ended::Lost("the connection closed".into()),
                Some(Err(e)) => return Ended::Lost(format!("websocket error: {e}")),
                Some(Ok(m)) => m,
            };
            last_frame = Instant::now();
            if message.is_close() {
                return Ended::Lost("Slack closed the connection".into());
            }
            let Some(text) = message.as_text() else {
                continue;
            };
            let Ok(frame) = serde_json::from_str::<Frame>(text) else {
                tracing::warn!("unreadable slack socket mode frame; skipped");
                continue;
            };
            match frame.kind.as_str() {
                "hello" => {
                    hello = true;
                    *failures = 0;
                    tracing::info!("slack socket mode connected");
                    if self.tx.send(Inbound::Connected).await.is_err() {
                        return Ended::Stopping;
                    }
                }
                "disconnect" => {
                    let reason = frame.reason.unwrap_or_default();
                    if reason == LINK_DISABLED {
                        return Ended::Fatal(
                            "Socket Mode was turned off for the app (link_disabled)".into(),
                        );
                    }
                    if reason == "warning" {
                        tracing::debug!("slack warns that this connection will be refreshed");
                        continue;
                    }
                    let _ = ws
                        .send(Message::close(Some(CloseCode::NORMAL_CLOSURE), ""))
                        .await;
                    return if hello {
                        Ended::Refresh {
                            lived: opened.elapsed(),
                        }
                    } else {
                        Ended::Lost(format!("disconnect ({reason}) before hello"))
                    };
                }
                _ => {
                    let Some(id) = frame.envelope_id else {
                        continue;
                    };
                    if frame.retry_attempt.unwrap_or(0) > 0 {
                        tracing::debug!(envelope = %id, "slack delivers an envelope again");
                    }
                    // Acknowledged first: whatever happens next is the receiver's, and a
                    // redelivery would only be dropped as a duplicate.
                    let ack = json!({"envelope_id": id}).to_string();
                    if let Err(e) = ws.send(Message::text(ack)).await {
                        return Ended::Lost(format!("ack failed: {e}"));
                    }
                    let item = Inbound::Envelope {
                        id: Some(id),
                        kind: frame.kind,
                        payload: frame.payload.unwrap_or(Value::Null),
                    };
                    if self.tx.send(item).await.is_err() {
                        return Ended::Stopping;
                    }
                }
            }
        }
    }
}

fn stopped(reason: &str) {
    tracing::error!(%reason, "slack channel stopped; fix the cause and restart");
    metrics::channel_connection(SLACK, "stopped", reason);
}
