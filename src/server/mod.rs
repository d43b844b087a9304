//! The HTTP API (axum): the contract of SPEC §9a. Only this module knows HTTP.
//!
//! [`app`] builds the router for a runtime (tests use it directly); [`serve`] runs it on a
//! bound listener until a shutdown future resolves, then drains. `ui/` is the operator
//! console (`/ui`), `stats.rs` and `history.rs` the figures its overview reads.

mod admin;
mod auth;
mod error;
mod events;
mod guard;
mod history;
mod limits;
mod messages;
mod openai;
mod sessions;
mod stats;
mod ui;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use auth::{bearer, check_exposure, Auth, PUBLIC_PATHS};
pub use error::ApiError;
pub use limits::RateLimiter;

use crate::runtime::Runtime;

/// Shared by all handlers.
#[derive(Clone)]
pub struct AppState {
    runtime: Runtime,
    /// Becomes true when the server begins to shut down; long-lived streams end on it.
    closing: watch::Receiver<bool>,
    /// The recent past the console's overview charts (sampled by a task of this router).
    history: Arc<history::History>,
}

/// The router for `runtime`, with the API key named by `[server] api_key_env` (read from the
/// environment now). `closing` ends long-lived streams (SSE) at shutdown.
pub fn app(runtime: Runtime, closing: watch::Receiver<bool>) -> Router {
    let auth = Auth::from_config(&runtime.config().server);
    app_with_auth(runtime, closing, auth)
}

/// Like [`app`] with explicit credentials (for embedding applications that hold the key).
pub fn app_with_auth(runtime: Runtime, closing: watch::Receiver<bool>, auth: Auth) -> Router {
    let max_body = runtime.config().server.max_body_bytes;
    crate::metrics::install_prometheus();
    let history = Arc::new(history::History::default());
    // The sampler ends with the router's `closing` signal (or when its sender is dropped).
    if let Ok(tokio) = tokio::runtime::Handle::try_current() {
        tokio.spawn(history::run(
            runtime.clone(),
            Arc::clone(&history),
            closing.clone(),
        ));
    }
    let guard = Arc::new(guard::Guard {
        auth,
        limiter: RateLimiter::from_config(&runtime.config().server.rate_limit),
    });
    Router::new()
        .route("/v1/messages", post(messages::post_message))
        .route("/v1/sessions", get(sessions::list))
        .route(
            "/v1/sessions/{key}",
            get(sessions::show).delete(admin::delete),
        )
        .route("/v1/sessions/{key}/compact", post(admin::compact))
        .route("/v1/stats", get(stats::stats))
        .route("/v1/stats/history", get(stats::history))
        .route("/metrics", get(admin::metrics))
        .route("/v1/sessions/{key}/transcript", get(sessions::transcript))
        .route("/v1/sessions/{key}/context", get(sessions::context))
        .route("/v1/events", get(events::stream))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .merge(ui::routes())
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(guard, guard::check))
        .with_state(AppState {
            runtime,
            closing,
            history,
        })
}

async fn readyz(State(state): State<AppState>) -> (StatusCode, String) {
    if !state.runtime.is_ready() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down".into());
    }
    match state.runtime.store_not_ready() {
        None => (StatusCode::OK, "ready".into()),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}"),
        ),
    }
}

/// Serves `runtime` on `listener` until `shutdown` resolves; then stops accepting, ends
/// streams, lets in-flight requests and running turns finish within the configured grace, and
/// flushes the store. Refuses (`InvalidInput`) a non-loopback listener without an API key.
pub async fn serve(
    listener: TcpListener,
    runtime: Runtime,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let server_config = &runtime.config().server;
    let auth = Auth::from_config(server_config);
    check_exposure(listener.local_addr()?, &auth, &server_config.api_key_env)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    let (close_tx, close_rx) = watch::channel(false);
    let router = app_with_auth(runtime.clone(), close_rx.clone(), auth)
        .into_make_service_with_connect_info::<SocketAddr>();
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
