//! [`StoreBudget`]: the janitor's [`DiskBudget`] over this store and its data dir.
//!
//! # How space comes back
//! sled never shrinks its file when keys are deleted, but it does reuse the space: a segment
//! whose live share drops to half is relocated, freed segments are reused lowest offset first,
//! and free segments at the end of the file are truncated. Measured on sled 0.34.7, a workload
//! that keeps deleting the oldest data settles at 2.2–3.3× the live bytes and stays there
//! (ARCHITECTURE.md has the numbers). So the janitor does not wait for the file to shrink —
//! right after an eviction it usually has not — it controls the *live* bytes instead:
//!
//! * `amplification` is estimated as `db bytes / live bytes`, but only when the database file
//!   has just grown (then sled had no free space left to reuse, so the ratio is real); a
//!   measurement taken while freed space is still inside the file would overstate it and make
//!   the janitor evict far too much.
//! * The live-byte target is `(high water − bytes outside the db) / amplification`; above it,
//!   the oldest idle sessions are evicted until live bytes are 10% below it.
//! * The target is handed to the store's meter, which calls the janitor the moment a write
//!   crosses it, so the reaction does not wait for the next tick.
//! * If the data dir is ever over the hard limit anyway, the estimate is raised to the
//!   pessimistic `db bytes / live bytes` at once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use turnstile_actors::{DiskBudget, DiskUsage, ReclaimReport};

use super::evict::{Candidate, TRANSCRIPT_KEY_BYTES};
use super::{archive, decode, disk, SessionRecord, Store, DB_DIR};
use crate::config::StorageConfig;
use crate::error::StoreError;

/// Tells whether a session has a live lane (a turn may be running); such sessions are never
/// evicted.
pub type Liveness = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The amplification assumed before one is measured (sled 0.34.7 measured 2.2–3.3×).
const INITIAL_AMPLIFICATION: f64 = 3.0;
/// Bounds on the amplification estimate.
const MIN_AMPLIFICATION: f64 = 1.0;
const MAX_AMPLIFICATION: f64 = 8.0;
/// The database file must have grown by this much for a new amplification estimate.
const GROWTH_FOR_ESTIMATE: u64 = 1 << 20;
/// Below this many live bytes the ratio is dominated by sled's fixed overhead; not estimated.
const MIN_LIVE_FOR_ESTIMATE: u64 = 1 << 20;
/// Eviction goes this far below the target, so the next pass is not one write away.
const EVICT_TO_FRACTION: f64 = 0.9;
/// How often live bytes are recounted exactly (and empty sessions collected); between
/// recounts the store's meter is used.
const RECOUNT_EVERY: Duration = Duration::from_secs(300);
/// Most sessions evicted in one pass; the next pass continues.
const MAX_EVICTIONS_PER_PASS: u64 = 100_000;
/// Index entries read per page while choosing what to evict.
const SCAN_PAGE: usize = 256;
/// Most empty sessions removed per recount.
const MAX_EMPTY_PER_PASS: usize = 10_000;
const DAY_MS: u64 = 24 * 60 * 60 * 1_000;

/// The disk budget of one store.
pub struct StoreBudget {
    store: Store,
    limit_bytes: u64,
    high_water_bytes: u64,
    keep_archives: bool,
    prune_after_ms: Option<u64>,
    max_sessions: Option<u64>,
    is_live: Liveness,
    estimate: Mutex<Estimate>,
}

#[derive(Debug)]
struct Estimate {
    amplification: f64,
    /// Database bytes at the newest measurement.
    db_bytes: u64,
    last_recount: Option<Instant>,
}

/// How eviction is simulated in warn mode and tracked in enforce mode.
struct Progress {
    live: u64,
    sessions: u64,
    evicted: u64,
    /// Warn mode: sessions this pass already reported as evictable (at most
    /// `MAX_EVICTIONS_PER_PASS`), so later rules do not count them again.
    simulated: HashSet<String>,
}

impl StoreBudget {
    /// A budget for `store` with the `[storage]` settings; `is_live` protects live sessions.
    pub fn new(store: Store, config: &StorageConfig, is_live: Liveness) -> Self {
        let limit = config.max_disk_bytes;
        Self {
            store,
            limit_bytes: limit,
            high_water_bytes: (limit as f64 * config.high_water) as u64,
            keep_archives: config.keep_archives,
            prune_after_ms: (config.prune_after_days > 0)
                .then(|| u64::from(config.prune_after_days) * DAY_MS),
            max_sessions: config.max_sessions,
            is_live,
            estimate: Mutex::new(Estimate {
                amplification: INITIAL_AMPLIFICATION,
                db_bytes: 0,
                last_recount: None,
            }),
        }
    }

    /// The current amplification estimate (db bytes per live byte).
    pub fn amplification(&self) -> f64 {
        self.estimate
            .lock()
            .map(|e| e.amplification)
            .unwrap_or(INITIAL_AMPLIFICATION)
    }

    fn busy(&self, key: &str) -> Result<bool, StoreError> {
        Ok((self.is_live)(key) || !self.store.pending(key, 0, 1)?.is_empty())
    }

    /// Evicts sessions oldest first while `want` says so.
    fn evict_oldest(
        &self,
        enforce: bool,
        progress: &mut Progress,
        report: &mut ReclaimReport,
        why: &'static str,
        mut want: impl FnMut(&Candidate, &Progress) -> bool,
    ) -> Result<(), StoreError> {
        let mut cursor: Option<Vec<u8>> = None;
        loop {
            let page = self.store.oldest_sessions(cursor.as_deref(), SCAN_PAGE)?;
            if page.is_empty() {
                return Ok(());
            }
            for candidate in page {
                if !want(&candidate, progress) || progress.evicted >= MAX_EVICTIONS_PER_PASS {
                    return Ok(());
                }
                if progress.simulated.contains(&candidate.session_key) {
                    // Warn mode: already reported by an earlier rule of this pass.
                } else if self.busy(&candidate.session_key)? {
                    report.sessions_skipped_busy += 1;
                } else if let Some(bytes) = self.evict_one(&candidate, enforce, why)? {
                    progress.live = progress.live.saturating_sub(bytes);
                    progress.sessions = progress.sessions.saturating_sub(1);
                    progress.evicted += 1;
                    report.sessions_evicted += 1;
                    report.bytes_freed += bytes;
                    if !enforce {
                        progress.simulated.insert(candidate.session_key.clone());
                    }
                }
                cursor = Some(candidate.index_key);
            }
        }
    }

    /// Evicts one session (archiving it first if configured). Returns the live bytes freed,
    /// or `None` if it changed meanwhile and was kept.
    pub(super) fn evict_one(
        &self,
        c: &Candidate,
        enforce: bool,
        why: &'static str,
    ) -> Result<Option<u64>, StoreError> {
        let Some(record) = self.store.session(&c.session_key)? else {
            return Ok(None);
        };
        if record.updated_at_ms != c.updated_at_ms {
            return Ok(None);
        }
        let bytes = record.bytes + record.entries * TRANSCRIPT_KEY_BYTES;
        if !enforce {
            tracing::warn!(session_key = %c.session_key, bytes, why, "would evict session (janitor_mode = warn)");
            return Ok(Some(bytes));
        }
        let archived = if self.keep_archives {
            Some(archive::write(
                &self.store,
                &c.session_key,
                &record,
                now_ms(),
            )?)
        } else {
            None
        };
        match self
            .store
            .evict_session(&c.session_key, Some(c.updated_at_ms))?
        {
            Some(evicted) => {
                tracing::info!(
                    session_key = %c.session_key,
                    session_id = evicted.record.id,
                    updated_at_ms = c.updated_at_ms,
                    entries = evicted.entries_deleted,
                    bytes = evicted.bytes,
                    archived = archived.is_some(),
                    why,
                    "evicted session"
                );
                Ok(Some(evicted.bytes))
            }
            None => {
                if let Some(path) = archived {
                    let _ = std::fs::remove_file(path);
                }
                Ok(None)
            }
        }
    }

    /// Deletes archives oldest first until `over` bytes are gone. Returns bytes deleted.
    fn delete_archives(
        &self,
        mut over: u64,
        enforce: bool,
        report: &mut ReclaimReport,
    ) -> Result<u64, StoreError> {
        let mut freed = 0u64;
        for file in archive::list(self.store.data_dir())? {
            if over == 0 {
                break;
            }
            if enforce {
                std::fs::remove_file(&file.path).map_err(StoreError::file("delete", &file.path))?;
                tracing::info!(path = %file.path.display(), bytes = file.disk_bytes, "deleted archive");
            } else {
                tracing::warn!(path = %file.path.display(), "would delete archive (janitor_mode = warn)");
            }
            over = over.saturating_sub(file.disk_bytes);
            freed += file.disk_bytes;
            report.archives_deleted += 1;
            report.bytes_freed += file.disk_bytes;
        }
        Ok(freed)
    }

    fn reclaim_inner(&self, usage: &DiskUsage, enforce: bool) -> Result<ReclaimReport, StoreError> {
        let mut report = ReclaimReport::default();
        let (db_bytes, recount_due) = {
            let e = self
                .estimate
                .lock()
                .map_err(|_| StoreError::Flush("janitor estimate poisoned".into()))?;
            (
                e.db_bytes,
                e.last_recount.is_none_or(|t| t.elapsed() >= RECOUNT_EVERY),
            )
        };
        let mut empty = Vec::new();
        if recount_due {
            let (live, found) = self.store.recount(MAX_EMPTY_PER_PASS)?;
            self.store.inner.meter.set_live(live);
            empty = found;
            if let Ok(mut e) = self.estimate.lock() {
                e.last_recount = Some(Instant::now());
            }
        }
        let mut other = usage.disk_bytes.saturating_sub(db_bytes);

        // 1. Archives, oldest first.
        if usage.disk_bytes > usage.high_water_bytes {
            let over = usage.disk_bytes - usage.high_water_bytes;
            other = other.saturating_sub(self.delete_archives(over, enforce, &mut report)?);
        }

        // 2. Whole sessions, oldest first, down to the live-byte target.
        let live = self.store.live_bytes();
        let mut amplification = self.amplification();
        if db_bytes + other > self.limit_bytes && live >= MIN_LIVE_FOR_ESTIMATE {
            // Over the hard limit: the estimate was too low; take the pessimistic one.
            amplification = amplification.max(db_bytes as f64 / live as f64);
            if let Ok(mut e) = self.estimate.lock() {
                e.amplification = amplification.clamp(MIN_AMPLIFICATION, MAX_AMPLIFICATION);
            }
        }
        let db_room = usage.high_water_bytes.saturating_sub(other);
        let target = (db_room as f64 / amplification) as u64;
        self.store.set_janitor_trigger(target);
        let mut progress = Progress {
            live,
            sessions: 0,
            evicted: 0,
            simulated: HashSet::new(),
        };
        if live > target {
            let goal = (target as f64 * EVICT_TO_FRACTION) as u64;
            self.evict_oldest(
                enforce,
                &mut progress,
                &mut report,
                "disk budget",
                |_, p| p.live > goal,
            )?;
        }

        // 3. Sessions not updated for `prune_after_days`.
        if let Some(age) = self.prune_after_ms {
            let cutoff = now_ms().saturating_sub(age);
            self.evict_oldest(
                enforce,
                &mut progress,
                &mut report,
                "prune_after",
                |c, _| c.updated_at_ms < cutoff,
            )?;
        }

        // 4. Empty sessions.
        for (key, updated_at_ms) in empty {
            if self.busy(&key)? || progress.simulated.contains(&key) {
                continue;
            }
            let c = Candidate {
                index_key: Vec::new(),
                updated_at_ms,
                session_key: key,
            };
            if self.evict_one(&c, enforce, "empty")?.is_some() {
                report.sessions_evicted += 1;
                if !enforce {
                    progress.simulated.insert(c.session_key);
                }
            }
        }

        // 5. Beyond `max_sessions`.
        if let Some(max) = self.max_sessions {
            progress.sessions = (self.store.inner.by_updated.len() as u64)
                .saturating_sub(progress.simulated.len() as u64);
            self.evict_oldest(
                enforce,
                &mut progress,
                &mut report,
                "max_sessions",
                |_, p| p.sessions > max,
            )?;
        }
        Ok(report)
    }
}

impl DiskBudget for StoreBudget {
    fn usage(&self) -> Result<DiskUsage, String> {
        let dir = self.store.data_dir();
        let disk_bytes =
            disk::dir_disk_bytes(dir).map_err(|e| format!("measuring {}: {e}", dir.display()))?;
        let db_bytes = disk::dir_disk_bytes(&dir.join(DB_DIR))
            .map_err(|e| format!("measuring {}: {e}", dir.display()))?;
        let live = self.store.live_bytes();
        if let Ok(mut e) = self.estimate.lock() {
            // Only a growing file shows the real ratio (see the module doc).
            if db_bytes >= e.db_bytes + GROWTH_FOR_ESTIMATE && live >= MIN_LIVE_FOR_ESTIMATE {
                e.amplification =
                    (db_bytes as f64 / live as f64).clamp(MIN_AMPLIFICATION, MAX_AMPLIFICATION);
            }
            e.db_bytes = db_bytes;
        }
        Ok(DiskUsage {
            disk_bytes,
            limit_bytes: self.limit_bytes,
            high_water_bytes: self.high_water_bytes,
        })
    }

    fn reclaim(&self, usage: &DiskUsage, enforce: bool) -> Result<ReclaimReport, String> {
        self.reclaim_inner(usage, enforce)
            .map_err(|e| e.to_string())
    }
}

impl Store {
    /// Recounts live bytes exactly (sessions and inbox) and collects up to `max_empty` empty
    /// sessions (key, updated_at). Reads every session record: O(sessions).
    pub(super) fn recount(
        &self,
        max_empty: usize,
    ) -> Result<(u64, Vec<(String, u64)>), StoreError> {
        let mut live = 0u64;
        let mut empty = Vec::new();
        for kv in self.inner.sessions.iter() {
            let (k, v) = kv.map_err(StoreError::sled("scanning sessions"))?;
            let Ok(record) = decode::<SessionRecord>("sessions", &v) else {
                continue;
            };
            live += record.bytes + record.entries * TRANSCRIPT_KEY_BYTES;
            if record.entries == 0 && empty.len() < max_empty {
                empty.push((
                    String::from_utf8_lossy(&k).into_owned(),
                    record.updated_at_ms,
                ));
            }
        }
        for kv in self.inner.inbox.iter() {
            let (k, v) = kv.map_err(StoreError::sled("scanning the inbox"))?;
            live += (k.len() + v.len()) as u64;
        }
        Ok((live, empty))
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
