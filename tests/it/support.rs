//! What every integration test needs: a server (in this process, or the real binary as a child
//! process), a thin client for the HTTP contract of SPEC §9a, an SSE reader, a polling helper
//! instead of fixed sleeps, and a builder for inbound messages.
//!
//! Everything here talks real HTTP on loopback to a server with a real sled database in a
//! fresh temporary directory.

use std::fs::File;
use std::future::Future;
use std::io::Read;
use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{Stream, StreamExt};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use turnstile::{Config, Runtime};

/// How long a test waits for something that should happen "soon" before it fails. Generous:
/// the server is a debug build on a small, shared machine.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A fresh temporary data directory, shared between a test and the servers it starts on it.
pub fn data_dir() -> Arc<TempDir> {
    Arc::new(
        tempfile::Builder::new()
            .prefix("turnstile-it-")
            .tempdir()
            .expect("creating a temporary data dir"),
    )
}

/// An HTTP client for loopback: no proxy, a per-request timeout so a hung server fails the
/// test instead of hanging it.
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .build()
        .expect("building the HTTP client")
}

/// Polls `check` until it returns `Ok`, backing off from 10 ms to 250 ms between tries; after
/// `timeout` the test fails with the last `Err` as the reason.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(10);
    loop {
        match check().await {
            Ok(value) => return value,
            Err(why) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}: {why}")
            }
            Err(_) => {}
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

// ---------------------------------------------------------------------------------------------
// Messages

/// An InboundMessage as JSON (SPEC §9a), built field by field.
#[derive(Debug, Clone)]
pub struct Msg(Value);

impl Msg {
    /// A Telegram group message that mentions the bot: it is answered, and its session is
    /// `agent:main:telegram:group:<chat_id>` (see [`group_key`]).
    pub fn group(chat_id: &str, message_id: &str, text: &str) -> Self {
        Self(json!({
            "channel": "telegram",
            "account_id": "default",
            "chat_kind": "group",
            "chat_id": chat_id,
            "thread_id": null,
            "message_id": message_id,
            "sender": {"id": "111", "name": "Alice", "is_bot": false},
            "text": text,
            "mentioned_bot": true,
            "reply_to": null,
            "timestamp_ms": 0,
        }))
    }

    /// Sets a top-level field.
    pub fn with(mut self, field: &str, value: Value) -> Self {
        self.0[field] = value;
        self
    }

    /// Removes a top-level field.
    pub fn without(mut self, field: &str) -> Self {
        self.0
            .as_object_mut()
            .expect("a message is an object")
            .remove(field);
        self
    }

    /// The JSON body.
    pub fn json(&self) -> &Value {
        &self.0
    }
}

/// The session key of [`Msg::group`] messages in `chat_id`.
pub fn group_key(chat_id: &str) -> String {
    format!("agent:main:telegram:group:{chat_id}").to_lowercase()
}

// ---------------------------------------------------------------------------------------------
// The HTTP contract

/// A transcript entry of `GET /v1/sessions/{key}/transcript`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Entry {
    pub seq: u64,
    pub kind: String,
    pub text: String,
    #[serde(default)]
    pub message_id: Option<String>,
    #[serde(default)]
    pub sender: Option<String>,
    pub timestamp_ms: u64,
    pub tokens: u32,
}

/// A client for one server's HTTP API.
#[derive(Clone)]
pub struct Api {
    /// `http://127.0.0.1:PORT`
    pub base: String,
    pub client: reqwest::Client,
}

/// Percent-encodes a session key for a URL path segment.
pub fn encode_key(key: &str) -> String {
    utf8_percent_encode(key, NON_ALPHANUMERIC).to_string()
}

/// Reads a response as (status, JSON body); a body that is not JSON becomes a JSON string.
pub async fn json_of(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let text = response.text().await.expect("reading a response body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

impl Api {
    pub fn new(base: String) -> Self {
        Self {
            base,
            client: http_client(),
        }
    }

    /// The absolute URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        let response = self
            .client
            .get(self.url(path))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        json_of(response).await
    }

    /// `DELETE path`.
    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        let response = self
            .client
            .delete(self.url(path))
            .send()
            .await
            .unwrap_or_else(|e| panic!("DELETE {path}: {e}"));
        json_of(response).await
    }

    /// `POST /v1/messages` with any JSON body.
    pub async fn post_message(&self, body: &Value) -> (StatusCode, Value) {
        self.post_raw("/v1/messages", body.to_string()).await
    }

    /// `POST path` with raw bytes as a JSON body.
    pub async fn post_raw(&self, path: &str, body: String) -> (StatusCode, Value) {
        let response = self
            .client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        json_of(response).await
    }

    /// Sends a message that must be accepted; returns the session key of the `202`.
    pub async fn send(&self, msg: &Msg) -> String {
        let (status, body) = self.post_message(msg.json()).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        assert_eq!(body["status"], "accepted", "{body}");
        assert_eq!(body["message_id"], msg.json()["message_id"], "{body}");
        body["session_key"]
            .as_str()
            .unwrap_or_else(|| panic!("no session_key in {body}"))
            .to_string()
    }

    /// `GET /v1/sessions` (first page).
    pub async fn sessions(&self) -> Vec<Value> {
        let (status, body) = self.get("/v1/sessions?limit=1000").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body.as_array()
            .unwrap_or_else(|| panic!("not a list: {body}"))
            .clone()
    }

    /// `GET /v1/sessions/{key}`.
    pub async fn session(&self, key: &str) -> (StatusCode, Value) {
        self.get(&format!("/v1/sessions/{}", encode_key(key))).await
    }

    /// The whole transcript of `key` as raw JSON (every page), or `None` on 404.
    pub async fn transcript_json(&self, key: &str) -> Option<Vec<Value>> {
        let mut all = Vec::new();
        let mut after = 0;
        loop {
            let path = format!(
                "/v1/sessions/{}/transcript?after={after}&limit=1000",
                encode_key(key)
            );
            let (status, body) = self.get(&path).await;
            if status == StatusCode::NOT_FOUND {
                assert!(all.is_empty(), "session {key} vanished while paging");
                return None;
            }
            assert_eq!(status, StatusCode::OK, "{body}");
            let page = body
                .as_array()
                .unwrap_or_else(|| panic!("not a list: {body}"));
            let Some(last) = page.last() else {
                return Some(all);
            };
            let next = last["seq"]
                .as_u64()
                .unwrap_or_else(|| panic!("no seq in {last}"));
            assert!(next > after, "transcript paging went backwards: {last}");
            after = next;
            all.extend(page.iter().cloned());
        }
    }

    /// The whole transcript of `key`, or `None` on 404.
    pub async fn transcript(&self, key: &str) -> Option<Vec<Entry>> {
        self.transcript_json(key).await.map(|items| {
            items
                .into_iter()
                .map(|v| {
                    serde_json::from_value(v.clone())
                        .unwrap_or_else(|e| panic!("bad transcript entry {v}: {e}"))
                })
                .collect()
        })
    }

    /// Opens `GET /v1/events` (optionally filtered to one session). Once this returns, the
    /// server has subscribed: every later reply is on the stream.
    pub async fn events(&self, session_key: Option<&str>) -> SseStream {
        let path = match session_key {
            Some(k) => format!("/v1/events?session_key={}", encode_key(k)),
            None => "/v1/events".to_string(),
        };
        self.sse(self.client.get(self.url(&path))).await
    }

    /// Sends `request` and reads its body as Server-Sent Events.
    pub async fn sse(&self, request: reqwest::RequestBuilder) -> SseStream {
        let response = request
            // A stream lives as long as the test needs it.
            .timeout(Duration::from_secs(600))
            .send()
            .await
            .expect("opening an event stream");
        assert_eq!(response.status(), StatusCode::OK, "opening an event stream");
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        assert!(
            content_type.starts_with("text/event-stream"),
            "content-type {content_type:?}"
        );
        SseStream::new(response)
    }
}

// ---------------------------------------------------------------------------------------------
// Server-Sent Events

/// One event of an SSE stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `None` for the default (`message`).
    pub event: Option<String>,
    /// The `data:` lines, joined by `\n`.
    pub data: String,
}

impl SseEvent {
    /// The data as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data)
            .unwrap_or_else(|e| panic!("event data is not JSON ({e}): {:?}", self.data))
    }
}

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Vec<u8>>> + Send>>;

/// Reads events from a streaming response body (the `text/event-stream` format: `field: value`
/// lines, events separated by a blank line, `:` comments ignored).
pub struct SseStream {
    body: ByteStream,
    buf: Vec<u8>,
    event: Option<String>,
    data: Vec<String>,
}

impl SseStream {
    pub fn new(response: reqwest::Response) -> Self {
        Self::from_bytes(response.bytes_stream().map(|r| r.map(|b| b.to_vec())))
    }

    /// Reads events from any byte stream (the parser's own tests feed it pieces).
    pub fn from_bytes(body: impl Stream<Item = reqwest::Result<Vec<u8>>> + Send + 'static) -> Self {
        Self {
            body: Box::pin(body),
            buf: Vec::new(),
            event: None,
            data: Vec::new(),
        }
    }

    /// The next event, or `None` once the server ended the stream.
    pub async fn next(&mut self) -> Option<SseEvent> {
        loop {
            while let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
                let raw: Vec<u8> = self.buf.drain(..=end).collect();
                let line = String::from_utf8(raw).expect("SSE is UTF-8");
                let line = line.trim_end_matches(['\n', '\r']);
                if line.is_empty() {
                    if self.event.is_some() || !self.data.is_empty() {
                        return Some(SseEvent {
                            event: self.event.take(),
                            data: std::mem::take(&mut self.data).join("\n"),
                        });
                    }
                    continue;
                }
                if line.starts_with(':') {
                    continue;
                }
                let (field, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                match field {
                    "event" => self.event = Some(value.to_string()),
                    "data" => self.data.push(value.to_string()),
                    _ => {}
                }
            }
            match self.body.next().await {
                Some(Ok(bytes)) => self.buf.extend_from_slice(&bytes),
                Some(Err(e)) => panic!("reading an event stream: {e}"),
                None => return None,
            }
        }
    }

    /// The next event; fails the test if none comes within [`PATIENCE`] or the stream ends.
    pub async fn expect_next(&mut self) -> SseEvent {
        tokio::time::timeout(PATIENCE, self.next())
            .await
            .expect("timed out waiting for an event")
            .expect("the event stream ended")
    }

    /// Every remaining event until the server ends the stream (within [`PATIENCE`]).
    pub async fn rest(&mut self) -> Vec<SseEvent> {
        let mut events = Vec::new();
        let all = async {
            while let Some(e) = self.next().await {
                events.push(e);
            }
        };
        tokio::time::timeout(PATIENCE, all)
            .await
            .expect("the event stream did not end");
        events
    }
}

// ---------------------------------------------------------------------------------------------
// A server in this process

/// `turnstile::server::serve` on `127.0.0.1:0`, in this process, on its own data dir.
pub struct TestServer {
    pub api: Api,
    /// The data dir; keep a clone to restart on it after [`TestServer::stop`].
    pub dir: Arc<TempDir>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl Deref for TestServer {
    type Target = Api;

    fn deref(&self) -> &Api {
        &self.api
    }
}

/// A server with the default configuration on a fresh data dir.
pub async fn start_server() -> TestServer {
    start_server_with(data_dir(), |_| {}).await
}

/// Config edit for tests that count one reply per message: `followup` queueing, no debounce
/// (the default `collect` mode answers messages queued during a turn together).
pub fn one_turn_per_message(config: &mut Config) {
    config.queue.mode = turnstile::config::QueueModeSetting::Followup;
    config.queue.debounce_ms = 0;
}

/// A server on `dir` whose configuration `edit` adjusts.
pub async fn start_server_with(dir: Arc<TempDir>, edit: impl FnOnce(&mut Config)) -> TestServer {
    start_server_full(dir, edit, None).await
}

/// A server on `dir` with a config edit and, optionally, a test model instead of `echo`.
pub async fn start_server_full(
    dir: Arc<TempDir>,
    edit: impl FnOnce(&mut Config),
    model: Option<Arc<dyn turnstile::model::Model>>,
) -> TestServer {
    let mut config = Config::with_data_dir(dir.path());
    edit(&mut config);
    let mut builder = Runtime::builder().config(config);
    if let Some(model) = model {
        builder = builder.model(model);
    }
    let runtime = builder.build().await.expect("building the runtime");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding a loopback port");
    let addr = listener.local_addr().expect("local address");
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(turnstile::server::serve(listener, runtime, async move {
        let _ = rx.await;
    }));
    TestServer {
        api: Api::new(format!("http://{addr}")),
        dir,
        shutdown: Some(tx),
        task: Some(task),
    }
}

impl TestServer {
    /// Triggers graceful shutdown and waits until the server has drained and closed the
    /// store.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(PATIENCE, task)
                .await
                .expect("the server did not stop in time")
                .expect("the server task panicked")
                .expect("the server failed");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // A test that fails before `stop` still shuts its server down; the test's runtime
        // ends the task when it drops.
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The real binary as a child process

/// `turnstile serve` as a child process. Dropping it kills the child: no process outlives
/// its test.
pub struct ServerProcess {
    pub api: Api,
    child: Child,
    log: PathBuf,
    _log_dir: Arc<TempDir>,
}

impl Deref for ServerProcess {
    type Target = Api;

    fn deref(&self) -> &Api {
        &self.api
    }
}

/// A port that was free a moment ago. Another process may take it before the child binds it;
/// [`spawn_binary`] then retries with a new one.
fn free_port() -> u16 {
    StdTcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("finding a free port")
}

/// Starts `turnstile serve --data-dir <data_dir> --listen 127.0.0.1:<free port>` and waits
/// until `/readyz` answers 200.
pub async fn spawn_binary(data_dir: &Path) -> ServerProcess {
    let log_dir = Arc::new(
        tempfile::Builder::new()
            .prefix("turnstile-it-log-")
            .tempdir()
            .expect("creating a log dir"),
    );
    let mut failures = Vec::new();
    for attempt in 0..5 {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let log = log_dir.path().join(format!("server-{attempt}.log"));
        let stderr = File::create(&log).expect("creating the log file");
        let child = Command::new(env!("CARGO_BIN_EXE_turnstile"))
            .arg("serve")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--listen")
            .arg(addr.to_string())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("starting the turnstile binary");
        let mut server = ServerProcess {
            api: Api::new(format!("http://{addr}")),
            child,
            log,
            _log_dir: Arc::clone(&log_dir),
        };
        match server.wait_ready().await {
            Ok(()) => return server,
            // Dropping `server` kills the child before the next attempt.
            Err(why) => failures.push(format!("attempt {attempt}: {why}\n{}", server.log_text())),
        }
    }
    panic!(
        "the turnstile binary did not become ready:\n{}",
        failures.join("\n")
    );
}

impl ServerProcess {
    /// Waits until `/readyz` answers 200; fails early if the child exits (e.g. its port was
    /// taken).
    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + PATIENCE;
        let mut why = String::from("no answer yet");
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!("the server exited with {status}"));
            }
            match self
                .client
                .get(self.url("/readyz"))
                .timeout(Duration::from_secs(2))
                .send()
                .await
            {
                Ok(r) if r.status() == StatusCode::OK => return Ok(()),
                Ok(r) => why = format!("/readyz answered {}", r.status()),
                Err(e) => why = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(format!("not ready within {PATIENCE:?}: {why}"))
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL (`kill -9`), then reaps the child.
    pub fn kill9(&mut self) {
        // `Child::kill` sends SIGKILL on unix.
        self.child.kill().expect("sending SIGKILL");
        self.child.wait().expect("reaping the child");
    }

    /// SIGTERM: asks the server to shut down gracefully.
    pub fn sigterm(&self) {
        let pid = libc::pid_t::try_from(self.pid()).expect("pid fits pid_t");
        // SAFETY: `kill` has no memory-safety preconditions; `pid` is our own child, which is
        // not yet reaped (we hold its `Child`), so the pid cannot have been reused.
        let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(rc, 0, "kill(SIGTERM): {}", std::io::Error::last_os_error());
    }

    /// Waits for the child to exit, at most `timeout`; `None` if it is still running.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("polling the child") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// What the server logged so far.
    pub fn log_text(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = File::open(&self.log) {
            let _ = f.read_to_string(&mut text);
        }
        text
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            let text = self.log_text();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            eprintln!(
                "--- last lines of the server log ({}) ---",
                self.log.display()
            );
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Load and durability checks

/// Senders that post messages as fast as the server takes them: one task per session
/// (`load-<n>`), each sequential, recording every message id that got a `202`. A task stops
/// at the first transport error (the server died) or `503` (it is shutting down); any other
/// status fails the test.
pub struct Load {
    acked: Arc<std::sync::atomic::AtomicUsize>,
    tasks: Vec<JoinHandle<(String, Vec<String>)>>,
}

impl Load {
    /// Starts `sessions` senders against `api`; message ids are `<prefix>-<session>-<n>`.
    pub fn start(api: &Api, sessions: usize, prefix: &str) -> Self {
        let acked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tasks = (0..sessions)
            .map(|s| {
                let (api, acked, prefix) = (api.clone(), Arc::clone(&acked), prefix.to_string());
                tokio::spawn(async move {
                    let chat = format!("load-{s}");
                    let mut ids = Vec::new();
                    for n in 0.. {
                        let id = format!("{prefix}-{s}-{n}");
                        let msg = Msg::group(&chat, &id, &format!("{id} says hello"));
                        let sent = api
                            .client
                            .post(api.url("/v1/messages"))
                            .json(msg.json())
                            .send()
                            .await;
                        let Ok(response) = sent else { break };
                        let status = response.status();
                        if status == StatusCode::SERVICE_UNAVAILABLE {
                            break;
                        }
                        // A transport error while reading the body: the server died.
                        let Ok(body) = response.text().await else {
                            break;
                        };
                        assert_eq!(status, StatusCode::ACCEPTED, "{id}: {body}");
                        ids.push(id);
                        acked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    (group_key(&chat), ids)
                })
            })
            .collect();
        Self { acked, tasks }
    }

    /// Messages acknowledged so far, over all senders.
    pub fn acked(&self) -> usize {
        self.acked.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits until at least `n` messages were acknowledged.
    pub async fn wait_for_acks(&self, n: usize) {
        eventually(PATIENCE, "load to flow", || async move {
            let acked = self.acked();
            if acked >= n {
                Ok(())
            } else {
                Err(format!("{acked} acknowledged"))
            }
        })
        .await;
    }

    /// Waits for every sender to stop (the server must be gone or shutting down); returns
    /// each session key with the ids acknowledged in it, in send order.
    pub async fn finish(self) -> Vec<(String, Vec<String>)> {
        let mut out = Vec::new();
        for task in self.tasks {
            let done = tokio::time::timeout(PATIENCE, task)
                .await
                .expect("a sender did not stop");
            out.push(done.expect("a sender failed"));
        }
        out
    }
}

/// Why `entries` does not yet hold every id of `acked` as a user entry, in order, each once
/// and each followed by an assistant entry; `Ok` once it does. Once the transcript starts with
/// a compaction summary, the oldest acknowledged ids may have been compacted into it: only
/// the ids after them must be present.
pub fn all_answered(entries: &[Entry], acked: &[String]) -> Result<(), String> {
    let compacted = if entries.first().is_some_and(|e| e.kind == "summary") {
        let stored: std::collections::HashSet<&str> = entries
            .iter()
            .filter_map(|e| e.message_id.as_deref())
            .collect();
        acked
            .iter()
            .take_while(|id| !stored.contains(id.as_str()))
            .count()
    } else {
        0
    };
    let acked = &acked[compacted..];
    let users: Vec<(usize, &str)> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind == "user")
        .filter_map(|(i, e)| e.message_id.as_deref().map(|id| (i, id)))
        .collect();
    let mut seen = std::collections::HashSet::new();
    for (_, id) in &users {
        // Not retryable: a message processed twice stays processed twice.
        assert!(seen.insert(*id), "message {id} is in the transcript twice");
    }
    let acked_set: std::collections::HashSet<&str> = acked.iter().map(String::as_str).collect();
    let present: Vec<(usize, &str)> = users
        .into_iter()
        .filter(|(_, id)| acked_set.contains(id))
        .collect();
    if present.len() < acked.len() {
        let missing: Vec<&String> = acked
            .iter()
            .filter(|id| !present.iter().any(|(_, p)| p == id))
            .take(5)
            .collect();
        return Err(format!(
            "{} of {} acknowledged messages missing, e.g. {missing:?}",
            acked.len() - present.len(),
            acked.len()
        ));
    }
    let order: Vec<&str> = present.iter().map(|(_, id)| *id).collect();
    assert_eq!(order, acked, "acknowledged messages out of order");
    let last_answer = entries.iter().rposition(|e| e.kind == "assistant");
    match present.last() {
        Some((i, id)) if last_answer.is_none_or(|a| a < *i) => {
            Err(format!("{id} (entry {i}) is not answered yet"))
        }
        _ => Ok(()),
    }
}

/// Waits until every session of `acked` has all its acknowledged messages, in order, answered.
pub async fn wait_all_answered(api: &Api, acked: &[(String, Vec<String>)]) {
    for (key, ids) in acked {
        if ids.is_empty() {
            continue;
        }
        let (key, ids) = (key.as_str(), ids.as_slice());
        eventually(
            PATIENCE,
            &format!("every acknowledged message of {key} answered"),
            || async move {
                let entries = api
                    .transcript(key)
                    .await
                    .ok_or_else(|| format!("no session {key}"))?;
                all_answered(&entries, ids)
            },
        )
        .await;
    }
}

// ---------------------------------------------------------------------------------------------
// The helpers' own checks: a wrong helper would make every test above meaningless.

#[tokio::test]
async fn sse_reader_handles_split_lines_comments_and_crlf() {
    let wire = "event: reply\ndata: {\"a\":1}\n\n: keep-alive\n\ndata: one\r\ndata: two\r\n\r\ndata:[DONE]\n\n";
    // Every split point, so events and lines that straddle chunks are covered.
    for cut in 0..wire.len() {
        let pieces = vec![
            Ok(wire.as_bytes()[..cut].to_vec()),
            Ok(wire.as_bytes()[cut..].to_vec()),
        ];
        let mut stream = SseStream::from_bytes(futures_util::stream::iter(pieces));
        let mut events = Vec::new();
        while let Some(e) = stream.next().await {
            events.push((e.event, e.data));
        }
        assert_eq!(
            events,
            [
                (Some("reply".to_string()), r#"{"a":1}"#.to_string()),
                (None, "one\ntwo".to_string()),
                (None, "[DONE]".to_string()),
            ],
            "cut at {cut}"
        );
    }
}

#[test]
fn all_answered_checks_presence_order_and_answers() {
    let entry = |seq: u64, kind: &str, id: Option<&str>| Entry {
        seq,
        kind: kind.into(),
        text: String::new(),
        message_id: id.map(Into::into),
        sender: None,
        timestamp_ms: 1,
        tokens: 1,
    };
    let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let entries = [
        entry(1, "user", Some("a")),
        entry(2, "assistant", None),
        entry(3, "user", Some("x")),
        entry(4, "assistant", None),
        entry(5, "user", Some("b")),
    ];
    assert!(all_answered(&entries[..4], &ids(&["a"])).is_ok());
    // `x` was never acknowledged (in flight at a kill): it may be there or not.
    assert!(all_answered(&entries[..4], &ids(&["a", "x"])).is_ok());
    assert!(all_answered(&entries[..2], &ids(&["a", "b"])).is_err());
    // Present but not answered yet.
    assert!(all_answered(&entries, &ids(&["a", "b"])).is_err());
    let answered = [&entries[..], &[entry(6, "assistant", None)]].concat();
    assert!(all_answered(&answered, &ids(&["a", "b"])).is_ok());
    let out_of_order = std::panic::catch_unwind(|| all_answered(&answered, &ids(&["b", "a"])));
    assert!(out_of_order.is_err());
    let twice = [&answered[..], &[entry(7, "user", Some("a"))]].concat();
    assert!(std::panic::catch_unwind(|| all_answered(&twice, &ids(&["a"]))).is_err());
    // The oldest ids may be compacted into a summary, but only the oldest.
    let compacted = [
        entry(4, "summary", None),
        entry(5, "user", Some("b")),
        entry(6, "assistant", None),
    ];
    assert!(all_answered(&compacted, &ids(&["a", "b"])).is_ok());
    assert!(all_answered(&compacted[1..], &ids(&["a", "b"])).is_err());
    assert!(all_answered(&compacted, &ids(&["a", "b", "c"])).is_err());
}
