//! `/v1/admin/quotas`: what `[[quotas]]` counted. `GET /v1/admin/quotas` lists the rules'
//! totals and top offenders; `GET /v1/admin/quotas/{subject}` reads one subject's stored usage
//! (`sender:<channel>:<id>`, `chat:…`, `account:…`, `agent:<id>`); `DELETE` resets it (audited as
//! `quota.reset`).

use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

use super::error::ApiError;
use super::AppState;

pub(super) async fn summary(State(state): State<AppState>) -> Json<Value> {
    Json(json!(state.runtime.quota_stats()))
}

pub(super) async fn read(
    State(state): State<AppState>,
    Path(subject): Path<String>,
) -> Result<Json<Value>, ApiError> {
    // One sled read (or the cache): no walk, short enough for the handler.
    let usage = state.runtime.quota_usage(&subject)?;
    let usage = usage.ok_or_else(|| ApiError::not_found(format!("no usage for {subject:?}")))?;
    Ok(Json(json!({ "subject": subject, "usage": usage })))
}

pub(super) async fn reset(
    State(state): State<AppState>,
    Path(subject): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let had = state.runtime.reset_quota(&subject)?;
    if !had {
        return Err(ApiError::not_found(format!("no usage for {subject:?}")));
    }
    Ok(Json(json!({ "subject": subject, "status": "reset" })))
}
