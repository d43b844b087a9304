//! The check in front of every route (run by `edge::edge`): auth, then rate limits. Probes (`/healthz`,
//! `/readyz`) pass untouched so orchestrators never need the key or get throttled. The
//! console's pages and assets (`ui::is_public`) hold no data and need no key — a browser
//! cannot send a bearer header when it navigates — but they are rate limited like the API.
//! So is Slack's events route, which Slack signs instead (`slack.rs`).

use axum::extract::{ConnectInfo, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;

use super::auth::{Auth, PUBLIC_PATHS};
use super::error::ApiError;
use super::limits::{retry_after_secs, RateLimiter};
use crate::metrics;

/// What the middleware checks.
#[derive(Debug)]
pub(super) struct Guard {
    pub(super) auth: Auth,
    pub(super) limiter: Option<RateLimiter>,
}

/// The answer refusing `request` (no or a wrong key, over the rate limit), or `None` to let
/// it through.
pub(super) fn refusal(guard: &Guard, request: &Request) -> Option<Response> {
    if PUBLIC_PATHS.contains(&request.uri().path()) {
        return None;
    }
    let authenticated = guard.auth.is_required() && guard.auth.permits(request.headers());
    // Slack's events are signed by Slack (checked by the route), not by the API key.
    let path = request.uri().path();
    let needs_key = guard.auth.is_required()
        && !super::ui::is_public(path)
        && path != super::slack::SLACK_EVENTS_PATH;
    if needs_key && !authenticated {
        metrics::http_rejected("unauthorized");
        let mut response = ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send `Authorization: Bearer <key>` with the server's API key",
        )
        .into_response();
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return Some(response);
    }
    if let Some(limiter) = &guard.limiter {
        let ip = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip());
        if let Err(wait) = limiter.check(ip, authenticated) {
            metrics::http_rejected("rate_limited");
            let secs = retry_after_secs(wait);
            return Some(
                ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limited",
                    format!("too many requests; retry in {secs} s"),
                )
                .with_retry_after(secs)
                .into_response(),
            );
        }
    }
    None
}
