//! Operator endpoints: `/metrics`, `DELETE /v1/sessions/{key}`,
//! `POST /v1/sessions/{key}/compact`, `POST /v1/admin/drain`, `POST /v1/admin/backup`,
//! `POST /v1/admin/reload` (`/v1/stats` is in `stats.rs`).

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::AppState;
use crate::runtime::{Compacted, Deleted};

/// The content type of the Prometheus text format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

pub(super) async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    let runtime = state.runtime.clone();
    // Sampling walks the data dir: keep it off the async worker threads.
    let _ = tokio::task::spawn_blocking(move || runtime.sample_gauges()).await;
    let mut text = crate::metrics::render().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "not_available",
            "another metrics recorder owns this process; /metrics is not served here",
        )
    })?;
    let quotas = state.runtime.quota_stats();
    let top: Vec<(&str, u64)> = quotas
        .top
        .iter()
        .map(|o| (o.subject.as_str(), o.refused))
        .collect();
    text.push_str(&crate::metrics::quota_offenders_text(&top));
    Ok(([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], text).into_response())
}

pub(super) async fn delete(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> Result<Json<Deleted>, ApiError> {
    state
        .runtime
        .delete_session(&key)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no session {key:?}")))
}

pub(super) async fn compact(
    State(state): State<AppState>,
    Path(key): Path<String>,
) -> Result<Json<Compacted>, ApiError> {
    state
        .runtime
        .compact(&key)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no session {key:?}")))
}

/// `POST /v1/admin/drain`: drains and stops the server as SIGTERM does (`serve` runs the
/// drain; this only asks for it). `202` at once; `/readyz` turns `503` as the drain begins.
pub(super) async fn drain(State(state): State<AppState>) -> (StatusCode, Json<serde_json::Value>) {
    tracing::info!("drain requested over HTTP");
    state.runtime.request_drain();
    (
        StatusCode::ACCEPTED,
        Json(serde_json::json!({ "status": "draining" })),
    )
}

/// `POST /v1/admin/reload`: reads the config file again and applies what may change at run
/// time (`config/reload.rs`): `200 {"applied","restart_required","unchanged"}`; a file that
/// fails validation changes nothing and is answered `400 invalid_config` with the reason.
/// The edge records it in the audit log as `server.reload`, with the outcome as its target.
pub(super) async fn reload(State(state): State<AppState>) -> Response {
    let result = state.runtime.reload_from_file().await;
    log_reload("POST /v1/admin/reload", &result);
    let note = super::audit::AuditNote(match &result {
        Ok(outcome) => outcome.summary(),
        Err(e) => e.to_string(),
    });
    let mut response = match result {
        Ok(outcome) => Json(outcome).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    };
    response.extensions_mut().insert(note);
    response
}

/// Logs a reload's outcome: `info` when it applied or found nothing, `warn` for settings
/// that wait for a restart, `error` when it was refused. `via` says who asked.
pub(super) fn log_reload(via: &str, result: &Result<crate::ReloadOutcome, crate::ReloadError>) {
    match result {
        Ok(o) if !o.restart_required.is_empty() => tracing::warn!(
            via,
            applied = ?o.applied,
            restart_required = ?o.restart_required,
            "config reloaded; changed settings that need a restart were not applied"
        ),
        Ok(o) => {
            tracing::info!(via, applied = ?o.applied, unchanged = o.unchanged, "config reloaded")
        }
        Err(error) => {
            tracing::error!(via, %error, "config reload refused; the running config is unchanged")
        }
    }
}

/// Bytes of the backup buffered before a chunk goes to the response.
const BACKUP_CHUNK_BYTES: usize = 256 << 10;
/// Chunks of the backup in flight between the copy and the response (with
/// [`BACKUP_CHUNK_BYTES`], bounds what a slow client makes the server hold).
const BACKUP_CHUNKS_IN_FLIGHT: usize = 8;

/// One chunk of the backup, or why it stopped.
type Chunk = Result<Vec<u8>, std::io::Error>;

/// Hands the backup's bytes to the response in chunks; blocks while the client is behind.
struct ChunkSender {
    tx: tokio::sync::mpsc::Sender<Chunk>,
    buf: Vec<u8>,
}

impl std::io::Write for ChunkSender {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= BACKUP_CHUNK_BYTES {
            self.flush()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(BACKUP_CHUNK_BYTES));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| std::io::Error::other("the client went away"))
    }
}

/// `POST /v1/admin/backup`: a consistent snapshot of the store (`store/backup.rs`), streamed
/// as the body (`application/octet-stream`). Writes are held off only for the cut. An error
/// before the first byte is answered as JSON (`409` while another backup runs); one after it
/// ends the body early, which the checksum at its end shows (`turnstile backup` checks it).
/// The edge records it in the audit log as `server.backup`.
pub(super) async fn backup(State(state): State<AppState>) -> Result<Response, ApiError> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Chunk>(BACKUP_CHUNKS_IN_FLIGHT);
    let runtime = state.runtime.clone();
    let (done_tx, mut done_rx) = tokio::sync::oneshot::channel();
    tokio::task::spawn_blocking(move || {
        let mut out = ChunkSender {
            tx: tx.clone(),
            buf: Vec::with_capacity(BACKUP_CHUNK_BYTES),
        };
        match runtime.backup(&mut out) {
            Ok(report) => tracing::info!(?report, "backup sent"),
            Err(e) => {
                tracing::warn!(error = %e, "backup failed");
                // Before the first byte: the handler answers with the error itself.
                if let Err(unsent) = done_tx.send(e) {
                    let _ = tx.blocking_send(Err(std::io::Error::other(unsent.to_string())));
                }
            }
        }
    });
    // The first chunk comes after the cut, so an early error is still a proper answer.
    let first = tokio::select! {
        first = rx.recv() => first,
        Ok(e) = &mut done_rx => return Err(ApiError::from(e)),
    };
    let Some(first) = first else {
        // The task sends its error before it drops the chunk sender.
        return Err(ApiError::from(done_rx.try_recv().unwrap_or(
            crate::Error::Store(crate::error::StoreError::Invariant(
                "the backup ended without a byte",
            )),
        )));
    };
    let rest = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    let body = futures_util::StreamExt::chain(futures_util::stream::once(async { first }), rest);
    Ok((
        [(header::CONTENT_TYPE, "application/octet-stream")],
        axum::body::Body::from_stream(body),
    )
        .into_response())
}
