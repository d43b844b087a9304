//! The HTTP Events API (`mode = "http"`): the channel's half of `POST
//! /v1/channels/slack/events` (the route is the server's). A request is verified — Slack's
//! v0 signature, HMAC-SHA256 of `v0:<timestamp>:<body>` with the signing secret, compared in
//! constant time, the timestamp within [`MAX_SKEW_SECS`] of now — then answered at once:
//! `url_verification` with its challenge, an event callback with 200 after it is queued for
//! the receiver (which dedupes Slack's retries on the event id). A full queue answers 503, so
//! Slack delivers the event again later rather than it being lost.

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;
use tokio::sync::mpsc;

use super::events::Callback;
use super::socket::Inbound;
use crate::secret::Secret;

/// Slack's signature header.
pub const SIGNATURE_HEADER: &str = "x-slack-signature";
/// Slack's timestamp header.
pub const TIMESTAMP_HEADER: &str = "x-slack-request-timestamp";
/// Oldest (or furthest in the future) a signed request may be: Slack's five minutes.
pub const MAX_SKEW_SECS: u64 = 300;

type HmacSha256 = Hmac<Sha256>;

/// What the route answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventsAnswer {
    /// 200 with this JSON body.
    Ok(Value),
    /// 401: the signature or timestamp is wrong.
    Unauthorized(&'static str),
    /// 400: not an Events API request.
    BadRequest(&'static str),
    /// 503: the channel cannot take it now (Slack retries).
    Unavailable,
}

/// The signature of `body` sent at `timestamp`, as Slack writes it (`v0=<hex>`).
pub fn sign(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    let digest = mac(secret, timestamp, body).finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("v0={hex}")
}

fn mac(secret: &[u8], timestamp: &str, body: &[u8]) -> HmacSha256 {
    #[allow(clippy::expect_used)]
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC accepts keys of any length");
    mac.update(b"v0:");
    mac.update(timestamp.as_bytes());
    mac.update(b":");
    mac.update(body);
    mac
}

/// Checks Slack's `signature` of `body` at `timestamp` against `secret`, the timestamp
/// within [`MAX_SKEW_SECS`] of `now_secs`.
pub fn verify(secret: &[u8], timestamp: &str, signature: &str, body: &[u8], now_secs: u64) -> bool {
    let Ok(t) = timestamp.trim().parse::<u64>() else {
        return false;
    };
    if t.abs_diff(now_secs) > MAX_SKEW_SECS {
        return false;
    }
    let Some(hex) = signature.trim().strip_prefix("v0=") else {
        return false;
    };
    if hex.len() != 64 {
        return false;
    }
    let Some(bytes) = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()
    else {
        return false;
    };
    mac(secret, timestamp.trim(), body)
        .verify_slice(&bytes)
        .is_ok()
}

/// The channel's side of the route.
pub struct SlackEvents {
    secret: Secret,
    tx: mpsc::Sender<Inbound>,
}

impl std::fmt::Debug for SlackEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackEvents").finish_non_exhaustive()
    }
}

impl SlackEvents {
    pub(crate) fn new(secret: Secret, tx: mpsc::Sender<Inbound>) -> Self {
        Self { secret, tx }
    }

    /// Verifies and takes one request (`timestamp` and `signature`: its Slack headers).
    pub fn handle(
        &self,
        timestamp: Option<&str>,
        signature: Option<&str>,
        body: &[u8],
        now_secs: u64,
    ) -> EventsAnswer {
        let (Some(timestamp), Some(signature)) = (timestamp, signature) else {
            return EventsAnswer::Unauthorized(
                "missing X-Slack-Signature or X-Slack-Request-Timestamp",
            );
        };
        if !verify(
            self.secret.expose().as_bytes(),
            timestamp,
            signature,
            body,
            now_secs,
        ) {
            return EventsAnswer::Unauthorized("bad signature or stale timestamp");
        }
        let Ok(payload) = serde_json::from_slice::<Value>(body) else {
            return EventsAnswer::BadRequest("not JSON");
        };
        let Ok(callback) = serde_json::from_value::<Callback>(payload.clone()) else {
            return EventsAnswer::BadRequest("not an Events API request");
        };
        match callback.kind.as_str() {
            "url_verification" => EventsAnswer::Ok(
                serde_json::json!({"challenge": callback.challenge.unwrap_or_default()}),
            ),
            "event_callback" => {
                let item = Inbound::Envelope {
                    id: None,
                    kind: "events_api".into(),
                    payload,
                };
                match self.tx.try_send(item) {
                    Ok(()) => EventsAnswer::Ok(serde_json::json!({"ok": true})),
                    Err(_) => EventsAnswer::Unavailable,
                }
            }
            _ => EventsAnswer::Ok(serde_json::json!({"ok": true})),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slack_signatures_verify_within_the_window() {
        // Slack's documented example.
        let secret = b"8f742231b10e8888abcd99yyyzzz85a5";
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let ts = "1531420618";
        let sig = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        assert_eq!(sign(secret, ts, body), sig);
        assert!(verify(secret, ts, sig, body, 1_531_420_618 + 10));
        assert!(!verify(secret, ts, sig, body, 1_531_420_618 + 301), "stale");
        assert!(!verify(secret, ts, sig, b"tampered", 1_531_420_618));
        assert!(!verify(b"other", ts, sig, body, 1_531_420_618));
        assert!(!verify(secret, ts, "v1=00", body, 1_531_420_618));
        assert!(!verify(secret, "soon", sig, body, 1_531_420_618));
    }

    #[test]
    fn url_verification_and_events_are_answered_at_once() {
        let (tx, mut rx) = mpsc::channel(1);
        let events = SlackEvents::new(Secret::new("s3cret"), tx);
        let body = br#"{"type":"url_verification","challenge":"abc","token":"x"}"#;
        let sig = sign(b"s3cret", "1000", body);
        assert_eq!(
            events.handle(Some("1000"), Some(&sig), body, 1_000),
            EventsAnswer::Ok(serde_json::json!({"challenge": "abc"}))
        );
        assert!(matches!(
            events.handle(Some("1000"), Some("v0=00"), body, 1_000),
            EventsAnswer::Unauthorized(_)
        ));
        assert!(matches!(
            events.handle(None, None, body, 1_000),
            EventsAnswer::Unauthorized(_)
        ));
        let event = br#"{"type":"event_callback","event_id":"Ev1","event":{"type":"message"}}"#;
        let sig = sign(b"s3cret", "1000", event);
        assert!(matches!(
            events.handle(Some("1000"), Some(&sig), event, 1_000),
            EventsAnswer::Ok(_)
        ));
        assert!(matches!(
            rx.try_recv(),
            Ok(Inbound::Envelope { id: None, .. })
        ));
        assert!(matches!(
            events.handle(Some("1000"), Some(&sig), event, 1_000),
            EventsAnswer::Ok(_)
        ));
        assert_eq!(
            events.handle(Some("1000"), Some(&sig), event, 1_000),
            EventsAnswer::Unavailable,
            "a full queue: Slack retries"
        );
    }
}
