//! `POST /v1/messages`: the inbound webhook.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::error::{parse_json, ApiError};
use super::AppState;
use crate::inbound::InboundMessage;
use crate::inbound::Refusal;
use crate::runtime::SubmitError;

/// Accepts one message: 202 once durably queued, 4xx with a reason otherwise.
pub(super) async fn post_message(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let message: InboundMessage = parse_json(body)?;
    let ack = match state.runtime.submit(message).await {
        Ok(ack) => ack,
        Err(SubmitError::Refused(Refusal::Dropped(reason))) => {
            let body = json!({"status": "dropped", "reason": reason.as_str()});
            return Ok((StatusCode::OK, Json(body)).into_response());
        }
        Err(SubmitError::Refused(Refusal::OverQuota(q))) => {
            let body = json!({"status": "dropped", "reason": "quota", "limit": q.limit});
            return Ok((StatusCode::OK, Json(body)).into_response());
        }
        Err(e) => return Err(e.into()),
    };
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({
            "status": "accepted",
            "session_key": ack.session_key,
            "message_id": ack.message_id,
        })),
    )
        .into_response())
}
