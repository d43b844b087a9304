//! Session inspection: list, show, transcript, context dump.

use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use serde_json::Value;

use super::error::ApiError;
use super::query::StrictQuery;
use super::AppState;
use crate::runtime::{SessionInfo, TranscriptItem};

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

pub(super) async fn show(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> Result<Json<SessionInfo>, ApiError> {
    state
        .runtime
        .session(&key)?
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no session {key:?}")))
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
) -> Result<Json<Vec<TranscriptItem>>, ApiError> {
    state
        .runtime
        .transcript(&key, q.after.unwrap_or(0), page(q.limit))?
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no session {key:?}")))
}

pub(super) async fn context(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let Some(assembly) = state.runtime.context_dump(&key)? else {
        return Err(ApiError::not_found(format!("no session {key:?}")));
    };
    let mut dump = assembly.dump();
    let key = crate::inbound::normalize_session_key(&key);
    if let Some(fields) = dump.as_object_mut() {
        fields.insert(
            "agent".into(),
            Value::from(state.runtime.agent_of_session(&key)),
        );
    }
    Ok(Json(dump))
}
