//! MCP client tools against real MCP servers: `tests/fixtures/mcp/server.py`, written with the
//! official Python SDK (`mcp` on PyPI), started by the tests over stdio (Turnstile starts it)
//! and over streamable HTTP (the test starts it). The model is a fake OpenAI-compatible server
//! on loopback (a test double for the remote model) that calls the tool a user message names
//! and answers with what the tool said.
//!
//! The Python comes from `$TURNSTILE_MCP_PYTHON`, else the venv `.ci/run` prepares
//! (`target/mcp-venv`); without it the tests are skipped with a message, and fail under CI.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use turnstile::config::McpServerConfig;
use turnstile::Config;

use crate::support::{data_dir, eventually, json_of, start_server_with, Api, TestServer, PATIENCE};

/// The Python with the `mcp` package, or `None` (the test is skipped; under CI it fails).
fn python() -> Option<PathBuf> {
    let path = std::env::var_os("TURNSTILE_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("target/mcp-venv/bin/python3")
        });
    let ok = Command::new(&path)
        .args(["-c", "import mcp.server.mcpserver"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(path);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI=true: a Python with the `mcp` package is required (.ci/run prepares target/mcp-venv)"
    );
    println!(
        "skipped: no Python with the `mcp` package (python3 -m venv target/mcp-venv && \
         target/mcp-venv/bin/pip install mcp, or set TURNSTILE_MCP_PYTHON)"
    );
    None
}

fn fixture() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mcp/server.py")
        .display()
        .to_string()
}

/// The fake model: it records every request; a trailing tool message is answered with
/// "the tool said: <its text>", a user message `call <tool> <json>` with a call of that tool,
/// anything else with "no call".
struct ToolCallingModel {
    base_url: String,
    requests: Arc<Mutex<Vec<Value>>>,
    task: JoinHandle<()>,
}

impl Drop for ToolCallingModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ToolCallingModel {
    async fn start() -> Self {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .with_state(Arc::clone(&requests));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the fake model");
        let addr = listener.local_addr().expect("fake model address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            base_url: format!("http://{addr}/v1"),
            requests,
            task,
        }
    }

    fn requests(&self) -> Vec<Value> {
        self.requests.lock().expect("the recorder").clone()
    }
}

async fn complete(
    State(requests): State<Arc<Mutex<Vec<Value>>>>,
    Json(body): Json<Value>,
) -> Json<Value> {
    requests.lock().expect("the recorder").push(body.clone());
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let text = last["content"].as_str().unwrap_or_default().to_string();
    let (content, calls) = if last["role"] == "tool" {
        (json!(format!("the tool said: {text}")), json!([]))
    } else if let Some(rest) = text.strip_prefix("call ") {
        let (name, args) = rest.split_once(' ').unwrap_or((rest, "{}"));
        let n = messages.len();
        let call = json!({"id": format!("call_{n}"), "type": "function",
                          "function": {"name": name, "arguments": args}});
        (Value::Null, json!([call]))
    } else {
        (json!("no call"), json!([]))
    };
    let has_calls = calls.as_array().is_some_and(|c| !c.is_empty());
    let mut message = json!({"role": "assistant", "content": content});
    if has_calls {
        message["tool_calls"] = calls;
    }
    Json(json!({
        "id": "fake", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": message,
                     "finish_reason": if has_calls { "tool_calls" } else { "stop" }}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }))
}

/// A stdio server running the fixture, its pid file and markers in `dir`.
fn stdio_server(python: &Path, dir: &Path) -> McpServerConfig {
    let mut c = McpServerConfig {
        command: Some(python.display().to_string()),
        args: vec![fixture(), "stdio".into()],
        connect_timeout_ms: 30_000,
        ..McpServerConfig::default()
    };
    c.env
        .insert("MCP_FIXTURE_DIR".into(), dir.display().to_string());
    c
}

/// A Turnstile server whose model is `model` and whose MCP servers are `servers`.
async fn server_with(
    model: &ToolCallingModel,
    servers: Vec<(&str, McpServerConfig)>,
    edit: impl FnOnce(&mut Config),
) -> TestServer {
    let base_url = model.base_url.clone();
    start_server_with(data_dir(), move |c| {
        crate::support::one_turn_per_message(c);
        c.model.provider = "openai".into();
        c.model.base_url = base_url;
        c.model.model = "fake-model".into();
        c.model.max_retries = 0;
        for (name, server) in servers {
            c.mcp_servers.insert(name.into(), server);
        }
        edit(c);
    })
    .await
}

/// The answer to `text` in session `user`, through `/v1/chat/completions`.
async fn ask(api: &Api, user: &str, text: &str) -> String {
    let body = json!({"model": "fake-model", "user": user,
                      "messages": [{"role": "user", "content": text}]});
    let response = api
        .client
        .post(api.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .expect("POST /v1/chat/completions");
    let (status, reply) = json_of(response).await;
    assert_eq!(status, 200, "{reply}");
    reply["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The tool names a model request offered.
fn offered(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(String::from))
        .collect()
}

/// The tool message of the newest request that has one.
fn last_tool_message(model: &ToolCallingModel) -> String {
    model
        .requests()
        .iter()
        .rev()
        .find_map(|r| {
            r["messages"]
                .as_array()?
                .iter()
                .rev()
                .find(|m| m["role"] == "tool")
                .and_then(|m| m["content"].as_str().map(String::from))
        })
        .unwrap_or_default()
}

/// `/v1/stats`' line for MCP server `name`.
async fn health(api: &Api, name: &str) -> Value {
    let (_, stats) = api.get("/v1/stats").await;
    stats["mcp_servers"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == name).cloned())
        .unwrap_or(Value::Null)
}

async fn metrics(api: &Api) -> String {
    let (_, body) = api.get("/metrics").await;
    body.as_str().unwrap_or_default().to_string()
}

async fn readyz(api: &Api) -> (u16, String) {
    let r = api
        .client
        .get(api.url("/readyz"))
        .send()
        .await
        .expect("GET /readyz");
    let status = r.status().as_u16();
    (status, r.text().await.unwrap_or_default())
}

#[tokio::test]
async fn a_model_calls_a_stdio_mcp_tool_and_reads_its_result() {
    let Some(python) = python() else { return };
    let fixture_dir = tempfile::tempdir().expect("a fixture dir");
    let model = ToolCallingModel::start().await;
    let server = server_with(
        &model,
        vec![("fx", stdio_server(&python, fixture_dir.path()))],
        |_| {},
    )
    .await;
    // Listed at start: the first turn already offers the tools.
    let (status, ready) = readyz(&server).await;
    assert_eq!(status, 200, "{ready}");
    assert!(ready.contains("mcp fx: up, 4 tools"), "{ready}");

    let answer = ask(&server, "u1", r#"call fx__echo {"text":"hello mcp"}"#).await;
    assert_eq!(answer, "the tool said: echo: hello mcp");
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "a tool round and the answer");
    let tools = offered(&requests[0]);
    for name in ["fx__echo", "fx__big", "fx__slow", "fx__add_tool"] {
        assert!(tools.contains(&name.to_string()), "{tools:?}");
    }
    // The call and its result, paired, in the next request and in the transcript.
    let messages = requests[1]["messages"].as_array().expect("messages");
    let n = messages.len();
    assert_eq!(
        messages[n - 2]["tool_calls"][0]["function"]["name"],
        "fx__echo"
    );
    let call_id = messages[n - 2]["tool_calls"][0]["id"].clone();
    assert_eq!(messages[n - 1]["role"], "tool");
    assert_eq!(messages[n - 1]["tool_call_id"], call_id);
    assert_eq!(messages[n - 1]["content"], "echo: hello mcp");
    let key = eventually(PATIENCE, "the session", || async {
        let sessions = server.sessions().await;
        sessions
            .iter()
            .find_map(|s| s["session_key"].as_str().map(String::from))
            .ok_or_else(|| "no session yet".to_string())
    })
    .await;
    let transcript = server.transcript_json(&key).await.expect("a transcript");
    let text = serde_json::to_string(&transcript).expect("json");
    assert!(
        text.contains("fx__echo") && text.contains("echo: hello mcp"),
        "{text}"
    );

    // notifications/tools/list_changed: the new tool is listed again and offered.
    let answer = ask(&server, "u1", "call fx__add_tool {}").await;
    assert_eq!(answer, "the tool said: added");
    eventually(PATIENCE, "the re-listed tools", || async {
        let h = health(&server, "fx").await;
        (h["tools"] == 5).then_some(()).ok_or_else(|| h.to_string())
    })
    .await;
    let answer = ask(&server, "u2", "call fx__added {}").await;
    assert_eq!(answer, "the tool said: the added tool ran");
    let last = model.requests();
    assert!(offered(&last[last.len() - 2]).contains(&"fx__added".to_string()));
    server.stop().await;
}

/// A free loopback port (bound, then released for the child to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The fixture over streamable HTTP, killed when dropped.
struct HttpFixture {
    child: Child,
    url: String,
}

impl Drop for HttpFixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn http_fixture(python: &Path) -> HttpFixture {
    let port = free_port();
    let child = Command::new(python)
        .args([fixture(), "http".into(), port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting the HTTP fixture");
    let fixture = HttpFixture {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    };
    eventually(PATIENCE, "the HTTP fixture's port", || async move {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await;
    fixture
}

#[tokio::test]
async fn a_streamable_http_mcp_tool_returning_a_megabyte_is_cut_to_the_limit() {
    let Some(python) = python() else { return };
    let fixture = http_fixture(&python).await;
    let model = ToolCallingModel::start().await;
    // An auth header from the environment (the fixture ignores it; a missing one fails).
    std::env::set_var("TURNSTILE_IT_MCP_TOKEN", "Bearer test-token");
    let mut config = McpServerConfig {
        url: Some(fixture.url.clone()),
        connect_timeout_ms: 30_000,
        ..McpServerConfig::default()
    };
    config
        .headers_env
        .insert("Authorization".into(), "TURNSTILE_IT_MCP_TOKEN".into());
    let server = server_with(&model, vec![("web", config)], |c| {
        c.tools.max_result_chars = 20_000;
    })
    .await;
    let answer = ask(&server, "u1", r#"call web__echo {"text":"over http"}"#).await;
    assert_eq!(answer, "the tool said: echo: over http");

    let started = Instant::now();
    let answer = ask(&server, "u1", r#"call web__big {"size":1000000}"#).await;
    let result = last_tool_message(&model);
    assert!(
        result.chars().count() < 20_100,
        "cut to about max_result_chars: {}",
        result.len()
    );
    assert!(result.starts_with("xxxx") && result.ends_with("xxxx"));
    assert!(
        result.contains("more characters truncated]"),
        "clearly marked: {}",
        &result[14_000..15_200.min(result.len())]
    );
    assert!(answer.starts_with("the tool said: xxx"));
    println!("1 MB tool result round trip: {:?}", started.elapsed());
    let h = health(&server, "web").await;
    assert_eq!(h["transport"], "http", "{h}");
    assert_eq!(h["status"], "up", "{h}");
    server.stop().await;
}

#[tokio::test]
async fn a_stdio_server_killed_mid_call_fails_the_call_and_is_restarted() {
    let Some(python) = python() else { return };
    let fixture_dir = tempfile::tempdir().expect("a fixture dir");
    let model = ToolCallingModel::start().await;
    let server = server_with(
        &model,
        vec![("fx", stdio_server(&python, fixture_dir.path()))],
        |c| c.tools.timeout_ms = 120_000,
    )
    .await;
    let marker = fixture_dir.path().join("slow-started");
    let api = server.api.clone();
    let started = Instant::now();
    let turn = tokio::spawn(async move { ask(&api, "u1", r#"call fx__slow {"ms":60000}"#).await });
    let pid: i32 = eventually(PATIENCE, "the slow call to start", || {
        let marker = marker.clone();
        async move {
            std::fs::read_to_string(&marker)
                .map_err(|e| e.to_string())?
                .trim()
                .parse()
                .map_err(|e: std::num::ParseIntError| e.to_string())
        }
    })
    .await;
    assert_eq!(kill9(pid), 0, "kill -9 {pid}");
    let answer = tokio::time::timeout(PATIENCE, turn)
        .await
        .expect("the turn ends, not hangs")
        .expect("the turn task");
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "ended by the server's death, not the 60 s call: {:?}",
        started.elapsed()
    );
    assert!(
        answer.starts_with("the tool said: error:") && answer.contains("fx"),
        "{answer}"
    );
    println!("killed mid-call: {answer}");

    // Restarted with back-off; the next call works.
    eventually(PATIENCE, "the restart", || async {
        let h = health(&server, "fx").await;
        (h["status"] == "up" && h["restarts"].as_u64() >= Some(1))
            .then_some(())
            .ok_or_else(|| h.to_string())
    })
    .await;
    let answer = ask(&server, "u1", r#"call fx__echo {"text":"again"}"#).await;
    assert_eq!(answer, "the tool said: echo: again");
    let metrics = metrics(&server).await;
    assert!(
        metrics.contains("turnstile_mcp_restarts_total{server=\"fx\"}"),
        "{metrics}"
    );
    server.stop().await;
}

/// `kill -9 pid` through the `kill` program.
fn kill9(pid: i32) -> i32 {
    Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .map_or(-1, |s| s.code().unwrap_or(-1))
}

#[tokio::test]
async fn a_slow_tools_list_within_list_timeout_works_and_past_it_the_server_is_down() {
    let Some(python) = python() else { return };
    let fixture_dir = tempfile::tempdir().expect("a fixture dir");
    let model = ToolCallingModel::start().await;
    // 2.5 s per tools/list: past a hard-coded 1.5 s, within list_timeout_ms.
    let mut slow = stdio_server(&python, fixture_dir.path());
    slow.env.insert("SLOW_LIST_MS".into(), "2500".into());
    slow.list_timeout_ms = 20_000;
    let mut too_slow = slow.clone();
    too_slow.list_timeout_ms = 1_000;
    let server = server_with(&model, vec![("slow", slow), ("late", too_slow)], |_| {}).await;
    let (status, ready) = readyz(&server).await;
    assert_eq!(
        status, 200,
        "a down MCP server leaves the node ready: {ready}"
    );
    assert!(ready.contains("mcp slow: up, 4 tools"), "{ready}");
    assert!(
        ready.contains(
            "mcp late: down (tools/list did not answer within list_timeout_ms (1000 ms))"
        ),
        "{ready}"
    );
    let answer = ask(&server, "u1", r#"call slow__echo {"text":"patient"}"#).await;
    assert_eq!(answer, "the tool said: echo: patient");
    let first = &model.requests()[0];
    assert!(
        !offered(first).iter().any(|t| t.starts_with("late__")),
        "never listed: not offered"
    );
    // A call of a down server's tool is a clear error in the turn.
    let answer = ask(&server, "u2", "call late__echo {}").await;
    assert!(
        answer.contains("error: MCP server \"late\" is down"),
        "{answer}"
    );
    let metrics = metrics(&server).await;
    assert!(
        metrics.contains("turnstile_mcp_server_up{server=\"late\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("turnstile_mcp_server_up{server=\"slow\"} 1"),
        "{metrics}"
    );
    server.stop().await;
}
