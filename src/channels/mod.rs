//! Channels: transports that feed the supervisor and, where the platform needs it, push
//! replies back. Each is a [`turnstile_actors::Channel`] started by `Runtime::add_channel`.
//!
//! - `api.rs`: the HTTP and embedding API (replies are read from the reply hub).
//! - `callback.rs`: replies POSTed to a URL, HMAC-signed, retried (`[channels.callback]`).
//! - `telegram/`: a Telegram bot, long polling (`[channels.telegram]`).
//! - `router.rs`: which channel a published reply goes to.
//! - `retry.rs`: back-off shared by the channels.

mod api;
pub mod callback;
mod retry;
mod router;
pub mod telegram;

pub use api::ApiChannel;
pub use callback::{sign, verify_signature, CallbackChannel, SIGNATURE_HEADER};
pub use router::{ChannelRouter, ReplySink, Serves};
pub use telegram::TelegramChannel;

use crate::error::Error;
use crate::runtime::Runtime;

/// Starts the channels the configuration turns on.
pub(crate) async fn start_configured(runtime: &Runtime) -> Result<(), Error> {
    let channels = runtime.config().channels.clone();
    if let Some(telegram) = channels.telegram {
        telegram::start(runtime, telegram).await?;
    }
    if let Some(callback) = channels.callback {
        callback::start(runtime, callback).await?;
    }
    Ok(())
}
