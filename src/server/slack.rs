//! `POST /v1/channels/slack/events`: Slack's HTTP Events API (`[channels.slack] mode =
//! "http"`). No API key (Slack cannot send one): the request is authenticated by Slack's
//! signature instead, checked by the channel (`channels/slack/http.rs`), and answered at
//! once. Without the channel in `http` mode the route answers 404.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::AppState;
use crate::channels::{SlackEventsAnswer, SLACK_SIGNATURE_HEADER, SLACK_TIMESTAMP_HEADER};

/// The route's path (public: signed by Slack, not by the API key).
pub(crate) const SLACK_EVENTS_PATH: &str = "/v1/channels/slack/events";

pub(super) async fn events(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(events) = state.runtime.slack_events() else {
        return ApiError::not_found("the slack channel is not in http mode").into_response();
    };
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    match events.handle(
        header(SLACK_TIMESTAMP_HEADER),
        header(SLACK_SIGNATURE_HEADER),
        &body,
        now,
    ) {
        SlackEventsAnswer::Ok(json) => (StatusCode::OK, Json(json)).into_response(),
        SlackEventsAnswer::Unauthorized(why) => {
            ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", why).into_response()
        }
        SlackEventsAnswer::BadRequest(why) => {
            ApiError::new(StatusCode::BAD_REQUEST, "bad_request", why).into_response()
        }
        SlackEventsAnswer::Unavailable => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the slack channel is busy; Slack delivers the event again",
        )
        .into_response(),
    }
}
