//! The reply side of `/v1/chat/completions` that does not stream: the completion body, the
//! error a failed turn answers with, and `GET /v1/models`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
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

/// A whole `chat.completion` body, serialised straight from the reply (one answer per turn:
/// building a `serde_json::Value` tree first cost a map allocation per field).
#[derive(Serialize)]
pub(super) struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [Choice<'a>; 1],
    usage: ReplyUsage,
}

#[derive(Serialize)]
struct Choice<'a> {
    index: u32,
    message: AnswerMessage<'a>,
    finish_reason: &'a str,
}

/// The assistant message of an answer: `content` is the text, or `null` when an answer of
/// tool calls says nothing; `tool_calls` only when there are some.
#[derive(Serialize)]
struct AnswerMessage<'a> {
    role: &'static str,
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<Value>>,
}

/// The `chat.completion` body answering with `reply`.
pub(super) fn completion<'a>(
    id: &'a str,
    created: u64,
    reply: &'a Reply,
    fallback_model: &'a str,
) -> Completion<'a> {
    let calls = !reply.tool_calls.is_empty();
    let message = AnswerMessage {
        role: "assistant",
        content: Some(reply.text.as_str()).filter(|t| !calls || !t.is_empty()),
        tool_calls: calls.then(|| {
            reply
                .tool_calls
                .iter()
                .map(chat_request::tool_call_json)
                .collect()
        }),
    };
    Completion {
        id,
        object: "chat.completion",
        created,
        model: model_of(reply, fallback_model),
        choices: [Choice {
            index: 0,
            message,
            finish_reason: finish_reason_of(reply),
        }],
        usage: reply.usage.unwrap_or(ReplyUsage::new(0, 0)),
    }
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
    let model = |id: &str| json!({"id": id, "object": "model", "created": 0, "owned_by": OWNED_BY});
    let mut data: Vec<Value> = std::iter::once(&config.model)
        .chain(&config.fallbacks)
        .map(|id| model(id))
        .collect();
    // Each agent, by the names that select it: `agent:<id>` and its aliases, with the model it
    // answers with.
    for agent in state.runtime.agents().profiles() {
        let mut names = vec![format!("{}{}", crate::agents::AGENT_MODEL_PREFIX, agent.id)];
        names.extend(agent.aliases.iter().cloned());
        for name in names {
            let mut entry = model(&name);
            entry["agent"] = json!(agent.id);
            entry["agent_model"] = json!(agent.config.model.model);
            data.push(entry);
        }
    }
    Json(json!({"object": "list", "data": data}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCall;

    fn reply(text: &str, tool_calls: Vec<ToolCall>) -> Reply {
        Reply {
            session_key: "s".into(),
            text: text.into(),
            in_reply_to: vec!["m".into()],
            seq: 1,
            error: false,
            route: None,
            tool_calls,
            usage: Some(ReplyUsage::new(7, 2)),
            finish_reason: None,
            model: None,
            error_kind: None,
        }
    }

    fn body(reply: &Reply) -> Value {
        serde_json::to_value(completion("chatcmpl-1", 5, reply, "m1")).expect("serialises")
    }

    #[test]
    fn a_text_answer_is_a_whole_completion() {
        let v = body(&reply("hi", Vec::new()));
        assert_eq!(
            v,
            json!({
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 5,
                "model": "m1",
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": "hi"},
                    "finish_reason": "stop",
                }],
                "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9},
            })
        );
        let v = body(&reply("", Vec::new()));
        assert_eq!(v["choices"][0]["message"]["content"], json!(""));
    }

    #[test]
    fn answers_with_tool_calls_finish_with_tool_calls() {
        let call = ToolCall {
            id: "c1".into(),
            name: "w".into(),
            arguments: "{\"city\":\"Oslo\"}".into(),
        };
        let v = body(&reply("", vec![call.clone()]));
        let choice = &v["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(choice["message"]["content"], Value::Null);
        assert_eq!(
            choice["message"]["tool_calls"][0],
            json!({"id": "c1", "type": "function",
                   "function": {"name": "w", "arguments": "{\"city\":\"Oslo\"}"}})
        );
        let v = body(&reply("calling", vec![call]));
        assert_eq!(v["choices"][0]["message"]["content"], "calling");
    }

    #[test]
    fn a_reply_without_usage_reports_zeros_and_names_its_model() {
        let mut r = reply("hi", Vec::new());
        r.usage = None;
        r.model = Some("fallback-b".into());
        let v = body(&r);
        assert_eq!(v["usage"]["total_tokens"], 0);
        assert_eq!(v["model"], "fallback-b");
    }
}
