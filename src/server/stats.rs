//! `GET /v1/stats` (the figures of `turnstile stats`, plus what the console's overview shows:
//! the disk budget, the janitor's last pass, this process's errors and compactions, and the
//! last minute's throughput and latency) and `GET /v1/stats/history[?after_ms=]` (the sample
//! ring, or its samples newer than `after_ms`).
//!
//! Fields are only ever added to `/v1/stats`, never renamed: scripts read it.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::error::ApiError;
use super::history::{Reading, Recent, HISTORY_SAMPLES, RECENT_WINDOW, SAMPLE_INTERVAL};
use super::query::StrictQuery;
use super::AppState;
use crate::runtime::Stats;

/// `/v1/stats`: [`Stats`] with the console's additions.
#[derive(Debug, Serialize)]
pub(super) struct StatsView {
    #[serde(flatten)]
    base: Stats,
    /// The disk budget (`storage.max_disk_bytes`).
    max_disk_bytes: u64,
    /// Above this the janitor frees space (`high_water × max_disk_bytes`).
    high_water_bytes: u64,
    /// Failed model calls of this process.
    model_errors: u64,
    /// Compactions run by this process (`compactions` counts the stored sessions' total).
    compactions_run: u64,
    /// Sessions evicted by this runtime's janitor.
    evictions: u64,
    /// The janitor's newest pass; `None` when it did not answer.
    janitor: Option<JanitorView>,
    /// The last [`RECENT_WINDOW`] (or less, just after start); `None` before the first sample.
    recent: Option<Recent>,
    /// `[[quotas]]`: refusals since start and the top offenders; absent without rules.
    #[serde(skip_serializing_if = "Option::is_none")]
    quotas: Option<crate::quotas::QuotaStats>,
    /// A health line per `[mcp_servers]` entry (empty without them).
    mcp_servers: Vec<crate::McpServerHealth>,
    /// The agents, the default first.
    agents: Vec<AgentView>,
    /// Each platform channel's connection (Discord, Slack): state, stop reason, since when.
    channels: Vec<crate::metrics::ChannelConnection>,
}

/// One agent in `/v1/stats`.
#[derive(Debug, Serialize)]
struct AgentView {
    /// Its id (in its sessions' keys, `agent:<id>:…`).
    id: String,
    /// Whether it takes what no binding matches.
    default: bool,
    /// The model it answers with, as configured.
    model: String,
    /// Turns it answered in this process.
    turns: u64,
    /// `[[bindings]]` that route to it.
    bindings: usize,
}

/// What the janitor last did.
#[derive(Debug, Serialize)]
struct JanitorView {
    passes: u64,
    /// When the newest pass ended (ms since the Unix epoch).
    last_pass_at_ms: Option<u64>,
    /// Allocated bytes under the data dir at the newest pass (the figure it enforces).
    measured_disk_bytes: Option<u64>,
    last_pass_sessions_evicted: u64,
    last_pass_archives_deleted: u64,
    last_pass_bytes_freed: u64,
    /// Sessions moved into the cold tier (kept, compressed) by the newest pass and by all.
    last_pass_sessions_frozen: u64,
    sessions_frozen_total: u64,
    /// Cold sessions deleted for good (only with the data dir over the budget itself).
    last_pass_cold_deleted: u64,
    cold_deleted_total: u64,
    bytes_freed_total: u64,
    last_error: Option<String>,
    enforcing: bool,
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "stats task failed");
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "internal error",
    )
}

pub(super) async fn stats(State(state): State<AppState>) -> Result<Json<StatsView>, ApiError> {
    let runtime = state.runtime.clone();
    // Counters, and a walk of the data dir's files only before the janitor's first measurement:
    // off the async worker threads all the same.
    let base = tokio::task::spawn_blocking(move || runtime.stats())
        .await
        .map_err(internal)??;
    let janitor = state.runtime.janitor_status().await.ok();
    let evictions = janitor
        .as_ref()
        .map(|j| j.totals.sessions_evicted)
        .unwrap_or_else(|| state.history.last_evictions());
    let now = Reading::now(&state.runtime, evictions);
    let storage = &state.runtime.config().storage;
    let directory = state.runtime.agents();
    let turns: std::collections::HashMap<String, u64> =
        state.runtime.agent_turns().into_iter().collect();
    let bindings = &state.runtime.config().bindings;
    let agents = directory
        .profiles()
        .map(|p| AgentView {
            id: p.id.clone(),
            default: p.is_default,
            model: p.config.model.model.clone(),
            turns: turns.get(&p.id).copied().unwrap_or(0),
            bindings: bindings
                .iter()
                .filter(|b| crate::inbound::normalize_agent_id(&b.agent) == p.id)
                .count(),
        })
        .collect();
    let high_water = (storage.max_disk_bytes as f64 * storage.high_water) as u64;
    Ok(Json(StatsView {
        base,
        max_disk_bytes: storage.max_disk_bytes,
        high_water_bytes: high_water,
        model_errors: now.model_errors,
        compactions_run: now.compactions,
        evictions,
        recent: state.history.recent(&now, RECENT_WINDOW),
        agents,
        mcp_servers: state.runtime.mcp_health(),
        channels: crate::metrics::channel_connections(),
        janitor: janitor.map(|j| JanitorView {
            passes: j.passes,
            last_pass_at_ms: j.last_pass_at_ms,
            measured_disk_bytes: j.last_usage.map(|u| u.disk_bytes),
            last_pass_sessions_evicted: j.last_pass.sessions_evicted,
            last_pass_archives_deleted: j.last_pass.archives_deleted,
            last_pass_bytes_freed: j.last_pass.bytes_freed,
            last_pass_sessions_frozen: j.last_pass.sessions_frozen,
            sessions_frozen_total: j.totals.sessions_frozen,
            last_pass_cold_deleted: j.last_pass.cold_deleted,
            cold_deleted_total: j.totals.cold_deleted,
            bytes_freed_total: j.totals.bytes_freed,
            last_error: j.last_error,
            enforcing: j.enforcing,
        }),
        quotas: Some(state.runtime.quota_stats()).filter(|q| q.rules > 0),
    }))
}

/// `/v1/stats/history`.
#[derive(Debug, Serialize)]
pub(super) struct HistoryView {
    /// Seconds between samples.
    interval_seconds: f64,
    /// Most samples kept.
    max_samples: usize,
    /// Oldest first; each covers the interval before its `at_ms`.
    samples: Vec<Recent>,
}

#[derive(Debug, Deserialize)]
pub(super) struct HistoryQuery {
    /// Only samples newer than this (ms since the Unix epoch): a refreshing client asks for
    /// what it has not seen, so a refresh costs one sample, not the whole ring.
    after_ms: Option<u64>,
}

pub(super) async fn history(
    State(state): State<AppState>,
    StrictQuery(q): StrictQuery<HistoryQuery>,
) -> Json<HistoryView> {
    let samples = state.history.samples_after(q.after_ms.unwrap_or(0));
    Json(HistoryView {
        interval_seconds: SAMPLE_INTERVAL.as_secs_f64(),
        max_samples: HISTORY_SAMPLES,
        samples,
    })
}
