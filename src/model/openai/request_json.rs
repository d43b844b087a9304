//! The JSON body of a Chat Completions request, written straight into its bytes.
//!
//! Only the fields every common server understands are sent (OpenAI, vLLM, Ollama, llama.cpp
//! server, LM Studio), and of the client's parameters only those it set.
//!
//! The history is most of every request. serde_json escapes a string byte by byte, which cost
//! a turn with a long history about a tenth of its instructions; here a string that needs no
//! escaping (nearly every message) is checked in one pass the compiler vectorises and copied
//! whole, and any other string goes through serde_json. The bytes are serde_json's either way.

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::{json, Value};

use crate::error::ModelError;
use crate::model::{ChatMessage, ModelRequest, Role, ToolSpec};

/// The body of `request` to `model`, streamed or not.
pub(crate) fn request_body(
    model: &str,
    request: &ModelRequest,
    stream: bool,
) -> Result<Vec<u8>, ModelError> {
    write_body(model, request, stream)
        .map_err(|e| ModelError::Protocol(format!("cannot encode the request: {e}")))
}

fn write_body(
    model: &str,
    request: &ModelRequest,
    stream: bool,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(encoded_size_hint(request));
    out.extend_from_slice(b"{\"model\":");
    write_str(&mut out, model)?;
    out.extend_from_slice(b",\"messages\":[");
    for (i, m) in request.messages.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_message(&mut out, m)?;
    }
    out.extend_from_slice(b"],");
    // The rest is an object that always has `stream`: its members follow the messages'.
    let at = out.len();
    serde_json::to_writer(&mut out, &rest(request, stream))?;
    out.remove(at);
    Ok(out)
}

/// About the size of `request` as JSON: its texts plus a little per message and for the rest.
/// The body is written into one buffer of this size instead of one grown by doubling, which
/// copied it over again each time (the history makes it kilobytes).
fn encoded_size_hint(request: &ModelRequest) -> usize {
    const PER_MESSAGE: usize = 48;
    const REST: usize = 512;
    request
        .messages
        .iter()
        .map(|m| m.content.len() + PER_MESSAGE)
        .sum::<usize>()
        .saturating_add(REST)
}

/// `s` as a JSON string, exactly as serde_json writes it.
fn write_str(out: &mut Vec<u8>, s: &str) -> Result<(), serde_json::Error> {
    // No early exit: a branch-free pass over the bytes vectorises.
    let escapes = s.bytes().fold(false, |any, b| {
        any | (b < 0x20) | (b == b'"') | (b == b'\\')
    });
    if escapes {
        return serde_json::to_writer(&mut *out, s);
    }
    out.reserve(s.len() + 2);
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
    Ok(())
}

fn role_name(role: Role) -> &'static [u8] {
    match role {
        Role::System => b"system",
        Role::User => b"user",
        Role::Assistant => b"assistant",
        Role::Tool => b"tool",
    }
}

/// One message of the context: `role`, `content`, then `tool_calls` and `tool_call_id` when
/// it has them.
fn write_message(out: &mut Vec<u8>, m: &ChatMessage) -> Result<(), serde_json::Error> {
    out.extend_from_slice(b"{\"role\":\"");
    out.extend_from_slice(role_name(m.role));
    out.extend_from_slice(b"\",\"content\":");
    if !m.image_urls.is_empty() {
        // Vision: the text stays a part of its own, each image an `image_url` part after it.
        let parts: Vec<Value> = std::iter::once(json!({"type": "text", "text": m.content}))
            .chain(
                m.image_urls
                    .iter()
                    .map(|url| json!({"type": "image_url", "image_url": {"url": url}})),
            )
            .collect();
        serde_json::to_writer(&mut *out, &parts)?;
    } else if m.tool_calls.is_empty() || !m.content.is_empty() {
        write_str(out, &m.content)?;
    } else {
        // An assistant message that only calls tools has no content (OpenAI wants null).
        out.extend_from_slice(b"null");
    }
    if !m.tool_calls.is_empty() {
        out.extend_from_slice(b",\"tool_calls\":[");
        for (i, call) in m.tool_calls.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"id\":");
            write_str(out, &call.id)?;
            out.extend_from_slice(b",\"type\":\"function\",\"function\":{\"name\":");
            write_str(out, &call.name)?;
            out.extend_from_slice(b",\"arguments\":");
            write_str(out, &call.arguments)?;
            out.extend_from_slice(b"}}");
        }
        out.push(b']');
    }
    if let Some(id) = &m.tool_call_id {
        out.extend_from_slice(b",\"tool_call_id\":");
        write_str(out, id)?;
    }
    out.push(b'}');
    Ok(())
}

fn rest(request: &ModelRequest, stream: bool) -> Rest<'_> {
    let p = &request.params;
    let max_tokens = match (request.max_output_tokens, p.max_tokens) {
        (0, asked) => asked.unwrap_or(0),
        (reserve, Some(asked)) => reserve.min(asked),
        (reserve, None) => reserve,
    };
    Rest {
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

/// The members after `messages`; only what the client set is sent.
#[derive(Debug, Serialize)]
struct Rest<'a> {
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
struct WireTool<'a>(&'a ToolSpec);

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{MessageText, RequestParams, ToolCall, ToolSpec};
    use proptest::prelude::*;

    fn text(role: Role, content: &str) -> ChatMessage {
        ChatMessage::text(role, content.to_string())
    }

    fn parsed(request: &ModelRequest, stream: bool) -> Value {
        let body = request_body("m", request, stream).unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    proptest! {
        #[test]
        fn strings_are_written_as_serde_json_writes_them(s in any::<String>()) {
            let mut out = Vec::new();
            write_str(&mut out, &s).unwrap();
            prop_assert_eq!(out, serde_json::to_vec(&s).unwrap());
        }

        #[test]
        fn messages_read_back_as_sent(
            contents in proptest::collection::vec("[ -~\\n\\t\"\\\\é\\u{1}\\u{7f}]{0,40}", 0..8),
        ) {
            let request = ModelRequest {
                messages: contents.iter().map(|c| text(Role::User, c)).collect(),
                tools: vec![],
                prompt_tokens: 0,
                max_output_tokens: 0,
                params: RequestParams::default(),
            };
            let body = parsed(&request, false);
            let sent: Vec<Value> = contents
                .iter()
                .map(|c| json!({"role": "user", "content": c}))
                .collect();
            prop_assert_eq!(body, json!({"model": "m", "messages": sent, "stream": false}));
        }
    }

    #[test]
    fn special_characters_are_escaped() {
        let mut out = Vec::new();
        for s in [
            "",
            "plain",
            "a\"b",
            "back\\slash",
            "line\nbreak",
            "\u{0}\u{1f}",
            "é ✓ 🦀",
        ] {
            out.clear();
            write_str(&mut out, s).unwrap();
            assert_eq!(out, serde_json::to_vec(s).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn body_has_only_common_fields() {
        let request = ModelRequest {
            messages: vec![
                ChatMessage::text(Role::System, "sys"),
                ChatMessage {
                    role: Role::Assistant,
                    content: MessageText::default(),
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
        let body = parsed(&request, true);
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
        let body = parsed(&plain, false);
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
        let body = parsed(&request, false);
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
        let body = parsed(&request, false);
        assert_eq!(
            body["max_tokens"],
            json!(512),
            "never above the output reserve"
        );
        request.params = RequestParams::default();
        let body = parsed(&request, false);
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
        let body = parsed(&request, false);
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
}
