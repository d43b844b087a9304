//! Bad input gets a clear 4xx with `{"error":{"code","message"}}`, and nothing is stored.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::{data_dir, encode_key, group_key, start_server_with, Api, Msg};

/// The body limit of the server under test: above the 32,000-character text limit, so both
/// can be exercised.
const MAX_BODY: usize = 48 * 1024;

/// Posts `body` to `path` and checks the refusal.
async fn check(api: &Api, path: &str, body: String, status: StatusCode, code: &str) {
    let what = format!("{path} with {:.120}", body);
    let (got, response) = api.post_raw(path, body).await;
    assert_eq!(got, status, "{what}: {response}");
    let error = &response["error"];
    assert_eq!(error["code"], code, "{what}: {response}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(!message.is_empty(), "{what}: no message in {response}");
}

fn message(edit: impl FnOnce(Msg) -> Msg) -> String {
    edit(Msg::group("bad-chat", "bad-1", "hello"))
        .json()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_nothing_is_stored() {
    let server = start_server_with(data_dir(), |c| c.server.max_body_bytes = MAX_BODY).await;
    let bad_request = StatusCode::BAD_REQUEST;
    let m = "/v1/messages";

    // Not an InboundMessage at all.
    check(
        &server,
        m,
        r#"{"channel": "telegram", "#.into(),
        bad_request,
        "invalid_json",
    )
    .await;
    check(&server, m, "hello".into(), bad_request, "invalid_json").await;
    check(&server, m, String::new(), bad_request, "invalid_json").await;
    check(&server, m, "[]".into(), bad_request, "invalid_json").await;
    // Missing, unknown and mistyped fields.
    for field in [
        "text",
        "chat_id",
        "message_id",
        "sender",
        "channel",
        "chat_kind",
    ] {
        check(
            &server,
            m,
            message(|b| b.without(field)),
            bad_request,
            "invalid_json",
        )
        .await;
    }
    let unknown = message(|b| b.with("bogus", json!(1)));
    check(&server, m, unknown, bad_request, "invalid_json").await;
    let nested_unknown = message(|b| b.with("sender", json!({"id": "1", "rank": "admiral"})));
    check(&server, m, nested_unknown, bad_request, "invalid_json").await;
    let kind = message(|b| b.with("chat_kind", json!("room")));
    check(&server, m, kind, bad_request, "invalid_json").await;
    let typed = message(|b| b.with("text", json!(42)));
    check(&server, m, typed, bad_request, "invalid_json").await;
    // Well-formed but invalid (SPEC §2.1).
    for (field, value) in [
        ("message_id", json!("")),
        ("chat_id", json!("")),
        ("chat_id", json!("   ")),
        ("channel", json!("")),
        ("chat_id", json!("a\nb")),
        ("text", json!("a\u{0}b")),
        ("text", json!("x".repeat(32_001))),
        ("timestamp_ms", json!(u64::MAX / 2)),
    ] {
        let body = message(|b| b.with(field, value));
        check(&server, m, body, bad_request, "invalid_message").await;
    }
    // Over the body limit.
    let huge = message(|b| b.with("text", json!("x".repeat(2 * MAX_BODY))));
    check(
        &server,
        m,
        huge,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
    )
    .await;

    // The OpenAI-compatible endpoint.
    let c = "/v1/chat/completions";
    let hello = json!([{"role": "user", "content": "hi"}]);
    for body in [
        json!({"messages": hello}),
        json!({"messages": hello, "stream": true}),
        json!({"messages": hello, "user": "  "}),
    ] {
        check(&server, c, body.to_string(), bad_request, "missing_session").await;
    }
    let no_user = json!({"messages": [{"role": "system", "content": "hi"}], "user": "bad-oa"});
    check(
        &server,
        c,
        no_user.to_string(),
        bad_request,
        "invalid_request",
    )
    .await;
    check(&server, c, "{".into(), bad_request, "invalid_json").await;
    check(
        &server,
        c,
        json!({"user": "bad-oa"}).to_string(),
        bad_request,
        "invalid_json",
    )
    .await;

    // Nothing was stored.
    assert_eq!(server.sessions().await, Vec::<Value>::new());
    for key in [group_key("bad-chat"), "bad-oa".to_string()] {
        let (status, body) = server
            .get(&format!("/v1/sessions/{}/transcript", encode_key(&key)))
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{key}: {body}");
    }

    // And the server is still fine.
    let key = server
        .send(&Msg::group("bad-chat", "good-1", "hello"))
        .await;
    assert_eq!(key, group_key("bad-chat"));
    let long_enough = Msg::group("bad-chat", "good-2", &"x".repeat(32_000));
    server.send(&long_enough).await;
    server.stop().await;
}
