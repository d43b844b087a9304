//! The turn with the context engine and the tool loop, through a real runtime (sled in a temp
//! dir) and a scripted model.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use crate::config::Config;
use crate::error::ModelError;
use crate::inbound::{ChatKind, InboundMessage, Sender};
use crate::model::{Model, ModelReply, ModelRequest, Role, ToolCall};
use crate::store::EntryKind;
use crate::Runtime;

/// Answers with the scripted replies in order (then "done"), recording every request.
#[derive(Default)]
struct Scripted {
    replies: Mutex<VecDeque<ModelReply>>,
    requests: Mutex<Vec<ModelRequest>>,
}

impl Scripted {
    fn new(replies: Vec<ModelReply>) -> Arc<Self> {
        Arc::new(Self {
            replies: Mutex::new(replies.into()),
            requests: Mutex::default(),
        })
    }

    fn requests(&self) -> Vec<ModelRequest> {
        self.requests.lock().unwrap().clone()
    }
}

impl Model for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        self.requests.lock().unwrap().push(request.clone());
        let reply = self
            .replies
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(ModelReply {
                text: "done".into(),
                ..ModelReply::default()
            });
        Box::pin(async move { Ok(reply) })
    }
}

fn calls(names: &[(&str, &str)]) -> ModelReply {
    ModelReply {
        text: String::new(),
        tool_calls: names
            .iter()
            .enumerate()
            .map(|(i, (name, args))| ToolCall {
                id: format!("call_{name}_{i}"),
                name: name.to_string(),
                arguments: args.to_string(),
            })
            .collect(),
        ..ModelReply::default()
    }
}

fn message(id: &str, text: &str, reply_to: Option<&str>) -> InboundMessage {
    InboundMessage {
        channel: "test".into(),
        account_id: "default".into(),
        chat_kind: ChatKind::Direct,
        chat_id: "c1".into(),
        thread_id: None,
        message_id: id.into(),
        sender: Sender {
            id: "u1".into(),
            name: "Uma".into(),
            is_bot: false,
        },
        text: text.into(),
        mentions: vec![],
        mentioned_bot: false,
        reply_to: reply_to.map(str::to_string),
        timestamp_ms: 0,
        attachments: vec![],
        kind: crate::inbound::MessageKind::Message,
    }
}

async fn ask(runtime: &Runtime, m: InboundMessage) -> String {
    let id = m.message_id.clone();
    let mut waiter = runtime.reply_to(&id);
    let ack = runtime.submit(m).await.unwrap();
    assert!(!ack.session_key.is_empty());
    waiter.recv().await.unwrap().text.clone()
}

async fn runtime(dir: &std::path::Path, model: Arc<Scripted>, config: Config) -> Runtime {
    let mut config = config;
    config.storage.data_dir = dir.to_path_buf();
    Runtime::builder()
        .config(config)
        .model(model)
        .tool(
            "lookup",
            "Looks a word up",
            json!({"type": "object", "properties": {"word": {"type": "string"}}}),
            |args: Value| async move {
                Ok(format!(
                    "definition of {}",
                    args["word"].as_str().unwrap_or("?")
                ))
            },
        )
        .tool(
            "huge",
            "Returns a lot",
            json!({"type": "object"}),
            |_| async { Ok("z".repeat(50_000)) },
        )
        .build()
        .await
        .unwrap()
}

#[tokio::test]
async fn tools_run_until_the_model_answers_and_are_stored() {
    let dir = tempfile::tempdir().unwrap();
    let model = Scripted::new(vec![
        calls(&[("lookup", r#"{"word":"ox"}"#), ("huge", "{}")]),
        ModelReply {
            text: "An ox is a cow.".into(),
            ..ModelReply::default()
        },
    ]);
    let rt = runtime(dir.path(), Arc::clone(&model), Config::default()).await;
    assert_eq!(
        ask(&rt, message("m1", "what is an ox?", None)).await,
        "An ox is a cow."
    );

    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].tools.len(), 2);
    let second = &requests[1].messages;
    let n = second.len();
    assert_eq!(second[n - 3].role, Role::Assistant);
    assert_eq!(second[n - 3].tool_calls.len(), 2);
    assert_eq!(second[n - 2].content, "definition of ox");
    assert_eq!(second[n - 2].tool_call_id.as_deref(), Some("call_lookup_0"));
    assert!(second[n - 1].content.contains("more characters truncated]"));
    assert!(requests[1].prompt_tokens > requests[0].prompt_tokens);

    let key = rt.sessions(None, 10).unwrap()[0].session_key.clone();
    let t = rt.transcript(&key, 0, 100).unwrap().unwrap();
    let kinds: Vec<EntryKind> = t.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            EntryKind::User,
            EntryKind::ToolCall,
            EntryKind::ToolCall,
            EntryKind::ToolResult,
            EntryKind::ToolResult,
            EntryKind::Assistant
        ]
    );
    // Cut before it was stored: head + tail of 40,000 characters, and the marker.
    let stored = t[4].text.chars().count();
    assert!(stored > 40_000 && stored < 40_100, "{stored}");

    // The next turn sees the exchange, paired.
    assert_eq!(ask(&rt, message("m2", "and a yak?", None)).await, "done");
    let third = &model.requests()[2].messages;
    let roles: Vec<Role> = third.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::System,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Tool,
            Role::Assistant,
            Role::User
        ]
    );
    rt.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_tool_loop_stops_after_max_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let model = Scripted::new(vec![
        calls(&[("lookup", "{}")]),
        calls(&[("lookup", "{}")]),
        calls(&[("nonexistent", "{}")]),
    ]);
    let mut config = Config::default();
    config.tools.max_rounds = 2;
    let rt = runtime(dir.path(), Arc::clone(&model), config).await;
    let reply = ask(&rt, message("m1", "loop forever", None)).await;
    assert!(reply.contains("stopped after 2 rounds"), "{reply}");
    assert_eq!(model.requests().len(), 3);
    rt.shutdown().await.unwrap();
}

#[tokio::test]
async fn replies_get_their_thread_and_the_dump_is_cached() {
    let dir = tempfile::tempdir().unwrap();
    let model = Scripted::new(vec![]);
    let rt = runtime(dir.path(), Arc::clone(&model), Config::default()).await;
    ask(&rt, message("m1", "the launch is on Friday", None)).await;
    ask(&rt, message("m2", "are you sure?", Some("m1"))).await;
    let last = model.requests()[1].messages.last().unwrap().content.clone();
    assert!(last.contains(">> ["), "{last}");
    assert!(last.contains("the launch is on Friday"));
    assert!(last.ends_with("are you sure?"));

    let key = rt.sessions(None, 10).unwrap()[0].session_key.clone();
    let before = rt.context_cache_stats();
    let a = rt.context_dump(&key).unwrap().unwrap();
    let b = rt.context_dump(&key).unwrap().unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    let after = rt.context_cache_stats();
    assert_eq!(after.hits, before.hits + 1);
    let dump = a.dump();
    for field in [
        "session_key",
        "blocks",
        "dropped",
        "older_entries_not_loaded",
        "messages",
        "budget",
        "total_tokens",
        "stable_prefix_tokens",
    ] {
        assert!(dump.get(field).is_some(), "{field} missing");
    }
    assert_eq!(dump["blocks"][0]["source"], "system_prompt");
    assert!(rt.context_dump("agent:main:nope").unwrap().is_none());
    rt.shutdown().await.unwrap();
}
