//! What a load test drives: a server over HTTP, or a runtime in this process.

use std::future::Future;
use std::sync::Arc;

use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::inbound::InboundMessage;
use crate::inbound::Refusal;
use crate::runtime::{Runtime, SubmitError};
use crate::sse::{SseEvents, SseParser};

/// Replies buffered between the reply reader and the bookkeeping task.
const REPLY_BUFFER: usize = 4_096;

/// What one submission got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Durably queued.
    Accepted,
    /// Dropped by preflight, with the reason.
    Dropped(String),
    /// Refused or failed, with its kind (e.g. `http_429`, `connect`).
    Error(String),
}

/// A system under load.
pub trait Target: Send + Sync + 'static {
    /// Submits one message.
    fn submit(&self, message: InboundMessage) -> impl Future<Output = Outcome> + Send;
    /// A stream of replies, each as the message ids it answers. Subscribe before submitting.
    fn replies(&self) -> impl Future<Output = mpsc::Receiver<Vec<String>>> + Send;
    /// For the report.
    fn describe(&self) -> String;
    /// Resident memory of the loaded process, if known.
    fn rss_bytes(&self) -> Option<u64>;
}

/// Resident set size of process `pid` (Linux `/proc`).
pub fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A server reached over HTTP.
pub struct HttpTarget {
    base: String,
    client: reqwest::Client,
    server_pid: Option<u32>,
}

impl HttpTarget {
    /// A target at `base` (e.g. `http://127.0.0.1:7878`); `server_pid` lets the report read
    /// the server's memory when it runs on this machine.
    pub fn new(
        base: &str,
        server_pid: Option<u32>,
        bearer: Option<String>,
    ) -> Result<Self, reqwest::Error> {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(token) = bearer {
            if let Ok(v) = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")) {
                headers.insert(reqwest::header::AUTHORIZATION, v);
            }
        }
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .pool_max_idle_per_host(1_024)
            .build()?;
        Ok(Self {
            base: base.trim_end_matches('/').to_string(),
            client,
            server_pid,
        })
    }
}

impl Target for HttpTarget {
    async fn submit(&self, message: InboundMessage) -> Outcome {
        let response = self
            .client
            .post(format!("{}/v1/messages", self.base))
            .json(&message)
            .send()
            .await;
        let response = match response {
            Ok(r) => r,
            Err(e) if e.is_connect() => return Outcome::Error("connect".into()),
            Err(e) if e.is_timeout() => return Outcome::Error("timeout".into()),
            Err(_) => return Outcome::Error("transport".into()),
        };
        let status = response.status().as_u16();
        match status {
            202 => Outcome::Accepted,
            200 => {
                let body: serde_json::Value = response.json().await.unwrap_or_default();
                Outcome::Dropped(body["reason"].as_str().unwrap_or("unknown").to_string())
            }
            other => Outcome::Error(format!("http_{other}")),
        }
    }

    async fn replies(&self) -> mpsc::Receiver<Vec<String>> {
        let (tx, rx) = mpsc::channel(REPLY_BUFFER);
        let request = self
            .client
            .get(format!("{}/v1/events", self.base))
            .send()
            .await;
        let Ok(response) = request else {
            return rx;
        };
        tokio::spawn(async move {
            let mut body = response.bytes_stream();
            let mut parser = SseParser::default();
            let mut events = SseEvents::default();
            let mut lines = Vec::new();
            while let Some(Ok(chunk)) = body.next().await {
                if parser.push(&chunk, &mut lines).is_err() {
                    return;
                }
                for event in lines.drain(..).filter_map(|l| events.line(l)) {
                    // A streaming turn's `delta` events are not answers.
                    if event.event.as_deref().map(str::trim) == Some("delta") {
                        continue;
                    }
                    let Ok(v) = serde_json::from_str::<serde_json::Value>(&event.data) else {
                        continue;
                    };
                    let ids = v["in_reply_to"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|x| x.as_str().map(String::from))
                                .collect()
                        })
                        .unwrap_or_default();
                    if tx.send(ids).await.is_err() {
                        return;
                    }
                }
            }
        });
        rx
    }

    fn describe(&self) -> String {
        self.base.clone()
    }

    fn rss_bytes(&self) -> Option<u64> {
        self.server_pid.and_then(rss_of)
    }
}

/// A runtime in this process.
pub struct InProcessTarget {
    runtime: Runtime,
}

impl InProcessTarget {
    /// Drives `runtime`.
    pub fn new(runtime: Runtime) -> Arc<Self> {
        Arc::new(Self { runtime })
    }
}

impl Target for InProcessTarget {
    async fn submit(&self, message: InboundMessage) -> Outcome {
        match self.runtime.submit(message).await {
            Ok(_) => Outcome::Accepted,
            Err(SubmitError::Refused(refusal)) => match refusal {
                Refusal::Dropped(reason) => Outcome::Dropped(reason.as_str().into()),
                Refusal::OverQuota(_) => Outcome::Dropped("quota".into()),
                Refusal::Overloaded(_) => Outcome::Error("overloaded".into()),
                Refusal::ShuttingDown => Outcome::Error("shutting_down".into()),
                Refusal::Storage(_) => Outcome::Error("storage".into()),
                Refusal::Unavailable(_) => Outcome::Error("unavailable".into()),
                Refusal::InsufficientStorage(_) => Outcome::Error("insufficient_storage".into()),
            },
            Err(SubmitError::Failed(e)) => Outcome::Error(e.kind().into()),
        }
    }

    async fn replies(&self) -> mpsc::Receiver<Vec<String>> {
        let (tx, rx) = mpsc::channel(REPLY_BUFFER);
        let mut sub = self.runtime.subscribe();
        tokio::spawn(async move {
            loop {
                match sub.recv().await {
                    Ok(reply) => {
                        if tx.send(reply.in_reply_to.clone()).await.is_err() {
                            return;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        rx
    }

    fn describe(&self) -> String {
        format!(
            "in-process ({})",
            self.runtime.config().storage.data_dir.display()
        )
    }

    fn rss_bytes(&self) -> Option<u64> {
        rss_of(std::process::id())
    }
}
