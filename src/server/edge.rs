//! The router's edge middleware, one layer in front of every route: the rule that every error
//! answer is the JSON error shape (including the ones axum writes itself: 404, 405, extractor
//! rejections), the guard (auth, rate limits; `guard.rs`), then the request bounds (URI
//! length, declared and read body size, the body-read timeout). One layer rather than three:
//! each `from_fn` layer clones the boxed service behind it and boxes a future per request.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;

use super::auth::PUBLIC_PATHS;
use super::error::ApiError;
use super::guard::{self, Guard};
use crate::metrics;

/// Largest plain-text error body carried over into a JSON error's message.
const MAX_REJECTION_TEXT: usize = 4 * 1024;

/// The request bounds of one router (from `[server]`).
#[derive(Debug, Clone, Copy)]
pub(super) struct RequestBounds {
    pub(super) max_body: usize,
    pub(super) max_uri: usize,
    pub(super) body_timeout: Duration,
}

/// What the edge middleware checks.
pub(super) struct Edge {
    pub(super) bounds: RequestBounds,
    pub(super) guard: Guard,
    /// Where audited requests are recorded (`audit.rs`).
    pub(super) runtime: crate::Runtime,
    pub(super) refusals: super::audit::RefusalWindow,
}

/// The edge middleware: the guard, then the bounds, then the route; any error answer in the
/// JSON error shape.
pub(super) async fn edge(State(edge): State<Arc<Edge>>, request: Request, next: Next) -> Response {
    let probe = request.method() == Method::GET && PUBLIC_PATHS.contains(&request.uri().path());
    // Only admin paths and refusals are audited: nothing is copied for any other request.
    let admin = super::audit::admin_action(&request);
    let response = match guard::refusal(&edge.guard, &request) {
        Some(refused) => {
            super::audit::refused(&edge.runtime, &edge.refusals, &request, refused.status());
            refused
        }
        None => match bound_request(&edge.bounds, request).await {
            Ok(request) => next.run(request).await,
            Err(refused) => refused,
        },
    };
    if let Some(action) = admin {
        super::audit::record(&edge.runtime, action, &response);
    }
    json_errors(probe, response).await
}

/// Refuses an over-long URI (`414`) and a declared body over the limit (`413`, before
/// `100 Continue` is sent, as hyper sends it only when the body is first read), then reads the
/// body within the body-read timeout (`408`) and the limit (`413`). These answers close the
/// connection: the rest of the body is never read.
async fn bound_request(bounds: &RequestBounds, request: Request) -> Result<Request, Response> {
    let uri_len = request
        .uri()
        .path_and_query()
        .map_or(0, |p| p.as_str().len());
    if uri_len > bounds.max_uri {
        metrics::http_rejected("uri_too_long");
        return Err(closing(ApiError::new(
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            format!("the URI is over {} bytes", bounds.max_uri),
        )));
    }
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > bounds.max_body as u64) {
        return Err(too_large(bounds.max_body));
    }
    let (parts, body) = request.into_parts();
    let bytes =
        match tokio::time::timeout(bounds.body_timeout, read_body(body, bounds.max_body)).await {
            Err(_) => {
                metrics::http_rejected("body_timeout");
                return Err(closing(ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "request_timeout",
                    format!(
                        "the request body did not arrive within {} ms",
                        bounds.body_timeout.as_millis()
                    ),
                )));
            }
            Ok(Err(BodyError::TooLarge)) => return Err(too_large(bounds.max_body)),
            Ok(Err(BodyError::Read(e))) => {
                return Err(closing(ApiError::bad_request(
                    "invalid_body",
                    format!("reading the request body: {e}"),
                )))
            }
            Ok(Ok(bytes)) => bytes,
        };
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// Why a body could not be read.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("the body is over the limit")]
    TooLarge,
    #[error(transparent)]
    Read(axum::Error),
}

/// Reads `body` whole, refusing more than `max` bytes.
/// A body that arrives in one chunk (most do) is passed on as it is, not copied.
async fn read_body(body: Body, max: usize) -> Result<Bytes, BodyError> {
    let mut stream = body.into_data_stream();
    let mut first: Option<Bytes> = None;
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(BodyError::Read)?;
        let have = first.as_ref().map_or(0, Bytes::len) + out.len();
        if have + chunk.len() > max {
            return Err(BodyError::TooLarge);
        }
        if first.is_none() && out.is_empty() {
            first = Some(chunk);
            continue;
        }
        if let Some(first) = first.take() {
            out.extend_from_slice(&first);
        }
        out.extend_from_slice(&chunk);
    }
    Ok(first.unwrap_or_else(|| Bytes::from(out)))
}

fn too_large(max: usize) -> Response {
    metrics::http_rejected("payload_too_large");
    closing(ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("the request body is over {max} bytes"),
    ))
}

/// `error` with `Connection: close`, for answers given before the request was read whole.
fn closing(error: ApiError) -> Response {
    let mut response = error.into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The answer on a connection past `max_connections` to anything but a health probe.
pub(super) fn over_capacity() -> Response {
    metrics::http_rejected("over_capacity");
    closing(
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "over_capacity",
            "too many connections; retry",
        )
        .with_retry_after(1),
    )
}

/// The router's fallback: no route has this path.
pub(super) async fn no_route(request: Request) -> ApiError {
    ApiError::not_found(format!("no route for {}", request.uri().path()))
}

/// Turns an error answer that is not JSON (written by axum: 405 from a method router, an
/// extractor's plain-text rejection) into the JSON error shape, keeping its status and headers
/// (`Allow`, `Retry-After`). The probes' answers to `GET` (`probe`) stay as they are.
async fn json_errors(probe: bool, response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if probe || is_json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_REJECTION_TEXT)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    let mut json = ApiError::new(status, code_of(status), message).into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            json.headers_mut().insert(name.clone(), value.clone());
        }
    }
    json
}

/// The error code of a status, for errors that arrive without one.
pub(super) fn code_of(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "bad_request",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::REQUEST_TIMEOUT => "request_timeout",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::URI_TOO_LONG => "uri_too_long",
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "headers_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UNPROCESSABLE_ENTITY => "unprocessable",
        s if s.is_server_error() => "internal",
        _ => "invalid_request",
    }
}
