//! The Chat Completions wire format: the request body, a complete answer, and the chunks of a
//! streamed one.
//!
//! Only the fields every common server understands are sent (OpenAI, vLLM, Ollama, llama.cpp
//! server, LM Studio). Answers are read leniently: `null` where a list is expected, missing
//! ids, `content` as an array of parts, tool arguments as an object instead of a string.

use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::errors;
use crate::error::ModelError;
use crate::model::{ChatMessage, ModelReply, ModelRequest, Role, ToolCall, Usage};

/// Most bytes of text and tool arguments accepted in one answer; more means a runaway stream.
pub const MAX_REPLY_BYTES: usize = 8 << 20;

/// Most tool calls accepted in one answer.
pub const MAX_TOOL_CALLS: usize = 128;

/// The JSON body of a request to `model`: borrowed from the request and serialised straight
/// into the request's bytes (building a `serde_json::Value` tree first cost a turn about as
/// much as the rest of the model call's own work).
pub(crate) fn request_body<'a>(
    model: &'a str,
    request: &'a ModelRequest,
    stream: bool,
) -> WireRequest<'a> {
    let p = &request.params;
    let max_tokens = match (request.max_output_tokens, p.max_tokens) {
        (0, asked) => asked.unwrap_or(0),
        (reserve, Some(asked)) => reserve.min(asked),
        (reserve, None) => reserve,
    };
    WireRequest {
        model,
        messages: request.messages.iter().map(WireOutMessage).collect(),
        tools: request.tools.iter().map(WireTool).collect(),
        max_tokens: (max_tokens > 0).then_some(max_tokens),
        temperature: p.temperature,
        top_p: p.top_p,
        frequency_penalty: p.frequency_penalty,
        presence_penalty: p.presence_penalty,
        stop: &p.stop,
        seed: p.seed,
        response_format: p.response_format.as_ref(),
        tool_choice: p.tool_choice.as_ref(),
        stream,
        stream_options: stream.then_some(StreamOptions {
            include_usage: true,
        }),
    }
}

/// A request body (see [`request_body`]); only what the client set is sent.
#[derive(Debug, Serialize)]
pub(crate) struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireOutMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frequency_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'a Value>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Debug, Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// A tool the model may call, as `{"type": "function", "function": {...}}`.
#[derive(Debug)]
struct WireTool<'a>(&'a crate::model::ToolSpec);

impl Serialize for WireTool<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Function<'a> {
            name: &'a str,
            description: &'a str,
            parameters: &'a Value,
        }
        let t = self.0;
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("type", "function")?;
        m.serialize_entry(
            "function",
            &Function {
                name: &t.name,
                description: &t.description,
                parameters: &t.parameters,
            },
        )?;
        m.end()
    }
}

/// One message of the context.
#[derive(Debug)]
struct WireOutMessage<'a>(&'a ChatMessage);

impl Serialize for WireOutMessage<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let m = self.0;
        let role = match m.role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        };
        let mut out = s.serialize_map(None)?;
        out.serialize_entry("role", role)?;
        if !m.image_urls.is_empty() {
            // Vision: the text stays a part of its own, each image an `image_url` part after it.
            let parts: Vec<Value> = std::iter::once(json!({"type": "text", "text": m.content}))
                .chain(
                    m.image_urls
                        .iter()
                        .map(|url| json!({"type": "image_url", "image_url": {"url": url}})),
                )
                .collect();
            out.serialize_entry("content", &parts)?;
        } else if m.tool_calls.is_empty() || !m.content.is_empty() {
            out.serialize_entry("content", &m.content)?;
        } else {
            // An assistant message that only calls tools has no content (OpenAI wants null).
            out.serialize_entry("content", &Value::Null)?;
        }
        if !m.tool_calls.is_empty() {
            let calls: Vec<Value> = m
                .tool_calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function",
                           "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect();
            out.serialize_entry("tool_calls", &calls)?;
        }
        if let Some(id) = &m.tool_call_id {
            out.serialize_entry("tool_call_id", id)?;
        }
        out.end()
    }
}

#[derive(Debug, Default, Deserialize)]
struct WireCompletion {
    #[serde(default)]
    choices: Option<Vec<WireChoice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    /// Only looked at to route an error body to [`errors::classify_embedded`].
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    object: Option<Value>,
}

impl WireCompletion {
    /// True when the body may carry an error instead of an answer (see `error_fields`).
    fn may_be_error(&self) -> bool {
        self.error.is_some() || self.object.as_ref().and_then(Value::as_str) == Some("error")
    }
}

#[derive(Debug, Default, Deserialize)]
struct WireChoice {
    #[serde(default)]
    message: Option<WireMessage>,
    #[serde(default)]
    delta: Option<WireMessage>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct WireMessage {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Debug, Default, Deserialize)]
struct WireToolCall {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunction>,
}

#[derive(Debug, Default, Deserialize)]
struct WireFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

impl WireUsage {
    fn usage(&self) -> Usage {
        let clamp = |n: Option<u64>| u32::try_from(n.unwrap_or(0)).unwrap_or(u32::MAX);
        Usage {
            prompt_tokens: clamp(self.prompt_tokens),
            completion_tokens: clamp(self.completion_tokens),
        }
    }
}

/// The text of a `content` value: a string, or the `text` parts of an array.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// Tool arguments as JSON text (some servers send an object).
fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn parse_value(body: &[u8]) -> Result<Value, ModelError> {
    serde_json::from_slice(body)
        .map_err(|e| ModelError::Protocol(format!("answer is not JSON: {e}")))
}

fn decode<T: for<'de> Deserialize<'de>>(value: Value) -> Result<T, ModelError> {
    serde_json::from_value(value)
        .map_err(|e| ModelError::Protocol(format!("answer has an unexpected shape: {e}")))
}

/// Reads a complete (non-streamed) answer.
pub(crate) fn parse_completion(body: &[u8]) -> Result<ModelReply, ModelError> {
    // The usual answer decodes in one pass; a body that may carry an error, or does not
    // decode, goes through a generic value first, which classifies it.
    let completion = match serde_json::from_slice::<WireCompletion>(body) {
        Ok(completion) if !completion.may_be_error() => completion,
        _ => {
            let value = parse_value(body)?;
            if let Some(error) = errors::classify_embedded(&value) {
                return Err(error);
            }
            decode(value)?
        }
    };
    let choice = completion
        .choices
        .unwrap_or_default()
        .into_iter()
        .next()
        .ok_or_else(|| ModelError::Protocol("answer has no choices".into()))?;
    let message = choice.message.or(choice.delta).unwrap_or_default();
    let mut tool_calls = Vec::new();
    for (i, call) in message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .take(MAX_TOOL_CALLS)
        .enumerate()
    {
        let function = call.function.unwrap_or_default();
        tool_calls.push(ToolCall {
            id: call.id.unwrap_or_else(|| synthetic_id(i)),
            name: function.name.unwrap_or_default(),
            arguments: function
                .arguments
                .as_ref()
                .map(arguments_text)
                .unwrap_or_default(),
        });
    }
    Ok(ModelReply {
        text: message
            .content
            .as_ref()
            .map(content_text)
            .unwrap_or_default(),
        tool_calls,
        usage: completion.usage.map(|u| u.usage()),
        finish_reason: choice.finish_reason,
        model: None,
    })
}

fn synthetic_id(index: usize) -> String {
    format!("call_{index}")
}

/// A tool call being assembled from stream deltas.
#[derive(Debug, Default)]
struct PartialCall {
    index: u32,
    id: String,
    name: String,
    arguments: String,
}

/// Assembles a streamed answer chunk by chunk.
#[derive(Debug, Default)]
pub(crate) struct StreamState {
    text: String,
    calls: Vec<PartialCall>,
    usage: Option<Usage>,
    bytes: usize,
    /// The `finish_reason` a choice reported, if one did.
    finish_reason: Option<String>,
    /// `[DONE]` arrived.
    pub(crate) done: bool,
}

impl StreamState {
    /// Applies one `data:` payload; returns the text delta it carries, if any.
    pub(crate) fn apply(&mut self, payload: &str) -> Result<Option<String>, ModelError> {
        let payload = payload.trim();
        if payload == "[DONE]" {
            self.done = true;
            return Ok(None);
        }
        if payload.is_empty() {
            return Ok(None);
        }
        let value = parse_value(payload.as_bytes())?;
        if let Some(error) = errors::classify_embedded(&value) {
            return Err(error);
        }
        let chunk: WireCompletion = decode(value)?;
        if let Some(usage) = &chunk.usage {
            self.usage = Some(usage.usage());
        }
        let mut text = String::new();
        for choice in chunk.choices.unwrap_or_default() {
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
            let Some(delta) = choice.delta.or(choice.message) else {
                continue;
            };
            if let Some(content) = &delta.content {
                text.push_str(&content_text(content));
            }
            for call in delta.tool_calls.unwrap_or_default() {
                self.apply_call(call)?;
            }
        }
        self.grow(text.len())?;
        self.text.push_str(&text);
        Ok((!text.is_empty()).then_some(text))
    }

    fn grow(&mut self, bytes: usize) -> Result<(), ModelError> {
        self.bytes = self.bytes.saturating_add(bytes);
        if self.bytes > MAX_REPLY_BYTES {
            return Err(ModelError::Protocol(format!(
                "answer longer than {MAX_REPLY_BYTES} bytes"
            )));
        }
        Ok(())
    }

    /// Merges a tool-call delta into the call with the same `index`. A delta without an index
    /// continues the last call unless it brings a new id.
    fn apply_call(&mut self, call: WireToolCall) -> Result<(), ModelError> {
        let index = match call.index {
            Some(i) => i,
            None => match (self.calls.last(), &call.id) {
                (Some(last), Some(id)) if !last.id.is_empty() && &last.id != id => last.index + 1,
                (Some(last), _) => last.index,
                (None, _) => 0,
            },
        };
        let position = match self.calls.iter().position(|c| c.index == index) {
            Some(p) => p,
            None => {
                if self.calls.len() >= MAX_TOOL_CALLS {
                    return Err(ModelError::Protocol(format!(
                        "more than {MAX_TOOL_CALLS} tool calls"
                    )));
                }
                self.calls.push(PartialCall {
                    index,
                    ..PartialCall::default()
                });
                self.calls.len() - 1
            }
        };
        let function = call.function.unwrap_or_default();
        let name = function.name.unwrap_or_default();
        let arguments = function
            .arguments
            .as_ref()
            .map(arguments_text)
            .unwrap_or_default();
        self.grow(name.len() + arguments.len())?;
        let target = &mut self.calls[position];
        if let Some(id) = call.id.filter(|id| !id.is_empty()) {
            target.id = id;
        }
        // Names arrive whole in the first delta on most servers, in pieces on a few.
        target.name.push_str(&name);
        target.arguments.push_str(&arguments);
        Ok(())
    }

    /// The assembled answer. A stream that ended without `[DONE]` or a `finish_reason` was cut
    /// off.
    pub(crate) fn into_reply(self) -> Result<ModelReply, ModelError> {
        if !self.done && self.finish_reason.is_none() {
            return Err(ModelError::Transport(
                "stream ended before the answer was complete".into(),
            ));
        }
        let mut calls = self.calls;
        calls.sort_by_key(|c| c.index);
        Ok(ModelReply {
            text: self.text,
            tool_calls: calls
                .into_iter()
                .enumerate()
                .map(|(i, c)| ToolCall {
                    id: if c.id.is_empty() {
                        synthetic_id(i)
                    } else {
                        c.id
                    },
                    name: c.name,
                    arguments: c.arguments,
                })
                .collect(),
            usage: self.usage,
            finish_reason: self.finish_reason,
            model: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RequestParams, ToolSpec};

    #[test]
    fn body_has_only_common_fields() {
        let request = ModelRequest {
            messages: vec![
                ChatMessage::text(Role::System, "sys"),
                ChatMessage {
                    role: Role::Assistant,
                    content: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "lookup".into(),
                        arguments: "{\"q\":1}".into(),
                    }],
                    tool_call_id: None,
                    image_urls: vec![],
                },
                ChatMessage {
                    role: Role::Tool,
                    content: "42".into(),
                    tool_calls: vec![],
                    tool_call_id: Some("c1".into()),
                    image_urls: vec![],
                },
            ],
            tools: vec![ToolSpec {
                name: "lookup".into(),
                description: "finds".into(),
                parameters: json!({"type": "object"}),
            }],
            prompt_tokens: 10,
            max_output_tokens: 64,
            params: Default::default(),
        };
        let body = serde_json::to_value(request_body("m", &request, true)).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "m",
                "messages": [
                    {"role": "system", "content": "sys"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function",
                         "function": {"name": "lookup", "arguments": "{\"q\":1}"}}]},
                    {"role": "tool", "content": "42", "tool_call_id": "c1"}
                ],
                "tools": [{"type": "function", "function":
                    {"name": "lookup", "description": "finds", "parameters": {"type": "object"}}}],
                "max_tokens": 64,
                "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
        let mut plain = request.clone();
        plain.tools.clear();
        plain.max_output_tokens = 0;
        let body = serde_json::to_value(request_body("m", &plain, false)).unwrap();
        assert!(body.get("tools").is_none() && body.get("max_tokens").is_none());
        assert!(body.get("stream_options").is_none());
    }

    #[test]
    fn client_params_are_sent_only_when_set() {
        let mut request = ModelRequest {
            messages: vec![ChatMessage::text(Role::User, "hi")],
            tools: vec![],
            prompt_tokens: 3,
            max_output_tokens: 512,
            params: RequestParams {
                max_tokens: Some(40),
                temperature: Some(0.5),
                top_p: Some(0.9),
                stop: vec!["END".into()],
                seed: Some(7),
                frequency_penalty: None,
                presence_penalty: Some(0.25),
                response_format: Some(json!({"type": "json_object"})),
                tool_choice: Some(json!("none")),
            },
        };
        let body = serde_json::to_value(request_body("m", &request, false)).unwrap();
        assert_eq!(
            body["max_tokens"],
            json!(40),
            "the lower of reserve and asked"
        );
        assert_eq!(body["temperature"], json!(0.5));
        assert_eq!(body["top_p"], json!(0.9));
        assert_eq!(body["stop"], json!(["END"]));
        assert_eq!(body["seed"], json!(7));
        assert_eq!(body["presence_penalty"], json!(0.25));
        assert!(body.get("frequency_penalty").is_none());
        assert_eq!(body["response_format"], json!({"type": "json_object"}));
        assert_eq!(body["tool_choice"], json!("none"));
        request.params.max_tokens = Some(4_096);
        let body = serde_json::to_value(request_body("m", &request, false)).unwrap();
        assert_eq!(
            body["max_tokens"],
            json!(512),
            "never above the output reserve"
        );
        request.params = RequestParams::default();
        let body = serde_json::to_value(request_body("m", &request, false)).unwrap();
        for name in [
            "temperature",
            "top_p",
            "stop",
            "seed",
            "response_format",
            "tool_choice",
        ] {
            assert!(body.get(name).is_none(), "{name} sent unasked");
        }
    }

    #[test]
    fn images_are_image_url_parts_after_the_text() {
        let mut user = ChatMessage::text(Role::User, "what is this?\n[image: p.png, image/png]");
        user.image_urls = vec!["https://x.test/p.png".into(), "http://y.test/q".into()];
        let request = ModelRequest {
            messages: vec![ChatMessage::text(Role::System, "sys"), user],
            tools: vec![],
            prompt_tokens: 10,
            max_output_tokens: 0,
            params: Default::default(),
        };
        let body = serde_json::to_value(request_body("m", &request, false)).unwrap();
        assert_eq!(
            body["messages"],
            json!([
                {"role": "system", "content": "sys"},
                {"role": "user", "content": [
                    {"type": "text", "text": "what is this?\n[image: p.png, image/png]"},
                    {"type": "image_url", "image_url": {"url": "https://x.test/p.png"}},
                    {"type": "image_url", "image_url": {"url": "http://y.test/q"}}
                ]}
            ])
        );
    }

    #[test]
    fn parses_lenient_completions() {
        let body = br#"{"choices":[{"message":{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"tool_calls":[{"function":{"name":"f","arguments":{"x":1}}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}"#;
        let reply = parse_completion(body).unwrap();
        assert_eq!(reply.text, "ab");
        assert_eq!(reply.tool_calls[0].id, "call_0");
        assert_eq!(reply.tool_calls[0].arguments, "{\"x\":1}");
        assert_eq!(reply.usage.unwrap().prompt_tokens, 5);
        let nulls = br#"{"choices":[{"message":{"content":null,"tool_calls":null}}],"usage":null}"#;
        assert_eq!(parse_completion(nulls).unwrap(), ModelReply::default());
        assert!(matches!(
            parse_completion(br#"{"choices":[]}"#),
            Err(ModelError::Protocol(_))
        ));
        assert!(matches!(
            parse_completion(b"<html>"),
            Err(ModelError::Protocol(_))
        ));
    }

    /// A 200 body that carries an error is an error, whether or not it also decodes as an
    /// answer; an odd shape that is no error still decodes the lenient way.
    #[test]
    fn an_error_inside_a_successful_body_is_classified() {
        let embedded = br#"{"error":{"message":"prompt is too long","type":"invalid_request_error"},"choices":[{"message":{"content":"x"}}]}"#;
        assert!(parse_completion(embedded).is_err());
        let vllm =
            br#"{"object":"error","message":"maximum context length is 4096 tokens","code":400}"#;
        assert!(parse_completion(vllm).is_err());
        let text = br#"{"error":"upstream down"}"#;
        assert!(parse_completion(text).is_err());
        let null_error = br#"{"error":null,"object":"chat.completion","choices":[{"message":{"content":"ok"}}]}"#;
        assert_eq!(parse_completion(null_error).unwrap().text, "ok");
        let odd = br#"{"object":7,"choices":[{"message":{"content":"ok"},"finish_reason":3}]}"#;
        assert!(
            parse_completion(odd).is_err(),
            "a finish reason that is no string is a protocol error, as before"
        );
    }

    #[test]
    fn stream_without_end_is_cut_off() {
        let mut s = StreamState::default();
        s.apply(r#"{"choices":[{"delta":{"content":"hi"}}]}"#)
            .unwrap();
        assert!(matches!(s.into_reply(), Err(ModelError::Transport(_))));
        let mut s = StreamState::default();
        s.apply(r#"{"choices":[{"delta":{"content":"hi"},"finish_reason":"stop"}]}"#)
            .unwrap();
        assert_eq!(s.into_reply().unwrap().text, "hi");
    }

    #[test]
    fn tool_calls_without_index_are_grouped_by_id() {
        let mut s = StreamState::default();
        for p in [
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"g","arguments":"[]"}}]}}]}"#,
            "[DONE]",
        ] {
            s.apply(p).unwrap();
        }
        let reply = s.into_reply().unwrap();
        let calls: Vec<_> = reply
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(calls, vec![("a", "f", "{}"), ("b", "g", "[]")]);
    }
}
