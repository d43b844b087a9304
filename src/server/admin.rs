//! Operator endpoints: `/metrics`, `DELETE /v1/sessions/{key}`,
//! `POST /v1/sessions/{key}/compact`, `POST /v1/admin/drain` (`/v1/stats` is in `stats.rs`).

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::AppState;
use crate::runtime::{Compacted, Deleted};

/// The content type of the Prometheus text format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

pub(super) async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    let runtime = state.runtime.clone();
    // Sampling walks the data dir: keep it off the async worker threads.
    let _ = tokio::task::spawn_blocking(move || runtime.sample_gauges()).await;
    let text = crate::metrics::render().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "not_available",
            "another metrics recorder owns this process; /metrics is not served here",
        )
    })?;
    Ok(([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], text).into_response())
}

pub(super) async fn delete(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> Result<Json<Deleted>, ApiError> {
    state
        .runtime
        .delete_session(&key)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no session {key:?}")))
}

pub(super) async fn compact(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> Result<Json<Compacted>, ApiError> {
    state
        .runtime
        .compact(&key)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no session {key:?}")))
}

/// `POST /v1/admin/drain`: drains and stops the server as SIGTERM does (`serve` runs the
/// drain; this only asks for it). `202` at once; `/readyz` turns `503` as the drain begins.
pub(super) async fn drain(State(state): State<AppState>) -> (StatusCode, Json<serde_json::Value>) {
    tracing::info!("drain requested over HTTP");
    state.runtime.request_drain();
    (
        StatusCode::ACCEPTED,
        Json(serde_json::json!({ "status": "draining" })),
    )
}
