//! Preflight wired into admission: drops answered as refusals, system events and pending group
//! history stored on the inbox record of the next accepted message, threads the bot answered
//! in recorded when its reply is published.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::*;
use crate::error::ModelError;
use crate::inbound::{ChatKind, DropReason, MessageKind, Sender};
use crate::model::{Model, ModelReply, ModelRequest};

/// A model that never answers, so accepted messages stay in the inbox for inspection.
struct Stalled;

impl Model for Stalled {
    fn name(&self) -> &str {
        "stalled"
    }

    fn complete<'a>(
        &'a self,
        _request: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(std::future::pending())
    }
}

async fn runtime(dir: &std::path::Path, model: Arc<dyn Model>) -> Runtime {
    let mut config = Config::with_data_dir(dir);
    config.server.shutdown_grace_ms = 200;
    Runtime::builder()
        .config(config)
        .model(model)
        .build()
        .await
        .unwrap()
}

fn message(id: &str, mentioned: bool) -> InboundMessage {
    InboundMessage {
        channel: "slack".into(),
        account_id: "default".into(),
        chat_kind: ChatKind::Group,
        chat_id: "C1".into(),
        thread_id: None,
        message_id: id.into(),
        sender: Sender {
            id: "U1".into(),
            name: "Alice".into(),
            is_bot: false,
        },
        text: format!("text {id}"),
        mentions: vec![],
        mentioned_bot: mentioned,
        reply_to: None,
        timestamp_ms: 0,
        attachments: vec![],
        kind: MessageKind::Message,
    }
}

fn event(id: &str, text: &str) -> InboundMessage {
    InboundMessage {
        kind: MessageKind::SystemEvent,
        text: text.into(),
        ..message(id, false)
    }
}

const KEY: &str = "agent:main:slack:group:c1";

async fn accepted(rt: &Runtime, m: InboundMessage) -> Ack {
    rt.submit(m).await.unwrap()
}

async fn dropped(rt: &Runtime, m: InboundMessage) -> DropReason {
    match rt.submit(m).await {
        Err(SubmitError::Refused(Refusal::Dropped(reason))) => reason,
        other => panic!("expected a drop, got {other:?}"),
    }
}

fn inbox(rt: &Runtime, key: &str) -> Vec<crate::store::InboxItem> {
    rt.inner.store.pending(key, 0, 100).unwrap()
}

#[tokio::test]
async fn system_events_and_group_history_ride_on_the_next_accepted_message() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path(), Arc::new(Stalled)).await;
    assert_eq!(
        dropped(&rt, event("e1", "Bob joined")).await,
        DropReason::SystemEvent
    );
    assert_eq!(
        dropped(&rt, message("1", false)).await,
        DropReason::NoMention
    );
    assert_eq!(
        dropped(&rt, message("2", false)).await,
        DropReason::NoMention
    );
    assert_eq!(accepted(&rt, message("3", true)).await.session_key, KEY);
    assert_eq!(accepted(&rt, message("4", true)).await.session_key, KEY);

    let items = inbox(&rt, KEY);
    assert_eq!(items.len(), 2);
    let first = &items[0].record;
    assert_eq!(first.message.message_id, "3");
    let events: Vec<&str> = first
        .system_events
        .iter()
        .map(|e| e.text.as_str())
        .collect();
    assert_eq!(events, ["Bob joined"]);
    let history: Vec<&str> = first
        .group_history
        .iter()
        .map(|l| l.message_id.as_str())
        .collect();
    assert_eq!(history, ["1", "2"]);
    // Handed over once, then cleared.
    assert!(items[1].record.system_events.is_empty());
    assert!(items[1].record.group_history.is_empty());
    let stats = rt.preflight_stats();
    assert_eq!(
        (stats.accepted, stats.no_mention, stats.system_event),
        (2, 2, 1)
    );
    assert_eq!(
        dropped(&rt, message("3", true)).await,
        DropReason::Duplicate
    );
    rt.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_thread_the_bot_answered_in_addresses_it() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path(), Arc::new(crate::model::EchoModel)).await;
    let in_thread = |m: InboundMessage| InboundMessage {
        thread_id: Some("T1".into()),
        ..m
    };
    let mut replies = rt.subscribe();
    assert_eq!(
        dropped(&rt, in_thread(message("1", false))).await,
        DropReason::NoMention
    );
    accepted(&rt, in_thread(message("2", true))).await;
    let reply = tokio::time::timeout(Duration::from_secs(10), replies.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reply.in_reply_to, ["2"]);
    // The reply is published before the thread is recorded; poll briefly.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut n = 3;
    loop {
        match rt.submit(in_thread(message(&n.to_string(), false))).await {
            Ok(_) => break,
            Err(SubmitError::Refused(Refusal::Dropped(DropReason::NoMention)))
                if std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
                n += 1;
            }
            other => panic!("expected acceptance, got {other:?}"),
        }
    }
    rt.shutdown().await.unwrap();
}

/// A model answering `text` with `completion_tokens` in its usage.
struct Reporting {
    text: &'static str,
    completion_tokens: u32,
}

impl Model for Reporting {
    fn name(&self) -> &str {
        "reporting"
    }

    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            Ok(ModelReply {
                text: self.text.into(),
                usage: Some(crate::model::Usage {
                    prompt_tokens: request.prompt_tokens,
                    completion_tokens: self.completion_tokens,
                }),
                ..ModelReply::default()
            })
        })
    }
}

/// The tokens stored with the reply of one turn answered by `model`.
async fn reply_tokens(model: Reporting) -> u32 {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path(), Arc::new(model)).await;
    let mut replies = rt.subscribe();
    accepted(&rt, message("1", true)).await;
    tokio::time::timeout(Duration::from_secs(10), replies.recv())
        .await
        .unwrap()
        .unwrap();
    let items = rt.transcript(KEY, 0, 10).unwrap().expect("the session");
    let reply = items.last().expect("the reply");
    rt.shutdown().await.unwrap();
    reply.tokens
}

/// The reply is stored with the count the model reported, not tokenised again; a zero for a
/// non-empty text is no count, so the text is counted.
#[tokio::test]
async fn a_reply_keeps_the_token_count_its_model_reported() {
    let text = "a reply of several words";
    let reported = reply_tokens(Reporting {
        text,
        completion_tokens: 77,
    })
    .await;
    assert_eq!(reported, 77);
    let counted = reply_tokens(Reporting {
        text,
        completion_tokens: 0,
    })
    .await;
    assert_eq!(
        counted,
        crate::model::TokenCounter::new(crate::model::Encoding::Cl100k).count(text)
    );
}
