//! Tools for applications that register them: a name, a JSON schema and an async handler;
//! and the tools of MCP servers (`mcp/`, `[mcp_servers]`), named `<server>__<tool>`. When the
//! model answers with tool calls, the turn runs them and calls the model again (at most
//! `tools.max_rounds` rounds), storing each call and result in the transcript.
//!
//! Results are plain text; a failing handler, an unknown tool, arguments that are not JSON or a
//! timeout become an `error: …` result the model can read, never a failed turn.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::context::text::truncate_middle;
use crate::error::ConfigError;
use crate::model::{ChatMessage, Role, ToolCall, ToolSpec};

pub(crate) mod mcp;
mod pairing;

pub(crate) use pairing::repair_tool_messages;

/// The future a tool handler returns: the result text, or an error message for the model.
pub type ToolFuture = BoxFuture<'static, Result<String, String>>;

/// Runs one tool call. Implemented for any `Fn(serde_json::Value) -> impl Future<Output =
/// Result<String, String>>`.
pub trait ToolHandler: Send + Sync + 'static {
    /// Runs the tool with `arguments` (the JSON the model produced).
    fn call(&self, arguments: Value) -> ToolFuture;
}

impl<F, Fut> ToolHandler for F
where
    F: Fn(Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<String, String>> + Send + 'static,
{
    fn call(&self, arguments: Value) -> ToolFuture {
        Box::pin(self(arguments))
    }
}

/// A registered tool.
#[derive(Clone)]
pub(crate) struct Tool {
    /// What the model is told about it.
    pub spec: ToolSpec,
    handler: Arc<dyn ToolHandler>,
}

/// Longest tool name (OpenAI's limit).
pub(crate) const MAX_TOOL_NAME_CHARS: usize = 64;

/// The tools of a runtime, by name.
#[derive(Clone, Default)]
pub(crate) struct ToolRegistry {
    tools: BTreeMap<String, Tool>,
}

impl ToolRegistry {
    /// Registers a tool; a name must be 1–64 characters of `[A-Za-z0-9_-]` and not taken.
    pub(crate) fn register(
        &mut self,
        name: &str,
        description: &str,
        parameters: Value,
        handler: impl ToolHandler,
    ) -> Result<(), ConfigError> {
        let valid = !name.is_empty()
            && name.len() <= MAX_TOOL_NAME_CHARS
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(ConfigError::Invalid(format!(
                "tool name {name:?}: use 1–{MAX_TOOL_NAME_CHARS} characters of A-Z a-z 0-9 _ -"
            )));
        }
        if self.tools.contains_key(name) {
            return Err(ConfigError::Invalid(format!(
                "tool {name:?} is registered twice"
            )));
        }
        self.tools.insert(
            name.to_string(),
            Tool {
                spec: ToolSpec {
                    name: name.to_string(),
                    description: description.to_string(),
                    parameters,
                },
                handler: Arc::new(handler),
            },
        );
        Ok(())
    }

    /// The tools whose names `keep` lets through (an agent's `tools_allow`/`tools_deny`).
    pub(crate) fn filtered(&self, keep: impl Fn(&str) -> bool) -> Self {
        Self {
            tools: self
                .tools
                .iter()
                .filter(|(name, _)| keep(name))
                .map(|(name, tool)| (name.clone(), tool.clone()))
                .collect(),
        }
    }

    /// What the model is told about every tool.
    pub(crate) fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|t| t.spec.clone()).collect()
    }

    /// Whether a tool named `name` is registered.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    /// Runs `call` within `timeout`; the result is cut to `max_chars` characters.
    pub(crate) async fn run(&self, call: &ToolCall, timeout: Duration, max_chars: usize) -> String {
        let Some(tool) = self.tools.get(&call.name) else {
            return format!("error: there is no tool named {:?}", call.name);
        };
        run_handler(call, timeout, max_chars, |arguments| {
            tool.handler.call(arguments)
        })
        .await
    }
}

/// Runs `call` through `handler` within `timeout`: the arguments parsed (empty is `{}`), an
/// `Err`, bad JSON or a timeout turned into an `error: …` result, the result cut to
/// `max_chars` characters. The one path of registered and MCP tools alike.
pub(crate) async fn run_handler<F>(
    call: &ToolCall,
    timeout: Duration,
    max_chars: usize,
    handler: impl FnOnce(Value) -> F,
) -> String
where
    F: Future<Output = Result<String, String>>,
{
    let arguments = if call.arguments.trim().is_empty() {
        Value::Object(Default::default())
    } else {
        match serde_json::from_str(&call.arguments) {
            Ok(v) => v,
            Err(e) => return format!("error: the arguments are not valid JSON: {e}"),
        }
    };
    let text = match tokio::time::timeout(timeout, handler(arguments)).await {
        Ok(Ok(text)) => text,
        Ok(Err(message)) => format!("error: {message}"),
        Err(_) => format!(
            "error: the tool did not finish within {} ms",
            timeout.as_millis()
        ),
    };
    cut_result(&text, max_chars)
}

/// `text` cut to about `max_chars` characters (the first three quarters and the last quarter
/// kept around a `[... N more characters truncated]` line).
pub(crate) fn cut_result(text: &str, max_chars: usize) -> String {
    let head = max_chars * 3 / 4;
    truncate_middle(text, head, max_chars - head).into_owned()
}

/// The assistant message that carries `calls`.
pub(crate) fn call_message(text: &str, calls: &[ToolCall]) -> ChatMessage {
    let mut m = ChatMessage::text(Role::Assistant, text);
    m.tool_calls = calls.to_vec();
    m
}

/// The `tool` message answering `call_id`.
pub(crate) fn result_message(call_id: &str, text: &str) -> ChatMessage {
    let mut m = ChatMessage::text(Role::Tool, text);
    m.tool_call_id = Some(call_id.to_string());
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: "c1".into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[tokio::test]
    async fn runs_and_reports_errors_as_results() {
        let mut r = ToolRegistry::default();
        r.register(
            "echo",
            "echoes",
            serde_json::json!({"type": "object"}),
            |v: Value| async move { Ok(v["text"].as_str().unwrap_or("").repeat(3)) },
        )
        .unwrap();
        r.register("fail", "fails", Value::Null, |_| async {
            Err("nope".to_string())
        })
        .unwrap();
        r.register("slow", "sleeps", Value::Null, |_| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(String::new())
        })
        .unwrap();
        assert!(r
            .register("echo", "again", Value::Null, |_| async {
                Ok(String::new())
            })
            .is_err());
        assert!(r
            .register("bad name", "", Value::Null, |_| async { Ok(String::new()) })
            .is_err());
        let t = Duration::from_millis(50);
        assert_eq!(
            r.run(&call("echo", r#"{"text":"ab"}"#), t, 100).await,
            "ababab"
        );
        assert_eq!(r.run(&call("fail", ""), t, 100).await, "error: nope");
        assert!(r
            .run(&call("nope", "{}"), t, 100)
            .await
            .starts_with("error: there is no tool"));
        assert!(r
            .run(&call("echo", "{oops"), t, 100)
            .await
            .contains("not valid JSON"));
        assert!(r
            .run(&call("slow", "{}"), t, 100)
            .await
            .contains("did not finish"));
        let long = r
            .run(
                &call("echo", &format!(r#"{{"text":"{}"}}"#, "x".repeat(100))),
                t,
                120,
            )
            .await;
        assert!(
            long.contains("[... 180 more characters truncated]"),
            "{long}"
        );
        assert_eq!(r.specs().len(), 3);
    }
}
