//! `/v1/schedules`: scheduled turns. `GET` lists every job with its newest run; `POST` adds one
//! (the `[[schedules]]` shape; `201`, `400` naming the problem, `409` when the id exists);
//! `GET /v1/schedules/{id}` shows one with its newest runs; `DELETE` removes a job the API
//! added (`409` for one from the config file). In a cluster `POST` answers `501`: jobs come
//! from every node's `[[schedules]]` (see `docs/schedules.md`). Changes are audited (`schedule.create`,
//! `schedule.delete`).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::error::{body_bytes, ApiError};
use super::AppState;
use crate::config::ScheduleConfig;
use crate::error::Error;
use crate::schedules::ScheduleError;

impl From<ScheduleError> for ApiError {
    fn from(e: ScheduleError) -> Self {
        match e {
            ScheduleError::Invalid(e) => ApiError::bad_request("invalid_schedule", e.to_string()),
            ScheduleError::NotFound(_) => ApiError::not_found(e.to_string()),
            ScheduleError::Exists(_) | ScheduleError::FromConfig(_) | ScheduleError::TooMany => {
                ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string())
            }
            ScheduleError::Store(e) => ApiError::from(Error::from(e)),
        }
    }
}

pub(super) async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    // At most MAX_SCHEDULES jobs and one run each: bounded, short enough for the handler.
    let jobs = state.runtime.schedules().list(1).map_err(Error::from)?;
    Ok(Json(json!({"object": "list", "data": jobs})))
}

pub(super) async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let job = state.runtime.schedules().get(&id).map_err(Error::from)?;
    let job = job.ok_or_else(|| ApiError::not_found(format!("no schedule {id:?}")))?;
    Ok(Json(json!(job)))
}

pub(super) async fn create(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    if state.runtime.is_clustered() {
        // The nodes share no job list: each keeps `[[schedules]]` of its own config.
        return Err(Error::NotAvailable(
            "in a cluster, schedules come from [[schedules]] in every node's config; \
             the API cannot add one",
        )
        .into());
    }
    let spec: ScheduleConfig = serde_json::from_slice(&body_bytes(body)?)
        .map_err(|e| ApiError::bad_request("invalid_json", e.to_string()))?;
    let job = state.runtime.schedules().create(spec).await?;
    Ok((StatusCode::CREATED, Json(json!(job))).into_response())
}

pub(super) async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    state.runtime.schedules().delete(&id).await?;
    Ok(Json(json!({"id": id, "deleted": true})))
}
