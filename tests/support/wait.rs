//! Waiting without fixed sleeps: a polling helper, the patience every wait shares, and the
//! temporary data dirs the servers run on.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tempfile::TempDir;

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

/// [`eventually`] for checks that have nothing to say while they wait: polls until `check`
/// returns `Some`.
pub async fn eventually_some<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually(timeout, what, || {
        let next = check();
        async move { next.await.ok_or_else(|| "not yet".to_string()) }
    })
    .await
}
