//! Session inspection: list, show, transcript, context dump.

use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use serde_json::Value;

use super::error::ApiError;
use super::query::StrictQuery;
use super::AppState;
use crate::runtime::{SessionInfo, SessionRead};

/// Largest page a client may ask for.
pub(super) const MAX_PAGE: usize = 1_000;
/// Page size when the client does not say.
pub(super) const DEFAULT_PAGE: usize = 100;

#[derive(Debug, Deserialize)]
pub(super) struct ListQuery {
    after: Option<String>,
    limit: Option<usize>,
}

fn page(limit: Option<usize>) -> usize {
    limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE)
}

pub(super) async fn list(
    State(state): State<AppState>,
    StrictQuery(q): StrictQuery<ListQuery>,
) -> Result<Json<Vec<SessionInfo>>, ApiError> {
    Ok(Json(
        state.runtime.sessions(q.after.as_deref(), page(q.limit))?,
    ))
}

/// A session read, served here or (a cluster node that does not keep the session's
/// partition) by a node that keeps it: the same JSON either way.
async fn read(state: &AppState, read: SessionRead) -> Result<Json<Value>, ApiError> {
    let key = read.session_key();
    state
        .runtime
        .read_session(&read)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no session {key:?}")))
}

pub(super) async fn show(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> Result<Json<Value>, ApiError> {
    read(&state, SessionRead::Session { key }).await
}

#[derive(Debug, Deserialize)]
pub(super) struct TranscriptQuery {
    after: Option<u64>,
    limit: Option<usize>,
}

pub(super) async fn transcript(
    State(state): State<AppState>,
    Path(key): Path<String>,
    StrictQuery(q): StrictQuery<TranscriptQuery>,
) -> Result<Json<Value>, ApiError> {
    let transcript = SessionRead::Transcript {
        key,
        after: q.after.unwrap_or(0),
        limit: page(q.limit),
    };
    read(&state, transcript).await
}

pub(super) async fn context(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> Result<Json<Value>, ApiError> {
    read(&state, SessionRead::Context { key }).await
}
