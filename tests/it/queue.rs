//! Queue modes end to end, over HTTP, with test-double models: `collect` coalesces messages
//! queued during a turn into one turn, `interrupt` aborts an in-flight model call, and a
//! panicking model call is retried once and then answered with an error (the session keeps
//! working).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use turnstile::config::QueueModeSetting;
use turnstile::error::ModelError;
use turnstile::model::{Model, ModelReply, ModelRequest};

use crate::support::{data_dir, eventually, group_key, start_server_full, Msg, PATIENCE};

/// Test double: answers like `echo` with the last message's text, after waiting on the
/// first call for as long as `first_call_delay`, and panics on text containing `PANIC`.
struct ScriptedModel {
    first_call_delay: Duration,
    calls: AtomicUsize,
    finished: AtomicUsize,
}

impl ScriptedModel {
    fn new(first_call_delay: Duration) -> Arc<Self> {
        Arc::new(Self {
            first_call_delay,
            calls: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
        })
    }
}

impl Model for ScriptedModel {
    fn name(&self) -> &str {
        "scripted"
    }

    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            let call = self.calls.fetch_add(1, Ordering::SeqCst);
            let last = request
                .messages
                .last()
                .map(|m| m.content.clone())
                .unwrap_or_default();
            if last.contains("PANIC") {
                panic!("scripted model panics on request");
            }
            if call == 0 {
                tokio::time::sleep(self.first_call_delay).await;
            }
            self.finished.fetch_add(1, Ordering::SeqCst);
            Ok(ModelReply {
                text: format!("seen: {last}"),
                ..ModelReply::default()
            })
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collect_answers_messages_queued_during_a_turn_in_one_turn() {
    let model = ScriptedModel::new(Duration::from_millis(600));
    let server = start_server_full(
        data_dir(),
        |c| c.queue.debounce_ms = 100,
        Some(model.clone() as Arc<dyn Model>),
    )
    .await;
    let mut events = server.events(Some(&group_key("q"))).await;
    server.send(&Msg::group("q", "m1", "first")).await;
    eventually(PATIENCE, "the first turn is running", || {
        let model = model.clone();
        async move {
            (model.calls.load(Ordering::SeqCst) == 1)
                .then_some(())
                .ok_or_else(|| "not yet".to_string())
        }
    })
    .await;
    for (id, text) in [("m2", "second"), ("m3", "third"), ("m4", "fourth")] {
        server.send(&Msg::group("q", id, text)).await;
    }
    let first = events.expect_next().await.json();
    assert_eq!(first["in_reply_to"], serde_json::json!(["m1"]));
    let second = events.expect_next().await.json();
    assert_eq!(second["in_reply_to"], serde_json::json!(["m2", "m3", "m4"]));
    let text = second["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("[Queued messages while agent was busy]"),
        "{text}"
    );
    assert!(text.contains("Queued #3\nfourth"), "{text}");
    assert_eq!(
        model.calls.load(Ordering::SeqCst),
        2,
        "two turns for four messages"
    );

    // Every acknowledged message is in the transcript, answered by the two replies.
    let entries = server
        .transcript(&group_key("q"))
        .await
        .expect("session exists");
    let kinds: Vec<&str> = entries.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["user", "assistant", "user", "user", "user", "assistant"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_aborts_the_model_call_and_answers_with_the_newest_in_view() {
    let model = ScriptedModel::new(Duration::from_secs(60));
    let server = start_server_full(
        data_dir(),
        |c| c.queue.mode = QueueModeSetting::Interrupt,
        Some(model.clone() as Arc<dyn Model>),
    )
    .await;
    let mut events = server.events(Some(&group_key("i"))).await;
    server
        .send(&Msg::group("i", "m1", "tell me a long story"))
        .await;
    eventually(PATIENCE, "the slow model call started", || {
        let model = model.clone();
        async move {
            (model.calls.load(Ordering::SeqCst) == 1)
                .then_some(())
                .ok_or_else(|| "not yet".to_string())
        }
    })
    .await;
    server.send(&Msg::group("i", "m2", "actually, stop")).await;
    let reply = events.expect_next().await.json();
    assert_eq!(reply["in_reply_to"], serde_json::json!(["m1", "m2"]));
    assert!(reply["text"]
        .as_str()
        .unwrap_or_default()
        .contains("actually, stop"));
    assert_eq!(model.calls.load(Ordering::SeqCst), 2);
    assert_eq!(
        model.finished.load(Ordering::SeqCst),
        1,
        "the first, 60 s call was aborted, not awaited"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_turn_is_retried_then_answered_with_an_error_and_the_session_goes_on() {
    let model = ScriptedModel::new(Duration::ZERO);
    let server = start_server_full(data_dir(), |_| {}, Some(model.clone() as Arc<dyn Model>)).await;
    let mut events = server.events(Some(&group_key("p"))).await;
    server.send(&Msg::group("p", "m1", "please PANIC")).await;
    let reply = events.expect_next().await.json();
    assert_eq!(reply["in_reply_to"], serde_json::json!(["m1"]));
    assert_eq!(reply["error"], serde_json::json!(true));
    assert_eq!(
        model.calls.load(Ordering::SeqCst),
        2,
        "tried, then retried once"
    );

    server.send(&Msg::group("p", "m2", "hello again")).await;
    let reply = events.expect_next().await.json();
    assert_eq!(reply["in_reply_to"], serde_json::json!(["m2"]));
    assert_eq!(reply["text"], serde_json::json!("seen: hello again"));
}
