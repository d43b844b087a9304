//! A fake OpenAI-compatible model server on loopback (a test double, not a model) for the
//! window and rate-limit tests: it counts prompts with its own tokenizer (denser than
//! tiktoken, like a small local model's), enforces a context window with the error shape of
//! a real server, answers 429 with `Retry-After` to its first requests when asked, and
//! records every request.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::task::JoinHandle;

/// How the fake says a prompt is too long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// llama.cpp's `llama-server`: `exceed_context_size_error` with `n_prompt_tokens`/`n_ctx`.
    LlamaServer,
    /// OpenAI's text: "This model's maximum context length is N tokens…".
    OpenAiText,
}

/// What the fake does.
#[derive(Debug, Clone, Copy)]
pub struct Behaviour {
    /// The window: a prompt plus its `max_tokens` beyond it is refused (strict, like OpenAI
    /// and vLLM; llama-server refuses only the prompt, so this is the harder case).
    pub n_ctx: Option<u32>,
    pub overflow: Overflow,
    /// The first this many requests are answered 429.
    pub rate_limited_first: usize,
    /// `Retry-After` of those answers, in seconds.
    pub retry_after_secs: u32,
    /// How long each answer takes (a slow model), in ms.
    pub delay_ms: u64,
    /// Answers wait until [`FakeModel::release`] (a model that is busy for as long as the
    /// test needs, so what happens meanwhile does not race a timer).
    pub held: bool,
    /// The answer repeats the last `turn-N` marker of the last user message (the message
    /// answered comes after the context blocks that may quote others) instead of the first.
    pub last_marker: bool,
}

impl Default for Behaviour {
    fn default() -> Self {
        Self {
            n_ctx: None,
            overflow: Overflow::LlamaServer,
            rate_limited_first: 0,
            retry_after_secs: 1,
            delay_ms: 0,
            held: false,
            last_marker: false,
        }
    }
}

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    /// The prompt in the fake's tokens.
    pub prompt_tokens: u32,
    pub max_tokens: Option<u32>,
    /// The text of the last user message.
    pub last_user: String,
    /// The `model` the request named.
    pub model: String,
    /// The text of its system messages, joined.
    pub system: String,
    /// Every message's text, joined (what the model was shown).
    pub prompt: String,
    /// 200, 400 (overflow) or 429.
    pub status: u16,
}

struct FakeState {
    behaviour: Behaviour,
    seen: Mutex<Vec<Seen>>,
    /// Requests received so far, counted on arrival (before any delay).
    arrived: std::sync::atomic::AtomicUsize,
    /// Requests being answered now, and the most at once so far.
    in_flight: std::sync::atomic::AtomicUsize,
    most_in_flight: std::sync::atomic::AtomicUsize,
    /// Open once released; held answers wait on it.
    released: tokio::sync::watch::Sender<bool>,
}

/// Counts a request in flight until dropped.
struct InFlight<'a>(&'a FakeState);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0
            .in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The fake server; dropping it stops it.
pub struct FakeModel {
    pub base_url: String,
    state: Arc<FakeState>,
    task: JoinHandle<()>,
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeModel {
    pub async fn start(behaviour: Behaviour) -> Self {
        let state = Arc::new(FakeState {
            behaviour,
            seen: Mutex::new(Vec::new()),
            arrived: std::sync::atomic::AtomicUsize::new(0),
            in_flight: std::sync::atomic::AtomicUsize::new(0),
            most_in_flight: std::sync::atomic::AtomicUsize::new(0),
            released: tokio::sync::watch::Sender::new(false),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the fake model's port");
        let addr = listener.local_addr().expect("local address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            base_url: format!("http://{addr}/v1"),
            state,
            task,
        }
    }

    /// Requests received so far, answered or not.
    pub fn arrived(&self) -> usize {
        self.state.arrived.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The most requests it was answering at once.
    pub fn most_in_flight(&self) -> usize {
        self.state
            .most_in_flight
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Lets held answers (and every later one) go.
    pub fn release(&self) {
        self.state.released.send_replace(true);
    }

    /// Every request so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().expect("fake state").clone()
    }
}

/// The fake's tokenizer: a token per 3 characters, plus 4 per message (the chat template).
pub fn fake_tokens(text: &str) -> u32 {
    u32::try_from(text.chars().count().div_ceil(3)).unwrap_or(u32::MAX)
}

fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The `turn-N` marker of a message, if any: the answer repeats it, proving the model saw
/// the user's words (not a cut marker).
pub fn marker(text: &str) -> Option<&str> {
    let start = text.find("turn-")?;
    let rest = &text[start..];
    let end = rest[5..]
        .find(|c: char| !c.is_ascii_digit())
        .map_or(rest.len(), |i| i + 5);
    (end > 5).then(|| &rest[..end])
}

async fn completions(State(state): State<Arc<FakeState>>, Json(body): Json<Value>) -> Response {
    state
        .arrived
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let now = state
        .in_flight
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        + 1;
    state
        .most_in_flight
        .fetch_max(now, std::sync::atomic::Ordering::SeqCst);
    let _counted = InFlight(&state);
    if state.behaviour.held {
        let mut released = state.released.subscribe();
        let _ = released.wait_for(|open| *open).await;
    }
    if state.behaviour.delay_ms > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(state.behaviour.delay_ms)).await;
    }
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let prompt_tokens: u32 = messages
        .iter()
        .map(|m| fake_tokens(&content_text(&m["content"])) + 4)
        .sum();
    let max_tokens = body["max_tokens"]
        .as_u64()
        .or_else(|| body["max_completion_tokens"].as_u64())
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    let last_user = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(|m| content_text(&m["content"]))
        .unwrap_or_default();
    let system = messages
        .iter()
        .filter(|m| m["role"] == "system")
        .map(|m| content_text(&m["content"]))
        .collect::<Vec<_>>()
        .join("\n");
    let prompt = messages
        .iter()
        .map(|m| content_text(&m["content"]))
        .collect::<Vec<_>>()
        .join("\n");
    let model = body["model"].as_str().unwrap_or_default().to_string();
    let b = state.behaviour;
    let mut seen = state.seen.lock().expect("fake state");
    let index = seen.len();
    let wanted = prompt_tokens.saturating_add(max_tokens.unwrap_or(0));
    let (status, response) = if index < b.rate_limited_first {
        let body = json!({"error": {
            "message": "Rate limit reached for requests per min (RPM). Please try again in 1s.",
            "type": "requests", "code": "rate_limit_exceeded"}});
        let mut response = (StatusCode::TOO_MANY_REQUESTS, Json(body)).into_response();
        response.headers_mut().insert(
            "retry-after",
            b.retry_after_secs
                .to_string()
                .parse()
                .expect("a header value"),
        );
        (429, response)
    } else if let Some(n_ctx) = b.n_ctx.filter(|n| wanted > *n) {
        let body = match b.overflow {
            // The exact shape of llama-server (see src/model/openai/errors.rs tests).
            Overflow::LlamaServer => json!({"error": {"code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": prompt_tokens, "n_ctx": n_ctx}}),
            Overflow::OpenAiText => json!({"error": {
                "message": format!("This model's maximum context length is {n_ctx} tokens. However, you requested {wanted} tokens ({prompt_tokens} in the messages, {} in the completion). Please reduce the length of the messages or completion.", max_tokens.unwrap_or(0)),
                "type": "invalid_request_error", "param": "messages",
                "code": "context_length_exceeded"}}),
        };
        (400, (StatusCode::BAD_REQUEST, Json(body)).into_response())
    } else {
        let from = if state.behaviour.last_marker {
            last_user.rfind("turn-").unwrap_or(0)
        } else {
            0
        };
        let mark = marker(&last_user[from..]).unwrap_or("no-marker");
        // An answer within max_tokens: the marker and some words.
        let room = max_tokens.unwrap_or(64).min(64);
        let words = (room / 2).saturating_sub(2) as usize;
        let text = format!("answer {mark} {}", "ok ".repeat(words))
            .trim()
            .to_string();
        let completion_tokens = fake_tokens(&text);
        let body = json!({
            "id": format!("chatcmpl-fake-{index}"), "object": "chat.completion", "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}});
        (200, (StatusCode::OK, Json(body)).into_response())
    };
    seen.push(Seen {
        at: Instant::now(),
        prompt_tokens,
        max_tokens,
        last_user,
        model,
        system,
        prompt,
        status,
    });
    response
}

#[test]
fn markers_are_found() {
    assert_eq!(marker("hello turn-12 and more"), Some("turn-12"));
    assert_eq!(marker("turn-7"), Some("turn-7"));
    assert_eq!(marker("turn-x"), None);
    assert_eq!(marker("nothing"), None);
}
