//! Shared helpers: a server on a loopback port, messages, polling, small models.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use tokio::sync::{oneshot, Notify};
use turnstile::error::ModelError;
use turnstile::model::{Model, ModelReply, ModelRequest};
use turnstile::{Config, Runtime};

/// A unique name (env vars, ids) for this test process.
pub fn unique(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Sets a fresh environment variable to `value` and returns its name.
pub fn env_var(value: &str) -> String {
    let name = unique("TURNSTILE_IT");
    std::env::set_var(&name, value);
    name
}

/// A running server on 127.0.0.1.
pub struct Server {
    pub url: String,
    pub runtime: Runtime,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// Serves `runtime` on a free loopback port.
    pub async fn start(runtime: Runtime) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(turnstile::server::serve(listener, runtime.clone(), async {
            let _ = stopped.await;
        }));
        Self {
            url,
            runtime,
            stop: Some(stop),
            task,
        }
    }

    /// Builds a runtime from `config` and serves it.
    pub async fn with_config(config: Config) -> Self {
        Self::start(Runtime::builder().config(config).build().await.unwrap()).await
    }

    /// Shuts down (drains and flushes the store).
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.unwrap().unwrap();
    }
}

/// A config with data under `dir` and short shutdown grace.
pub fn config(dir: &std::path::Path) -> Config {
    let mut c = Config::with_data_dir(dir);
    c.server.shutdown_grace_ms = 2_000;
    c
}

/// An InboundMessage JSON for `POST /v1/messages`.
pub fn message(channel: &str, chat_id: &str, id: &str, text: &str) -> Value {
    json!({
        "channel": channel, "chat_kind": "group", "chat_id": chat_id, "message_id": id,
        "sender": {"id": "u1", "name": "User"}, "text": text, "mentioned_bot": true
    })
}

/// Polls `f` every 20 ms until it returns `Some`, failing after `secs` seconds.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A model that answers with a fixed text, or `long_text` when the last message contains
/// "long".
pub struct FixedModel {
    pub long_text: String,
}

impl Model for FixedModel {
    fn name(&self) -> &str {
        "fixed"
    }

    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        let last = request
            .messages
            .last()
            .map(|m| m.content.clone())
            .unwrap_or_default();
        let text = if last.contains("long") {
            self.long_text.clone()
        } else {
            format!("re: {last}")
        };
        Box::pin(async move {
            Ok(ModelReply {
                text,
                ..ModelReply::default()
            })
        })
    }
}

/// A model that waits for `release` before answering; `entered` is notified when a call
/// starts.
#[derive(Default)]
pub struct GateModel {
    pub entered: Notify,
    pub release: Notify,
}

impl Model for GateModel {
    fn name(&self) -> &str {
        "gate"
    }

    fn complete<'a>(
        &'a self,
        _request: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            self.entered.notify_one();
            self.release.notified().await;
            Ok(ModelReply {
                text: "done".into(),
                ..ModelReply::default()
            })
        })
    }
}

/// `Arc<GateModel>` as a model.
pub struct SharedGate(pub Arc<GateModel>);

impl Model for SharedGate {
    fn name(&self) -> &str {
        "gate"
    }

    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        self.0.complete(request)
    }
}
