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

pub(crate) use client::OpenAiModel;
#[cfg(test)]
use settings::ApiKey;
pub(crate) use settings::OpenAiSettings;
