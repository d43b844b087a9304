//! Channels: transports that feed the supervisor and, where the platform needs it, push
//! replies back. Each is a [`turnstile_actors::Channel`] started by `Runtime::add_channel`.
//!
//! - `callback.rs`: replies POSTed to a URL, HMAC-signed, retried (`[channels.callback]`).
//! - `telegram/`: a Telegram bot, long polling (`[channels.telegram]`).
//! - `discord/`: a Discord bot, gateway and REST with twilight (`[channels.discord]`).
//! - `slack/`: a Slack app, Socket Mode or the HTTP Events API, and the Web API
//!   (`[channels.slack]`).
//!
//! The API channel is the runtime's own (`runtime/api_channel.rs`); the router that picks the
//! channel for a reply lives in `crate::replies`, below both.
//! - `retry.rs`: the pause between retries (delays from `crate::backoff`).
//! - `preview.rs`: a streaming reply shown as one message edited as it grows (Telegram,
//!   Discord, Slack).
//! - `thread_starter.rs`: a thread session's starter message, read once (bounded) and kept
//!   with the session (Discord, Slack).

mod callback;
mod discord;
mod preview;
mod retry;
mod slack;
mod telegram;
mod thread_starter;

pub(crate) use discord::DISCORD;
pub use slack::http::{
    sign as slack_sign, verify as slack_verify, EventsAnswer as SlackEventsAnswer, SlackEvents,
    MAX_SKEW_SECS as SLACK_MAX_SKEW_SECS, SIGNATURE_HEADER as SLACK_SIGNATURE_HEADER,
    TIMESTAMP_HEADER as SLACK_TIMESTAMP_HEADER,
};
pub(crate) use slack::SLACK;

pub use callback::{verify_signature, SIGNATURE_HEADER};

use crate::error::Error;
use crate::runtime::Runtime;

/// Starts the channels the configuration turns on (called by `RuntimeBuilder::build`).
pub(crate) async fn start_configured(runtime: &Runtime) -> Result<(), Error> {
    let channels = runtime.config().channels.clone();
    if let Some(telegram) = channels.telegram {
        telegram::start(runtime, telegram).await?;
    }
    if let Some(discord) = channels.discord {
        discord::start(runtime, discord).await?;
    }
    if let Some(slack) = channels.slack {
        slack::start(runtime, slack).await?;
    }
    if let Some(callback) = channels.callback {
        callback::start(runtime, callback).await?;
    }
    Ok(())
}
