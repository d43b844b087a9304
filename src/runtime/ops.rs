//! Operator actions on a runtime: delete a session, compact one, and the figures behind
//! `turnstile stats` and `GET /v1/stats`.

use std::path::Path;

use serde::Serialize;
use turnstile_actors::DiscardOutcome;

use super::Runtime;
use crate::error::Error;
use crate::inbound::normalize_session_key;
use crate::metrics;

/// Most directory entries visited when measuring disk use (the data dir holds a handful of sled
/// files plus archives; this only guards against a runaway tree).
pub(crate) const MAX_DISK_WALK_ENTRIES: usize = 100_000;

/// What deleting a session removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Deleted {
    /// The session key.
    pub session_key: String,
    /// Transcript entries removed.
    pub entries: u64,
    /// Accepted but unanswered messages removed.
    pub pending_messages: u64,
}

/// What a compaction did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Compacted {
    /// The session key.
    pub session_key: String,
    /// History tokens before.
    pub tokens_before: u64,
    /// History tokens after.
    pub tokens_after: u64,
}

/// The figures of `turnstile stats`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    /// Stored sessions.
    pub sessions: u64,
    /// Transcript entries across sessions.
    pub transcript_entries: u64,
    /// Encoded bytes of those entries (their text and its metadata), before the store's
    /// own overhead: the figure `disk_bytes` is compared with.
    pub transcript_bytes: u64,
    /// Average transcript tokens per session (the history a session holds).
    pub avg_session_tokens: f64,
    /// Largest transcript, in tokens.
    pub max_session_tokens: u64,
    /// Compactions across sessions.
    pub compactions: u64,
    /// Turns run by this process; `None` when read from a data dir without a server.
    pub turns: Option<u64>,
    /// Average context (prompt) tokens per turn of this process.
    pub avg_context_tokens: Option<f64>,
    /// Largest context of a turn of this process.
    pub max_context_tokens: Option<u64>,
    /// Assembly cache hit rate of this process; `None` before any lookup.
    pub assembly_cache_hit_rate: Option<f64>,
    /// Bytes under the data dir.
    pub disk_bytes: u64,
    /// Live session lanes.
    pub live_lanes: u64,
    /// Accepted messages not yet answered.
    pub queued_messages: u64,
}

impl Runtime {
    /// Deletes a session: its record, transcript and unanswered messages, in one transaction,
    /// after its lane dropped what it held in memory (else the lane would answer the deleted
    /// messages into a new session). `Ok(None)` if there is no such session;
    /// [`Error::Conflict`] while a turn of it runs (its commit could land after the delete).
    /// Messages admitted after the lane dropped its queue belong to a new session. On a
    /// cluster node the partition's owner does this and appends it to the changelog; the
    /// answer comes once this node has applied it too (`docs/cluster.md`).
    pub async fn delete_session(&self, key: &str) -> Result<Option<Deleted>, Error> {
        let key = normalize_session_key(key);
        if self.is_clustered() {
            let Some(deletes) = self.inner.deletes.get() else {
                return Err(Error::Replication(
                    "the node has not joined its cluster yet".into(),
                ));
            };
            return deletes.delete(&key).await;
        }
        self.discard_for_delete(&key).await?;
        self.delete_stored(&key).await
    }

    /// Makes sure no turn of `key` runs and its lane holds nothing: [`Error::Conflict`] if a
    /// turn runs (its commit could land after the delete).
    pub(crate) async fn discard_for_delete(&self, key: &str) -> Result<(), Error> {
        let busy = || {
            Error::Conflict(format!(
                "session {key:?} is running a turn; retry when it has finished"
            ))
        };
        if self.inner.running.is_running(key) {
            return Err(busy());
        }
        // Ordered with admissions by the supervisor, and answered by the lane itself, which is
        // the only one that can tell whether a turn started since the check above.
        match self.inner.supervisor.discard(key.into()).await? {
            DiscardOutcome::Dropped => Ok(()),
            DiscardOutcome::Busy => Err(busy()),
        }
    }

    /// Deletes what this node stores of `key` (after [`Runtime::discard_for_delete`]) and
    /// waits until that is durable. `Ok(None)` if nothing was stored.
    pub(crate) async fn delete_stored(&self, key: &str) -> Result<Option<Deleted>, Error> {
        let store = &self.inner.store;
        let Some(gone) = store.delete_session(key)? else {
            return Ok(None);
        };
        store.commit().wait(gone.ticket).await?;
        self.inner
            .engine
            .agents()
            .for_key(key)
            .context
            .invalidate(key);
        tracing::info!(session_key = %key, entries = gone.entries, pending = gone.pending, "session deleted");
        Ok(Some(Deleted {
            session_key: key.to_string(),
            entries: gone.entries,
            pending_messages: gone.pending,
        }))
    }

    /// Compacts a session now (through the Compactor actor, joining a compaction of it
    /// already queued or running) and returns its history tokens before and after.
    /// `Ok(None)` if there is no such session.
    pub async fn compact(&self, key: &str) -> Result<Option<Compacted>, Error> {
        let key = normalize_session_key(key);
        // The compactor works on sled: a cold session comes back first, within the budget.
        self.inner.store.thaw_within_budget(&key)?;
        if self.session(&key)?.is_none() {
            return Ok(None);
        }
        let outcome = self
            .inner
            .engine
            .compaction()
            .compact_now(&key, turnstile_actors::CompactionReason::Manual)
            .await?;
        Ok(Some(Compacted {
            session_key: key,
            tokens_before: outcome.tokens_before,
            tokens_after: outcome.tokens_after,
        }))
    }

    /// Current figures: the store's totals, kept as records are written (constant time,
    /// however many sessions are stored), its disk estimate, and this process's turn figures.
    pub fn stats(&self) -> Result<Stats, Error> {
        let store = &self.inner.store;
        let totals = store.totals();
        let process = metrics::process_stats();
        Ok(Stats {
            sessions: totals.sessions,
            transcript_entries: totals.entries,
            transcript_bytes: totals.bytes,
            avg_session_tokens: if totals.sessions == 0 {
                0.0
            } else {
                totals.tokens as f64 / totals.sessions as f64
            },
            max_session_tokens: totals.max_session_tokens,
            compactions: totals.compactions,
            turns: Some(process.turns),
            avg_context_tokens: Some(process.avg_context_tokens),
            max_context_tokens: Some(process.max_context_tokens),
            assembly_cache_hit_rate: process.assembly_cache_hit_rate,
            disk_bytes: data_dir_bytes(store),
            live_lanes: self.live_lanes() as u64,
            queued_messages: self.queued() as u64,
        })
    }

    /// Samples the gauges `/metrics` shows (disk, sessions, lanes, inbox depth).
    pub(crate) fn sample_gauges(&self) {
        let store = &self.inner.store;
        metrics::runtime_gauges(metrics::RuntimeGauges {
            disk_bytes: data_dir_bytes(store),
            sessions: store.totals().sessions,
            live_lanes: self.live_lanes() as u64,
            inbox_depth: self.queued() as u64,
        });
    }
}

/// The data dir's size: the janitor's newest measurement plus what was written since (no
/// walk), or, before any measurement, a walk of its files (not of its sessions).
fn data_dir_bytes(store: &crate::store::Store) -> u64 {
    match store.disk_estimate() {
        0 => disk_bytes(store.data_dir()),
        estimate => estimate,
    }
}

/// Bytes of the files under `dir` (not following symlinks), visiting at most
/// [`MAX_DISK_WALK_ENTRIES`] entries. Unreadable entries count as 0.
pub(crate) fn disk_bytes(dir: &Path) -> u64 {
    let mut total = 0u64;
    let mut visited = 0usize;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            visited += 1;
            if visited > MAX_DISK_WALK_ENTRIES {
                return total;
            }
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    total
}
