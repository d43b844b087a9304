//! Compaction through a real runtime (sled in a temp dir) against a fake OpenAI-compatible
//! server on 127.0.0.1:0 that serves both the answering model (`main`, which rejects prompts
//! over a size limit with an overflow error) and the summariser (`summ`, which drops every
//! identifier and may be slow). The fake is a test double, not a model.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::config::Config;
use crate::inbound::{ChatKind, InboundMessage, Sender};
use crate::store::EntryKind;
use crate::Runtime;

#[derive(Default)]
struct Fake {
    /// Prompts of `main` larger than this (in the fake's tokens: chars / 4) are rejected.
    limit: AtomicU64,
    /// How long `summ` takes to answer, in ms.
    summary_delay_ms: AtomicU64,
    /// What happened, in order: `summary_started`, `summary_done`, `overflow`.
    events: Mutex<Vec<&'static str>>,
}

impl Fake {
    fn events(&self) -> Vec<&'static str> {
        self.events.lock().unwrap().clone()
    }

    fn log(&self, e: &'static str) {
        self.events.lock().unwrap().push(e);
    }
}

async fn completions(State(fake): State<Arc<Fake>>, Json(body): Json<Value>) -> Response {
    let chars: usize = body["messages"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| m["content"].as_str().map_or(0, str::len))
                .sum()
        })
        .unwrap_or(0);
    let size = (chars / 4) as u64;
    let answer = |text: &str| {
        Json(json!({"choices": [{"message": {"role": "assistant", "content": text}}]}))
            .into_response()
    };
    if body["model"] == "summ" {
        fake.log("summary_started");
        let delay = fake.summary_delay_ms.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        fake.log("summary_done");
        return answer("## Decisions\nThe user asked about several orders.");
    }
    let limit = fake.limit.load(Ordering::SeqCst);
    if size > limit {
        fake.log("overflow");
        let message = format!(
            "This model's maximum context length is {limit} tokens. However, your messages \
             resulted in {size} tokens."
        );
        let error = json!({"error": {"message": message, "type": "invalid_request_error", "code": "context_length_exceeded"}});
        return (StatusCode::BAD_REQUEST, Json(error)).into_response();
    }
    answer("ok")
}

async fn start_fake(limit: u64, summary_delay_ms: u64) -> (String, Arc<Fake>) {
    let fake = Arc::new(Fake::default());
    fake.limit.store(limit, Ordering::SeqCst);
    fake.summary_delay_ms
        .store(summary_delay_ms, Ordering::SeqCst);
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .with_state(Arc::clone(&fake));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/v1"), fake)
}

async fn runtime(dir: &std::path::Path, base_url: String, soft_threshold: f64) -> Runtime {
    let mut c = Config::default();
    c.storage.data_dir = dir.to_path_buf();
    c.model.provider = "openai".into();
    c.model.base_url = base_url;
    c.model.model = "main".into();
    c.model.context_window = 8_192;
    c.model.max_retries = 0;
    c.model.api_key_env = "TURNSTILE_TEST_SURELY_UNSET".into();
    c.context.max_tokens = 3_000;
    c.context.reserve_output_tokens = 256;
    c.compaction.model = "summ".into();
    c.compaction.soft_threshold = soft_threshold;
    Runtime::builder().config(c).build().await.unwrap()
}

fn message(n: usize) -> InboundMessage {
    let filler = "We went over the delivery schedule, the packaging and the invoice. ".repeat(5);
    InboundMessage {
        channel: "test".into(),
        account_id: "default".into(),
        chat_kind: ChatKind::Direct,
        chat_id: "c1".into(),
        thread_id: None,
        message_id: format!("m{n}"),
        sender: Sender {
            id: "u1".into(),
            name: "Uma".into(),
            is_bot: false,
        },
        text: format!("Please check order ORD-{n:04}. {filler}"),
        mentions: vec![],
        mentioned_bot: false,
        reply_to: None,
        timestamp_ms: 0,
        attachments: vec![],
        kind: crate::inbound::MessageKind::Message,
    }
}

/// Sends message `n` and returns its reply (text, error flag) and session key.
async fn ask(runtime: &Runtime, n: usize) -> (String, bool, String) {
    let m = message(n);
    let mut waiter = runtime.reply_to(&m.message_id);
    let ack = runtime.submit(m).await.unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(10), waiter.recv())
        .await
        .expect("answered in time")
        .unwrap();
    (reply.text.clone(), reply.error, ack.session_key)
}

#[tokio::test]
async fn manual_compaction_keeps_identifiers_the_summariser_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _fake) = start_fake(u64::MAX, 0).await;
    // Soft threshold 1.0: only the manual compaction runs.
    let rt = runtime(dir.path(), url, 1.0).await;
    let mut key = String::new();
    for n in 0..12 {
        key = ask(&rt, n).await.2;
    }
    let done = rt.compact(&key).await.unwrap().unwrap();
    assert!(done.tokens_after < done.tokens_before, "{done:?}");
    let info = rt.session(&key).unwrap().unwrap();
    assert_eq!(info.compaction_count, 1);
    assert_eq!(info.tokens, done.tokens_after);
    let transcript = rt.transcript(&key, 0, 1_000).unwrap().unwrap();
    assert_eq!(transcript[0].kind, EntryKind::Summary);
    let summary = &transcript[0].text;
    assert!(
        summary.contains("several orders"),
        "the model's summary: {summary}"
    );
    let kept: String = transcript[1..].iter().map(|e| e.text.clone()).collect();
    let compacted: Vec<String> = (0..12)
        .map(|n| format!("ORD-{n:04}"))
        .filter(|id| !kept.contains(id.as_str()))
        .collect();
    assert!(compacted.len() >= 2, "{compacted:?}");
    for id in &compacted {
        assert!(summary.contains(id.as_str()), "{id} restored: {summary}");
    }
    // The next turn sees the summary as its compaction summary.
    let dump = rt.context_dump(&key).unwrap().unwrap();
    let sent: String = dump.messages().iter().map(|m| m.content.as_str()).collect();
    assert!(sent.contains("several orders"), "{sent}");
    assert!(rt.compact("agent:main:nope").await.unwrap().is_none());
    rt.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_slow_background_compaction_does_not_delay_turns() {
    let dir = tempfile::tempdir().unwrap();
    let (url, fake) = start_fake(u64::MAX, 2_000).await;
    let rt = runtime(dir.path(), url, 0.3).await;
    let mut n = 0;
    let mut key = String::new();
    // Turns until history passes the soft threshold and the summariser is called.
    while !fake.events().contains(&"summary_started") {
        key = ask(&rt, n).await.2;
        n += 1;
        assert!(n < 40, "the soft threshold never triggered");
    }
    // The compaction is running now; the session keeps being answered meanwhile.
    for _ in 0..3 {
        let (text, error, _) = ask(&rt, n).await;
        assert_eq!((text.as_str(), error), ("ok", false));
        n += 1;
    }
    assert!(
        !fake.events().contains(&"summary_done"),
        "turns were answered while the summariser was still working"
    );
    assert_eq!(rt.session(&key).unwrap().unwrap().compaction_count, 0);
    let mut compacted = false;
    for _ in 0..200 {
        if rt.session(&key).unwrap().unwrap().compaction_count >= 1 {
            compacted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(compacted, "the background compaction finished");
    rt.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_long_conversation_against_a_small_window_is_always_answered() {
    let dir = tempfile::tempdir().unwrap();
    let (url, fake) = start_fake(1_200, 0).await;
    // Soft threshold 1.0: overflow errors are the only trigger.
    let rt = runtime(dir.path(), url, 1.0).await;
    let mut key = String::new();
    for n in 0..40 {
        let (text, error, k) = ask(&rt, n).await;
        assert_eq!((text.as_str(), error), ("ok", false), "turn {n}");
        key = k;
    }
    assert!(fake.events().contains(&"overflow"), "the limit was reached");
    let info = rt.session(&key).unwrap().unwrap();
    assert!(info.compaction_count >= 1, "{info:?}");
    rt.shutdown().await.unwrap();
}
