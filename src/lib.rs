//! Turnstile: an actor-based runtime that hosts AI chat-agent sessions for many chats at once.
//!
//! Messages come in through channels, pass preflight in the supervisor, are written to a
//! durable inbox, and are answered one turn at a time per session by that session's lane. See
//! `ARCHITECTURE.md` for the map; the actors themselves live in the `turnstile-actors` crate.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let runtime = turnstile::Runtime::builder().data_dir("./turnstile-data").build().await?;
//! let mut replies = runtime.subscribe();
//! # let message: turnstile::inbound::InboundMessage = unimplemented!();
//! runtime.submit(message).await?;
//! let reply = replies.recv().await;
//! runtime.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - `agents`: several agents per process — their profiles, `[[bindings]]` routing, tool
//!   filters, and the per-agent models and context engines turns use.
//! - `clock`: `now_ms`, the one wall clock (re-exported from `turnstile-actors`; follows
//!   tokio's virtual time in tests).
//! - `config`: `turnstile.toml`, every key with its default.
//! - `backoff`: the one back-off (exponential, capped, jittered) and `Retry-After`, for the
//!   model client, its limiter and the channels.
//! - `error`: the error types.
//! - `cluster`: several nodes over NATS JetStream — placement of session keys in partitions
//!   (always), partition leases and membership (feature `cluster`).
//! - `inbound`: the normalised inbound message, its validation, session keys.
//! - `store`: sled storage — sessions, transcripts, the durable inbox, group commit.
//! - `model`: model requests, the built-in `echo` model, the OpenAI-compatible client,
//!   per-model token calibration and request limiter, token counting.
//! - `context`: the context engine — sources, processors, presets, the dump, the cache.
//! - `compaction`: summarising old transcript spans (extractive or model), fact retention.
//! - `pipeline`: the life of one message — admission, turn, delivery — and the actors' backend.
//! - `replies`: the reply hub and the channel router, below both the runtime and the channels.
//! - `runtime`: the [`Runtime`] handle, its builder, operator actions, channel ports.
//! - `channels`: transports that feed the supervisor (Telegram, Discord, Slack, webhook
//!   callbacks).
//! - `metrics`: Prometheus metrics and per-turn timing, behind one-line functions.
//! - `secret`: secrets from the environment, redacted when printed, compared in constant time.
//! - `server`: the axum HTTP API, with auth and rate limits.
//! - `sse`: the one Server-Sent Events parser (model streams, `/v1/events` readers).
//! - `tools`: tools the embedding application registers and MCP servers' tools, run in a
//!   turn's tool loop.
//! - `loadtest`: bounded load against a server or an in-process runtime, with latency
//!   histograms (with the default `cli` feature, like the binary and its dependencies).
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

pub mod agents;
mod backoff;
pub mod channels;
pub mod cluster;
pub use turnstile_actors::clock;
pub mod compaction;
pub mod config;
pub mod context;
pub mod error;
pub mod inbound;
mod launch;
#[cfg(feature = "cli")]
pub mod loadtest;
pub mod metrics;
pub mod model;
mod pipeline;
mod quotas;
mod replies;
mod runtime;
pub mod schedules;
pub mod secret;
pub mod server;
pub mod sse;
pub mod store;
mod tools;

pub use config::Config;
pub use error::Error;
pub use inbound::{DropReason, QuotaRefusal, Refusal};
pub use replies::{
    Delta, DeltaWatch, Heard, Reply, ReplyErrorKind, ReplyRoute, ReplyUsage, ReplyWaiter,
};
pub use runtime::{
    Ack, Admitted, ChannelPort, Compacted, Deleted, DeltaTaker, DrainReport, ReloadError,
    ReloadOutcome, Runtime, RuntimeBuilder, SessionInfo, Stats, SubmitError, TranscriptItem,
};
pub use tools::mcp::{McpServerHealth, McpStatus, McpTools};
pub use tools::{ToolFuture, ToolHandler};
