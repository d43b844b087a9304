//! `turnstile::server::serve` in this process: on a fresh data dir, on a config, or on a
//! runtime the test built itself.

use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tempfile::TempDir;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use turnstile::{Config, Runtime};

use super::api::Api;
use super::wait::{data_dir, PATIENCE};

/// `turnstile::server::serve` on `127.0.0.1:0`, in this process.
pub struct TestServer {
    pub api: Api,
    /// The data dir when this server owns it; keep a clone to restart on it after
    /// [`TestServer::stop`].
    pub dir: Option<Arc<TempDir>>,
    /// The runtime it serves, for tests that also use the library API.
    pub runtime: Runtime,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<turnstile::DrainReport>>>,
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
    TestServer::serve(runtime, Some(dir)).await
}

impl TestServer {
    /// Serves `runtime` on a free loopback port; `dir` is its data dir when the server should
    /// keep it alive.
    pub async fn serve(runtime: Runtime, dir: Option<Arc<TempDir>>) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding a loopback port");
        let addr = listener.local_addr().expect("local address");
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(turnstile::server::serve(
            listener,
            runtime.clone(),
            async move {
                let _ = rx.await;
            },
        ));
        TestServer {
            api: Api::new(format!("http://{addr}")),
            dir,
            runtime,
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    /// Builds a runtime from `config` (whose data dir the test owns) and serves it.
    pub async fn with_config(config: Config) -> TestServer {
        let runtime = Runtime::builder()
            .config(config)
            .build()
            .await
            .expect("building the runtime");
        TestServer::serve(runtime, None).await
    }

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

/// A config with data under `dir` and a short shutdown grace, for servers the test builds
/// from a config.
pub fn config(dir: &std::path::Path) -> turnstile::Config {
    let mut c = turnstile::Config::with_data_dir(dir);
    c.server.shutdown_grace_ms = 2_000;
    c
}

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
