//! `POST /v1/chat/completions`, OpenAI-compatible. The runtime owns the history: only the
//! newest user message of the request is taken; the session comes from `X-Session-Key` or the
//! `user` field.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{parse_json, ApiError};
use super::AppState;
use crate::inbound::{ChatKind, InboundMessage, MessageKind, Sender};

/// Most characters sent in one streamed chunk.
pub(super) const STREAM_CHUNK_CHARS: usize = 64;

#[derive(Debug, Deserialize)]
pub(super) struct ChatRequest {
    #[serde(default)]
    model: Option<String>,
    messages: Vec<RequestMessage>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    user: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RequestMessage {
    role: String,
    #[serde(default)]
    content: Value,
}

/// The text of a message's `content`: a string, or an array of parts of which the `text`
/// parts count.
fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        _ => None,
    }
}

fn completion_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "chatcmpl-{nanos:x}{:06x}",
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

pub(super) async fn chat_completions(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: ChatRequest = parse_json(body)?;
    let session = headers
        .get("x-session-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| request.user.clone())
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| {
            ApiError::bad_request(
                "missing_session",
                "name the session with the `user` field or an X-Session-Key header",
            )
        })?;
    let text = request
        .messages
        .iter()
        .rev()
        .find(|m| m.role == "user")
        .and_then(|m| content_text(&m.content))
        .ok_or_else(|| {
            ApiError::bad_request("invalid_request", "no user message with text content")
        })?;
    let id = completion_id();
    let model = request.model.clone().unwrap_or_else(|| "turnstile".into());
    let message = InboundMessage {
        channel: "openai".into(),
        account_id: "default".into(),
        chat_kind: ChatKind::Direct,
        chat_id: session.clone(),
        thread_id: None,
        message_id: id.clone(),
        sender: Sender {
            id: request.user.clone().unwrap_or_else(|| session.clone()),
            name: String::new(),
            is_bot: false,
        },
        text,
        mentions: Vec::new(),
        mentioned_bot: true,
        reply_to: None,
        timestamp_ms: 0,
        attachments: Vec::new(),
        kind: MessageKind::Message,
    };
    let runtime = state.runtime.clone();
    let timeout = Duration::from_millis(runtime.config().server.reply_timeout_ms);
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);

    if !request.stream {
        let mut waiter = runtime.reply_to(&id);
        // Nothing is answered before the reply, so the reply's commit flush makes the inbox
        // write durable too: one flush per turn. A failed flush still ends the wait early.
        let admitted = runtime.submit_for_reply(message, Some(session)).await?;
        let replied = async {
            tokio::select! {
                reply = waiter.recv() => Ok(reply),
                Err(e) = runtime.admitted_durable(&admitted, false) => Err(e),
            }
        };
        let reply = tokio::time::timeout(timeout, replied)
            .await
            .map_err(|_| crate::Error::Timeout("the model's reply"))??
            .ok_or(crate::Error::ShuttingDown)?;
        // Already durable (the reply was published after a later flush): no flush asked for.
        runtime.admitted_durable(&admitted, true).await?;
        return Ok(Json(json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": reply.text},
                "finish_reason": "stop",
            }],
        }))
        .into_response());
    }

    // Streaming: acknowledge first (errors still get a proper status), then stream the reply.
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(16);
    let (accepted_tx, accepted_rx) = tokio::sync::oneshot::channel();
    let stream_id = id.clone();
    tokio::spawn(async move {
        let mut waiter = runtime.reply_to(&stream_id);
        match runtime.submit_to(message, Some(session)).await {
            Ok(_) => {
                let _ = accepted_tx.send(Ok(()));
            }
            Err(e) => {
                let _ = accepted_tx.send(Err(ApiError::from(e)));
                return;
            }
        }
        let chunk = |delta: Value, finish: Value| {
            let data = json!({
                "id": stream_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            });
            Event::default().data(data.to_string())
        };
        if tx
            .send(chunk(json!({"role": "assistant"}), Value::Null))
            .await
            .is_err()
        {
            return;
        }
        match tokio::time::timeout(timeout, waiter.recv()).await {
            Ok(Some(reply)) => {
                let chars: Vec<char> = reply.text.chars().collect();
                for piece in chars.chunks(STREAM_CHUNK_CHARS) {
                    let text: String = piece.iter().collect();
                    if tx
                        .send(chunk(json!({"content": text}), Value::Null))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                let _ = tx.send(chunk(json!({}), json!("stop"))).await;
            }
            _ => {
                let error = json!({"error": {
                    "code": "timeout",
                    "message": "no reply in time",
                    "type": "server_error",
                    "param": null,
                }});
                let _ = tx.send(Event::default().data(error.to_string())).await;
            }
        }
        let _ = tx.send(Event::default().data("[DONE]")).await;
    });
    match accepted_rx.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "submission task ended",
            ))
        }
    }
    let events = stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Ok(Sse::new(events).into_response())
}
