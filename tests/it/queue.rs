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
    let (second_at, fourth_at) = (text.find("second"), text.find("fourth"));
    assert!(text.contains("Queued #3"), "{text}");
    assert!(second_at < fourth_at && second_at.is_some(), "{text}");
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
    let text = reply["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("seen: ") && text.ends_with("hello again"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_inbox_answers_429_with_retry_after_and_stores_nothing_more() {
    let model = ScriptedModel::new(Duration::from_secs(2));
    let server = start_server_full(
        data_dir(),
        |c| c.storage.max_queued_messages = 3,
        Some(model.clone() as Arc<dyn Model>),
    )
    .await;
    for i in 0..3 {
        server
            .send(&Msg::group("full", &format!("m{i}"), "hello"))
            .await;
    }
    let client = crate::support::http_client();
    let response = client
        .post(server.url("/v1/messages"))
        .json(Msg::group("full", "m3", "one too many").json())
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
    assert!(response.headers().contains_key("retry-after"));
    let body: serde_json::Value = response.json().await.expect("json body");
    assert_eq!(body["error"]["code"], "overloaded");

    // Once the queue drains, the refused message is accepted when retried; it was not stored.
    eventually(PATIENCE, "room in the inbox again", || {
        let api = server.api.clone();
        async move {
            let (status, _) = api
                .post_message(Msg::group("full", "m3", "retry").json())
                .await;
            (status == reqwest::StatusCode::ACCEPTED)
                .then_some(())
                .ok_or_else(|| format!("status {status}"))
        }
    })
    .await;
    eventually(PATIENCE, "all four answered", || {
        let api = server.api.clone();
        async move {
            let entries = api.transcript(&group_key("full")).await.unwrap_or_default();
            let users: Vec<&str> = entries
                .iter()
                .filter(|e| e.kind == "user")
                .filter_map(|e| e.message_id.as_deref())
                .collect();
            let answered = entries.last().is_some_and(|e| e.kind == "assistant");
            (users == ["m0", "m1", "m2", "m3"] && answered)
                .then_some(())
                .ok_or_else(|| format!("{users:?}"))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lanes_passivate_under_load_and_come_back_without_loss() {
    let server = start_server_full(
        data_dir(),
        |c| {
            c.lanes.max_live_lanes = 8;
            c.lanes.idle_timeout_ms = 50;
        },
        None,
    )
    .await;
    let mut tasks = Vec::new();
    for s in 0..40 {
        let api = server.api.clone();
        tasks.push(tokio::spawn(async move {
            for m in 0..5 {
                api.send(&Msg::group(&format!("p{s}"), &format!("m{m}"), "hi"))
                    .await;
                tokio::time::sleep(Duration::from_millis(5 * (s % 7) as u64)).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("sender");
    }
    for s in 0..40 {
        let key = group_key(&format!("p{s}"));
        eventually(
            PATIENCE,
            "every message of the session stored and answered",
            || {
                let api = server.api.clone();
                let key = key.clone();
                async move {
                    let entries = api.transcript(&key).await.unwrap_or_default();
                    let users: Vec<String> = entries
                        .iter()
                        .filter(|e| e.kind == "user")
                        .filter_map(|e| e.message_id.clone())
                        .collect();
                    let answered = entries.last().is_some_and(|e| e.kind == "assistant");
                    (users == ["m0", "m1", "m2", "m3", "m4"] && answered)
                        .then_some(())
                        .ok_or_else(|| format!("{key}: {users:?}"))
                }
            },
        )
        .await;
    }
}
