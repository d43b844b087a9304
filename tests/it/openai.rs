//! `POST /v1/chat/completions`, OpenAI-compatible, with the real reqwest client: the runtime
//! keeps the history, the client sends only the new message; the session comes from the
//! `X-Session-Key` header or the `user` field.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::{json_of, start_server, Api, SseEvent};

/// A non-streaming completion; returns the reply text after checking the response shape.
async fn complete(api: &Api, session_header: Option<&str>, body: Value) -> String {
    let mut request = api.client.post(api.url("/v1/chat/completions")).json(&body);
    if let Some(key) = session_header {
        request = request.header("X-Session-Key", key);
    }
    let (status, response) =
        json_of(request.send().await.expect("POST /v1/chat/completions")).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_eq!(response["object"], "chat.completion", "{response}");
    assert!(
        response["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("chatcmpl-")),
        "{response}"
    );
    assert!(response["created"].is_u64(), "{response}");
    assert!(response["model"].is_string(), "{response}");
    let choice = &response["choices"][0];
    assert_eq!(choice["index"], 0, "{response}");
    assert_eq!(choice["finish_reason"], "stop", "{response}");
    assert_eq!(choice["message"]["role"], "assistant", "{response}");
    choice["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no content in {response}"))
        .to_string()
}

/// A streaming completion; returns the reply text assembled from the chunks after checking
/// the chunk shapes and the closing `[DONE]`.
async fn complete_streaming(api: &Api, body: Value) -> (String, usize) {
    let mut stream = api
        .sse(api.client.post(api.url("/v1/chat/completions")).json(&body))
        .await;
    let mut events: Vec<SseEvent> = Vec::new();
    while let Some(event) = tokio::time::timeout(crate::support::PATIENCE, stream.next())
        .await
        .expect("timed out waiting for a chunk")
    {
        events.push(event);
    }
    let (done, chunks) = events.split_last().expect("no events at all");
    assert_eq!(done.data, "[DONE]", "the stream must end with [DONE]");
    assert!(
        chunks.len() >= 3,
        "role, content and stop chunks expected: {chunks:?}"
    );
    let chunks: Vec<Value> = chunks.iter().map(SseEvent::json).collect();
    let id = chunks[0]["id"].clone();
    for chunk in &chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk", "{chunk}");
        assert_eq!(chunk["id"], id, "one id for the whole stream: {chunk}");
        assert_eq!(chunk["choices"][0]["index"], 0, "{chunk}");
    }
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let last = chunks.last().expect("a final chunk");
    assert_eq!(last["choices"][0]["finish_reason"], "stop", "{last}");
    let contents: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    (contents.concat(), contents.len())
}

fn user_says(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

/// The echo model describes what it received: the message count grows by two per turn
/// (the previous user message and reply), after the system prompt.
fn assert_echo(reply: &str, messages: usize, last: &str) {
    let prefix = format!("echo: received {messages} messages (");
    assert!(
        reply.starts_with(&prefix),
        "expected {prefix:?}…, got {reply:?}"
    );
    assert!(
        reply.ends_with(&format!("tokens); last: {last}")),
        "{reply:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_streaming_session_by_header_and_by_user() {
    let server = start_server().await;

    // By header. Only the newest user message counts: the runtime owns the history.
    let body = json!({"model": "echo", "messages": [
        {"role": "system", "content": "ignored: the runtime has its own system prompt"},
        user_says("hello there"),
    ]});
    let first = complete(&server, Some("OA-Header-1"), body).await;
    assert_echo(&first, 2, "hello there");
    let body = json!({"model": "echo", "messages": [user_says("and again")]});
    let second = complete(&server, Some("oa-header-1"), body).await;
    assert_echo(&second, 4, "and again");

    let transcript = server
        .transcript("oa-header-1")
        .await
        .expect("the session exists");
    let texts: Vec<(&str, &str)> = transcript
        .iter()
        .map(|e| (e.kind.as_str(), e.text.as_str()))
        .collect();
    assert_eq!(
        texts,
        [
            ("user", "hello there"),
            ("assistant", first.as_str()),
            ("user", "and again"),
            ("assistant", second.as_str()),
        ]
    );

    // By the `user` field: a different session, starting from scratch.
    let body = json!({"messages": [user_says("I am alice")], "user": "alice-oa"});
    let reply = complete(&server, None, body).await;
    assert_echo(&reply, 2, "I am alice");
    let body = json!({"messages": [user_says("still alice")], "user": "alice-oa"});
    let reply = complete(&server, None, body).await;
    assert_echo(&reply, 4, "still alice");
    let transcript = server
        .transcript("alice-oa")
        .await
        .expect("the session exists");
    assert_eq!(transcript.len(), 4, "{transcript:?}");
    // Content given as parts works too.
    let body = json!({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "in parts"}
    ]}], "user": "alice-oa"});
    let reply = complete(&server, None, body).await;
    assert_echo(&reply, 6, "in parts");

    let keys: Vec<Value> = server
        .sessions()
        .await
        .iter()
        .map(|s| s["session_key"].clone())
        .collect();
    assert_eq!(keys, [json!("alice-oa"), json!("oa-header-1")]);
    server.stop().await;
}

/// The id of a streamed completion sent with `headers` (every event read to the end).
async fn streamed_id(api: &Api, body: &Value, headers: &[(&str, &str)]) -> Value {
    let mut request = api.client.post(api.url("/v1/chat/completions")).json(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut stream = api.sse(request).await;
    let mut ids = Vec::new();
    while let Some(event) = tokio::time::timeout(crate::support::PATIENCE, stream.next())
        .await
        .expect("timed out waiting for a chunk")
    {
        if event.data != "[DONE]" {
            ids.push(event.json()["id"].clone());
        }
    }
    ids.first().cloned().expect("a chunk with an id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_retry_of_an_official_client_joins_its_first_attempt() {
    let server = start_server().await;
    let body = json!({"stream": true, "user": "stream-retry",
                      "messages": [user_says("said once")]});
    let first = streamed_id(&server, &body, &[("x-stainless-retry-count", "0")]).await;
    let retry = streamed_id(&server, &body, &[("x-stainless-retry-count", "1")]).await;
    assert_eq!(first, retry, "the retry joins the first attempt");
    let unmarked = streamed_id(&server, &body, &[]).await;
    assert_ne!(first, unmarked, "an unmarked request is a new message");
    let users = server
        .transcript("stream-retry")
        .await
        .expect("the session exists")
        .into_iter()
        .filter(|e| e.kind == "user")
        .count();
    assert_eq!(users, 2, "the first attempt and the unmarked request");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_chunks_add_up_to_the_reply() {
    let server = start_server().await;
    let long = "a fairly long message, so that the reply spans several chunks of the stream: \
                one, two, three, four, five, six, seven";

    let body = json!({"model": "echo", "stream": true, "user": "streamer",
                      "messages": [user_says(long)]});
    let (first, pieces) = complete_streaming(&server, body).await;
    assert_echo(&first, 2, long);
    assert!(pieces > 1, "expected several content chunks, got {pieces}");

    let body = json!({"stream": true, "user": "streamer", "messages": [user_says("short")]});
    let (second, _) = complete_streaming(&server, body).await;
    assert_echo(&second, 4, "short");

    // The streamed text is exactly what was stored.
    let transcript = server
        .transcript("streamer")
        .await
        .expect("the session exists");
    let answers: Vec<&str> = transcript
        .iter()
        .filter(|e| e.kind == "assistant")
        .map(|e| e.text.as_str())
        .collect();
    assert_eq!(answers, [first.as_str(), second.as_str()]);

    // Streaming and non-streaming share the session.
    let body = json!({"messages": [user_says("not streamed")], "user": "streamer"});
    let third = complete(&server, None, body).await;
    assert_echo(&third, 6, "not streamed");
    server.stop().await;
}
