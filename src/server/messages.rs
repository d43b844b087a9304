//! `POST /v1/messages`: the inbound webhook.
//!
//! The body is an [`InboundMessage`], optionally with two routing fields beside its own:
//! `guild_id` (the Discord guild or Slack team) and `roles` (the sender's role ids there),
//! which only `[[bindings]]` read; they are not stored.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::error::{body_bytes, ApiError};
use super::AppState;
use crate::inbound::{InboundMessage, Refusal, RouteHints};
use crate::runtime::SubmitError;

/// Accepts one message: 202 once durably queued, 4xx with a reason otherwise.
pub(super) async fn post_message(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let (message, route) = parse_message(&body_bytes(body)?)?;
    let submitted = if route.is_empty() {
        state.runtime.submit(message).await
    } else {
        state.runtime.submit_routed(message, route).await
    };
    let ack = match submitted {
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

/// The message of a body, and its routing fields. Bodies without them (almost all) are read
/// straight into the message; the others through a JSON value the two fields are taken out of.
fn parse_message(bytes: &[u8]) -> Result<(InboundMessage, RouteHints), ApiError> {
    let invalid = |e: serde_json::Error| ApiError::bad_request("invalid_json", e.to_string());
    let finder = |needle: &str| memchr::memmem::find(bytes, needle.as_bytes()).is_some();
    if !finder("\"guild_id\"") && !finder("\"roles\"") {
        return Ok((
            serde_json::from_slice(bytes).map_err(invalid)?,
            RouteHints::default(),
        ));
    }
    let mut value: serde_json::Value = serde_json::from_slice(bytes).map_err(invalid)?;
    let mut route = RouteHints::default();
    if let Some(fields) = value.as_object_mut() {
        let mut hints = serde_json::Map::new();
        for name in ["guild_id", "roles"] {
            if let Some(v) = fields.remove(name).filter(|v| !v.is_null()) {
                hints.insert(name.into(), v);
            }
        }
        route = serde_json::from_value(hints.into()).map_err(invalid)?;
    }
    let message = serde_json::from_value(value).map_err(invalid)?;
    Ok((message, route))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_fields_are_taken_out_of_the_message() {
        let plain = br#"{"channel":"discord","chat_kind":"channel","chat_id":"c1","message_id":"1",
            "sender":{"id":"u1"},"text":"hi"}"#;
        let (m, r) = parse_message(plain).unwrap();
        assert_eq!((m.chat_id.as_str(), r), ("c1", RouteHints::default()));
        let routed =
            br#"{"channel":"discord","chat_kind":"channel","chat_id":"c1","message_id":"1",
            "sender":{"id":"u1"},"text":"hi","guild_id":"g1","roles":["mod"]}"#;
        let (m, r) = parse_message(routed).unwrap();
        assert_eq!(m.text, "hi");
        assert_eq!(r.guild_id.as_deref(), Some("g1"));
        assert_eq!(r.roles, vec!["mod".to_string()]);
        // A text that merely mentions the words is read as before.
        let mention = br#"{"channel":"x","chat_kind":"direct","chat_id":"c1","message_id":"1",
            "sender":{"id":"u1"},"text":"my \"roles\" here"}"#;
        assert_eq!(parse_message(mention).unwrap().1, RouteHints::default());
        // Unknown fields are still refused; wrong types too.
        let bogus = br#"{"channel":"x","chat_kind":"direct","chat_id":"c1","message_id":"1",
            "sender":{"id":"u1"},"text":"t","roles":[],"bogus":1}"#;
        assert!(parse_message(bogus).is_err());
        let wrong = br#"{"channel":"x","chat_kind":"direct","chat_id":"c1","message_id":"1",
            "sender":{"id":"u1"},"text":"t","roles":"mod"}"#;
        assert!(parse_message(wrong).is_err());
    }
}
