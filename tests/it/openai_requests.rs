//! `POST /v1/chat/completions` request fields against a recording fake OpenAI-compatible model
//! server on loopback: system instructions kept and sent, parameters forwarded, unsupported
//! fields refused by name, the client-side tool round trip, idempotent retries, `user` ids
//! that differ only in case. The official `openai` Python client drives the tool round trip
//! and a retry in `tests/openai_client/requests_roundtrip.py`.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::support::{
    data_dir, encode_key, eventually, json_of, one_turn_per_message, start_server_with, Api,
    TestServer, PATIENCE,
};

/// The fake model's state: every request body it received, and a gate that holds answers.
#[derive(Clone)]
struct Recorder {
    requests: Arc<Mutex<Vec<Value>>>,
    open: watch::Receiver<bool>,
}

/// A fake OpenAI-compatible server on `127.0.0.1:0`. It answers a trailing tool message with
/// "the tool said: <result>", a user message mentioning the weather (when `get_weather` is
/// offered) with a call of it, and anything else with "answer to: <text>".
struct FakeModel {
    base_url: String,
    recorder: Recorder,
    gate: watch::Sender<bool>,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl FakeModel {
    async fn start() -> Self {
        let (gate, open) = watch::channel(true);
        let recorder = Recorder {
            requests: Arc::new(Mutex::new(Vec::new())),
            open,
        };
        let app = Router::new()
            .route("/v1/chat/completions", post(fake_completion))
            .with_state(recorder.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the fake model");
        let addr = listener.local_addr().expect("fake model address");
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = rx.await;
                })
                .await;
        });
        Self {
            base_url: format!("http://{addr}/v1"),
            recorder,
            gate,
            shutdown: Some(tx),
            task,
        }
    }

    /// Every request body received so far.
    fn requests(&self) -> Vec<Value> {
        self.recorder
            .requests
            .lock()
            .expect("the recorder lock")
            .clone()
    }

    /// Holds answers (`false`) or lets them go (`true`).
    fn set_open(&self, open: bool) {
        let _ = self.gate.send(open);
    }

    async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = tokio::time::timeout(PATIENCE, &mut self.task).await;
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn fake_completion(State(recorder): State<Recorder>, Json(body): Json<Value>) -> Response {
    recorder
        .requests
        .lock()
        .expect("the recorder lock")
        .push(body.clone());
    let mut open = recorder.open.clone();
    let _ = open.wait_for(|o| *o).await;
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let offers_weather = body["tools"]
        .as_array()
        .is_some_and(|tools| tools.iter().any(|t| t["function"]["name"] == "get_weather"));
    let text_of = |m: &Value| m["content"].as_str().unwrap_or_default().to_string();
    let (content, calls) = if last["role"] == "tool" {
        (format!("the tool said: {}", text_of(&last)), Vec::new())
    } else if offers_weather && text_of(&last).contains("weather") {
        let call = json!({"id": "call_w1", "type": "function",
                          "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}});
        (String::new(), vec![call])
    } else {
        (format!("answer to: {}", text_of(&last)), Vec::new())
    };
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    if body["stream"] == json!(true) {
        let mut delta = json!({"role": "assistant", "content": content});
        if !calls.is_empty() {
            let indexed: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let mut c = c.clone();
                    c["index"] = json!(i);
                    c
                })
                .collect();
            delta["tool_calls"] = json!(indexed);
        }
        let chunks = [
            json!({"choices": [{"index": 0, "delta": delta, "finish_reason": null}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}),
        ];
        let mut text = String::new();
        for c in chunks {
            text.push_str(&format!("data: {c}\n\n"));
        }
        text.push_str("data: [DONE]\n\n");
        return ([("content-type", "text/event-stream")], text).into_response();
    }
    let mut message = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        message["tool_calls"] = json!(calls);
    }
    Json(json!({
        "id": "fake-1", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }))
    .into_response()
}

/// A Turnstile server whose model is `fake`, one turn per message.
async fn server_with(fake: &FakeModel, dir: Arc<tempfile::TempDir>) -> TestServer {
    let base_url = fake.base_url.clone();
    start_server_with(dir, move |c| {
        one_turn_per_message(c);
        c.model.provider = "openai".into();
        c.model.base_url = base_url;
        c.model.model = "fake-model".into();
        c.model.max_retries = 0;
    })
    .await
}

/// POSTs a completion with extra headers; returns status and body.
async fn post_completion(api: &Api, body: &Value, headers: &[(&str, &str)]) -> (StatusCode, Value) {
    let mut request = api.client.post(api.url("/v1/chat/completions")).json(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    json_of(request.send().await.expect("POST /v1/chat/completions")).await
}

fn user_says(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

/// The system messages of a request the fake model received.
fn system_texts(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "system")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_instructions_are_kept_durably_and_sent() {
    let fake = FakeModel::start().await;
    let dir = data_dir();
    let server = server_with(&fake, Arc::clone(&dir)).await;
    let body = json!({"user": "inst-user", "messages": [
        {"role": "system", "content": "You are terse."}, user_says("hi")]});
    let (status, reply) = post_completion(&server, &body, &[]).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["choices"][0]["message"]["content"], "answer to: hi");
    let sent = fake.requests();
    assert!(
        system_texts(&sent[0])
            .iter()
            .any(|t| t.contains("You are terse.")),
        "{}",
        sent[0]
    );

    // Without system messages the stored instructions stay; new ones replace them.
    let body = json!({"user": "inst-user", "messages": [user_says("again")]});
    assert_eq!(post_completion(&server, &body, &[]).await.0, StatusCode::OK);
    assert!(system_texts(&fake.requests()[1])
        .iter()
        .any(|t| t.contains("You are terse.")));
    let body = json!({"user": "inst-user", "messages": [
        {"role": "developer", "content": "Be kind."}, user_says("third")]});
    assert_eq!(post_completion(&server, &body, &[]).await.0, StatusCode::OK);
    let third = system_texts(&fake.requests()[2]).join("\n");
    assert!(
        third.contains("Be kind.") && !third.contains("You are terse."),
        "{third}"
    );
    // The system messages are not stored as user entries.
    let transcript = server.transcript("inst-user").await.expect("the session");
    assert!(
        transcript.iter().all(|e| !e.text.contains("Be kind.")),
        "{transcript:?}"
    );
    server.stop().await;

    // Durable: after a restart the context dump still shows them.
    let server = server_with(&fake, dir).await;
    let (status, dump) = server
        .get(&format!("/v1/sessions/{}/context", encode_key("inst-user")))
        .await;
    assert_eq!(status, StatusCode::OK, "{dump}");
    let blocks = dump["blocks"].as_array().expect("blocks");
    assert!(
        blocks
            .iter()
            .any(|b| b["kind"] == "system_prompt" && b["content"] == "Be kind."),
        "{dump}"
    );
    server.stop().await;
    fake.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parameters_are_forwarded_and_unsupported_fields_refused() {
    let fake = FakeModel::start().await;
    let server = server_with(&fake, data_dir()).await;
    let body = json!({"messages": [user_says("params")], "temperature": 0.3, "top_p": 0.5,
                      "max_tokens": 50, "stop": ["END"], "seed": 11,
                      "response_format": {"type": "json_object"}, "presence_penalty": 0.5});
    let (status, reply) = post_completion(&server, &body, &[("X-Session-Key", "params")]).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let sent = fake.requests();
    let got = &sent[0];
    assert_eq!(got["temperature"], json!(0.3), "{got}");
    assert_eq!(got["top_p"], json!(0.5), "{got}");
    assert_eq!(got["max_tokens"], json!(50), "{got}");
    assert_eq!(got["stop"], json!(["END"]), "{got}");
    assert_eq!(got["seed"], json!(11), "{got}");
    assert_eq!(got["presence_penalty"], json!(0.5), "{got}");
    assert_eq!(
        got["response_format"],
        json!({"type": "json_object"}),
        "{got}"
    );
    // A plain request sends none of them.
    let body = json!({"messages": [user_says("plain")]});
    assert_eq!(
        post_completion(&server, &body, &[("X-Session-Key", "params")])
            .await
            .0,
        StatusCode::OK
    );
    let plain = &fake.requests()[1];
    for name in ["temperature", "top_p", "stop", "seed", "response_format"] {
        assert!(plain.get(name).is_none(), "{name} sent unasked: {plain}");
    }

    // n = 2: a 400 naming `n`, in OpenAI's shape; nothing stored, the model not called.
    let body = json!({"messages": [user_says("two please")], "n": 2});
    let (status, error) = post_completion(&server, &body, &[("X-Session-Key", "refused")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert_eq!(error["error"]["param"], "n", "{error}");
    assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
    assert!(error["error"]["message"].is_string() && error["error"]["code"].is_string());
    for (field, value) in [("logprobs", json!(true)), ("temperature", json!(9))] {
        let mut body = json!({"messages": [user_says("x")]});
        body[field] = value;
        let (status, error) =
            post_completion(&server, &body, &[("X-Session-Key", "refused")]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
        assert_eq!(error["error"]["param"], field, "{error}");
    }
    assert_eq!(server.session("refused").await.0, StatusCode::NOT_FOUND);
    assert_eq!(fake.requests().len(), 2);
    server.stop().await;
    fake.stop().await;
}

fn weather_tool() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather",
            "description": "the weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_tool_round_trip() {
    let fake = FakeModel::start().await;
    let server = server_with(&fake, data_dir()).await;
    let session = [("X-Session-Key", "tools")];
    let question = user_says("what is the weather in Oslo?");
    let body = json!({"messages": [question], "tools": weather_tool()});
    let (status, reply) = post_completion(&server, &body, &session).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let choice = &reply["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{reply}");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["id"], "call_w1", "{reply}");
    assert_eq!(call["type"], "function", "{reply}");
    assert_eq!(call["function"]["name"], "get_weather", "{reply}");
    assert_eq!(
        call["function"]["arguments"], "{\"city\":\"Oslo\"}",
        "{reply}"
    );
    assert!(fake.requests()[0]["tools"][0]["function"]["name"] == "get_weather");

    // The client runs the tool and sends its result as the newest message.
    let body = json!({"tools": weather_tool(), "messages": [
        question,
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_w1", "content": "sunny, 21 C"}]});
    let (status, reply) = post_completion(&server, &body, &session).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["choices"][0]["finish_reason"], "stop", "{reply}");
    assert_eq!(
        reply["choices"][0]["message"]["content"],
        "the tool said: sunny, 21 C"
    );
    // The model got the result right after its call, once.
    let second = &fake.requests()[1];
    let messages = second["messages"].as_array().expect("messages");
    let at = messages
        .iter()
        .position(|m| m["tool_calls"][0]["id"] == "call_w1")
        .expect("the call is in context");
    assert_eq!(messages[at + 1]["role"], "tool", "{second}");
    assert_eq!(messages[at + 1]["tool_call_id"], "call_w1", "{second}");
    assert_eq!(messages[at + 1]["content"], "sunny, 21 C", "{second}");
    let results = messages.iter().filter(|m| m["role"] == "tool").count();
    assert_eq!(results, 1, "{second}");
    // Stored: user, tool_call, tool_result, assistant.
    let kinds: Vec<String> = server
        .transcript("tools")
        .await
        .expect("the session")
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["user", "tool_call", "tool_result", "assistant"]);
    server.stop().await;
    fake.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_carries_the_tool_calls() {
    let fake = FakeModel::start().await;
    let server = server_with(&fake, data_dir()).await;
    let body = json!({"stream": true, "user": "stream-tools", "tools": weather_tool(),
                      "messages": [user_says("the weather in Oslo?")]});
    let mut stream = server
        .sse(
            server
                .client
                .post(server.url("/v1/chat/completions"))
                .json(&body),
        )
        .await;
    let mut chunks: Vec<Value> = Vec::new();
    while let Some(event) = tokio::time::timeout(PATIENCE, stream.next())
        .await
        .expect("timed out waiting for a chunk")
    {
        if event.data != "[DONE]" {
            chunks.push(event.json());
        }
    }
    let call = chunks
        .iter()
        .find_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0).cloned())
        .unwrap_or_else(|| panic!("no tool call in {chunks:?}"));
    assert_eq!(call["index"], 0, "{call}");
    assert_eq!(call["id"], "call_w1", "{call}");
    assert_eq!(call["function"]["name"], "get_weather", "{call}");
    let last = chunks.last().expect("a final chunk");
    assert_eq!(last["choices"][0]["finish_reason"], "tool_calls", "{last}");
    server.stop().await;
    fake.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_with_the_same_idempotency_key_joins_the_original() {
    let fake = FakeModel::start().await;
    let server = server_with(&fake, data_dir()).await;
    fake.set_open(false);
    let body = json!({"messages": [user_says("only once")]});
    let headers = [("X-Session-Key", "idem"), ("Idempotency-Key", "key-1")];
    let first = {
        let api = Api::new(server.api.url(""));
        let body = body.clone();
        tokio::spawn(async move { post_completion(&api, &body, &headers).await })
    };
    eventually(PATIENCE, "the model is called", || async {
        (!fake.requests().is_empty())
            .then_some(())
            .ok_or("not yet".to_string())
    })
    .await;
    // The retry arrives while the first is still waiting for the model.
    let retry = {
        let api = Api::new(server.api.url(""));
        let body = body.clone();
        tokio::spawn(async move { post_completion(&api, &body, &headers).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    fake.set_open(true);
    let (s1, r1) = first.await.expect("the first request");
    let (s2, r2) = retry.await.expect("the retry");
    assert_eq!((s1, s2), (StatusCode::OK, StatusCode::OK), "{r1} {r2}");
    let text = &r1["choices"][0]["message"]["content"];
    assert_eq!(text, "answer to: only once");
    assert_eq!(&r2["choices"][0]["message"]["content"], text);
    assert_eq!(r1["id"], r2["id"]);
    // A late retry, after the answer: read back from the transcript.
    let (s3, r3) = post_completion(&server, &body, &headers).await;
    assert_eq!(s3, StatusCode::OK, "{r3}");
    assert_eq!(&r3["choices"][0]["message"]["content"], text);
    assert_eq!(fake.requests().len(), 1, "one model call");
    let users = server
        .transcript("idem")
        .await
        .expect("the session")
        .into_iter()
        .filter(|e| e.kind == "user")
        .count();
    assert_eq!(users, 1, "one stored user entry");

    // Another key is another message.
    let other = [("X-Session-Key", "idem"), ("Idempotency-Key", "key-2")];
    assert_eq!(
        post_completion(&server, &body, &other).await.0,
        StatusCode::OK
    );
    assert_eq!(fake.requests().len(), 2);

    // Without a key: the official clients mark every attempt (`x-stainless-retry-count`, 0
    // on the first); a marked retry with the same body joins its first attempt, the same
    // body without the mark is a new message.
    let body = json!({"messages": [user_says("no key")]});
    let session = [("X-Session-Key", "idem")];
    let first = [("X-Session-Key", "idem"), ("x-stainless-retry-count", "0")];
    let (_, a) = post_completion(&server, &body, &first).await;
    let retried = [("X-Session-Key", "idem"), ("x-stainless-retry-count", "1")];
    let (_, b) = post_completion(&server, &body, &retried).await;
    assert_eq!(a["id"], b["id"]);
    assert_eq!(fake.requests().len(), 3);
    let (_, c) = post_completion(&server, &body, &session).await;
    assert_ne!(a["id"], c["id"]);
    assert_eq!(fake.requests().len(), 4);
    // A client that does not mark its first attempt is not remembered: what it marks as a
    // retry later cannot be matched, and is a new message.
    let body = json!({"messages": [user_says("unmarked")]});
    let (_, d) = post_completion(&server, &body, &session).await;
    let (_, e) = post_completion(&server, &body, &retried).await;
    assert_ne!(d["id"], e["id"]);
    assert_eq!(fake.requests().len(), 6);
    server.stop().await;
    fake.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_differing_in_case_are_distinct_sessions() {
    let fake = FakeModel::start().await;
    let server = server_with(&fake, data_dir()).await;
    for (user, text) in [("CaseUser", "I am upper"), ("caseuser", "I am lower")] {
        let body = json!({"user": user, "messages": [user_says(text)]});
        let (status, reply) = post_completion(&server, &body, &[]).await;
        assert_eq!(status, StatusCode::OK, "{reply}");
    }
    let upper = server
        .transcript("%43ase%55ser")
        .await
        .expect("CaseUser's session");
    let lower = server
        .transcript("caseuser")
        .await
        .expect("caseuser's session");
    assert_eq!(upper.len(), 2, "{upper:?}");
    assert_eq!(lower.len(), 2, "{lower:?}");
    assert_eq!(upper[0].text, "I am upper");
    assert_eq!(lower[0].text, "I am lower");
    // The second model call saw only its own user's history.
    let second = fake.requests()[1].to_string();
    assert!(!second.contains("I am upper"), "{second}");
    server.stop().await;
    fake.stop().await;
}

/// The official `openai` Python client against Turnstile: the tool round trip and a retry
/// (`tests/openai_client/requests_roundtrip.py`). Skipped with a message when python3 or the
/// package is missing, unless `CI=true`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_round_trips() {
    let has_client = Command::new("python3")
        .args(["-c", "import openai"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_client {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI must have python3 with the openai package"
        );
        eprintln!("skipped: python3 with the `openai` package is not installed");
        return;
    }
    let fake = FakeModel::start().await;
    let server = server_with(&fake, data_dir()).await;
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/openai_client/requests_roundtrip.py");
    let base_url = server.api.url("/v1");
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg(script)
            .arg(base_url)
            .env("OPENAI_API_KEY", "unused")
            .output()
    })
    .await
    .expect("the python task")
    .expect("running python3");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("ok"), "{stdout}");
    // The round trip made two model calls, the retried question one.
    assert_eq!(fake.requests().len(), 3, "{stdout}");
    let users = server
        .transcript("py-retry")
        .await
        .expect("the retried session")
        .into_iter()
        .filter(|e| e.kind == "user")
        .count();
    assert_eq!(users, 1);
    server.stop().await;
    fake.stop().await;
}
