//! Operator endpoints: `/metrics`, `/v1/stats`, `DELETE /v1/sessions/{key}`,
//! `POST /v1/sessions/{key}/compact`.

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::AppState;
use crate::runtime::{Compacted, Deleted, Stats};

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

pub(super) async fn stats(State(state): State<AppState>) -> Result<Json<Stats>, ApiError> {
    let runtime = state.runtime.clone();
    let stats = tokio::task::spawn_blocking(move || runtime.stats())
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "stats task failed");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal error",
            )
        })??;
    Ok(Json(stats))
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
