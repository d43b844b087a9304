//! Shared helpers for the tests that drive the real `turnstile` binary over loopback HTTP.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A `turnstile serve` child process.
pub struct Server {
    child: Child,
    pub url: String,
    pub data_dir: PathBuf,
}

/// A free loopback port (bound and released; good enough for tests on one machine).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Server {
    /// Starts the binary on `data_dir` with the TOML `config` (written next to, not inside,
    /// the data dir) and waits until it answers `/readyz`.
    pub async fn start(data_dir: &Path, config_dir: &Path, config: &str) -> Server {
        let port = free_port();
        let config_path = config_dir.join("turnstile.toml");
        std::fs::write(&config_path, config).unwrap();
        let log = std::fs::File::create(config_dir.join(format!("server-{port}.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_turnstile"))
            .arg("serve")
            .arg("--config")
            .arg(&config_path)
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .env(
                "RUST_LOG",
                std::env::var("TURNSTILE_SERVER_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let server = Server {
            child,
            url: format!("http://127.0.0.1:{port}"),
            data_dir: data_dir.to_path_buf(),
        };
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = client.get(format!("{}/readyz", server.url)).send().await {
                if r.status().is_success() {
                    return server;
                }
            }
            assert!(Instant::now() < deadline, "server did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL: no shutdown code runs.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for a graceful exit.
    pub fn stop(&mut self) {
        // Through kill(1), so the tests need no unsafe code.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill9();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A group message that addresses the bot, so it becomes a turn in session
/// `agent:main:test:group:<chat>`.
pub fn message(chat: &str, id: &str, text: &str) -> Value {
    json!({
        "channel": "test",
        "chat_kind": "group",
        "chat_id": chat,
        "message_id": id,
        "sender": {"id": "u1", "name": "User", "is_bot": false},
        "text": text,
        "mentioned_bot": true,
        "timestamp_ms": now_ms(),
    })
}

pub fn session_key(chat: &str) -> String {
    format!("agent:main:test:group:{chat}")
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Posts a message; true when it was acknowledged (202).
pub async fn post(client: &reqwest::Client, url: &str, body: &Value) -> Result<bool, String> {
    let r = client
        .post(format!("{url}/v1/messages"))
        .json(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    Ok(r.status() == reqwest::StatusCode::ACCEPTED)
}

/// A session's whole transcript, as the API shows it.
pub async fn transcript(client: &reqwest::Client, url: &str, key: &str) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut after = 0u64;
    loop {
        let enc = key.replace(':', "%3A");
        let r = client
            .get(format!(
                "{url}/v1/sessions/{enc}/transcript?after={after}&limit=1000"
            ))
            .send()
            .await
            .unwrap();
        if r.status() == reqwest::StatusCode::NOT_FOUND {
            return out;
        }
        let page: Vec<Value> = r.json().await.unwrap();
        let Some(last) = page.last() else { return out };
        after = last["seq"].as_u64().unwrap();
        out.extend(page);
    }
}

/// Runs `turnstile <args>` to completion: (success, stdout + stderr).
pub fn run_cli(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Bytes allocated under `dir`.
pub fn disk_bytes(dir: &Path) -> u64 {
    turnstile::store::dir_disk_bytes(dir).unwrap()
}
