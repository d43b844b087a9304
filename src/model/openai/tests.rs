//! [`OpenAiModel`] against a scripted fake OpenAI-compatible server on 127.0.0.1:0.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};

use hyper_util::client::proxy::matcher::Matcher;

use super::*;
use crate::error::ModelError;
use crate::model::{CalibrationStore, ChatMessage, Model, ModelRequest, Role, ToolSpec, Usage};

/// One scripted answer of the fake server.
enum Canned {
    /// A status, extra headers and a JSON body.
    Json(u16, Vec<(&'static str, String)>, Value),
    /// A 200 `text/event-stream` whose body is these chunks, in order.
    Sse(Vec<String>),
    /// Answers after a pause (to trip the client's timeout).
    Slow(Duration),
}

#[derive(Default)]
struct FakeState {
    /// Scripted answers per requested model name, consumed in order.
    scripts: Mutex<HashMap<String, VecDeque<Canned>>>,
    /// Every request received: (model, body, Authorization header).
    seen: Mutex<Vec<(String, Value, Option<String>)>>,
}

/// A fake OpenAI-compatible server: answers `POST /v1/chat/completions` from a script. It is a
/// test double, not a model.
struct FakeOpenAi {
    addr: SocketAddr,
    state: Arc<FakeState>,
}

impl FakeOpenAi {
    async fn start() -> Self {
        let state = Arc::new(FakeState::default());
        let app = Router::new()
            .route("/v1/chat/completions", post(fake_completions))
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, state }
    }

    fn script(&self, model: &str, answers: Vec<Canned>) {
        self.state
            .scripts
            .lock()
            .unwrap()
            .entry(model.to_string())
            .or_default()
            .extend(answers);
    }

    fn models_seen(&self) -> Vec<String> {
        let seen = self.state.seen.lock().unwrap();
        seen.iter().map(|(m, _, _)| m.clone()).collect()
    }

    fn last_request(&self) -> (Value, Option<String>) {
        let seen = self.state.seen.lock().unwrap();
        let (_, body, auth) = seen.last().unwrap();
        (body.clone(), auth.clone())
    }

    fn settings(&self, model: &str) -> OpenAiSettings {
        let mut s = OpenAiSettings::new(format!("http://{}/v1/", self.addr), model);
        s.max_retries = 2;
        s.backoff_base = Duration::from_millis(1);
        s.backoff_max = Duration::from_millis(200);
        s.timeout = Duration::from_secs(5);
        s.connect_timeout = Duration::from_secs(1);
        s
    }

    /// [`FakeOpenAi::settings`] with the API key `sk-test-key`.
    fn keyed_settings(&self, model: &str) -> OpenAiSettings {
        let mut s = self.settings(model);
        s.api_key = Some(ApiKey::new("sk-test-key"));
        s
    }

    fn model(&self, model: &str) -> OpenAiModel {
        OpenAiModel::new(self.settings(model)).unwrap()
    }
}

async fn fake_completions(
    State(state): State<Arc<FakeState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let model = body["model"].as_str().unwrap_or_default().to_string();
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    state.seen.lock().unwrap().push((model.clone(), body, auth));
    let canned = state
        .scripts
        .lock()
        .unwrap()
        .get_mut(&model)
        .and_then(VecDeque::pop_front);
    match canned {
        Some(Canned::Json(status, headers, body)) => {
            let mut response =
                (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response();
            for (name, value) in headers {
                response.headers_mut().insert(name, value.parse().unwrap());
            }
            response
        }
        Some(Canned::Sse(chunks)) => {
            let stream = futures_util::stream::iter(
                chunks
                    .into_iter()
                    .map(|c| Ok::<_, Infallible>(Bytes::from(c))),
            );
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream))
                .unwrap()
        }
        Some(Canned::Slow(pause)) => {
            tokio::time::sleep(pause).await;
            (StatusCode::OK, axum::Json(reply_json("late"))).into_response()
        }
        None => (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(json!({"error": {"message": "fake server: no script left"}})),
        )
            .into_response(),
    }
}

fn reply_json(text: &str) -> Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 3, "total_tokens": 123}
    })
}

fn ok(text: &str) -> Canned {
    Canned::Json(200, vec![], reply_json(text))
}

fn request() -> ModelRequest {
    ModelRequest {
        messages: vec![
            ChatMessage::text(Role::System, "be brief"),
            ChatMessage::text(Role::User, "hello"),
        ],
        tools: vec![],
        prompt_tokens: 100,
        max_output_tokens: 256,
        params: Default::default(),
    }
}

fn chunk(delta: Value) -> String {
    format!(
        "data: {}\n\n",
        json!({"id": "c", "object": "chat.completion.chunk",
               "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
    )
}

#[tokio::test]
async fn non_streaming_reply_sends_common_fields_key_and_calibrates() {
    let fake = FakeOpenAi::start().await;
    fake.script("m", vec![ok("hi there")]);
    let calibration = CalibrationStore::new();
    let model = OpenAiModel::new(fake.keyed_settings("m"))
        .unwrap()
        .with_calibration(calibration.clone());
    assert!(!format!("{model:?}").contains("sk-test-key"));
    assert_eq!(model.name(), "m");

    let reply = model.complete(&request()).await.unwrap();
    assert_eq!(reply.text, "hi there");
    assert!(reply.tool_calls.is_empty());
    assert_eq!(
        reply.usage,
        Some(Usage {
            prompt_tokens: 120,
            completion_tokens: 3
        })
    );
    let (body, auth) = fake.last_request();
    assert_eq!(auth.as_deref(), Some("Bearer sk-test-key"));
    assert_eq!(
        body,
        json!({"model": "m", "stream": false, "max_tokens": 256, "messages": [
            {"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]})
    );
    assert!((calibration.ratio("m") - 1.2).abs() < 1e-9);
}

#[tokio::test]
async fn tool_calls_are_parsed_and_tools_sent_as_functions() {
    let fake = FakeOpenAi::start().await;
    fake.script(
        "m",
        vec![Canned::Json(
            200,
            vec![],
            json!({"choices": [{"message": {"role": "assistant", "content": null,
                "tool_calls": [
                    {"id": "call_a", "type": "function",
                     "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}},
                    {"id": "call_b", "type": "function",
                     "function": {"name": "time", "arguments": "{}"}}]},
                "finish_reason": "tool_calls"}]}),
        )],
    );
    let mut req = request();
    req.tools.push(ToolSpec {
        name: "weather".into(),
        description: "current weather".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    });
    let reply = fake.model("m").complete(&req).await.unwrap();
    let calls: Vec<_> = reply
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(
        calls,
        vec![
            ("call_a", "weather", "{\"city\":\"Oslo\"}"),
            ("call_b", "time", "{}")
        ]
    );
    assert_eq!(reply.text, "");
    assert_eq!(reply.usage, None);
    let (body, _) = fake.last_request();
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["function"]["name"], "weather");
}

#[tokio::test]
async fn streaming_sends_deltas_and_collects_usage() {
    let fake = FakeOpenAi::start().await;
    let usage = json!({"id": "c", "choices": [],
                       "usage": {"prompt_tokens": 90, "completion_tokens": 2}});
    fake.script(
        "m",
        vec![Canned::Sse(vec![
            ": keep-alive\n\n".into(),
            chunk(json!({"role": "assistant", "content": ""})),
            chunk(json!({"content": "Hel"})),
            // A chunk split mid-line.
            chunk(json!({"content": "lo"}))[..20].to_string(),
            chunk(json!({"content": "lo"}))[20..].to_string(),
            format!(
                "data: {}\n\n",
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            ),
            format!("data: {usage}\n\n"),
            "data: [DONE]\n\n".into(),
        ])],
    );
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let collector = tokio::spawn(async move {
        let mut deltas = Vec::new();
        while let Some(d) = rx.recv().await {
            deltas.push(d);
        }
        deltas
    });
    let model = fake.model("m");
    let reply = model.complete_streaming(&request(), tx).await.unwrap();
    drop(model);
    assert_eq!(reply.text, "Hello");
    assert_eq!(reply.usage.unwrap().prompt_tokens, 90);
    assert_eq!(collector.await.unwrap(), vec!["Hel", "lo"]);
    let (body, auth) = fake.last_request();
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(auth, None);
}

#[tokio::test]
async fn streamed_tool_calls_are_assembled_by_index() {
    let fake = FakeOpenAi::start().await;
    let call = |index: u32, id: Option<&str>, name: Option<&str>, args: &str| {
        let mut function = json!({"arguments": args});
        if let Some(n) = name {
            function["name"] = json!(n);
        }
        let mut c = json!({"index": index, "function": function});
        if let Some(id) = id {
            c["id"] = json!(id);
            c["type"] = json!("function");
        }
        chunk(json!({"tool_calls": [c]}))
    };
    fake.script(
        "m",
        vec![Canned::Sse(vec![
            call(0, Some("call_1"), Some("search"), ""),
            call(1, Some("call_2"), Some("fetch"), "{\"url\":"),
            call(0, None, None, "{\"q\":"),
            call(0, None, None, "\"rust\"}"),
            call(1, None, None, "\"https://x.test\"}"),
            format!(
                "data: {}\n\ndata: [DONE]\n\n",
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
            ),
        ])],
    );
    let (tx, _rx) = tokio::sync::mpsc::channel(4);
    let reply = fake
        .model("m")
        .complete_streaming(&request(), tx)
        .await
        .unwrap();
    let calls: Vec<_> = reply
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(
        calls,
        vec![
            ("call_1", "search", "{\"q\":\"rust\"}"),
            ("call_2", "fetch", "{\"url\":\"https://x.test\"}")
        ]
    );
}

#[tokio::test]
async fn rate_limit_honours_retry_after_then_succeeds() {
    let fake = FakeOpenAi::start().await;
    let limited = |header: &'static str, value: &str| {
        Canned::Json(
            429,
            vec![(header, value.to_string())],
            json!({"error": {"message": "Rate limit reached", "type": "requests",
                             "code": "rate_limit_exceeded"}}),
        )
    };
    fake.script(
        "m",
        vec![
            limited("retry-after", "0"),
            limited("retry-after-ms", "150"),
            ok("finally"),
        ],
    );
    let started = Instant::now();
    let reply = fake.model("m").complete(&request()).await.unwrap();
    assert_eq!(reply.text, "finally");
    assert_eq!(fake.models_seen(), vec!["m", "m", "m"]);
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "retry-after-ms was not honoured"
    );
}

#[tokio::test]
async fn a_retry_after_beyond_the_bound_moves_on_to_the_fallback() {
    let fake = FakeOpenAi::start().await;
    fake.script(
        "a",
        vec![Canned::Json(
            429,
            vec![("retry-after", "3600".to_string())],
            json!({"error": {"message": "slow down"}}),
        )],
    );
    fake.script("b", vec![ok("from b")]);
    let mut settings = fake.settings("a");
    settings.fallbacks = vec!["b".into()];
    let started = Instant::now();
    let reply = OpenAiModel::new(settings)
        .unwrap()
        .complete(&request())
        .await
        .unwrap();
    assert_eq!(reply.text, "from b");
    assert_eq!(fake.models_seen(), vec!["a", "b"]);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn server_errors_exhaust_retries_then_the_fallback_answers() {
    let fake = FakeOpenAi::start().await;
    let failing = || Canned::Json(500, vec![], json!({"error": {"message": "boom"}}));
    fake.script("a", vec![failing(), failing(), failing()]);
    fake.script(
        "b",
        vec![Canned::Json(503, vec![], json!({})), ok("from b")],
    );
    let mut settings = fake.settings("a");
    settings.fallbacks = vec!["b".into(), "c".into()];
    let reply = OpenAiModel::new(settings)
        .unwrap()
        .complete(&request())
        .await
        .unwrap();
    assert_eq!(reply.text, "from b");
    assert_eq!(fake.models_seen(), vec!["a", "a", "a", "b", "b"]);
}

#[tokio::test]
async fn every_model_failing_returns_the_last_error() {
    let fake = FakeOpenAi::start().await;
    fake.script(
        "a",
        vec![Canned::Json(
            401,
            vec![],
            json!({"error": {"message": "bad key"}}),
        )],
    );
    let mut settings = fake.settings("a");
    settings.fallbacks = vec!["b".into()];
    settings.max_retries = 0;
    let err = OpenAiModel::new(settings)
        .unwrap()
        .complete(&request())
        .await
        .unwrap_err();
    // 401 is not retried; the fallback (unscripted) answers 500.
    assert!(
        matches!(err, ModelError::Status { status: 500, .. }),
        "{err:?}"
    );
    assert_eq!(fake.models_seen(), vec!["a", "b"]);
}

#[tokio::test]
async fn overflow_errors_are_classified_and_neither_retried_nor_passed_to_fallbacks() {
    let shapes = [
        (
            json!({"error": {"message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens. Please reduce the length of the messages.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
            Some(8192),
            Some(9100),
        ),
        (
            json!({"object": "error", "message": "This model's maximum context length is 4096 tokens. However, you requested 4600 tokens (4400 in the messages, 200 in the completion).", "type": "BadRequestError", "param": null, "code": 400}),
            Some(4096),
            Some(4400),
        ),
        (
            json!({"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 3000, "n_ctx": 2048}}),
            Some(2048),
            Some(3000),
        ),
        (
            json!({"error": {"message": "prompt is too long", "type": "invalid_request_error"}}),
            None,
            None,
        ),
    ];
    for (body, limit, prompt) in shapes {
        let fake = FakeOpenAi::start().await;
        fake.script("a", vec![Canned::Json(400, vec![], body.clone())]);
        let mut settings = fake.settings("a");
        settings.fallbacks = vec!["b".into()];
        let calibration = CalibrationStore::new();
        let model = OpenAiModel::new(settings)
            .unwrap()
            .with_calibration(calibration.clone());
        let err = model.complete(&request()).await.unwrap_err();
        match &err {
            ModelError::ContextOverflow {
                limit: l,
                prompt_tokens: p,
                ..
            } => assert_eq!((*l, *p), (limit, prompt), "{body}"),
            other => panic!("{body}: {other:?}"),
        }
        assert_eq!(fake.models_seen(), vec!["a"], "{body}");
        assert_eq!(calibration.get("a").and_then(|c| c.window), limit);
    }
}

#[tokio::test]
async fn a_mid_stream_error_after_text_ends_the_call() {
    let fake = FakeOpenAi::start().await;
    fake.script(
        "a",
        vec![Canned::Sse(vec![
            chunk(json!({"content": "partial "})),
            format!(
                "data: {}\n\n",
                json!({"error": {"message": "upstream overloaded", "type": "server_error"}})
            ),
        ])],
    );
    fake.script("b", vec![ok("never")]);
    let mut settings = fake.settings("a");
    settings.fallbacks = vec!["b".into()];
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let err = OpenAiModel::new(settings)
        .unwrap()
        .complete_streaming(&request(), tx)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ModelError::Server(m) if m == "upstream overloaded"),
        "{err:?}"
    );
    assert_eq!(rx.recv().await.as_deref(), Some("partial "));
    assert_eq!(fake.models_seen(), vec!["a"], "text was sent: no retry");
}

#[tokio::test]
async fn a_mid_stream_error_before_any_text_is_retried() {
    let fake = FakeOpenAi::start().await;
    fake.script(
        "a",
        vec![
            Canned::Sse(vec![
                chunk(json!({"role": "assistant", "content": ""})),
                "event: error\ndata: {\"message\":\"slot unavailable\"}\n\n".into(),
            ]),
            Canned::Sse(vec![
                "error: {\"code\":500,\"message\":\"still busy\",\"type\":\"server_error\"}\n\n"
                    .into(),
            ]),
            Canned::Sse(vec![
                chunk(json!({"content": "ok"})),
                "data: [DONE]\n\n".into(),
            ]),
        ],
    );
    let (tx, _rx) = tokio::sync::mpsc::channel(8);
    let reply = fake
        .model("a")
        .complete_streaming(&request(), tx)
        .await
        .unwrap();
    assert_eq!(reply.text, "ok");
    assert_eq!(fake.models_seen(), vec!["a", "a", "a"]);
}

#[tokio::test]
async fn a_mid_stream_overflow_is_an_overflow() {
    let fake = FakeOpenAi::start().await;
    fake.script(
        "a",
        vec![Canned::Sse(vec![format!(
            "data: {}\n\n",
            json!({"error": {"message": "context length exceeded: maximum context length is 2048 tokens", "code": "context_length_exceeded"}})
        )])],
    );
    let (tx, _rx) = tokio::sync::mpsc::channel(8);
    let err = fake
        .model("a")
        .complete_streaming(&request(), tx)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ModelError::ContextOverflow {
                limit: Some(2048),
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_server_ignoring_stream_still_answers_the_sink() {
    let fake = FakeOpenAi::start().await;
    fake.script("a", vec![ok("whole answer")]);
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let reply = fake
        .model("a")
        .complete_streaming(&request(), tx)
        .await
        .unwrap();
    assert_eq!(reply.text, "whole answer");
    assert_eq!(rx.recv().await.as_deref(), Some("whole answer"));
}

#[tokio::test]
async fn timeouts_and_refused_connections_are_transport_errors() {
    let fake = FakeOpenAi::start().await;
    fake.script("a", vec![Canned::Slow(Duration::from_secs(2))]);
    let mut settings = fake.settings("a");
    settings.timeout = Duration::from_millis(200);
    settings.max_retries = 0;
    let err = OpenAiModel::new(settings)
        .unwrap()
        .complete(&request())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ModelError::Transport(m) if m.starts_with("timed out")),
        "{err:?}"
    );

    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut settings = OpenAiSettings::new(format!("http://127.0.0.1:{port}/v1"), "a");
    settings.max_retries = 1;
    settings.backoff_base = Duration::from_millis(1);
    let err = OpenAiModel::new(settings)
        .unwrap()
        .complete(&request())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ModelError::Transport(m) if m.starts_with("connection failed")),
        "{err:?}"
    );
    assert!(err.is_retryable());
}

/// A proxy matcher that sends every plain-HTTP request to a proxy (as `HTTP_PROXY` would).
fn proxied() -> Matcher {
    Matcher::builder().http("http://127.0.0.1:9").build()
}

#[tokio::test]
async fn plain_http_goes_direct_and_tls_or_a_proxy_through_reqwest() {
    let fake = FakeOpenAi::start().await;
    let none = Matcher::builder().build();
    assert!(OpenAiModel::with_proxies(fake.settings("m"), &none)
        .unwrap()
        .is_direct());
    let tls = OpenAiSettings::new("https://api.example.test/v1", "m");
    assert!(!OpenAiModel::with_proxies(tls, &none).unwrap().is_direct());
    assert!(!OpenAiModel::with_proxies(fake.settings("m"), &proxied())
        .unwrap()
        .is_direct());
    // NO_PROXY naming the host keeps it direct.
    let exempt = Matcher::builder()
        .http("http://127.0.0.1:9")
        .no("127.0.0.1")
        .build();
    assert!(OpenAiModel::with_proxies(fake.settings("m"), &exempt)
        .unwrap()
        .is_direct());
}

#[tokio::test]
async fn the_reqwest_path_answers_and_streams_like_the_direct_one() {
    // Our matcher says "proxied", so the model takes reqwest; reqwest reads the (proxy-free)
    // environment itself and reaches the fake server directly.
    let fake = FakeOpenAi::start().await;
    fake.script("m", vec![ok("hi there")]);
    let model = OpenAiModel::with_proxies(fake.keyed_settings("m"), &proxied()).unwrap();
    assert!(!model.is_direct());
    let reply = model.complete(&request()).await.unwrap();
    assert_eq!(reply.text, "hi there");
    let (body, auth) = fake.last_request();
    assert_eq!(auth.as_deref(), Some("Bearer sk-test-key"));
    assert_eq!(body["messages"][1]["content"], "hello");

    fake.script(
        "m",
        vec![Canned::Sse(vec![
            chunk(json!({"content": "Hel"})),
            chunk(json!({"content": "lo"})),
            "data: [DONE]\n\n".into(),
        ])],
    );
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let reply = model.complete_streaming(&request(), tx).await.unwrap();
    assert_eq!(reply.text, "Hello");
    let mut deltas = Vec::new();
    while let Some(d) = rx.recv().await {
        deltas.push(d);
    }
    assert_eq!(deltas, vec!["Hel", "lo"]);
}

#[test]
fn base_urls_are_checked() {
    assert!(OpenAiModel::new(OpenAiSettings::new("ftp://x", "m")).is_err());
    assert!(OpenAiModel::new(OpenAiSettings::new("not a url", "m")).is_err());
    let m = OpenAiModel::new(OpenAiSettings::new("http://127.0.0.1:1/v1/", "m")).unwrap();
    assert_eq!(m.endpoint(), "http://127.0.0.1:1/v1/chat/completions");
}
