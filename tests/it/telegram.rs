//! The Telegram channel against a fake Bot API on loopback: long polling with offsets, a group
//! mention answered with a quoted reply, a forum topic, a 5,000-character reply in two
//! messages, and the offset surviving a restart. Streaming previews: the first preview goes
//! before the model finished, deltas inside one edit interval make no edit of their own, the
//! final edit carries the final text, failed edits fall back to `sendMessage`, and with
//! `stream_edits = false` only the final text is sent; a failed turn's notice replaces its
//! preview.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::routing::post;
use axum::{Json, Router};
use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use tokio::sync::Notify;
use turnstile::config::TelegramConfig;
use turnstile::error::ModelError;
use turnstile::model::{DeltaSink, Model, ModelReply, ModelRequest};
use turnstile::Runtime;

use crate::fake_streaming_model::{use_model, FakeStreamingModel, Script};
use crate::support::{config, env_var, eventually_some, FixedModel};

const TOKEN: &str = "123456:TEST-token";

#[derive(Default)]
struct FakeBotApi {
    updates: Mutex<Vec<Value>>,
    arrived: Notify,
    /// The `offset` of every getUpdates call, in order.
    offsets: Mutex<Vec<i64>>,
    /// Bodies of sendMessage calls.
    sent: Mutex<Vec<Value>>,
    /// Bodies of editMessageText calls.
    edited: Mutex<Vec<Value>>,
    /// Refuse every edit with a 429.
    fail_edits: AtomicBool,
}

impl FakeBotApi {
    fn push(&self, update: Value) {
        self.updates.lock().unwrap().push(update);
        self.arrived.notify_waiters();
    }
    fn sent(&self) -> Vec<Value> {
        self.sent.lock().unwrap().clone()
    }
    fn edited(&self) -> Vec<Value> {
        self.edited.lock().unwrap().clone()
    }
    fn offsets(&self) -> Vec<i64> {
        self.offsets.lock().unwrap().clone()
    }
}

async fn bot_api(
    State(api): State<Arc<FakeBotApi>>,
    Path((bot, method)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Json<Value> {
    if bot != format!("bot{TOKEN}") {
        return Json(json!({"ok": false, "error_code": 401, "description": "Unauthorized"}));
    }
    match method.as_str() {
        "getMe" => Json(json!({"ok": true, "result":
            {"id": 999, "is_bot": true, "first_name": "Turn", "username": "TurnBot"}})),
        "getUpdates" => {
            let offset = body["offset"].as_i64().unwrap_or(0);
            api.offsets.lock().unwrap().push(offset);
            let timeout = body["timeout"].as_u64().unwrap_or(0).min(2);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
            loop {
                let arrived = api.arrived.notified();
                let ready: Vec<Value> = {
                    let mut updates = api.updates.lock().unwrap();
                    // Like Telegram: an offset confirms every update before it.
                    updates.retain(|u| u["update_id"].as_i64().unwrap() >= offset);
                    updates.clone()
                };
                if !ready.is_empty() {
                    return Json(json!({"ok": true, "result": ready}));
                }
                if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                    return Json(json!({"ok": true, "result": []}));
                }
            }
        }
        "sendMessage" => {
            let mut sent = api.sent.lock().unwrap();
            sent.push(body.clone());
            Json(json!({"ok": true, "result": {
                "message_id": 10_000 + sent.len(), "date": 1,
                "chat": {"id": body["chat_id"], "type": "group"}, "text": body["text"]}}))
        }
        "editMessageText" => {
            if api.fail_edits.load(Ordering::SeqCst) {
                return Json(json!({"ok": false, "error_code": 429,
                    "description": "Too Many Requests: retry after 1",
                    "parameters": {"retry_after": 1}}));
            }
            api.edited.lock().unwrap().push(body.clone());
            Json(json!({"ok": true, "result": {
                "message_id": body["message_id"], "date": 1,
                "chat": {"id": body["chat_id"], "type": "group"}, "text": body["text"]}}))
        }
        _ => Json(json!({"ok": false, "error_code": 404, "description": "Not Found"})),
    }
}

async fn start_fake() -> (String, Arc<FakeBotApi>) {
    let api = Arc::new(FakeBotApi::default());
    let app = Router::new()
        .route("/{bot}/{method}", post(bot_api))
        .with_state(Arc::clone(&api));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, api)
}

fn telegram_config(api_base: String, token_env: String) -> TelegramConfig {
    TelegramConfig {
        api_base,
        bot_token_env: token_env,
        poll_timeout_secs: 1,
        retry_backoff_ms: 20,
        max_retry_backoff_ms: 200,
        ..TelegramConfig::default()
    }
}

async fn runtime(dir: &std::path::Path, api_base: &str, token_env: &str) -> Runtime {
    let mut c = config(dir);
    c.channels.telegram = Some(telegram_config(api_base.into(), token_env.into()));
    Runtime::builder()
        .config(c)
        .model(Arc::new(FixedModel {
            long_text: "y".repeat(5_000),
        }))
        .build()
        .await
        .unwrap()
}

fn group_message(update_id: i64, chat: i64, message_id: i64, text: &str) -> Value {
    json!({"update_id": update_id, "message": {
        "message_id": message_id, "date": 1_700_000_000,
        "chat": {"id": chat, "type": "supergroup", "title": "Team"},
        "from": {"id": 1, "is_bot": false, "first_name": "Ann"},
        "text": text,
        "entities": [{"type": "mention", "offset": 0, "length": 8}]
    }})
}

#[tokio::test]
async fn a_group_mention_is_answered_in_place_and_long_replies_are_chunked() {
    let (api_base, fake) = start_fake().await;
    let token_env = env_var(TOKEN);
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path(), &api_base, &token_env).await;

    fake.push(group_message(1, -100123, 42, "@turnbot hello"));
    let sent = eventually_some(Duration::from_secs(10), "the reply", || {
        let fake = Arc::clone(&fake);
        async move { (!fake.sent().is_empty()).then(|| fake.sent()) }
    })
    .await;
    assert_eq!(sent[0]["chat_id"], json!(-100123));
    assert_eq!(sent[0]["reply_parameters"]["message_id"], json!(42));
    let text = sent[0]["text"].as_str().unwrap();
    assert!(text.starts_with("re: ") && text.contains("hello"), "{text}");
    let session = rt
        .session("agent:main:telegram:group:-100123")
        .unwrap()
        .expect("the group's session");
    assert_eq!(session.entries, 2);

    // A forum topic: its own session, the reply goes to the topic.
    let mut topic = group_message(2, -100777, 7, "@turnbot in a topic");
    topic["message"]["is_topic_message"] = json!(true);
    topic["message"]["message_thread_id"] = json!(5);
    fake.push(topic);
    let sent = eventually_some(Duration::from_secs(10), "the topic reply", || {
        let fake = Arc::clone(&fake);
        async move { (fake.sent().len() >= 2).then(|| fake.sent()) }
    })
    .await;
    assert_eq!(sent[1]["chat_id"], json!(-100777));
    assert_eq!(sent[1]["message_thread_id"], json!(5));
    assert!(rt
        .session("agent:main:telegram:group:-100777:topic:5")
        .unwrap()
        .is_some());

    // 5,000 characters: two messages, only the first quotes the question.
    fake.push(group_message(
        3,
        -100123,
        43,
        "@turnbot a long answer please",
    ));
    let sent = eventually_some(Duration::from_secs(10), "the chunked reply", || {
        let fake = Arc::clone(&fake);
        async move { (fake.sent().len() >= 4).then(|| fake.sent()) }
    })
    .await;
    let first = sent[2]["text"].as_str().unwrap();
    let second = sent[3]["text"].as_str().unwrap();
    assert_eq!(first.chars().count(), 4_096);
    assert_eq!(second.chars().count(), 904);
    assert_eq!(sent[2]["reply_parameters"]["message_id"], json!(43));
    assert!(sent[3].get("reply_parameters").is_none());

    // Offsets advanced past every update.
    let offsets = fake.offsets();
    assert_eq!(offsets[0], 0);
    eventually_some(Duration::from_secs(5), "offset 4", || {
        let fake = Arc::clone(&fake);
        async move { fake.offsets().contains(&4).then_some(()) }
    })
    .await;
    rt.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_offset_survives_a_restart() {
    let (api_base, fake) = start_fake().await;
    let token_env = env_var(TOKEN);
    let dir = tempfile::tempdir().unwrap();

    let rt = runtime(dir.path(), &api_base, &token_env).await;
    fake.push(group_message(10, -5, 1, "@turnbot one"));
    fake.push(group_message(11, -5, 2, "@turnbot two"));
    eventually_some(Duration::from_secs(10), "both replies", || {
        let fake = Arc::clone(&fake);
        async move { (fake.sent().len() >= 2).then_some(()) }
    })
    .await;
    eventually_some(Duration::from_secs(5), "a poll from offset 12", || {
        let fake = Arc::clone(&fake);
        async move { fake.offsets().contains(&12).then_some(()) }
    })
    .await;
    rt.shutdown().await.unwrap();
    drop(rt);
    // Telegram forgets nothing it was not told to: offer the old updates again.
    fake.push(group_message(10, -5, 1, "@turnbot one"));
    fake.push(group_message(11, -5, 2, "@turnbot two"));
    fake.offsets.lock().unwrap().clear();

    let rt = runtime(dir.path(), &api_base, &token_env).await;
    let first = eventually_some(
        Duration::from_secs(10),
        "the first poll after restart",
        || {
            let fake = Arc::clone(&fake);
            async move { fake.offsets().first().copied() }
        },
    )
    .await;
    assert_eq!(first, 12, "polling resumes after the last handled update");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.sent().len(), 2, "no update answered twice");
    rt.shutdown().await.unwrap();
}

/// A runtime whose model is `fake`, with `stream_edits` as given and a 60 s edit interval (so
/// every delta after the first preview falls inside one interval).
async fn streaming_runtime(
    dir: &std::path::Path,
    api_base: &str,
    token_env: &str,
    fake: &FakeStreamingModel,
    stream_edits: bool,
) -> Runtime {
    let mut c = config(dir);
    use_model(&mut c, &fake.base_url);
    c.channels.telegram = Some(TelegramConfig {
        stream_edits,
        edit_interval_ms: 60_000,
        ..telegram_config(api_base.into(), token_env.into())
    });
    Runtime::builder().config(c).build().await.unwrap()
}

#[tokio::test]
async fn a_streaming_reply_is_previewed_then_edited_to_the_final_text() {
    let (api_base, bot) = start_fake().await;
    let token_env = env_var(TOKEN);
    let dir = tempfile::tempdir().unwrap();
    let script = Script {
        gated: true,
        ..Script::text(&["Hel", "lo ", "the", "re!"])
    };
    let model = FakeStreamingModel::start(script.clone()).await;
    let rt = streaming_runtime(dir.path(), &api_base, &token_env, &model, true).await;

    let mut topic = group_message(1, -100777, 42, "@turnbot stream please");
    topic["message"]["is_topic_message"] = json!(true);
    topic["message"]["message_thread_id"] = json!(5);
    bot.push(topic);
    let sent = eventually_some(Duration::from_secs(10), "the first preview", || {
        let bot = Arc::clone(&bot);
        async move { (!bot.sent().is_empty()).then(|| bot.sent()) }
    })
    .await;
    assert_eq!(model.chunks_sent(), 1, "the model has not finished");
    assert_eq!(sent[0]["text"], json!("Hel"));
    assert_eq!(sent[0]["chat_id"], json!(-100777));
    assert_eq!(sent[0]["message_thread_id"], json!(5));
    assert_eq!(sent[0]["reply_parameters"]["message_id"], json!(42));
    let preview_id = 10_001;

    model.release();
    let edited = eventually_some(Duration::from_secs(10), "the final edit", || {
        let bot = Arc::clone(&bot);
        async move { (!bot.edited().is_empty()).then(|| bot.edited()) }
    })
    .await;
    // Three deltas inside one interval: no edit of their own, only the final one.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let edited_now = bot.edited();
    assert_eq!(edited_now.len(), 1, "{edited_now:?}");
    assert_eq!(edited[0]["text"], json!(script.whole()));
    assert_eq!(edited[0]["message_id"], json!(preview_id));
    assert_eq!(edited[0]["chat_id"], json!(-100777));
    assert_eq!(bot.sent().len(), 1, "the final reply is the edited preview");
    rt.shutdown().await.unwrap();
}

#[tokio::test]
async fn failed_edits_still_deliver_the_final_text() {
    let (api_base, bot) = start_fake().await;
    bot.fail_edits.store(true, Ordering::SeqCst);
    let token_env = env_var(TOKEN);
    let dir = tempfile::tempdir().unwrap();
    let script = Script {
        gated: true,
        ..Script::text(&["one ", "two"])
    };
    let model = FakeStreamingModel::start(script.clone()).await;
    let rt = streaming_runtime(dir.path(), &api_base, &token_env, &model, true).await;

    bot.push(group_message(1, -5, 9, "@turnbot hi"));
    eventually_some(Duration::from_secs(10), "the preview", || {
        let bot = Arc::clone(&bot);
        async move { (!bot.sent().is_empty()).then_some(()) }
    })
    .await;
    model.release();
    let sent = eventually_some(Duration::from_secs(10), "the final text, sent anew", || {
        let bot = Arc::clone(&bot);
        async move { (bot.sent().len() >= 2).then(|| bot.sent()) }
    })
    .await;
    assert_eq!(sent[0]["text"], json!("one "));
    assert_eq!(sent[1]["text"], json!(script.whole()));
    assert_eq!(sent[1]["reply_parameters"]["message_id"], json!(9));
    assert!(bot.edited().is_empty());
    rt.shutdown().await.unwrap();
}

#[tokio::test]
async fn without_stream_edits_only_the_final_text_is_sent() {
    let (api_base, bot) = start_fake().await;
    let token_env = env_var(TOKEN);
    let dir = tempfile::tempdir().unwrap();
    let script = Script {
        gated: true,
        ..Script::text(&["a", "b", "c"])
    };
    let model = FakeStreamingModel::start(script.clone()).await;
    let rt = streaming_runtime(dir.path(), &api_base, &token_env, &model, false).await;

    bot.push(group_message(1, -5, 3, "@turnbot hi"));
    eventually_some(Duration::from_secs(10), "the model call", || {
        let model = &model;
        async move { (model.chunks_sent() >= 1).then_some(()) }
    })
    .await;
    model.release();
    let sent = eventually_some(Duration::from_secs(10), "the reply", || {
        let bot = Arc::clone(&bot);
        async move { (!bot.sent().is_empty()).then(|| bot.sent()) }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(bot.sent().len(), 1);
    assert_eq!(sent[0]["text"], json!(script.whole()));
    assert!(bot.edited().is_empty());
    rt.shutdown().await.unwrap();
}

/// A model that streams "partial", then fails once the test releases it.
#[derive(Default)]
struct BreaksMidStream {
    release: Notify,
}

impl Model for BreaksMidStream {
    fn name(&self) -> &str {
        "breaks"
    }

    fn complete<'a>(
        &'a self,
        _: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async { Err(ModelError::Transport("cut off".into())) })
    }

    fn complete_streaming<'a>(
        &'a self,
        _: &'a ModelRequest,
        sink: DeltaSink,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            let _ = sink.send("partial".into()).await;
            self.release.notified().await;
            Err(ModelError::Transport("cut off".into()))
        })
    }
}

#[tokio::test]
async fn a_failed_turn_replaces_its_preview_with_the_error_notice() {
    let (api_base, bot) = start_fake().await;
    let token_env = env_var(TOKEN);
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.lanes.turn_retries = 0;
    c.channels.telegram = Some(telegram_config(api_base, token_env));
    let model = Arc::new(BreaksMidStream::default());
    let rt = Runtime::builder()
        .config(c)
        .model(Arc::clone(&model) as Arc<dyn Model>)
        .build()
        .await
        .unwrap();

    bot.push(group_message(1, -5, 3, "@turnbot hi"));
    let sent = eventually_some(Duration::from_secs(10), "the preview", || {
        let bot = Arc::clone(&bot);
        async move { (!bot.sent().is_empty()).then(|| bot.sent()) }
    })
    .await;
    assert_eq!(sent[0]["text"], json!("partial"));
    model.release.notify_one();
    let edited = eventually_some(Duration::from_secs(10), "the notice", || {
        let bot = Arc::clone(&bot);
        async move { (!bot.edited().is_empty()).then(|| bot.edited()) }
    })
    .await;
    let notice = edited[0]["text"].as_str().unwrap();
    assert!(
        notice.starts_with("Sorry, this message could not be answered"),
        "{notice}"
    );
    assert_eq!(edited[0]["message_id"], json!(10_001));
    assert_eq!(bot.sent().len(), 1);
    rt.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_interrupted_turns_preview_is_taken_over_by_the_next_answer() {
    let (api_base, bot) = start_fake().await;
    let token_env = env_var(TOKEN);
    let dir = tempfile::tempdir().unwrap();
    let model = FakeStreamingModel::start(Script {
        gated: true,
        ..Script::text(&["Hello", " there"])
    })
    .await;
    let mut c = config(dir.path());
    use_model(&mut c, &model.base_url);
    c.queue.mode = turnstile::config::QueueModeSetting::Interrupt;
    c.queue.debounce_ms = 0;
    c.channels.telegram = Some(TelegramConfig {
        edit_interval_ms: 60_000,
        ..telegram_config(api_base, token_env)
    });
    let rt = Runtime::builder().config(c).build().await.unwrap();

    bot.push(group_message(1, -5, 3, "@turnbot tell me"));
    eventually_some(Duration::from_secs(10), "the first preview", || {
        let bot = Arc::clone(&bot);
        async move { (!bot.sent().is_empty()).then_some(()) }
    })
    .await;
    // A new message interrupts the held call; the next answer covers both messages.
    let next = Script::text(&["Bye", " now"]);
    model.set_script(next.clone());
    bot.push(group_message(2, -5, 4, "@turnbot actually stop"));
    let edited = eventually_some(Duration::from_secs(10), "the final edit", || {
        let bot = Arc::clone(&bot);
        async move { (!bot.edited().is_empty()).then(|| bot.edited()) }
    })
    .await;
    assert_eq!(edited[0]["message_id"], json!(10_001));
    assert_eq!(edited[0]["text"], json!(next.whole()));
    let sent = bot.sent();
    assert_eq!(sent.len(), 1, "no second preview, no stale one: {sent:?}");
    assert_eq!(sent[0]["text"], json!("Hello"));
    rt.shutdown().await.unwrap();
}
