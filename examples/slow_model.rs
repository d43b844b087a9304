//! A test double for a slow OpenAI-compatible model server, for the benchmarks in
//! `benches/loadtest/slow_model.sh`: `POST /v1/chat/completions` answers after a fixed delay
//! (non-streaming) or streams `--chunks` pieces, the first after `--first-ms` and the last at
//! `--total-ms` (streaming), with `usage`; `GET /v1/models` lists one model. It never looks
//! at the prompt beyond the `stream` flags, so its own cost stays far below the runtime's.
//!
//! `cargo run --release --example slow_model -- --port 18811 --first-ms 100 --chunks 40 --total-ms 2000`

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

/// How the fake model answers.
#[derive(Clone, Copy)]
struct Timing {
    first: Duration,
    total: Duration,
    chunks: u32,
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port = arg("--port", 18811);
    let timing = Timing {
        first: Duration::from_millis(arg("--first-ms", 100)),
        total: Duration::from_millis(arg("--total-ms", 2000)),
        chunks: u32::try_from(arg("--chunks", 40)).unwrap_or(40).max(1),
    };
    let app = Router::new()
        .route("/v1/chat/completions", post(complete))
        .route("/v1/models", get(models))
        .with_state(timing);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port as u16)).await?;
    eprintln!("slow_model listening on 127.0.0.1:{port}");
    axum::serve(listener, app).await
}

async fn models() -> Json<Value> {
    Json(json!({"object": "list", "data": [
        {"id": "slow-model", "object": "model", "created": 0, "owned_by": "bench"}
    ]}))
}

async fn complete(State(timing): State<Timing>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let stream = request["stream"].as_bool().unwrap_or(false);
    let usage = json!({"prompt_tokens": 10, "completion_tokens": timing.chunks,
                       "total_tokens": 10 + timing.chunks});
    if !stream {
        tokio::time::sleep(timing.total).await;
        let text = "tok ".repeat(timing.chunks as usize);
        let answer = json!({
            "id": "slow-1", "object": "chat.completion", "created": 0, "model": "slow-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": usage,
        });
        return Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(answer.to_string()))
            .unwrap_or_default();
    }
    let include_usage = request["stream_options"]["include_usage"]
        .as_bool()
        .unwrap_or(false);
    let gap = timing
        .total
        .saturating_sub(timing.first)
        .checked_div(timing.chunks.saturating_sub(1).max(1))
        .unwrap_or_default();
    let chunks = futures_util::stream::unfold(0u32, move |n| {
        let usage = usage.clone();
        async move {
            let chunk = |delta: Value, finish: Value| {
                let data = json!({"id": "slow-1", "object": "chat.completion.chunk", "created": 0,
                              "model": "slow-model",
                              "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
                Bytes::from(format!("data: {data}\n\n"))
            };
            let bytes = match n {
                0 => {
                    tokio::time::sleep(timing.first).await;
                    chunk(json!({"role": "assistant", "content": "tok "}), Value::Null)
                }
                n if n < timing.chunks => {
                    tokio::time::sleep(gap).await;
                    chunk(json!({"content": "tok "}), Value::Null)
                }
                n if n == timing.chunks => {
                    let mut last = chunk(json!({}), json!("stop"));
                    if include_usage {
                        let data = json!({"id": "slow-1", "object": "chat.completion.chunk",
                                      "created": 0, "model": "slow-model", "choices": [],
                                      "usage": usage});
                        last = Bytes::from(format!(
                            "{}data: {data}\n\n",
                            String::from_utf8_lossy(&last)
                        ));
                    }
                    last
                }
                n if n == timing.chunks + 1 => Bytes::from_static(b"data: [DONE]\n\n"),
                _ => return None,
            };
            Some((Ok::<_, Infallible>(bytes), n + 1))
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(chunks))
        .unwrap_or_default()
}
