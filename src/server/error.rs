//! The one place errors become HTTP responses: `{"error":{"code","message","type","param"}}`
//! (SPEC §9a; `type` is the OpenAI error class, so OpenAI clients read it too), 5xx logged,
//! internals hidden.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::error::{Error, StoreError};
use crate::inbound::Refusal;
use crate::runtime::{ReloadError, SubmitError};

/// An error answered to an HTTP client.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    retry_after_secs: Option<u64>,
    /// The request field at fault, when one is (OpenAI's `param`).
    param: Option<String>,
}

impl ApiError {
    /// An error with a status, a stable machine-readable code and a human message.
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after_secs: None,
            param: None,
        }
    }

    /// 400 `invalid_request` naming the request field `param` at fault.
    pub(crate) fn invalid_param(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::bad_request("invalid_request", message).with_param(param)
    }

    /// Names the request field at fault.
    pub(crate) fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// 400 with `code`.
    pub(crate) fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// Sets the `Retry-After` header, in seconds.
    pub(crate) fn with_retry_after(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs);
        self
    }

    /// 404.
    pub(crate) fn not_found(what: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", what)
    }
}

/// `Retry-After` of a 507: the store probes for space every second.
const INSUFFICIENT_STORAGE_RETRY_SECS: u64 = 5;

impl ApiError {
    /// 507 `insufficient_storage`, with `Retry-After`.
    fn insufficient_storage(reason: String) -> Self {
        Self::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "insufficient_storage",
            format!("insufficient storage: {reason}"),
        )
        .with_retry_after(INSUFFICIENT_STORAGE_RETRY_SECS)
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        match e {
            Error::InsufficientStorage { reason }
            | Error::Store(StoreError::CannotWrite { reason }) => {
                Self::insufficient_storage(reason)
            }
            Error::Inbound(e) => Self::bad_request("invalid_message", e.to_string()),
            Error::Overloaded(m) => Self::from(Refusal::Overloaded(m)),
            Error::ShuttingDown => Self::from(Refusal::ShuttingDown),
            Error::Timeout(what) => Self::new(
                StatusCode::GATEWAY_TIMEOUT,
                "timeout",
                format!("timed out waiting for {what}"),
            ),
            Error::NotAvailable(what) => {
                Self::new(StatusCode::NOT_IMPLEMENTED, "not_available", what)
            }
            Error::Conflict(m) => Self {
                retry_after_secs: Some(1),
                ..Self::new(StatusCode::CONFLICT, "conflict", m)
            },
            Error::Replication(m) => Self::from(Refusal::Unavailable(m)),
            Error::Actors(e) => {
                tracing::error!(error = %e, "actor system unavailable");
                Self {
                    retry_after_secs: Some(1),
                    ..Self::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "unavailable",
                        "the runtime is busy; retry",
                    )
                }
            }
            other => {
                tracing::error!(error = %other, "internal error answering a request");
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error",
                )
            }
        }
    }
}

impl From<ReloadError> for ApiError {
    fn from(e: ReloadError) -> Self {
        match e {
            ReloadError::Invalid(_) => Self::bad_request("invalid_config", e.to_string()),
            ReloadError::NoConfigFile => {
                Self::new(StatusCode::CONFLICT, "no_config_file", e.to_string())
            }
            ReloadError::Store(store) => Self::from(Error::Store(store)),
        }
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        match e {
            SubmitError::Refused(refusal) => Self::from(refusal),
            SubmitError::Failed(error) => Self::from(error),
        }
    }
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> Self {
        match r {
            // The webhook answers it as a drop before reaching here; the OpenAI endpoint
            // (a client that can wait) gets a 429 it can act on.
            Refusal::OverQuota(q) => Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "quota_exceeded",
                format!("over the {} quota of {}", q.limit, q.subject),
            ),
            Refusal::Overloaded(m) => Self {
                retry_after_secs: Some(1),
                ..Self::new(StatusCode::TOO_MANY_REQUESTS, "overloaded", m)
            },
            Refusal::ShuttingDown => Self {
                retry_after_secs: Some(5),
                ..Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "shutting_down",
                    "the server is shutting down",
                )
            },
            Refusal::Dropped(reason) => {
                // Handlers answer drops with 200 before reaching here; an endpoint with no way
                // to say "dropped" (the OpenAI one) reports it as a client error.
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, "dropped", reason.as_str())
            }
            Refusal::InsufficientStorage(reason) => {
                Self::from(Error::InsufficientStorage { reason })
            }
            Refusal::Unavailable(m) => Self {
                retry_after_secs: Some(1),
                ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", m)
            },
            Refusal::Storage(m) => {
                tracing::error!(error = %m, "inbox write failed");
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "storage error",
                )
            }
        }
    }
}

impl ApiError {
    /// The status answered.
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    /// The request field at fault, if named.
    #[cfg(test)]
    pub(crate) fn param(&self) -> Option<&str> {
        self.param.as_deref()
    }

    /// The JSON body.
    fn body(&self) -> serde_json::Value {
        json!({"error": {
            "code": self.code,
            "message": self.message,
            "type": error_type(self.status),
            "param": self.param,
        }})
    }

    /// The whole HTTP/1.1 response as bytes, closing the connection: for the connection layer,
    /// which answers before (or instead of) a request reaching the router.
    pub(super) fn to_http1_bytes(&self) -> Vec<u8> {
        let body = self.body().to_string();
        let retry_after = self
            .retry_after_secs
            .map(|secs| format!("retry-after: {secs}\r\n"))
            .unwrap_or_default();
        let mut out = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             {retry_after}connection: close\r\n\r\n",
            self.status.as_u16(),
            self.status.canonical_reason().unwrap_or("Error"),
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(body.as_bytes());
        out
    }
}

/// The OpenAI error class of a status.
fn error_type(status: StatusCode) -> &'static str {
    match status {
        StatusCode::UNAUTHORIZED => "authentication_error",
        StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
        s if s.is_server_error() => "server_error",
        _ => "invalid_request_error",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        if let Some(secs) = self.retry_after_secs {
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        response
    }
}

/// The body's bytes, mapping a failed read to 400 (and an oversized body to 413).
pub(super) fn body_bytes(
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<axum::body::Bytes, ApiError> {
    body.map_err(|rejection| {
        let status = rejection.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(status, "payload_too_large", rejection.body_text())
        } else {
            ApiError::bad_request("invalid_body", rejection.body_text())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insufficient_storage_is_507_with_retry_after() {
        let response =
            ApiError::from(Refusal::InsufficientStorage("budget".into())).into_response();
        assert_eq!(response.status(), StatusCode::INSUFFICIENT_STORAGE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "5");
        let e = ApiError::from(Error::InsufficientStorage {
            reason: "disk full".into(),
        });
        assert_eq!(
            (e.status, e.code, e.message.as_str()),
            (
                StatusCode::INSUFFICIENT_STORAGE,
                "insufficient_storage",
                "insufficient storage: disk full"
            )
        );
    }
}
