//! `FakeStreamingModel`: a test double of an OpenAI-compatible model server (llama.cpp's
//! server, vLLM…) on loopback. It answers `POST /v1/chat/completions` streamed (SSE chunks,
//! optionally holding every chunk after the first until the test opens the gate) or whole, with
//! the finish reason and usage the test scripts, or fails with a scripted status. It records
//! every request body.

use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

/// The model name the fake reports (and the config names).
pub const FAKE_MODEL: &str = "fake-model";

/// What the fake answers.
#[derive(Debug, Clone)]
pub struct Script {
    /// The answer's text pieces, one chunk each.
    pub chunks: Vec<String>,
    /// The finish reason of the last chunk.
    pub finish_reason: String,
    /// The usage reported (prompt, completion), if any.
    pub usage: Option<(u32, u32)>,
    /// Hold every chunk after the first until [`FakeStreamingModel::release`].
    pub gated: bool,
    /// Hold each chunk after the first until its own [`FakeStreamingModel::release`] (a
    /// model that writes as slowly as the test needs).
    pub step_gated: bool,
    /// Answer with this status and error message instead.
    pub fail: Option<(u16, String)>,
}

impl Script {
    pub fn text(chunks: &[&str]) -> Self {
        Self {
            chunks: chunks.iter().map(|c| c.to_string()).collect(),
            finish_reason: "stop".into(),
            usage: None,
            gated: false,
            step_gated: false,
            fail: None,
        }
    }

    pub fn whole(&self) -> String {
        self.chunks.concat()
    }
}

struct Shared {
    script: Mutex<Script>,
    gate: Notify,
    requests: Mutex<Vec<Value>>,
    /// Chunks written to the wire so far.
    sent: Mutex<usize>,
}

/// The fake server; dropping it stops it.
pub struct FakeStreamingModel {
    /// `http://127.0.0.1:PORT/v1`, for `[model] base_url`.
    pub base_url: String,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for FakeStreamingModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeStreamingModel {
    pub async fn start(script: Script) -> Self {
        let shared = Arc::new(Shared {
            script: Mutex::new(script),
            gate: Notify::new(),
            requests: Mutex::new(Vec::new()),
            sent: Mutex::new(0),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            base_url: format!("http://{addr}/v1"),
            shared,
            task,
        }
    }

    /// Lets a gated stream send the rest of its chunks.
    pub fn release(&self) {
        self.shared.gate.notify_one();
    }

    /// The request bodies received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Chunks written so far.
    pub fn chunks_sent(&self) -> usize {
        *self.shared.sent.lock().unwrap()
    }

    pub fn set_script(&self, script: Script) {
        *self.shared.script.lock().unwrap() = script;
    }
}

/// A `[model]` section talking to `base_url`, failing fast (no retries).
pub fn use_model(config: &mut turnstile::config::Config, base_url: &str) {
    config.model.provider = "openai".into();
    config.model.base_url = base_url.to_string();
    config.model.model = FAKE_MODEL.into();
    config.model.max_retries = 0;
    config.lanes.turn_retries = 0;
}

fn chunk(delta: Value, finish: Value) -> Value {
    json!({
        "id": "fake-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": FAKE_MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
}

async fn complete(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    shared.requests.lock().unwrap().push(request.clone());
    let script = shared.script.lock().unwrap().clone();
    if let Some((status, message)) = &script.fail {
        let body = json!({"error": {"message": message, "type": "server_error"}});
        let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return (status, axum::Json(body)).into_response();
    }
    let usage = script
        .usage
        .map(|(p, c)| json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}));
    if request["stream"] != json!(true) {
        let mut body = json!({
            "id": "fake-1",
            "object": "chat.completion",
            "created": 1,
            "model": FAKE_MODEL,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": script.whole()},
                "finish_reason": script.finish_reason,
            }],
        });
        if let Some(usage) = usage {
            body["usage"] = usage;
        }
        *shared.sent.lock().unwrap() += script.chunks.len();
        return axum::Json(body).into_response();
    }
    let include_usage = request["stream_options"]["include_usage"] == json!(true);
    let (tx, rx) = mpsc::channel::<String>(4);
    tokio::spawn(async move {
        let send = |v: Value| format!("data: {v}\n\n");
        let _ = tx
            .send(send(chunk(json!({"role": "assistant"}), Value::Null)))
            .await;
        for (i, text) in script.chunks.iter().enumerate() {
            if (i == 1 && script.gated) || (i >= 1 && script.step_gated) {
                shared.gate.notified().await;
            }
            if tx
                .send(send(chunk(json!({"content": text}), Value::Null)))
                .await
                .is_err()
            {
                return;
            }
            *shared.sent.lock().unwrap() += 1;
        }
        let _ = tx
            .send(send(chunk(json!({}), json!(script.finish_reason))))
            .await;
        if let (true, Some(usage)) = (include_usage, usage) {
            let last = json!({"id": "fake-1", "object": "chat.completion.chunk", "created": 1,
                "model": FAKE_MODEL, "choices": [], "usage": usage});
            let _ = tx.send(send(last)).await;
        }
        let _ = tx.send("data: [DONE]\n\n".to_string()).await;
    });
    let body = tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, std::io::Error>);
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
