//! The body of `POST /v1/chat/completions`, field by field: what is honoured, what is refused
//! (a 400 naming the `param`, OpenAI's error shape), and what the turn gets out of it.
//!
//! Honoured: `messages` (the newest user message, or the trailing `role: "tool"` results that
//! continue a turn stopped at client tool calls; system and developer messages become the
//! session's instructions), `model`, `stream`, `user`, `tools` and `tool_choice` (client-side
//! tools), `max_tokens` / `max_completion_tokens`, `temperature`, `top_p`, `stop`, `seed`,
//! `frequency_penalty`, `presence_penalty`, `response_format`; accepted and without effect:
//! `n: 1`, `logprobs: false`, `parallel_tool_calls`, `stream_options`, `metadata`, `store`,
//! `service_tier`. Refused: anything in [`UNSUPPORTED`] set to a value that asks for
//! something, and a present field of the wrong type or out of range. Other fields are ignored,
//! as newer clients add some.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::error::ApiError;
use crate::model::{RequestParams, ToolCall, ToolSpec};
use crate::pipeline::{ClientToolResult, RequestExtras};

/// Most client tools one request may offer.
pub(super) const MAX_CLIENT_TOOLS: usize = 128;

/// Most stop sequences (OpenAI's limit).
pub(super) const MAX_STOP_SEQUENCES: usize = 4;

/// Longest accepted `Idempotency-Key`, in bytes.
pub(super) const MAX_IDEMPOTENCY_KEY_BYTES: usize = 256;

/// Fields asking for what Turnstile does not do; a value other than "off" is refused.
pub(super) const UNSUPPORTED: [&str; 10] = [
    "n",
    "logprobs",
    "top_logprobs",
    "audio",
    "modalities",
    "prediction",
    "logit_bias",
    "functions",
    "function_call",
    "web_search_options",
];

/// What the turn needs from the newest messages.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Input {
    /// A new user message.
    Text(String),
    /// Results of the client tools the previous turn called.
    ToolResults(Vec<ClientToolResult>),
}

impl Input {
    /// The inbound message text: the user's, or the tool results as readable lines (what a
    /// turn replayed after a restart, without the request's extras, sees).
    pub(super) fn text(&self) -> String {
        match self {
            Input::Text(t) => t.clone(),
            Input::ToolResults(results) => results
                .iter()
                .map(|r| format!("[tool result {}] {}", r.call_id, r.content))
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// A checked request.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ChatRequest {
    /// The model name to echo back.
    pub model: Option<String>,
    /// Stream the answer.
    pub stream: bool,
    /// `stream_options.include_usage`: end the stream with a usage chunk.
    pub include_usage: bool,
    /// The OpenAI `user` (an opaque id).
    pub user: Option<String>,
    /// The system and developer messages, joined; `None` when the request has none (the
    /// stored instructions stay).
    pub instructions: Option<String>,
    /// What the turn answers.
    pub input: Input,
    /// Parameters, client tools and tool results for the turn.
    pub extras: RequestExtras,
}

fn invalid(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::invalid_param(param, message)
}

/// Parses and checks a request body.
pub(super) fn parse(bytes: &[u8]) -> Result<ChatRequest, ApiError> {
    let body: Map<String, Value> = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request("invalid_json", e.to_string()))?;
    let field = |name: &str| body.get(name).filter(|v| !v.is_null());
    refuse_unsupported(&body)?;
    let model = optional_string(field("model"), "model")?;
    let user = optional_string(field("user"), "user")?;
    let stream = match field("stream") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(invalid("stream", "`stream` must be a boolean")),
    };
    let include_usage = match field("stream_options") {
        None => false,
        Some(Value::Object(o)) => match o.get("include_usage").filter(|v| !v.is_null()) {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(invalid(
                    "stream_options.include_usage",
                    "`stream_options.include_usage` must be a boolean",
                ))
            }
        },
        Some(_) => {
            return Err(invalid(
                "stream_options",
                "`stream_options` must be an object",
            ))
        }
    };
    let messages = match field("messages") {
        Some(Value::Array(m)) if !m.is_empty() => m,
        Some(Value::Array(_)) => {
            return Err(invalid("messages", "no user message with text content"))
        }
        // Not the body of a chat request at all (the code clients saw before fields were
        // checked one by one).
        _ => {
            return Err(
                ApiError::bad_request("invalid_json", "`messages` must be an array")
                    .with_param("messages"),
            )
        }
    };
    let (instructions, input) = read_messages(messages)?;
    let client_tools = read_tools(field("tools"))?;
    let params = RequestParams {
        max_tokens: max_tokens(&body)?,
        temperature: number_in(field("temperature"), "temperature", 0.0..=2.0)?,
        top_p: number_in(field("top_p"), "top_p", 0.0..=1.0)?,
        stop: read_stop(field("stop"))?,
        seed: match field("seed") {
            None => None,
            Some(v) => Some(
                v.as_i64()
                    .ok_or_else(|| invalid("seed", "`seed` must be an integer"))?,
            ),
        },
        frequency_penalty: number_in(field("frequency_penalty"), "frequency_penalty", -2.0..=2.0)?,
        presence_penalty: number_in(field("presence_penalty"), "presence_penalty", -2.0..=2.0)?,
        response_format: read_response_format(field("response_format"))?,
        tool_choice: read_tool_choice(field("tool_choice"), &client_tools)?,
    };
    let tool_results = match &input {
        Input::ToolResults(r) => r.clone(),
        Input::Text(_) => Vec::new(),
    };
    Ok(ChatRequest {
        model,
        stream,
        include_usage,
        user,
        instructions,
        input,
        extras: RequestExtras {
            params,
            client_tools,
            tool_results,
        },
    })
}

/// A field of [`UNSUPPORTED`] that asks for something is a 400 naming it.
fn refuse_unsupported(body: &Map<String, Value>) -> Result<(), ApiError> {
    for name in UNSUPPORTED {
        let Some(value) = body.get(name) else {
            continue;
        };
        let off = match (name, value) {
            (_, Value::Null) => true,
            ("n", v) => v.as_u64() == Some(1),
            ("logprobs", v) => v == &Value::Bool(false),
            ("top_logprobs", v) => v.as_u64() == Some(0),
            ("modalities", v) => v == &json!(["text"]),
            ("logit_bias", Value::Object(m)) => m.is_empty(),
            _ => false,
        };
        if !off {
            return Err(invalid(
                name,
                format!("`{name}` is not supported by this server"),
            ));
        }
    }
    Ok(())
}

fn optional_string(value: Option<&Value>, param: &str) -> Result<Option<String>, ApiError> {
    match value {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(invalid(param, format!("`{param}` must be a string"))),
    }
}

fn number_in(
    value: Option<&Value>,
    param: &str,
    range: std::ops::RangeInclusive<f64>,
) -> Result<Option<f64>, ApiError> {
    let Some(value) = value else {
        return Ok(None);
    };
    match value.as_f64() {
        Some(n) if range.contains(&n) => Ok(Some(n)),
        _ => Err(invalid(
            param,
            format!(
                "`{param}` must be a number from {} to {}",
                range.start(),
                range.end()
            ),
        )),
    }
}

/// `max_completion_tokens` (the current name) or `max_tokens`: a positive integer.
fn max_tokens(body: &Map<String, Value>) -> Result<Option<u32>, ApiError> {
    let mut out = None;
    for name in ["max_tokens", "max_completion_tokens"] {
        let Some(value) = body.get(name).filter(|v| !v.is_null()) else {
            continue;
        };
        let n = value
            .as_u64()
            .filter(|n| *n > 0)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| invalid(name, format!("`{name}` must be a positive integer")))?;
        out = Some(n);
    }
    Ok(out)
}

fn read_stop(value: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let bad = || {
        invalid(
            "stop",
            format!("`stop` must be a string or at most {MAX_STOP_SEQUENCES} strings"),
        )
    };
    match value {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) if items.len() <= MAX_STOP_SEQUENCES => items
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or_else(bad))
            .collect(),
        Some(_) => Err(bad()),
    }
}

fn read_response_format(value: Option<&Value>) -> Result<Option<Value>, ApiError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let kind = value.get("type").and_then(Value::as_str);
    match kind {
        Some("text") | Some("json_object") => Ok(Some(value.clone())),
        Some("json_schema") if value.get("json_schema").is_some_and(Value::is_object) => {
            Ok(Some(value.clone()))
        }
        _ => Err(invalid(
            "response_format",
            "`response_format.type` must be text, json_object or json_schema (with `json_schema`)",
        )),
    }
}

/// A tool name as OpenAI accepts it: 1 to 64 of `[a-zA-Z0-9_-]`.
fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn read_tools(value: Option<&Value>) -> Result<Vec<ToolSpec>, ApiError> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    let Some(items) = value.as_array().filter(|t| t.len() <= MAX_CLIENT_TOOLS) else {
        return Err(invalid(
            "tools",
            format!("`tools` must be an array of at most {MAX_CLIENT_TOOLS} tools"),
        ));
    };
    let mut specs: Vec<ToolSpec> = Vec::with_capacity(items.len());
    for (i, tool) in items.iter().enumerate() {
        let param = format!("tools[{i}]");
        if tool.get("type").and_then(Value::as_str) != Some("function") {
            return Err(invalid(&param, "only `function` tools are supported"));
        }
        let function = tool.get("function").filter(|f| f.is_object());
        let name = function
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .filter(|n| valid_tool_name(n))
            .ok_or_else(|| {
                invalid(
                    &param,
                    "a tool needs `function.name`: 1 to 64 letters, digits, `_` or `-`",
                )
            })?;
        if specs.iter().any(|s| s.name == name) {
            return Err(invalid(&param, format!("tool {name:?} is offered twice")));
        }
        let description = function
            .and_then(|f| f.get("description"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let parameters = function
            .and_then(|f| f.get("parameters"))
            .cloned()
            .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
        if !parameters.is_object() {
            return Err(invalid(
                &param,
                "`function.parameters` must be a JSON schema object",
            ));
        }
        specs.push(ToolSpec {
            name: name.to_string(),
            description: description.to_string(),
            parameters,
        });
    }
    Ok(specs)
}

fn read_tool_choice(value: Option<&Value>, tools: &[ToolSpec]) -> Result<Option<Value>, ApiError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let named = value
        .get("function")
        .and_then(|f| f.get("name"))
        .and_then(Value::as_str);
    let ok = match value {
        Value::String(s) => s == "none" || s == "auto" || (s == "required" && !tools.is_empty()),
        Value::Object(_) => {
            value.get("type").and_then(Value::as_str) == Some("function")
                && named.is_some_and(|n| tools.iter().any(|t| t.name == n))
        }
        _ => false,
    };
    if ok {
        Ok(Some(value.clone()))
    } else {
        Err(invalid(
            "tool_choice",
            "`tool_choice` must be none, auto, required (with tools) or a function among `tools`",
        ))
    }
}

/// The text of a message's `content`: a string, or an array of parts of which the `text`
/// parts count; `None` for anything else (or no text part).
pub(super) fn content_text(content: &Value) -> Option<String> {
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

/// The instructions (system and developer messages) and the input (the trailing tool
/// results, or the newest user message).
fn read_messages(messages: &[Value]) -> Result<(Option<String>, Input), ApiError> {
    let mut instructions: Vec<String> = Vec::new();
    let mut roles = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        match role {
            "system" | "developer" => {
                let text = m.get("content").and_then(content_text).ok_or_else(|| {
                    invalid(
                        &format!("messages[{i}].content"),
                        "a system message needs text",
                    )
                })?;
                instructions.push(text);
            }
            "user" | "assistant" | "tool" => {}
            _ => {
                return Err(invalid(
                    &format!("messages[{i}].role"),
                    "`role` must be system, developer, user, assistant or tool",
                ))
            }
        }
        roles.push(role);
    }
    let instructions = (!instructions.is_empty()).then(|| instructions.join("\n\n"));
    // Tool results continue a turn only when they are the newest messages.
    let trailing = roles.iter().rev().take_while(|r| **r == "tool").count();
    if trailing > 0 {
        let mut results = Vec::with_capacity(trailing);
        for (i, m) in messages.iter().enumerate().skip(messages.len() - trailing) {
            let call_id = m
                .get("tool_call_id")
                .and_then(Value::as_str)
                .filter(|id| !id.is_empty())
                .ok_or_else(|| {
                    invalid(
                        &format!("messages[{i}].tool_call_id"),
                        "a tool message needs `tool_call_id`",
                    )
                })?;
            let content = m.get("content").and_then(content_text).unwrap_or_default();
            results.push(ClientToolResult {
                call_id: call_id.to_string(),
                content,
            });
        }
        return Ok((instructions, Input::ToolResults(results)));
    }
    let text = messages
        .iter()
        .zip(&roles)
        .rev()
        .find(|(_, r)| **r == "user")
        .and_then(|(m, _)| m.get("content").and_then(content_text))
        .ok_or_else(|| invalid("messages", "no user message with text content"))?;
    Ok((instructions, Input::Text(text)))
}

fn hex_digest(parts: &[&[u8]]) -> String {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part);
    }
    // Every chat request takes a fingerprint: one string, no formatter per byte.
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(32);
    for b in hash.finalize().iter().take(16) {
        hex.push(char::from(DIGITS[usize::from(b >> 4)]));
        hex.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    hex
}

/// The message id of a request with `Idempotency-Key: key` in `session`: derived, so a retry
/// gets the original's id and the inbox's duplicate detection (in memory and on disk) stops
/// it, across restarts too.
pub(super) fn idempotent_message_id(session: &str, key: &str) -> String {
    format!(
        "chatcmpl-idem-{}",
        hex_digest(&[session.as_bytes(), key.as_bytes()])
    )
}

/// Tells a request apart from every other one of `session` but its retries (same body).
pub(super) fn fingerprint(session: &str, body: &[u8]) -> String {
    hex_digest(&[session.as_bytes(), body])
}

/// A checked `Idempotency-Key` header value.
pub(super) fn idempotency_key(value: &[u8]) -> Result<String, ApiError> {
    let bad = || {
        invalid(
            "Idempotency-Key",
            format!("`Idempotency-Key` must be 1 to {MAX_IDEMPOTENCY_KEY_BYTES} visible ASCII characters"),
        )
    };
    let key = std::str::from_utf8(value).map_err(|_| bad())?.trim();
    if key.is_empty()
        || key.len() > MAX_IDEMPOTENCY_KEY_BYTES
        || !key.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
    {
        return Err(bad());
    }
    Ok(key.to_string())
}

/// A tool call in OpenAI's shape.
pub(super) fn tool_call_json(call: &ToolCall) -> Value {
    json!({"id": call.id, "type": "function",
           "function": {"name": call.name, "arguments": call.arguments}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_value(v: Value) -> Result<ChatRequest, ApiError> {
        parse(v.to_string().as_bytes())
    }

    fn refused_param(v: Value) -> String {
        let e = parse_value(v).expect_err("refused");
        e.param().unwrap_or_default().to_string()
    }

    fn user(text: &str) -> Value {
        json!({"role": "user", "content": text})
    }

    #[test]
    fn unsupported_fields_are_refused_by_name() {
        for (field, value) in [
            ("n", json!(2)),
            ("logprobs", json!(true)),
            ("top_logprobs", json!(3)),
            ("audio", json!({"voice": "x"})),
            ("modalities", json!(["text", "audio"])),
            ("logit_bias", json!({"50256": -100})),
            ("functions", json!([])),
        ] {
            let mut body = json!({"messages": [user("hi")]});
            body[field] = value;
            assert_eq!(refused_param(body), field);
        }
        let e = parse_value(json!({"messages": [user("hi")], "n": 3})).expect_err("refused");
        assert_eq!(e.status().as_u16(), 400);
        // The "off" values are accepted.
        let ok = json!({"messages": [user("hi")], "n": 1, "logprobs": false,
                        "modalities": ["text"], "logit_bias": {}, "audio": null});
        assert!(parse_value(ok).is_ok());
    }

    #[test]
    fn out_of_range_parameters_name_their_field() {
        for (field, value) in [
            ("temperature", json!(2.5)),
            ("top_p", json!(-0.1)),
            ("max_tokens", json!(0)),
            ("max_completion_tokens", json!("many")),
            ("stop", json!(["a", "b", "c", "d", "e"])),
            ("seed", json!(1.5)),
            ("response_format", json!({"type": "yaml"})),
            ("tool_choice", json!("required")),
            ("stream", json!("yes")),
            ("user", json!(7)),
        ] {
            let mut body = json!({"messages": [user("hi")]});
            body[field] = value;
            assert_eq!(refused_param(body), field, "{field}");
        }
        let bad_role = json!({"messages": [{"role": "wizard", "content": "x"}]});
        assert_eq!(refused_param(bad_role), "messages[0].role");
        let bad_tool = json!({"messages": [user("hi")], "tools": [{"type": "function",
                              "function": {"name": "has space"}}]});
        assert_eq!(refused_param(bad_tool), "tools[0]");
    }

    #[test]
    fn parameters_instructions_and_tools_are_read() {
        let r = parse_value(json!({
            "model": "gpt-x", "user": "U1", "stream": false,
            "messages": [
                {"role": "system", "content": "Be terse."},
                {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]},
                user("old"), {"role": "assistant", "content": "ok"}, user("new")
            ],
            "max_tokens": 100, "max_completion_tokens": 50, "temperature": 0.2, "top_p": 1,
            "stop": "END", "seed": -4, "response_format": {"type": "json_object"},
            "tools": [{"type": "function", "function": {"name": "get_weather",
                       "description": "weather", "parameters": {"type": "object"}}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": true, "stream_options": null, "something_new": 1
        }))
        .expect("valid");
        assert_eq!(
            r.instructions.as_deref(),
            Some("Be terse.\n\nAnswer in French.")
        );
        assert_eq!(r.input, Input::Text("new".into()));
        let p = &r.extras.params;
        assert_eq!(p.max_tokens, Some(50), "max_completion_tokens wins");
        assert_eq!((p.temperature, p.top_p), (Some(0.2), Some(1.0)));
        assert_eq!(
            (p.stop.clone(), p.seed),
            (vec!["END".to_string()], Some(-4))
        );
        assert_eq!(p.response_format, Some(json!({"type": "json_object"})));
        assert!(p.tool_choice.is_some());
        assert_eq!(r.extras.client_tools[0].name, "get_weather");
        assert!(r.extras.tool_results.is_empty());
    }

    #[test]
    fn trailing_tool_messages_are_tool_results() {
        let r = parse_value(json!({"messages": [
            user("weather?"),
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
        ]}))
        .expect("valid");
        let results = vec![ClientToolResult {
            call_id: "c1".into(),
            content: "sunny".into(),
        }];
        assert_eq!(r.input, Input::ToolResults(results.clone()));
        assert_eq!(r.extras.tool_results, results);
        assert_eq!(r.input.text(), "[tool result c1] sunny");
        assert_eq!(r.instructions, None);
        let no_id = json!({"messages": [user("x"), {"role": "tool", "content": "y"}]});
        assert_eq!(refused_param(no_id), "messages[1].tool_call_id");
    }

    #[test]
    fn idempotent_ids_are_stable_and_distinct() {
        let a = idempotent_message_id("s", "k1");
        // Stored in the inbox: a retry after an upgrade must derive the same id.
        assert_eq!(a, "chatcmpl-idem-6c73c52f81b5324c08f8a3c59003f7fc");
        assert_eq!(a, idempotent_message_id("s", "k1"));
        assert_ne!(a, idempotent_message_id("s", "k2"));
        assert_ne!(a, idempotent_message_id("s2", "k1"));
        // Length-prefixed parts: moving bytes between session and key changes the id.
        assert_ne!(
            idempotent_message_id("ab", "c"),
            idempotent_message_id("a", "bc")
        );
        assert!(idempotency_key(b"  ").is_err());
        assert!(idempotency_key(&[b'x'; MAX_IDEMPOTENCY_KEY_BYTES + 1]).is_err());
        assert_eq!(
            idempotency_key(b" stainless-retry-1 ").unwrap(),
            "stainless-retry-1"
        );
    }
}
