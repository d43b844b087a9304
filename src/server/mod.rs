//! The HTTP API (axum): the contract of SPEC §9a. Only this module knows HTTP.
//!
//! [`app`] builds the router for a runtime (tests use it directly); [`serve`] runs it on a
//! bound listener until a shutdown future resolves, then drains.

mod error;
mod events;
mod messages;
mod openai;
mod sessions;

use std::future::Future;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use error::ApiError;

use crate::runtime::Runtime;

/// Shared by all handlers.
#[derive(Clone)]
pub struct AppState {
    runtime: Runtime,
    /// Becomes true when the server begins to shut down; long-lived streams end on it.
    closing: watch::Receiver<bool>,
}

/// The router for `runtime`. `closing` ends long-lived streams (SSE) at shutdown.
pub fn app(runtime: Runtime, closing: watch::Receiver<bool>) -> Router {
    let max_body = runtime.config().server.max_body_bytes;
    Router::new()
        .route("/v1/messages", post(messages::post_message))
        .route("/v1/sessions", get(sessions::list))
        .route("/v1/sessions/{key}", get(sessions::show))
        .route("/v1/sessions/{key}/transcript", get(sessions::transcript))
        .route("/v1/sessions/{key}/context", get(sessions::context))
        .route("/v1/events", get(events::stream))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(AppState { runtime, closing })
}

async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if state.runtime.is_ready() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down")
    }
}

/// Serves `runtime` on `listener` until `shutdown` resolves; then stops accepting, ends
/// streams, lets in-flight requests and running turns finish within the configured grace, and
/// flushes the store.
pub async fn serve(
    listener: TcpListener,
    runtime: Runtime,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (close_tx, close_rx) = watch::channel(false);
    let router = app(runtime.clone(), close_rx.clone());
    let grace = Duration::from_millis(runtime.config().server.shutdown_grace_ms);
    let mut signalled = close_rx;
    let stopping = runtime.clone();
    let server = axum::serve(listener, router).with_graceful_shutdown(async move {
        shutdown.await;
        tracing::info!("shutting down: no new connections");
        stopping.begin_shutdown();
        let _ = close_tx.send(true);
    });
    let server = tokio::spawn(async move { server.await });
    let _ = signalled.wait_for(|c| *c).await;
    // In-flight requests get half the grace; running turns the rest.
    match tokio::time::timeout(grace / 2, server).await {
        Ok(Ok(result)) => result?,
        Ok(Err(join)) => tracing::error!(error = %join, "server task failed"),
        Err(_) => tracing::warn!("in-flight requests did not finish in time"),
    }
    if let Err(e) = runtime.shutdown().await {
        tracing::error!(error = %e, "shutdown did not complete cleanly");
    }
    Ok(())
}
