//! [`OpenAiModel`]: `POST {base_url}/chat/completions` with retries and a fallback chain.
//!
//! One call tries the primary model, retrying it on 408/409/429/5xx answers and connection
//! errors (exponential back-off with jitter, or the server's `Retry-After`), then each fallback
//! model the same way. A context overflow ends the call at once: another attempt with the same
//! prompt cannot succeed, and the caller must compact. Once a streamed answer has sent text to
//! the caller's sink, a failure also ends the call, since a retry would repeat that text.
//!
//! Every attempt first takes a permit of its model's [`ModelLimiter`] (shared by all sessions):
//! a 429 pauses and throttles the model for everyone, so a turn retrying after a 429 waits in
//! the limiter instead of sleeping alone.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::future::BoxFuture;
use hyper_util::client::proxy::matcher::Matcher;
use reqwest::header::{HeaderValue, CONTENT_TYPE};

use super::settings::OpenAiSettings;
use super::sse::{SseDecoder, SseEvent};
use super::transport::{Answer, Transport};
use super::{errors, request_json, wire};
use crate::backoff::{self, RetryPolicy};
use crate::error::{ConfigError, ModelError};
use crate::model::{
    CalibrationStore, DeltaSink, LimiterSettings, Model, ModelLimiter, ModelReply, ModelRequest,
};

/// Most bytes read of an error answer (the message is at the start).
pub(crate) const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Most bytes read of a complete (non-streamed) answer.
pub(crate) const MAX_RESPONSE_BYTES: usize = wire::MAX_REPLY_BYTES + 64 * 1024;

/// A model behind any OpenAI-compatible server (OpenAI, vLLM, Ollama, llama.cpp server,
/// LM Studio…). Cheap to share behind an `Arc`; `Debug` never shows the API key.
#[derive(Debug)]
pub(crate) struct OpenAiModel {
    transport: Transport,
    #[cfg_attr(not(test), allow(dead_code))]
    endpoint: reqwest::Url,
    /// The `Authorization` header, built once (`Err` for a key that is not a valid header
    /// value: every call fails with it).
    authorization: Option<Result<HeaderValue, ()>>,
    settings: OpenAiSettings,
    retry: RetryPolicy,
    calibration: Option<CalibrationStore>,
    /// One limiter per model name (the primary and each fallback).
    limiters: HashMap<String, ModelLimiter>,
}

/// A failed attempt, with the delay the server asked for.
struct Failure {
    error: ModelError,
    retry_after: Option<Duration>,
}

impl From<ModelError> for Failure {
    fn from(error: ModelError) -> Self {
        Self {
            error,
            retry_after: None,
        }
    }
}

/// Where streamed text goes, and whether any went there yet.
struct Forward<'s> {
    sink: Option<&'s DeltaSink>,
    /// Text reached the caller: no retry or fallback may follow.
    sent: bool,
    /// The caller stopped listening; the answer is still read to the end.
    closed: bool,
}

impl Forward<'_> {
    async fn send(&mut self, text: String) {
        let Some(sink) = self.sink else { return };
        if self.closed || text.is_empty() {
            return;
        }
        match sink.send(text).await {
            Ok(()) => self.sent = true,
            Err(_) => self.closed = true,
        }
    }
}

impl OpenAiModel {
    /// A client for `settings`. Fails on a base URL that is not http(s).
    pub(crate) fn new(settings: OpenAiSettings) -> Result<Self, ConfigError> {
        Self::with_proxies(settings, &Matcher::from_env())
    }

    /// [`OpenAiModel::new`] given the proxies in force instead of the environment's.
    pub(super) fn with_proxies(
        settings: OpenAiSettings,
        proxies: &Matcher,
    ) -> Result<Self, ConfigError> {
        let endpoint = format!(
            "{}/chat/completions",
            settings.base_url.trim_end_matches('/')
        );
        let endpoint = reqwest::Url::parse(&endpoint)
            .map_err(|e| ConfigError::Invalid(format!("model.base_url: not a URL: {e}")))?;
        if !matches!(endpoint.scheme(), "http" | "https") {
            return Err(ConfigError::Invalid(
                "model.base_url: must be an http:// or https:// URL".into(),
            ));
        }
        let transport = Transport::new(&endpoint, &settings, proxies)?;
        let retry = RetryPolicy {
            max_retries: settings.max_retries,
            base: settings.backoff_base,
            max: settings.backoff_max,
        };
        let limits = LimiterSettings {
            requests_per_minute: settings.requests_per_minute,
            tokens_per_minute: settings.tokens_per_minute,
            base_pause: settings.backoff_base,
            max_pause: settings.backoff_max,
            max_concurrency: settings.max_connections,
        };
        let limiters = std::iter::once(&settings.model)
            .chain(&settings.fallbacks)
            .map(|m| (m.clone(), ModelLimiter::new(limits)))
            .collect();
        let authorization = settings.api_key.as_ref().map(|key| {
            let mut value =
                HeaderValue::from_str(&format!("Bearer {}", key.expose())).map_err(|_| ())?;
            value.set_sensitive(true);
            Ok(value)
        });
        Ok(Self {
            transport,
            endpoint,
            authorization,
            settings,
            retry,
            calibration: None,
            limiters,
        })
    }

    /// Records token usage and overflow limits of every call in `store`, under the name of
    /// the model that answered.
    pub(crate) fn with_calibration(mut self, store: CalibrationStore) -> Self {
        self.calibration = Some(store);
        self
    }

    /// The URL requests go to.
    #[cfg(test)]
    pub(crate) fn endpoint(&self) -> &str {
        self.endpoint.as_str()
    }

    /// True when requests go over hyper directly (plain HTTP, no proxy), false when through
    /// reqwest (TLS or a proxy from the environment).
    #[cfg(test)]
    pub(crate) fn is_direct(&self) -> bool {
        self.transport.is_direct()
    }

    async fn run(
        &self,
        request: &ModelRequest,
        sink: Option<&DeltaSink>,
    ) -> Result<ModelReply, ModelError> {
        let mut forward = Forward {
            sink,
            sent: false,
            closed: false,
        };
        let mut last_error = None;
        let models = std::iter::once(&self.settings.model).chain(&self.settings.fallbacks);
        for (position, model) in models.enumerate() {
            if position > 0 {
                tracing::warn!(model = %model, "trying fallback model");
            }
            match self.run_model(model, request, &mut forward).await {
                Ok(mut reply) => {
                    self.calibrate_usage(model, request, &reply);
                    reply.model = Some(model.clone());
                    return Ok(reply);
                }
                Err(error) => {
                    self.calibrate_error(model, request, &error);
                    if error.is_overflow() || forward.sent {
                        return Err(error);
                    }
                    tracing::warn!(model = %model, %error, "model failed");
                    last_error = Some(error);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| ModelError::Protocol("no model configured".into())))
    }

    /// Tries `model` until it answers, fails for good, or runs out of retries.
    async fn run_model(
        &self,
        model: &str,
        request: &ModelRequest,
        forward: &mut Forward<'_>,
    ) -> Result<ModelReply, ModelError> {
        let mut retry = 0;
        loop {
            let failure = match self.limited_attempt(model, request, forward).await {
                Ok(reply) => return Ok(reply),
                Err(failure) => failure,
            };
            let error = failure.error;
            if !error.is_retryable() || forward.sent || retry >= self.retry.max_retries {
                return Err(error);
            }
            let delay = match failure.retry_after {
                Some(asked) if asked > self.retry.max => {
                    tracing::warn!(
                        model,
                        retry_after_ms = asked.as_millis() as u64,
                        "server asks for a longer pause than model.backoff_max_ms; giving up"
                    );
                    return Err(error);
                }
                Some(asked) => asked,
                None => self.retry.delay(retry),
            };
            // After a 429 the model's limiter holds every session's next attempt back.
            let delay = if matches!(error, ModelError::RateLimited { .. }) {
                Duration::ZERO
            } else {
                delay
            };
            tracing::debug!(
                model,
                retry,
                delay_ms = delay.as_millis() as u64,
                %error,
                "model call failed; retrying"
            );
            tokio::time::sleep(delay).await;
            retry += 1;
        }
    }

    /// One HTTP request under `model`'s limiter, which learns how it ended.
    async fn limited_attempt(
        &self,
        model: &str,
        request: &ModelRequest,
        forward: &mut Forward<'_>,
    ) -> Result<ModelReply, Failure> {
        let Some(limiter) = self.limiters.get(model) else {
            return self.attempt(model, request, forward).await;
        };
        // Quotas count the server's tokens: scale ours by what calibration learned.
        let prompt = match &self.calibration {
            Some(store) => store.scale(model, request.prompt_tokens),
            None => request.prompt_tokens,
        };
        let cost = u64::from(prompt) + u64::from(request.max_output_tokens);
        let permit = limiter.acquire(cost).await;
        let result = self.attempt(model, request, forward).await;
        match &result {
            Ok(_) => permit.succeeded(),
            Err(f) if matches!(f.error, ModelError::RateLimited { .. }) => {
                permit.rate_limited(f.retry_after);
            }
            Err(_) => drop(permit),
        }
        result
    }

    /// One HTTP request.
    async fn attempt(
        &self,
        model: &str,
        request: &ModelRequest,
        forward: &mut Forward<'_>,
    ) -> Result<ModelReply, Failure> {
        let streaming = forward.sink.is_some();
        let body = request_json::request_body(model, request, streaming)?;
        let authorization = self
            .authorization
            .clone()
            .transpose()
            .map_err(|_| ModelError::Protocol("the API key is not a valid header".into()))?;
        let mut response = self.transport.post(body, authorization).await?;
        let status = response.status;
        if !status.is_success() {
            let retry_after = backoff::retry_after(&response.headers);
            // An unreadable error body still leaves the status to classify by.
            let (body, _) = read_capped(&mut response, MAX_ERROR_BODY_BYTES)
                .await
                .unwrap_or_default();
            return Err(Failure {
                error: errors::classify_http(status.as_u16(), &body),
                retry_after,
            });
        }
        let is_event_stream = response
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        if streaming && is_event_stream {
            return read_stream(response, forward).await.map_err(Failure::from);
        }
        let (body, truncated) = read_capped(&mut response, MAX_RESPONSE_BYTES).await?;
        if truncated {
            return Err(ModelError::Protocol(format!(
                "answer larger than {MAX_RESPONSE_BYTES} bytes"
            ))
            .into());
        }
        let reply = wire::parse_completion(&body)?;
        // A server that ignored `stream: true` still answered: pass the text on whole.
        forward.send(reply.text.clone()).await;
        Ok(reply)
    }

    fn calibrate_usage(&self, model: &str, request: &ModelRequest, reply: &ModelReply) {
        if let (Some(store), Some(usage)) = (&self.calibration, reply.usage) {
            store.record_usage(model, request.prompt_tokens, usage.prompt_tokens);
        }
    }

    fn calibrate_error(&self, model: &str, request: &ModelRequest, error: &ModelError) {
        if let Some(store) = &self.calibration {
            store.record_error(model, request.prompt_tokens, error);
        }
    }
}

/// Reads at most `cap` bytes of the body; the flag says whether more was left unread.
async fn read_capped(response: &mut Answer, cap: usize) -> Result<(Vec<u8>, bool), ModelError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = cap.saturating_sub(body.len());
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// Reads a streamed answer, sending text deltas on as they arrive.
async fn read_stream(
    mut response: Answer,
    forward: &mut Forward<'_>,
) -> Result<ModelReply, ModelError> {
    let mut decoder = SseDecoder::default();
    let mut state = wire::StreamState::default();
    let mut events = Vec::new();
    loop {
        let chunk = response.chunk().await?;
        match &chunk {
            Some(bytes) => decoder.push(bytes, &mut events)?,
            None => decoder.finish(&mut events),
        }
        for event in events.drain(..) {
            match event {
                SseEvent::Data(payload) => {
                    if let Some(text) = state.apply(&payload)? {
                        forward.send(text).await;
                    }
                }
                SseEvent::Error(payload) => return Err(errors::classify_stream_payload(&payload)),
            }
        }
        if state.done || chunk.is_none() {
            return state.into_reply();
        }
    }
}

impl Model for OpenAiModel {
    fn name(&self) -> &str {
        &self.settings.model
    }

    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(self.run(request, None))
    }

    fn complete_streaming<'a>(
        &'a self,
        request: &'a ModelRequest,
        sink: DeltaSink,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move { self.run(request, Some(&sink)).await })
    }
}
