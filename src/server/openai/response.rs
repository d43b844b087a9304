//! The reply side of `/v1/chat/completions` that does not stream: the completion body, the
//! error a failed turn answers with, and `GET /v1/models`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use crate::replies::{Reply, ReplyErrorKind, ReplyUsage};
use crate::server::chat_request;
use crate::server::error::ApiError;
use crate::server::AppState;

/// Who `GET /v1/models` says owns the configured models.
pub(crate) const OWNED_BY: &str = "turnstile";

/// The `usage` object of `reply`.
pub(super) fn usage_json(usage: Option<ReplyUsage>) -> Value {
    let usage = usage.unwrap_or(ReplyUsage::new(0, 0));
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    })
}

/// The model named in an answer: the one that answered, else `fallback`.
pub(super) fn model_of<'a>(reply: &'a Reply, fallback: &'a str) -> &'a str {
    reply.model.as_deref().unwrap_or(fallback)
}

/// The finish reason of an answer: `tool_calls` when it stopped at client tools, else what
/// the model said (`stop` when it said nothing).
pub(super) fn finish_reason_of(reply: &Reply) -> &str {
    if !reply.tool_calls.is_empty() {
        return "tool_calls";
    }
    reply.finish_reason.as_deref().unwrap_or("stop")
}

/// A whole `chat.completion` body.
pub(super) fn completion(id: &str, created: u64, reply: &Reply, fallback_model: &str) -> Value {
    json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model_of(reply, fallback_model),
        "choices": [{
            "index": 0,
            "message": chat_request::answer_message(&reply.text, &reply.tool_calls).0,
            "finish_reason": finish_reason_of(reply),
        }],
        "usage": usage_json(reply.usage),
    })
}

/// The status and error code a failed turn answers with: 502 when the model failed, 504 when
/// it did not answer in time, 500 for our own failures.
pub(super) fn failure_status(kind: Option<ReplyErrorKind>) -> (StatusCode, &'static str) {
    match kind {
        Some(ReplyErrorKind::Timeout) => (StatusCode::GATEWAY_TIMEOUT, "model_timeout"),
        Some(ReplyErrorKind::Model) => (StatusCode::BAD_GATEWAY, "model_error"),
        Some(ReplyErrorKind::Internal) | None => (StatusCode::INTERNAL_SERVER_ERROR, "turn_failed"),
    }
}

/// The error answering a request whose turn failed (its notice text carries no URL).
pub(super) fn failure(reply: &Reply) -> ApiError {
    let (status, code) = failure_status(reply.error_kind);
    ApiError::new(status, code, reply.text.clone())
}

/// The same error as an in-stream `data:` payload (the status line went out already).
pub(super) fn failure_payload(code: &str, message: &str) -> Value {
    json!({"error": {
        "message": message,
        "type": "server_error",
        "param": null,
        "code": code,
    }})
}

/// `GET /v1/models`: the configured model and its fallbacks, in the OpenAI list shape.
pub(crate) async fn models(State(state): State<AppState>) -> Json<Value> {
    let config = &state.runtime.config().model;
    let data: Vec<Value> = std::iter::once(&config.model)
        .chain(&config.fallbacks)
        .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": OWNED_BY}))
        .collect();
    Json(json!({"object": "list", "data": data}))
}
