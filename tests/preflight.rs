//! Preflight end to end over HTTP: drops are answered `200 {"status":"dropped","reason":…}`,
//! and a message redelivered after a restart on the same data dir is a `duplicate`.

mod support;

use serde_json::{json, Value};
use support::{data_dir, eventually, start_server_with, TestServer, PATIENCE};
use tempfile::TempDir;

/// A server on `dir` that knows the bot's own user id (`999`).
async fn start(dir: &std::sync::Arc<TempDir>) -> TestServer {
    start_server_with(dir.clone(), |config| {
        config.preflight.bot_user_ids = vec!["999".into()];
    })
    .await
}

/// Posts `body`: (status, JSON body).
async fn post(server: &TestServer, body: &Value) -> (u16, Value) {
    let (status, body) = server.post_message(body).await;
    (status.as_u16(), body)
}

fn message(id: &str) -> Value {
    json!({"channel":"telegram","account_id":"default","chat_kind":"group","chat_id":"-100123",
           "message_id":id,"sender":{"id":"111","name":"Alice","is_bot":false},
           "text":"@bot hello","mentioned_bot":true,"timestamp_ms":0})
}

fn with(mut base: Value, edit: Value) -> Value {
    if let (Some(b), Some(e)) = (base.as_object_mut(), edit.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    base
}

fn dropped(reason: &str) -> (u16, Value) {
    (200, json!({"status":"dropped","reason":reason}))
}

#[tokio::test]
async fn drops_are_answered_with_their_reason() {
    let dir = data_dir();
    let server = start(&dir).await;

    let (status, body) = post(&server, &message("1")).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["session_key"], "agent:main:telegram:group:-100123");
    assert_eq!(post(&server, &message("1")).await, dropped("duplicate"));

    let own = with(
        message("2"),
        json!({"sender":{"id":"999","name":"me","is_bot":true}}),
    );
    assert_eq!(post(&server, &own).await, dropped("bot"));
    let other_bot = with(
        message("3"),
        json!({"sender":{"id":"555","name":"other","is_bot":true}}),
    );
    assert_eq!(post(&server, &other_bot).await, dropped("bot"));

    let chatter = with(message("4"), json!({"mentioned_bot": false}));
    assert_eq!(post(&server, &chatter).await, dropped("no_mention"));

    let event = with(
        message("5"),
        json!({"kind":"system_event","text":"Bob joined the group","mentioned_bot":false}),
    );
    assert_eq!(post(&server, &event).await, dropped("system_event"));

    let (status, body) = post(&server, &with(message("6"), json!({"kind": "bogus"}))).await;
    assert_eq!(status, 400, "{body}");
    server.stop().await;
}

#[tokio::test]
async fn a_redelivery_after_a_restart_is_a_duplicate() {
    let dir = data_dir();
    let key = "agent:main:telegram:group:-100123";
    let server = start(&dir).await;
    assert_eq!(post(&server, &message("42")).await.0, 202);
    // Wait until it is answered (user entry + reply), so the inbox entry is consumed.
    eventually(PATIENCE, "the reply", || async {
        match server.transcript_json(key).await {
            Some(entries) if entries.len() >= 2 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    server.stop().await;

    let server = start(&dir).await;
    assert_eq!(post(&server, &message("42")).await, dropped("duplicate"));
    assert_eq!(post(&server, &message("43")).await.0, 202);
    server.stop().await;
}
