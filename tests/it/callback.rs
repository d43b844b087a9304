//! Webhook callbacks against a fake receiver on loopback: signatures verify, transient
//! failures are retried, a receiver that never succeeds does not lose the reply.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use turnstile::channels::{verify_signature, SIGNATURE_HEADER};
use turnstile::config::CallbackConfig;

use crate::support::{channel_message, config, env_var, eventually_some, TestServer};

const SECRET: &str = "callback-secret";

#[derive(Default)]
struct Receiver {
    /// Answer 503 to this many attempts (`usize::MAX`: always).
    fail_first: usize,
    attempts: Mutex<usize>,
    /// Bodies of accepted deliveries whose signature verified.
    delivered: Mutex<Vec<serde_json::Value>>,
    bad_signatures: Mutex<usize>,
}

async fn receive(State(r): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let attempt = {
        let mut a = r.attempts.lock().unwrap();
        *a += 1;
        *a
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let signature = headers
        .get(SIGNATURE_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !verify_signature(SECRET.as_bytes(), signature, &body, now, 300) {
        *r.bad_signatures.lock().unwrap() += 1;
        return StatusCode::UNAUTHORIZED;
    }
    if attempt <= r.fail_first {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    r.delivered
        .lock()
        .unwrap()
        .push(serde_json::from_slice(&body).unwrap());
    StatusCode::NO_CONTENT
}

async fn start_receiver(fail_first: usize) -> (String, Arc<Receiver>) {
    let state = Arc::new(Receiver {
        fail_first,
        ..Receiver::default()
    });
    let app = Router::new()
        .route("/hook", post(receive))
        .with_state(Arc::clone(&state));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, state)
}

fn callback_config(url: String, max_attempts: u32) -> CallbackConfig {
    CallbackConfig {
        url,
        secret_env: env_var(SECRET),
        max_attempts,
        initial_backoff_ms: 10,
        max_backoff_ms: 50,
        timeout_ms: 2_000,
        ..CallbackConfig::default()
    }
}

#[tokio::test]
async fn a_reply_is_delivered_signed_after_two_failures() {
    let (url, receiver) = start_receiver(2).await;
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.channels.callback = Some(callback_config(url, 5));
    let server = TestServer::with_config(c).await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/messages", server.base))
        .json(&channel_message(
            "webhook",
            "room-1",
            "m-1",
            "hello callback",
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let delivered = eventually_some(Duration::from_secs(10), "the callback delivery", || {
        let receiver = Arc::clone(&receiver);
        async move { receiver.delivered.lock().unwrap().first().cloned() }
    })
    .await;
    assert_eq!(
        *receiver.attempts.lock().unwrap(),
        3,
        "two failures, then success"
    );
    assert_eq!(*receiver.bad_signatures.lock().unwrap(), 0);
    assert_eq!(delivered["session_key"], "agent:main:webhook:group:room-1");
    assert_eq!(delivered["in_reply_to"], serde_json::json!(["m-1"]));
    assert!(delivered["text"]
        .as_str()
        .unwrap()
        .contains("hello callback"));
    assert_eq!(delivered["route"]["chat_id"], "room-1");
    server.stop().await;
}

#[tokio::test]
async fn a_receiver_that_always_fails_does_not_lose_the_reply() {
    let (url, receiver) = start_receiver(usize::MAX).await;
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.channels.callback = Some(callback_config(url, 3));
    let server = TestServer::with_config(c).await;
    let mut replies = server.runtime.subscribe();
    let r = reqwest::Client::new()
        .post(format!("{}/v1/messages", server.base))
        .json(&channel_message(
            "webhook",
            "room-2",
            "m-2",
            "are you there",
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let reply = tokio::time::timeout(std::time::Duration::from_secs(10), replies.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reply.in_reply_to, vec!["m-2".to_string()]);
    eventually_some(Duration::from_secs(10), "three attempts", || {
        let receiver = Arc::clone(&receiver);
        async move { (*receiver.attempts.lock().unwrap() >= 3).then_some(()) }
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(*receiver.attempts.lock().unwrap(), 3, "bounded attempts");
    assert!(receiver.delivered.lock().unwrap().is_empty());
    // The reply stays readable through the API.
    let transcript: serde_json::Value = reqwest::get(format!(
        "{}/v1/sessions/agent%3Amain%3Awebhook%3Agroup%3Aroom-2/transcript",
        server.base
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let texts: Vec<&str> = transcript
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "assistant")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, vec![reply.text.as_str()]);
    let metrics = reqwest::get(format!("{}/metrics", server.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(
            "turnstile_channel_deliveries_total{channel=\"callback\",outcome=\"failed\"}"
        ),
        "{metrics}"
    );
    server.stop().await;
}
