//! The OpenAI-compatible client: Chat Completions over HTTP, streamed (SSE) or not, with
//! timeouts, retries with back-off, a fallback chain of models, and classification of the
//! servers' error answers (context overflow, rate limit, billing).
//!
//! # Layout
//! - `settings`: [`OpenAiSettings`] from `[model]`, and the redacting [`ApiKey`].
//! - `client`: [`OpenAiModel`], the retry loop and the fallback chain.
//! - `transport`: one request's trip: hyper directly for plain HTTP, reqwest for TLS and
//!   proxies.
//! - `request_json`: the request body, written straight into its bytes.
//! - `wire`: complete answers, and assembling streamed chunks.
//! - `sse`: a model stream's payloads and errors, over the crate's SSE parser (`crate::sse`).
//! - `errors`: what an error answer means, and the limits it states.

mod client;
mod errors;
mod request_json;
mod settings;
mod sse;
mod transport;
mod wire;

#[cfg(test)]
mod tests;

pub use crate::sse::MAX_SSE_LINE_BYTES;
pub use client::{OpenAiModel, MAX_ERROR_BODY_BYTES, MAX_RESPONSE_BYTES};
pub use settings::{ApiKey, OpenAiSettings};
pub use transport::MAX_IDLE_MODEL_CONNECTIONS;
pub use wire::{MAX_REPLY_BYTES, MAX_TOOL_CALLS};
