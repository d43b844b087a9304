//! Real streaming end to end against `FakeStreamingModel` (an OpenAI-compatible test double on
//! loopback): the first content chunk reaches the client while the model still holds the rest;
//! `/v1/events` sends deltas then the reply; usage, finish reasons and the answering model's
//! name pass through; a failed model call answers 502 without URLs anywhere; `/v1/models`.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::fake_streaming_model::{use_model, FakeStreamingModel, Script, FAKE_MODEL};
use crate::support::{data_dir, json_of, start_server_with, Api, SseEvent, TestServer};

async fn server_for(fake: &FakeStreamingModel) -> TestServer {
    let base = fake.base_url.clone();
    start_server_with(data_dir(), move |c| use_model(c, &base)).await
}

fn chat(session: &str, text: &str, stream: bool) -> Value {
    json!({
        "model": "gpt-4o",
        "user": session,
        "stream": stream,
        "messages": [{"role": "user", "content": text}],
    })
}

async fn post_chat(api: &Api, body: &Value) -> (StatusCode, Value) {
    json_of(
        api.client
            .post(api.url("/v1/chat/completions"))
            .json(body)
            .send()
            .await
            .expect("POST /v1/chat/completions"),
    )
    .await
}

fn content_of(event: &SseEvent) -> Option<String> {
    if event.data == "[DONE]" {
        return None;
    }
    event.json()["choices"][0]["delta"]["content"]
        .as_str()
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_chunk_arrives_before_the_model_finished() {
    let script = Script {
        gated: true,
        ..Script::text(&["Hello", ", ", "world", "!"])
    };
    let fake = FakeStreamingModel::start(script.clone()).await;
    let server = server_for(&fake).await;
    // A plain subscriber does not make turns stream, but hears the deltas of one that does.
    let mut events = server.events(Some("st-first")).await;
    let request = server
        .client
        .post(server.url("/v1/chat/completions"))
        .json(&chat("st-first", "hi", true));
    let mut stream = server.sse(request).await;

    let role = stream.expect_next().await.json();
    assert_eq!(role["choices"][0]["delta"]["role"], "assistant", "{role}");
    let first = stream.expect_next().await;
    assert_eq!(content_of(&first).as_deref(), Some("Hello"), "{first:?}");
    // The fake holds everything after its first chunk until released: the client got the
    // first token while the model had not finished.
    assert_eq!(fake.chunks_sent(), 1, "the model sent only its first chunk");

    fake.release();
    let rest = stream.rest().await;
    let (done, chunks) = rest.split_last().expect("events after the first");
    assert_eq!(done.data, "[DONE]");
    let mut text = String::from("Hello");
    for c in chunks {
        text.push_str(&content_of(c).unwrap_or_default());
    }
    assert_eq!(text, script.whole());
    let finish = chunks.last().expect("a finish chunk").json();
    assert_eq!(finish["choices"][0]["finish_reason"], "stop", "{finish}");
    assert_eq!(finish["model"], FAKE_MODEL, "{finish}");

    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0]["stream"], true, "{}", requests[0]);
    assert_eq!(requests[0]["stream_options"]["include_usage"], true);

    // The transcript holds the final text once.
    let transcript = server.transcript("st-first").await.expect("the session");
    let replies: Vec<&str> = transcript
        .iter()
        .filter(|e| e.kind == "assistant")
        .map(|e| e.text.as_str())
        .collect();
    assert_eq!(replies, [script.whole().as_str()]);

    let mut heard = String::new();
    let reply = loop {
        let event = events.expect_next().await;
        match event.event.as_deref() {
            Some("delta") => heard.push_str(event.json()["text"].as_str().unwrap_or_default()),
            _ => break event,
        }
    };
    assert_eq!(reply.event.as_deref(), Some("reply"), "{reply:?}");
    assert_eq!(heard, script.whole());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_send_deltas_then_the_reply() {
    let script = Script::text(&["one ", "two ", "three"]);
    let fake = FakeStreamingModel::start(script.clone()).await;
    let server = server_for(&fake).await;
    let mut events = server
        .sse(
            server
                .client
                .get(server.url("/v1/events?session_key=st-events&deltas=true")),
        )
        .await;
    let (status, body) = post_chat(&server, &chat("st-events", "count", false)).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let mut deltas = Vec::new();
    let reply = loop {
        let event = events.expect_next().await;
        match event.event.as_deref() {
            Some("delta") => deltas.push(event.json()),
            Some("reply") => break event.json(),
            other => panic!("unexpected event {other:?}: {event:?}"),
        }
    };
    assert!(!deltas.is_empty(), "deltas before the reply");
    let mut text = String::new();
    for (i, d) in deltas.iter().enumerate() {
        assert_eq!(d["session_key"], "st-events", "{d}");
        assert_eq!(d["in_reply_to"], reply["in_reply_to"], "{d}");
        assert_eq!(d["seq"], json!(i + 1), "{d}");
        text.push_str(d["text"].as_str().expect("delta text"));
    }
    assert_eq!(text, script.whole());
    assert_eq!(reply["text"], script.whole());
    assert_eq!(reply["session_key"], "st-events");
    assert!(reply["seq"].is_u64(), "{reply}");
    assert_eq!(body["choices"][0]["message"]["content"], script.whole());
    // A subscriber asked for every turn's deltas: the model was called streaming.
    assert_eq!(fake.requests()[0]["stream"], true);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_watching_means_no_streaming_call() {
    let script = Script::text(&["plain"]);
    let fake = FakeStreamingModel::start(script).await;
    let server = server_for(&fake).await;
    // A plain /v1/events subscriber (a dashboard) does not make turns stream.
    let mut events = server.events(None).await;
    let (status, body) = post_chat(&server, &chat("st-plain", "hi", false)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "plain");
    assert_eq!(fake.requests()[0]["stream"], false);
    let reply = events.expect_next().await;
    assert_eq!(
        reply.event.as_deref(),
        Some("reply"),
        "no deltas first: {reply:?}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_finish_reason_and_model_pass_through() {
    let script = Script {
        finish_reason: "length".into(),
        usage: Some((11, 7)),
        ..Script::text(&["cut ", "off"])
    };
    let fake = FakeStreamingModel::start(script).await;
    let server = server_for(&fake).await;

    let (status, body) = post_chat(&server, &chat("st-usage", "hi", false)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["model"], FAKE_MODEL, "the model that answered: {body}");
    assert_eq!(body["choices"][0]["finish_reason"], "length", "{body}");
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}),
        "{body}"
    );

    // Streaming with include_usage: the usage chunk comes last, with no choices.
    let mut request = chat("st-usage", "again", true);
    request["stream_options"] = json!({"include_usage": true});
    let mut stream = server
        .sse(
            server
                .client
                .post(server.url("/v1/chat/completions"))
                .json(&request),
        )
        .await;
    let events = stream.rest().await;
    let (done, chunks) = events.split_last().expect("events");
    assert_eq!(done.data, "[DONE]");
    let chunks: Vec<Value> = chunks.iter().map(SseEvent::json).collect();
    let (usage, rest) = chunks.split_last().expect("a usage chunk");
    assert_eq!(usage["choices"], json!([]), "{usage}");
    assert_eq!(usage["usage"]["total_tokens"], 18, "{usage}");
    let finish = rest.last().expect("a finish chunk");
    assert_eq!(finish["choices"][0]["finish_reason"], "length", "{finish}");
    assert_eq!(finish["model"], FAKE_MODEL, "{finish}");
    assert!(
        rest.iter().all(|c| c.get("usage").is_none()),
        "usage only in the last chunk"
    );

    // Without usage from the model, our own counts.
    fake.set_script(Script::text(&["a few words here"]));
    let (_, body) = post_chat(&server, &chat("st-usage", "count yourself", false)).await;
    let usage = &body["usage"];
    assert!(usage["prompt_tokens"].as_u64().unwrap_or(0) > 0, "{body}");
    assert!(
        usage["completion_tokens"].as_u64().unwrap_or(0) > 0,
        "{body}"
    );
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(
            usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
        )
    );
    server.stop().await;
}

fn assert_no_url(text: &str) {
    assert!(
        !text.contains("http://")
            && !text.contains("127.0.0.1")
            && !text.contains("internal.example"),
        "a URL leaked: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_model_answers_502_without_urls() {
    // Nothing listens on this port: the transport error names the endpoint internally.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let server = start_server_with(data_dir(), move |c| use_model(c, &base)).await;
    let (status, body) = post_chat(&server, &chat("st-fail", "hi", false)).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    let error = &body["error"];
    assert_eq!(error["type"], "server_error", "{body}");
    assert_eq!(error["code"], "model_error", "{body}");
    assert!(error["param"].is_null(), "{body}");
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert_no_url(&body.to_string());
    let transcript = server
        .transcript_json("st-fail")
        .await
        .expect("the session");
    assert_no_url(&serde_json::to_string(&transcript).unwrap());
    server.stop().await;

    // A model whose error message carries a URL: stripped too, streamed or not.
    let fake = FakeStreamingModel::start(Script {
        fail: Some((400, "see http://internal.example/docs for details".into())),
        ..Script::text(&[])
    })
    .await;
    let server = server_for(&fake).await;
    let (status, body) = post_chat(&server, &chat("st-fail-2", "hi", false)).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert_no_url(&body.to_string());
    let mut stream = server
        .sse(
            server
                .client
                .post(server.url("/v1/chat/completions"))
                .json(&chat("st-fail-2", "hi", true)),
        )
        .await;
    let events = stream.rest().await;
    let (done, before) = events.split_last().expect("events");
    assert_eq!(done.data, "[DONE]");
    let error = before.last().expect("an error payload").json();
    assert_eq!(error["error"]["code"], "model_error", "{error}");
    assert_no_url(&error.to_string());
    let transcript = server
        .transcript_json("st-fail-2")
        .await
        .expect("the session");
    assert_no_url(&serde_json::to_string(&transcript).unwrap());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_lists_the_configured_models() {
    let fake = FakeStreamingModel::start(Script::text(&["x"])).await;
    let base = fake.base_url.clone();
    let server = start_server_with(data_dir(), move |c| {
        use_model(c, &base);
        c.model.fallbacks = vec!["backup-model".into()];
    })
    .await;
    let (status, body) = server.get("/v1/models").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["object"], "list");
    let ids: Vec<&str> = body["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|m| {
            assert_eq!(m["object"], "model", "{m}");
            assert!(m["created"].is_u64() && m["owned_by"].is_string(), "{m}");
            m["id"].as_str().expect("id")
        })
        .collect();
    // The configured models first, then the agents by the names that select them.
    assert_eq!(ids, [FAKE_MODEL, "backup-model", "agent:main"]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_stream_commits_nothing_and_the_client_gets_the_new_answer_once() {
    let script = Script {
        gated: true,
        ..Script::text(&["Hello", ", ", "world"])
    };
    let fake = FakeStreamingModel::start(script.clone()).await;
    let base = fake.base_url.clone();
    let server = start_server_with(data_dir(), move |c| {
        use_model(c, &base);
        c.queue.mode = turnstile::config::QueueModeSetting::Interrupt;
        c.queue.debounce_ms = 0;
    })
    .await;
    let request = server
        .client
        .post(server.url("/v1/chat/completions"))
        .json(&chat("st-int", "tell me", true));
    let mut stream = server.sse(request).await;
    stream.expect_next().await;
    let first = stream.expect_next().await;
    assert_eq!(content_of(&first).as_deref(), Some("Hello"));

    // A new message interrupts the held call; the next call streams freely.
    fake.set_script(Script::text(&["Hello", ", ", "world"]));
    let (status, body) = post_chat(&server, &chat("st-int", "go on", false)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], script.whole());

    let rest = stream.rest().await;
    let mut text = String::from("Hello");
    for event in &rest {
        text.push_str(&content_of(event).unwrap_or_default());
    }
    assert_eq!(
        text,
        script.whole(),
        "the restarted turn's text is not repeated"
    );
    assert_eq!(rest.last().map(|e| e.data.as_str()), Some("[DONE]"));
    assert_eq!(
        fake.requests().len(),
        2,
        "the interrupted call, then the new one"
    );

    let transcript = server.transcript("st-int").await.expect("the session");
    let kinds: Vec<&str> = transcript.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["user", "user", "assistant"],
        "nothing of the cancelled turn"
    );
    server.stop().await;
}
