//! The HTTP API (axum): the contract of SPEC §9a. Only this module knows HTTP.
//!
//! [`app`] builds the router for a runtime (tests use it directly); [`serve`] runs it on a
//! bound listener until a shutdown future resolves, then drains. `listen.rs` is the accept
//! loop (connection cap, health reserve, graceful drain), `conn_io.rs` a connection's read
//! deadlines (idle, request head), `edge.rs` the router's request bounds (URI, body size and
//! read timeout) and JSON errors. `ui/` is the operator console (`/ui`), `stats.rs` and
//! `history.rs` the figures its overview reads.

mod admin;
mod audit;
mod auth;
mod chat_request;
mod conn_io;
mod edge;
mod error;
mod events;
#[cfg(test)]
mod future_sizes;
mod guard;
mod history;
mod limits;
mod listen;
mod messages;
mod openai;
mod query;
mod quotas;
mod schedules;
mod sessions;
mod slack;
pub mod socket;
mod stats;
mod ui;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use auth::{check_exposure, Auth};
pub(crate) use limits::RateLimiter;

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
    let server_config = &runtime.config().server;
    let bounds = edge::RequestBounds {
        max_body: server_config.max_body_bytes,
        max_uri: server_config.max_uri_bytes,
        body_timeout: Duration::from_millis(server_config.body_read_timeout_ms),
    };
    let max_body = server_config.max_body_bytes;
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
    let edge = Arc::new(edge::Edge {
        bounds,
        guard: guard::Guard {
            auth,
            limiter: RateLimiter::from_config(&runtime.config().server.rate_limit),
        },
        runtime: runtime.clone(),
        refusals: audit::RefusalWindow::default(),
    });
    Router::new()
        .route("/v1/messages", post(messages::post_message))
        .route("/v1/sessions", get(sessions::list))
        .route(
            "/v1/sessions/{key}",
            get(sessions::show).delete(admin::delete),
        )
        .route("/v1/sessions/{key}/compact", post(admin::compact))
        .route("/v1/admin/drain", post(admin::drain))
        .route("/v1/admin/backup", post(admin::backup))
        .route("/v1/admin/reload", post(admin::reload))
        .route("/v1/admin/audit", get(audit::read))
        .route("/v1/admin/quotas", get(quotas::summary))
        .route(
            "/v1/admin/quotas/{subject}",
            get(quotas::read).delete(quotas::reset),
        )
        .route(
            "/v1/schedules",
            get(schedules::list).post(schedules::create),
        )
        .route(
            "/v1/schedules/{id}",
            get(schedules::show).delete(schedules::delete),
        )
        .route("/v1/stats", get(stats::stats))
        .route("/v1/stats/history", get(stats::history))
        .route("/metrics", get(admin::metrics))
        .route("/v1/sessions/{key}/transcript", get(sessions::transcript))
        .route("/v1/sessions/{key}/context", get(sessions::context))
        .route("/v1/events", get(events::stream))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/models", get(openai::models))
        .route(slack::SLACK_EVENTS_PATH, post(slack::events))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .merge(ui::routes())
        .fallback(edge::no_route)
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(edge, edge::edge))
        .with_state(AppState {
            runtime,
            closing,
            history,
        })
}

/// `ready`, `draining` or `not ready: <why>`, then a line per MCP server (`mcp <name>: up,
/// N tools` or `mcp <name>: down (<why>)`). A server that is down leaves the node ready: its
/// tools answer with an error, every other turn runs as before.
async fn readyz(State(state): State<AppState>) -> (StatusCode, String) {
    if !state.runtime.is_ready() {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining".into());
    }
    let (status, mut body) = match state.runtime.store_not_ready() {
        None => (StatusCode::OK, "ready".to_string()),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}"),
        ),
    };
    for server in state.runtime.mcp_health() {
        body.push_str(&mcp_health_line(&server));
    }
    (status, body)
}

/// One MCP server's `/readyz` line.
fn mcp_health_line(server: &crate::McpServerHealth) -> String {
    use crate::McpStatus;
    match server.status {
        McpStatus::Up => format!("\nmcp {}: up, {} tools", server.name, server.tools),
        McpStatus::Starting => format!("\nmcp {}: starting", server.name),
        McpStatus::Down => format!(
            "\nmcp {}: down ({})",
            server.name,
            server.error.as_deref().unwrap_or("not connected")
        ),
    }
}

/// Reloads the config file as `POST /v1/admin/reload` does, for a signal (`turnstile serve`
/// calls it on SIGHUP; `signal` names it): logs the outcome (an `error` line for a refused
/// file, a `warn` line for settings that need a restart) and records it in the audit log as
/// `server.reload`, with the status the API would have answered.
pub async fn reload_on_signal(runtime: &Runtime, signal: &str) {
    let result = runtime.reload_from_file().await;
    admin::log_reload(signal, &result);
    let (status, outcome) = match result {
        Ok(outcome) => (StatusCode::OK, outcome.summary()),
        Err(e) => {
            let text = e.to_string();
            (error::ApiError::from(e).status(), text)
        }
    };
    audit::record_signal(runtime, signal, &outcome, status);
}

/// How long, after the drain, the connections get to write their last answers and close.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Serves `runtime` on `listener` until `shutdown` resolves or a drain is requested
/// (`POST /v1/admin/drain`); then drains (new messages `503`, running turns finish within
/// `shutdown_grace_ms` and their replies are delivered), closes the connections, ends streams
/// and flushes the store. Returns what the drain finished and left. Refuses (`InvalidInput`)
/// a non-loopback listener without an API key.
pub async fn serve(
    listener: TcpListener,
    runtime: Runtime,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<crate::DrainReport> {
    let server_config = &runtime.config().server;
    let auth = Auth::from_config(server_config);
    check_exposure(listener.local_addr()?, &auth, &server_config.api_key_env)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    let (close_tx, close_rx) = watch::channel(false);
    let router = app_with_auth(runtime.clone(), close_rx.clone(), auth);
    let bounds = listen::ConnectionBounds {
        read: conn_io::ReadBounds {
            header: Duration::from_millis(server_config.header_read_timeout_ms),
            idle: Duration::from_millis(server_config.idle_timeout_ms),
            // The method, two spaces and the version around the URI.
            max_request_line: server_config.max_uri_bytes + 32,
        },
        max_connections: server_config.max_connections,
        health_connections: server_config.health_connections,
    };
    let grace = Duration::from_millis(server_config.shutdown_grace_ms);
    let mut server = tokio::spawn(listen::run(listener, router, bounds, close_rx));
    tokio::select! {
        () = shutdown => {}
        () = runtime.drain_requested() => {}
    }
    // The drain runs with the server still up: `/readyz` and new messages answer 503 at once
    // (a load balancer moves traffic), and the replies of the turns that finish reach the
    // clients waiting for them. Only then are the connections closed.
    tracing::info!("draining: new messages get 503, running turns finish");
    let report = runtime.drain(grace).await;
    if report.left_running == 0 {
        tracing::info!(
            finished = report.finished,
            queued_left = report.queued_left,
            elapsed_ms = report.elapsed_ms,
            "drained: every running turn finished; queued messages run after the restart"
        );
    } else {
        tracing::warn!(
            finished = report.finished,
            left_running = report.left_running,
            queued_left = report.queued_left,
            elapsed_ms = report.elapsed_ms,
            "drain: running turns did not finish within shutdown_grace_ms; they are replayed \
             at the next start"
        );
    }
    let _ = close_tx.send(true);
    // Answers of the finished turns are written now; connections end after their request.
    match tokio::time::timeout(
        CLOSE_GRACE.min(grace.max(Duration::from_millis(1))),
        &mut server,
    )
    .await
    {
        Ok(Ok(())) => {}
        Ok(Err(join)) => tracing::error!(error = %join, "server task failed"),
        Err(_) => {
            tracing::warn!("in-flight requests did not finish in time");
            server.abort();
        }
    }
    if let Err(e) = runtime.shutdown().await {
        tracing::error!(error = %e, "shutdown did not complete cleanly");
    }
    Ok(report)
}
