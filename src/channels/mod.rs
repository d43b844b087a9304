//! Channels: transports that feed the supervisor. Each is a [`turnstile_actors::Channel`].

mod api;

pub use api::ApiChannel;
