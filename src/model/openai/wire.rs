//! The Chat Completions answers: a complete one, and the chunks of a streamed one (the request
//! body is `request_json`).
//!
//! Answers are read leniently: `null` where a list is expected, missing ids, `content` as an
//! array of parts, tool arguments as an object instead of a string.

use serde::Deserialize;
use serde_json::Value;

use super::errors;
use crate::error::ModelError;
use crate::model::{ModelReply, ToolCall, Usage};

/// Most bytes of text and tool arguments accepted in one answer; more means a runaway stream.
pub(crate) const MAX_REPLY_BYTES: usize = 8 << 20;

/// Most tool calls accepted in one answer.
pub(crate) const MAX_TOOL_CALLS: usize = 128;

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
