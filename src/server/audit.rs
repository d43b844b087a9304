//! What the audit log records from the HTTP edge (`edge::edge` asks [`admin_action`] of every
//! request and reports guard refusals to [`refused`]): admin actions (`DELETE /v1/sessions/{key}`,
//! `POST /v1/sessions/{key}/compact`, `POST /v1/admin/*`) with their outcome, and every
//! refused authentication — at most [`MAX_REFUSALS_PER_SECOND`] of those, so a client
//! guessing keys cannot turn the log into a write flood. `GET /v1/admin/audit` reads it as
//! JSON lines.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::auth::bearer;
use super::error::ApiError;
use super::query::{percent_decode, StrictQuery};
use super::AppState;
use crate::store::{AuditRecord, MAX_AUDIT_PAGE};
use crate::Runtime;

/// Refused authentications recorded per second at most; the rest are counted
/// (`turnstile_audit_suppressed_total`).
pub(super) const MAX_REFUSALS_PER_SECOND: u64 = 20;

/// The refusals recorded in the current second: `second << 32 | count`.
#[derive(Debug, Default)]
pub(super) struct RefusalWindow(AtomicU64);

impl RefusalWindow {
    /// Whether one more refusal may be recorded in `second`.
    fn admit(&self, second: u64) -> bool {
        let mut current = self.0.load(Ordering::SeqCst);
        loop {
            let (at, count) = (current >> 32, current & 0xffff_ffff);
            let next = if at == second & 0xffff_ffff {
                if count >= MAX_REFUSALS_PER_SECOND {
                    return false;
                }
                current + 1
            } else {
                ((second & 0xffff_ffff) << 32) | 1
            };
            match self
                .0
                .compare_exchange(current, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return true,
                Err(seen) => current = seen,
            }
        }
    }
}

/// The audited action of a request, and its target, if it is one.
fn action_of(method: &Method, path: &str) -> Option<(String, Option<String>)> {
    let session = |rest: &str| String::from_utf8_lossy(&percent_decode(rest)).into_owned();
    if let Some(rest) = path.strip_prefix("/v1/sessions/") {
        if *method == Method::DELETE && !rest.contains('/') {
            return Some(("session.delete".into(), Some(session(rest))));
        }
        if let Some(key) = rest.strip_suffix("/compact") {
            if *method == Method::POST && !key.contains('/') {
                return Some(("session.compact".into(), Some(session(key))));
            }
        }
        return None;
    }
    if path == "/v1/schedules" {
        return (*method == Method::POST).then(|| ("schedule.create".into(), None));
    }
    if let Some(id) = path.strip_prefix("/v1/schedules/") {
        return (*method == Method::DELETE).then(|| ("schedule.delete".into(), Some(session(id))));
    }
    let admin = path.strip_prefix("/v1/admin/")?;
    if let Some(subject) = admin.strip_prefix("quotas/") {
        return (*method == Method::DELETE).then(|| ("quota.reset".into(), Some(session(subject))));
    }
    (*method == Method::POST).then(|| (format!("server.{admin}"), None))
}

/// `sha256:` and the first 12 hex digits of the key's hash: enough to tell keys apart in the
/// log, useless for finding the key.
fn fingerprint(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// An audited request, taken from it before it is answered.
pub(super) struct Action {
    action: String,
    target: Option<String>,
    key_fingerprint: Option<String>,
    client: Option<SocketAddr>,
}

impl Action {
    fn of(request: &Request, action: String, target: Option<String>) -> Self {
        Self {
            action,
            target,
            key_fingerprint: bearer(request.headers()).map(fingerprint),
            client: request
                .extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0),
        }
    }
}

/// The admin action `request` asks for, if it is one (see the module).
pub(super) fn admin_action(request: &Request) -> Option<Action> {
    let (action, target) = action_of(request.method(), request.uri().path())?;
    Some(Action::of(request, action, target))
}

/// Records a refused authentication of `request` (within [`MAX_REFUSALS_PER_SECOND`]).
pub(super) fn refused(
    runtime: &Runtime,
    refusals: &RefusalWindow,
    request: &Request,
    status: StatusCode,
) {
    if status != StatusCode::UNAUTHORIZED {
        return;
    }
    if !refusals.admit(crate::clock::now_ms() / 1_000) {
        crate::metrics::audit_suppressed();
        return;
    }
    let target = format!("{} {}", request.method(), request.uri().path());
    write(
        runtime,
        Action::of(request, "auth.refused".into(), Some(target)),
        status,
    );
}

/// Most characters of an [`AuditNote`] kept in a record (a validation message can quote the
/// file).
pub(super) const MAX_NOTE_CHARS: usize = 500;

/// What a handler adds to its response for the audit record's target: the outcome of an
/// action that has no target of its own (a config reload's applied settings or refusal).
#[derive(Debug, Clone)]
pub(super) struct AuditNote(pub(super) String);

/// Records an admin action answered with `response` (a refused one is recorded as a
/// refusal); an [`AuditNote`] on the response becomes the target when the action has none.
pub(super) fn record(runtime: &Runtime, mut action: Action, response: &Response) {
    let status = response.status();
    if status == StatusCode::UNAUTHORIZED {
        return;
    }
    if action.target.is_none() {
        action.target = response
            .extensions()
            .get::<AuditNote>()
            .map(|note| crate::inbound::preflight::cap_chars(&note.0, MAX_NOTE_CHARS));
    }
    write(runtime, action, status);
}

/// Records a reload asked for by `signal` (no key, no client), answered as the API would have
/// answered it (`status`), with `outcome` as the target.
pub(super) fn record_signal(runtime: &Runtime, signal: &str, outcome: &str, status: StatusCode) {
    let target =
        crate::inbound::preflight::cap_chars(&format!("{signal}: {outcome}"), MAX_NOTE_CHARS);
    write(
        runtime,
        Action {
            action: "server.reload".into(),
            target: Some(target),
            key_fingerprint: None,
            client: None,
        },
        status,
    );
}

/// Appends the record; a failure is logged, never turned into the client's answer.
fn write(runtime: &Runtime, action: Action, status: StatusCode) {
    let record = AuditRecord {
        id: 0,
        at_ms: crate::clock::now_ms(),
        action: action.action,
        target: action.target,
        status: status.as_u16(),
        key_fingerprint: action.key_fingerprint,
        client: action.client.map(|c| c.to_string()),
    };
    if let Err(error) = runtime.append_audit(&record) {
        tracing::warn!(%error, action = %record.action, "could not write an audit record");
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct AuditQuery {
    after: Option<u64>,
    limit: Option<usize>,
    tail: Option<usize>,
}

/// `GET /v1/admin/audit?after=&limit=`: records with ids above `after`, oldest first, as JSON
/// lines (at most `limit`, default and cap [`MAX_AUDIT_PAGE`]); `?tail=N`: the newest `N`
/// (what the console shows).
pub(super) async fn read(
    State(state): State<AppState>,
    StrictQuery(q): StrictQuery<AuditQuery>,
) -> Result<Response, ApiError> {
    let runtime = state.runtime.clone();
    let limit = q.limit.unwrap_or(MAX_AUDIT_PAGE).clamp(1, MAX_AUDIT_PAGE);
    let after = q.after;
    let tail = q.tail;
    let records = tokio::task::spawn_blocking(move || match tail {
        Some(n) => runtime.audit_tail(n),
        None => runtime.audit_page(after, limit),
    })
    .await
    .map_err(|_| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "reading the audit log did not finish",
        )
    })??;
    let mut body = String::new();
    for record in &records {
        if let Ok(line) = serde_json::to_string(record) {
            body.push_str(&line);
            body.push('\n');
        }
    }
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_paths_map_to_actions() {
        assert_eq!(
            action_of(&Method::DELETE, "/v1/sessions/agent%3Amain%3Ax"),
            Some(("session.delete".into(), Some("agent:main:x".into())))
        );
        assert_eq!(
            action_of(&Method::POST, "/v1/sessions/k/compact"),
            Some(("session.compact".into(), Some("k".into())))
        );
        assert_eq!(
            action_of(&Method::POST, "/v1/admin/drain"),
            Some(("server.drain".into(), None))
        );
        assert_eq!(
            action_of(&Method::POST, "/v1/admin/reload"),
            Some(("server.reload".into(), None))
        );
        assert_eq!(action_of(&Method::GET, "/v1/sessions/k"), None);
        assert_eq!(action_of(&Method::GET, "/v1/admin/audit"), None);
        assert_eq!(
            action_of(&Method::DELETE, "/v1/admin/quotas/sender:slack:u1"),
            Some(("quota.reset".into(), Some("sender:slack:u1".into())))
        );
        assert_eq!(
            action_of(&Method::GET, "/v1/admin/quotas/sender:slack:u1"),
            None
        );
        assert_eq!(action_of(&Method::POST, "/v1/messages"), None);
    }

    #[test]
    fn fingerprints_hide_the_key_and_tell_keys_apart() {
        let a = fingerprint("secret-key-a");
        assert!(a.starts_with("sha256:") && a.len() == 19, "{a}");
        assert!(!a.contains("secret"));
        assert_ne!(a, fingerprint("secret-key-b"));
    }

    #[test]
    fn refusals_are_bounded_per_second() {
        let window = RefusalWindow::default();
        let admitted = (0..100).filter(|_| window.admit(7)).count();
        assert_eq!(admitted as u64, MAX_REFUSALS_PER_SECOND);
        assert!(window.admit(8), "a new second starts a new window");
    }
}
