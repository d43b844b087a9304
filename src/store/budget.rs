//! [`StoreBudget`]: the janitor's [`DiskBudget`] over this store and its data dir.
//!
//! # The rules of a pass
//! * **Under high water nothing is frozen or deleted for the budget** (budgets too small to
//!   hold a rewrite beside a data dir at high water use the lower mark where they still can:
//!   `working_usage`). Only the operator's
//!   own rules remove sessions there (`prune_after_days`, `max_sessions`, sessions with no
//!   entries), and a database that is mostly dead space is rewritten when its copy fits
//!   beside it as things are (`Store::rewrite_within`: writers do not wait for the copy, and
//!   a copy that would not be smaller is given up).
//! * **Over high water**, in order: archives are deleted oldest first; idle sessions are
//!   evicted oldest first — into the cold tier when it is on — until the live bytes are 10%
//!   under `high_water / BUDGETED_AMPLIFICATION` of the budget (lower when a rewrite showed
//!   sled needs more room per live byte), so that the rewrite which gives the space back fits
//!   beside the database; the database is rewritten; if the data dir is still over, sessions
//!   are evicted in proportion to the overshoot and it is rewritten again.
//! * **Cold sessions are deleted only when all of that leaves the data dir over high water**,
//!   by whole files oldest first (old-layout segments, then packs), as many bytes as the
//!   overshoot, and never in the pass that froze them (a freeze frees room inside sled, not
//!   on the disk). The cold tier's upkeep (empty packs deleted, mostly dead ones compacted,
//!   old-layout files moved into packs: `cold_tidy.rs`) loses no session and runs in every
//!   pass. Every removal is counted per reason
//!   (`turnstile_evictions_total{reason}`) and a pass logs one line for all of them.
//!
//! sled never shrinks its file when keys are deleted: it reuses the space, so eviction slows
//! growth and a rewrite gives the space back.
//!
//! # Holding the line without the janitor
//! The janitor runs on a timer and on signals, so on its own it can fall behind a burst. The
//! store keeps an estimate of the data dir's size (the janitor's newest measurement plus what
//! was written since, see `disk::UsageMeter`); writes past high water wake the janitor, and
//! [`Store::disk_full`] makes admission refuse new messages (`507`) while the estimate, plus
//! room for the next rewrite's copy, is at `ADMIT_BELOW` of the budget (never below high
//! water), until a pass brings the measurement back down.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use turnstile_actors::{BudgetError, DiskBudget, DiskUsage, ReclaimReport};

use super::evict::{Candidate, TRANSCRIPT_KEY_BYTES};
use super::health::FLUSH_TIMEOUT;
use super::{archive, disk, Store};
use crate::clock::now_ms;
use crate::config::{JanitorMode, StorageConfig};
use crate::error::StoreError;

/// Tells whether a session has a live lane (a turn may be running); such sessions are never
/// evicted.
pub(crate) type Liveness = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Disk bytes budgeted per live byte over high water: sled's own amplification (2.2–3.3×
/// measured) plus room for the copy a rewrite makes. Once the data dir passes high water, live
/// bytes are brought to `high_water / 4` of the budget, so the rewrite that gives the space
/// back fits beside the database.
const BUDGETED_AMPLIFICATION: f64 = 4.0;
/// A rewrite starts when the data dir passes this fraction of the high-water mark...
const REWRITE_AT: f64 = 0.6;
/// ...and the database holds at least this many bytes per live byte (otherwise a rewrite
/// would give little back)...
const MIN_GARBAGE_RATIO: f64 = 2.0;
/// ...and has grown by this factor since the last rewrite left it (so rewrites do not follow
/// each other when sled's fresh copy is itself large).
const REWRITE_GROWTH: f64 = 1.3;
/// A fresh generation is kept to this fraction of the rewrite threshold: when a rewrite shows
/// that sled needs more bytes per live byte than budgeted (large values become blob files),
/// the live-byte target is lowered accordingly.
const FRESH_FRACTION_OF_REWRITE_AT: f64 = 0.6;
/// Eviction goes this far below the target, so the next pass is not one write away.
const EVICT_TO_FRACTION: f64 = 0.9;
/// Most sessions evicted in one pass; the next pass continues.
const MAX_EVICTIONS_PER_PASS: u64 = 100_000;
/// Index entries read per page while choosing what to evict.
const SCAN_PAGE: usize = 256;
const DAY_MS: u64 = 24 * 60 * 60 * 1_000;
/// Eviction reasons that move a session into the cold tier (when it is on) instead of
/// deleting it: the disk budget's, all only with the data dir over high water. Age, count
/// and emptiness delete. The last two (pressure, room for a rewrite's copy) write no archive
/// either.
const FREEZES: [&str; 3] = ["disk_budget", "disk_pressure", "rewrite_room"];
/// Rounds of eviction [`StoreBudget::make_room_for_rewrite`] tries: each freeze writes a
/// segment, which takes some of the room the eviction made, so the fit is checked again.
const ROOM_ROUNDS: usize = 4;
/// Admission refuses new messages once the disk estimate reaches this fraction of the budget:
/// messages already queued still get their turns (each writes its transcript entries and
/// reply), so the line is drawn a little before the budget itself.
const ADMIT_BELOW: f64 = 0.95;
/// A rewrite's old and new generation together may reach this multiple of the budget; more,
/// and sessions are evicted first so the copy is smaller.
const REWRITE_PEAK: f64 = 1.0;
/// While a rewrite copies, the data dir may pass the budget by this fraction of it, for the
/// length of the copy.
const COPY_OVERSHOOT: f64 = 0.1;
/// Over high water a rewrite's copy may take the data dir up to high water plus this much (at
/// most a quarter of the budget) whatever else the budget leaves: a fresh generation is at least sled's fixed overhead (6–10 MB
/// measured), which no eviction can make room for, and without the rewrite a store whose
/// sessions were all frozen stays over high water with admission closed.
const MIN_COPY_ROOM: u64 = 16 << 20;
/// The `meta` key of what the newest rewrite measured ([`StoreBudget::save_note`]).
const REWRITE_NOTE_KEY: &[u8] = b"janitor_rewrite";
/// sled's fixed overhead in a fresh generation (6–10 MB measured), beside its live data.
const FRESH_OVERHEAD_BYTES: u64 = 8 << 20;
/// The working high-water mark is never lowered below this fraction of the budget.
const MIN_WORKING_HIGH_WATER: f64 = 0.5;
/// Database bytes per live byte assumed for a rewrite's fresh copy before one has been
/// measured.
const FRESH_AMPLIFICATION_GUESS: f64 = 2.0;
/// A fresh copy is assumed this much larger than the newest one measured (per live byte), as
/// the room a rewrite is given.
const FRESH_COPY_MARGIN: f64 = 1.2;
/// After a pass, the disk-estimate signal waits for this fraction of the budget more than the
/// pass left (so a data dir over high water with nothing to free does not wake the janitor on
/// every write).
const DISK_TRIGGER_SLACK: f64 = 0.05;

/// The disk budget of one store.
pub struct StoreBudget {
    store: Store,
    limit_bytes: u64,
    high_water_bytes: u64,
    keep_archives: bool,
    prune_after_ms: Option<u64>,
    max_sessions: Option<u64>,
    is_live: Liveness,
    /// `janitor_mode = "enforce"`: only then does admission refuse on a full data dir.
    enforcing: bool,
    /// The cold tier's share of the budget in bytes; 0: no cold tier (evictions delete).
    cold_max_bytes: u64,
    /// Disk bytes of the cold segments this budget has written (a running total): a pass
    /// adds what its freezes wrote to the data dir it measured, as the segments take room the
    /// rewrite's copy needs.
    segments_written: AtomicU64,
    measured: Mutex<Measured>,
    /// Set while a flush before a measurement runs on its own thread: one that outlived its
    /// wait (sled can hang on a failing disk) is not joined by another.
    flush_in_flight: Arc<AtomicBool>,
    /// Set once this process tried to copy an uncompressed database into a compressed one
    /// (`storage.compression`): a copy given up is not tried again every pass.
    recompress_tried: AtomicBool,
}

#[derive(Debug, Default)]
struct Measured {
    /// Bytes of the current database generation at the newest measurement.
    db_bytes: u64,
    /// Bytes of the data dir at the newest measurement.
    disk_bytes: u64,
    /// Bytes of the database right after the newest rewrite.
    after_rewrite: u64,
    /// Database bytes per live byte right after the newest rewrite.
    fresh_amplification: Option<f64>,
}

/// How eviction is simulated in warn mode and tracked in enforce mode.
struct Progress {
    live: u64,
    sessions: u64,
    evicted: u64,
    /// Warn mode: sessions this pass already reported as evictable (at most
    /// `MAX_EVICTIONS_PER_PASS`), so later rules do not count them again.
    simulated: HashSet<String>,
    /// Busy sessions already counted in the report, so a later rule of the same pass passing
    /// over them again does not count them twice.
    busy_seen: HashSet<String>,
}

impl StoreBudget {
    /// A budget for `store` with the `[storage]` settings; `is_live` protects live sessions.
    pub fn new(store: Store, config: &StorageConfig, is_live: Liveness) -> Self {
        let measured = Self::load_note(&store);
        let limit = config.max_disk_bytes;
        let enforcing = config.janitor_mode == JanitorMode::Enforce;
        if enforcing {
            store
                .shared
                .meter
                .set_disk_trigger((limit as f64 * config.high_water) as u64);
        }
        Self {
            store,
            limit_bytes: limit,
            high_water_bytes: (limit as f64 * config.high_water) as u64,
            keep_archives: config.keep_archives,
            prune_after_ms: (config.prune_after_days > 0)
                .then(|| u64::from(config.prune_after_days) * DAY_MS),
            max_sessions: config.max_sessions,
            is_live,
            enforcing,
            // At most half of high water, whatever `high_water` is set to.
            cold_max_bytes: (limit as f64 * config.cold_max_fraction.min(config.high_water / 2.0))
                as u64,
            segments_written: AtomicU64::new(0),
            measured: Mutex::new(measured),
            flush_in_flight: Arc::new(AtomicBool::new(false)),
            recompress_tried: AtomicBool::new(false),
        }
    }

    /// The live bytes the janitor brings the store to once the data dir is over high water,
    /// for a measurement `usage`: a quarter of high water, lower if a rewrite showed sled needs
    /// more room per live byte.
    pub fn live_target(&self, usage: &DiskUsage) -> u64 {
        let sled_share = self.sled_share(usage) as f64;
        let budgeted = sled_share / BUDGETED_AMPLIFICATION;
        let fresh = self
            .measured
            .lock()
            .ok()
            .and_then(|m| m.fresh_amplification)
            .map(|amp| sled_share * REWRITE_AT * FRESH_FRACTION_OF_REWRITE_AT / amp)
            .unwrap_or(budgeted);
        budgeted.min(fresh) as u64
    }

    /// The part of high water the database may use: what the cold tier's share leaves (in
    /// proportion, so a measurement with another high-water mark scales alike).
    fn sled_share(&self, usage: &DiskUsage) -> u64 {
        let cold = self.cold_max_bytes as f64 / self.high_water_bytes.max(1) as f64;
        (usage.high_water_bytes as f64 * (1.0 - cold).max(0.0)) as u64
    }

    /// Deletes cold files oldest first (old-layout files, then whole packs) until `over`
    /// bytes are freed. Returns the bytes deleted.
    fn delete_cold(&self, mut over: u64, report: &mut ReclaimReport) -> Result<u64, StoreError> {
        let mut freed = 0u64;
        for file in self.store.cold_files_oldest_first()? {
            if over == 0 {
                break;
            }
            let sessions = self.store.delete_cold_file(&file)?;
            let bytes = file.disk_bytes();
            tracing::debug!(?file, sessions, bytes, "deleted cold sessions");
            over = over.saturating_sub(bytes);
            freed += bytes;
            report.cold_deleted += sessions;
            report.bytes_freed += bytes;
        }
        Ok(freed)
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
                    if progress.busy_seen.insert(candidate.session_key.clone()) {
                        report.sessions_skipped_busy += 1;
                    }
                } else if let Some(bytes) = self.evict_one(&candidate, enforce, why)? {
                    progress.live = progress.live.saturating_sub(bytes);
                    progress.sessions = progress.sessions.saturating_sub(1);
                    progress.evicted += 1;
                    report.sessions_evicted += 1;
                    report.bytes_freed += bytes;
                    if enforce && self.cold_max_bytes > 0 && FREEZES.contains(&why) {
                        report.sessions_frozen += 1;
                    }
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
            // One summary line per pass (the janitor's) instead of one per session.
            tracing::debug!(session_key = %c.session_key, bytes, why, "would evict session (janitor_mode = warn)");
            return Ok(Some(bytes));
        }
        if self.cold_max_bytes > 0 && FREEZES.contains(&why) {
            let Some(frozen) = self.store.freeze_session(&c.session_key, c.updated_at_ms)? else {
                return Ok(None);
            };
            self.segments_written
                .fetch_add(frozen.segment_bytes, Ordering::Relaxed);
            // One line per session at debug level; the janitor's pass line counts them.
            tracing::debug!(
                session_key = %c.session_key,
                updated_at_ms = c.updated_at_ms,
                entries = frozen.evicted.entries_deleted,
                bytes = frozen.evicted.bytes,
                segment_bytes = frozen.segment_bytes,
                why,
                "moved session to the cold tier"
            );
            // It left sled for the budget: an eviction, as far as the counter is concerned.
            crate::metrics::eviction(why);
            return Ok(Some(frozen.evicted.bytes));
        }
        // Under pressure an archive would only add to what must go (archives are deleted first).
        let archived = if self.keep_archives && !FREEZES[1..].contains(&why) {
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
                self.store.forget_cold(&c.session_key)?;
                tracing::debug!(
                    session_key = %c.session_key,
                    session_id = evicted.record.id,
                    updated_at_ms = c.updated_at_ms,
                    entries = evicted.entries_deleted,
                    bytes = evicted.bytes,
                    archived = archived.is_some(),
                    why,
                    "evicted session"
                );
                crate::metrics::eviction(why);
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

    /// `usage` with the highest mark at which the budget could still hold, beside the data
    /// dir, the rewrite that brings it back (its fresh copy: the live-byte target at the
    /// measured amplification, plus sled's fixed overhead). When that is below `high_water`
    /// (small budgets: with the default cold tier, under about 133 MiB) the janitor acts at
    /// that mark instead of high water.
    pub(super) fn working_usage(&self, usage: &DiskUsage) -> DiskUsage {
        let copy = self.live_target(usage) as f64 * self.fresh_amplification() * FRESH_COPY_MARGIN
            + FRESH_OVERHEAD_BYTES as f64;
        let fits = usage.limit_bytes as f64 * (REWRITE_PEAK + COPY_OVERSHOOT) - copy;
        let floor = usage.limit_bytes as f64 * MIN_WORKING_HIGH_WATER;
        DiskUsage {
            high_water_bytes: usage.high_water_bytes.min(fits.max(floor) as u64),
            ..*usage
        }
    }

    fn reclaim_inner(&self, usage: &DiskUsage, enforce: bool) -> Result<ReclaimReport, StoreError> {
        // A budget too small to hold, beside a data dir at high water, the rewrite that
        // brings it back (sled's fixed overhead is most of a fresh generation there) starts
        // at the lower mark where it still can; every other budget frees nothing under high
        // water.
        let working_high_water = self.working_usage(usage).high_water_bytes;
        let mut report = ReclaimReport::default();
        let (db_bytes, measured_disk, after_rewrite) = {
            let m = self
                .measured
                .lock()
                .map_err(|_| StoreError::Flush("janitor measurement poisoned".into()))?;
            (m.db_bytes, m.disk_bytes, m.after_rewrite)
        };
        let mut disk_bytes = usage.disk_bytes;
        let over = disk_bytes > usage.high_water_bytes;
        let segments_before = self.segments_written.load(Ordering::Relaxed);
        // Nothing is frozen or deleted for the budget while the data dir is under high water,
        // so the live-byte meter wakes the janitor for nothing; the disk estimate does.
        self.store.set_janitor_trigger(u64::MAX);

        // 0. The cold tier's upkeep, at any fill (it loses no session): empty packs deleted,
        // mostly dead ones compacted, old-layout files moved into packs (`cold_tidy.rs`).
        let tidied = self.store.tidy_cold(over)?;
        disk_bytes = disk_bytes.saturating_sub(tidied.bytes_freed);
        report.bytes_freed += tidied.bytes_freed;
        let over = over && disk_bytes > usage.high_water_bytes;
        let over_working = disk_bytes > working_high_water;

        // 1. Archives, oldest first.
        if over {
            let over_by = disk_bytes - usage.high_water_bytes;
            disk_bytes -= self
                .delete_archives(over_by, enforce, &mut report)?
                .min(disk_bytes);
        }

        // 2. Over high water: whole sessions, oldest first (into the cold tier when it is on),
        // down to the live-byte target, so the rewrite below fits beside the database.
        let target = self.live_target(usage);
        let mut progress = Progress {
            live: self.store.live_bytes(),
            sessions: 0,
            evicted: 0,
            simulated: HashSet::new(),
            busy_seen: HashSet::new(),
        };
        if (over || over_working) && progress.live > target {
            let goal = (target as f64 * EVICT_TO_FRACTION) as u64;
            self.evict_oldest(
                enforce,
                &mut progress,
                &mut report,
                "disk_budget",
                |_, p| p.live > goal,
            )?;
        }

        // 3. The operator's rules, at any fill: sessions not updated for `prune_after_days`
        // (the index is ordered by minute, so one that passed the cutoff within the cutoff's
        // minute may wait for the next pass), sessions with no entries, beyond `max_sessions`.
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
        for (key, updated_at_ms) in self.store.take_empty_found() {
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
        if let Some(max) = self.max_sessions {
            progress.sessions = self
                .store
                .totals()
                .sessions
                .saturating_sub(progress.simulated.len() as u64);
            self.evict_oldest(
                enforce,
                &mut progress,
                &mut report,
                "max_sessions",
                |_, p| p.sessions > max,
            )?;
        }

        // 4. Garbage: rewrite the database when it is mostly dead space. Under high water only
        // if its copy fits beside it as things are (nothing is evicted to make room there).
        disk_bytes = disk_bytes.saturating_add(
            self.segments_written
                .load(Ordering::Relaxed)
                .saturating_sub(segments_before),
        );
        let live = self.store.live_bytes();
        let rewrite_at = (self.sled_share(usage) as f64 * REWRITE_AT) as u64;
        let grown = if self.cold_max_bytes > 0 {
            db_bytes
        } else {
            disk_bytes
        };
        let mostly_garbage = db_bytes as f64 >= MIN_GARBAGE_RATIO * live.max(1) as f64
            && db_bytes as f64 >= REWRITE_GROWTH * after_rewrite as f64;
        // A database made before `storage.compression` (or with it off) is copied into a
        // compressed one once, whatever its garbage, when the copy fits: how an existing data
        // dir moves to the smaller layout.
        let recompress =
            self.store.recompression_due() && !self.recompress_tried.load(Ordering::Relaxed);
        let mut rewrote = false;
        let over = over || over_working;
        if ((grown > rewrite_at && mostly_garbage) || recompress) && (live <= target || !over) {
            if !enforce {
                tracing::warn!(
                    db_bytes,
                    live,
                    "would rewrite the database (janitor_mode = warn)"
                );
            } else if over {
                if self.make_room_for_rewrite(disk_bytes, &mut progress, &mut report)? {
                    self.recompress_tried.store(true, Ordering::Relaxed);
                    rewrote = self.rewrite_now(self.rewrite_room(disk_bytes), &mut report)?;
                }
            } else {
                let room = self.rewrite_room(disk_bytes);
                let copy = live as f64 * self.fresh_amplification() * FRESH_COPY_MARGIN;
                if copy <= room as f64 {
                    self.recompress_tried.store(true, Ordering::Relaxed);
                    rewrote = self.rewrite_now(room, &mut report)?;
                }
            }
        }
        if enforce {
            let changed = rewrote || tidied.bytes_freed > 0;
            self.relieve_pressure(usage, measured_disk, changed, &mut progress, &mut report)?;
        }
        Ok(report)
    }

    /// Room a rewrite's copy may take: what the budget leaves beside the data dir, plus
    /// [`COPY_OVERSHOOT`] of the budget (the copy is given up past that). Over high water,
    /// enough for the data dir to reach high water plus [`MIN_COPY_ROOM`] (at most a quarter
    /// of the budget): a floor measured from the data dir itself let a store far over high
    /// water (a backlog of acknowledged messages) pass the budget by that floor.
    fn rewrite_room(&self, disk_bytes: u64) -> u64 {
        let room = ((self.limit_bytes as f64 * (REWRITE_PEAK + COPY_OVERSHOOT)) as u64)
            .saturating_sub(disk_bytes);
        if disk_bytes > self.high_water_bytes {
            let floor = (self.high_water_bytes + MIN_COPY_ROOM.min(self.limit_bytes / 4))
                .saturating_sub(disk_bytes);
            room.max(floor)
        } else {
            room
        }
    }

    /// Step 7 of a pass: when the data dir is still over high water (the rewrite freed
    /// nothing or did not run, or busy sessions hold the live bytes up), evicts live bytes in
    /// proportion to the overshoot and rewrites if the fresh copy would be markedly smaller.
    /// Ends with a fresh measurement for admission and the next disk signal.
    ///
    /// `measured_disk` is the newest real measurement before this pass: what the pass changed
    /// is applied to `usage` (which a caller may have adjusted) as a difference.
    fn relieve_pressure(
        &self,
        usage: &DiskUsage,
        measured_disk: u64,
        changed: bool,
        progress: &mut Progress,
        report: &mut ReclaimReport,
    ) -> Result<(), StoreError> {
        let remeasure =
            || -> Result<u64, StoreError> {
                let real = self.measure()?;
                Ok((usage.disk_bytes + real)
                    .saturating_sub(measured_disk.min(usage.disk_bytes + real)))
            };
        let changed = changed
            || report.sessions_evicted > 0
            || report.archives_deleted > 0
            || report.cold_deleted > 0;
        let mut disk_now = if changed {
            remeasure()?
        } else {
            usage.disk_bytes
        };
        if disk_now > usage.high_water_bytes {
            let live = self.store.live_bytes();
            let fresh = live as f64 * self.fresh_amplification();
            // Only when a rewrite would give little back (the database is mostly live) does
            // the overshoot call for eviction; otherwise the rewrite below is the remedy, and
            // evicting as well would empty the store pass after pass.
            if (self.db_bytes()? as f64) < REWRITE_GROWTH * fresh {
                let goal = (live as f64 * usage.high_water_bytes as f64 / disk_now as f64
                    * EVICT_TO_FRACTION) as u64;
                progress.live = live;
                self.evict_oldest(true, progress, report, "disk_pressure", |_, p| {
                    p.live > goal
                })?;
            }
            let live = self.store.live_bytes();
            let db_bytes = self.db_bytes()?;
            let fresh = live as f64 * self.fresh_amplification();
            if db_bytes as f64 >= REWRITE_GROWTH * fresh
                && self.make_room_for_rewrite(disk_now, progress, report)?
            {
                self.rewrite_now(self.rewrite_room(disk_now), report)?;
            }
            disk_now = remeasure()?;
            // The last resort: cold sessions, oldest first, as many as the overshoot, and
            // never the ones this pass froze (a freeze frees room inside sled, not on the
            // disk: deleting its segment at once would only lose the session). The room they
            // leave may let a rewrite of a mostly dead database run.
            if disk_now > usage.high_water_bytes
                && self.cold_max_bytes > 0
                && report.sessions_frozen == 0
            {
                let over = disk_now - usage.high_water_bytes;
                if self.delete_cold(over, report)? > 0 {
                    disk_now = remeasure()?;
                    if disk_now > usage.high_water_bytes
                        && self.mostly_garbage()?
                        && self.rewrite_now(self.rewrite_room(disk_now), report)?
                    {
                        disk_now = remeasure()?;
                    }
                }
            }
            if disk_now > usage.high_water_bytes {
                tracing::warn!(
                    disk_bytes = disk_now,
                    high_water_bytes = usage.high_water_bytes,
                    live_bytes = self.store.live_bytes(),
                    skipped_busy = report.sessions_skipped_busy,
                    "data dir still over high water after evicting everything idle"
                );
            }
        }
        let slack = (self.limit_bytes as f64 * DISK_TRIGGER_SLACK) as u64;
        self.store.shared.meter.set_disk_trigger(
            self.working_usage(usage)
                .high_water_bytes
                .max(disk_now.saturating_add(slack)),
        );
        Ok(())
    }

    /// Whether the database holds enough dead space for a rewrite to give much back.
    fn mostly_garbage(&self) -> Result<bool, StoreError> {
        let db_bytes = self.db_bytes()? as f64;
        let fresh = self.store.live_bytes() as f64 * self.fresh_amplification();
        Ok(db_bytes >= REWRITE_GROWTH * fresh)
    }

    /// Database bytes per live byte expected for a rewrite's fresh copy.
    fn fresh_amplification(&self) -> f64 {
        self.measured
            .lock()
            .ok()
            .and_then(|m| m.fresh_amplification)
            .unwrap_or(FRESH_AMPLIFICATION_GUESS)
    }

    /// Evicts sessions until the old generation (`disk_bytes`) and the copy a rewrite makes
    /// fit together within `REWRITE_PEAK` of the budget. False when they still do not (busy
    /// sessions hold the live bytes up): the rewrite waits for a later pass, and admission
    /// refuses meanwhile, rather than the copy pushing the data dir past the budget.
    fn make_room_for_rewrite(
        &self,
        disk_bytes: u64,
        progress: &mut Progress,
        report: &mut ReclaimReport,
    ) -> Result<bool, StoreError> {
        let per_live_byte = self.fresh_amplification() * FRESH_COPY_MARGIN;
        let segments_before = self.segments_written.load(Ordering::Relaxed);
        let mut room = 0.0;
        let mut fits = false;
        for round in 0..=ROOM_ROUNDS {
            // Segments frozen meanwhile are on disk beside the old generation.
            let segments = self
                .segments_written
                .load(Ordering::Relaxed)
                .saturating_sub(segments_before);
            room = self.rewrite_room(disk_bytes + segments) as f64;
            let goal = (room / per_live_byte) as u64;
            progress.live = self.store.live_bytes();
            if progress.live <= goal {
                fits = true;
                break;
            }
            // No room at all (the data dir is at the budget): no eviction can make any, and
            // emptying the store for nothing would only lose it.
            if round == ROOM_ROUNDS || goal == 0 {
                break;
            }
            let evicted = progress.evicted;
            self.evict_oldest(true, progress, report, "rewrite_room", |_, p| p.live > goal)?;
            if progress.evicted == evicted {
                // Nothing more could go (busy sessions).
                break;
            }
        }
        if !fits {
            tracing::warn!(
                disk_bytes,
                live_bytes = self.store.live_bytes(),
                room,
                "no room for a rewrite beside the database yet (sessions busy); waiting"
            );
        }
        Ok(fits)
    }

    /// Rewrites the database within `room` bytes and records what the fresh generation
    /// measured (or, when the copy was given up, what it had reached: the next rewrite waits
    /// until the database has grown past that). Returns whether the new generation replaced
    /// the old one.
    fn rewrite_now(&self, room: u64, report: &mut ReclaimReport) -> Result<bool, StoreError> {
        let live = self.store.live_bytes();
        let done = self.store.rewrite_within(room)?;
        if !done.switched {
            if let Ok(mut m) = self.measured.lock() {
                // No rewrite before the database grows past this again.
                m.after_rewrite = done.bytes_before;
                if live > 0 {
                    let reached = done.bytes_after as f64 / live as f64;
                    m.fresh_amplification = Some(reached.max(m.fresh_amplification.unwrap_or(0.0)));
                }
            }
            return Ok(false);
        }
        report.bytes_freed += done.bytes_before.saturating_sub(done.bytes_after);
        // The next rewrite needs about as much room again: admission keeps it free.
        self.store
            .shared
            .meter
            .set_rewrite_reserve((done.bytes_after as f64 * FRESH_COPY_MARGIN) as u64);
        if let Ok(mut m) = self.measured.lock() {
            m.db_bytes = done.bytes_after;
            m.after_rewrite = done.bytes_after;
            if live > 0 {
                m.fresh_amplification = Some(done.bytes_after as f64 / live as f64);
            }
        }
        self.save_note();
        Ok(true)
    }

    /// Keeps what the newest rewrite taught (the fresh copy's bytes per live byte, and the
    /// database size the next rewrite waits for) in the store, so a restart does not try again
    /// a rewrite that was just given up.
    fn save_note(&self) {
        let (amp, after) = match self.measured.lock() {
            Ok(m) => (m.fresh_amplification.unwrap_or(0.0), m.after_rewrite),
            Err(_) => return,
        };
        let mut value = Vec::with_capacity(16);
        value.extend_from_slice(&amp.to_bits().to_be_bytes());
        value.extend_from_slice(&after.to_be_bytes());
        if let Err(error) = self.store.set_meta_value(REWRITE_NOTE_KEY, &value) {
            tracing::warn!(%error, "could not keep what the rewrite measured");
        }
    }

    /// What [`Self::save_note`] kept, if anything.
    fn load_note(store: &Store) -> Measured {
        let mut m = Measured::default();
        let Ok(Some(value)) = store.meta_value(REWRITE_NOTE_KEY) else {
            return m;
        };
        if let (Some(amp), Some(after)) = (value.get(..8), value.get(8..16)) {
            let amp = f64::from_bits(u64::from_be_bytes(amp.try_into().unwrap_or([0; 8])));
            if amp.is_finite() && amp > 0.0 {
                m.fresh_amplification = Some(amp);
            }
            m.after_rewrite = u64::from_be_bytes(after.try_into().unwrap_or([0; 8]));
        }
        m
    }

    /// Bytes of the current database generation.
    fn db_bytes(&self) -> Result<u64, StoreError> {
        let db_dir = self.store.inner().dir.clone();
        disk::dir_disk_bytes(&db_dir).map_err(StoreError::file("measure", &db_dir))
    }

    /// Flushes sled so that every write counted before a measurement is on disk when the
    /// data dir is walked: sled writes its buffers in the background and lags by megabytes
    /// under load, and the estimate would run under by that much. Skipped while the store
    /// cannot write (nothing new is written then). Bounded: the flush runs on a thread of its
    /// own and is waited for at most [`FLUSH_TIMEOUT`]; a failed or hung flush leaves the
    /// measurement low rather than stopping the pass that may free space.
    fn flush_before_measuring(&self) {
        if self.store.check_writable().is_err() || self.flush_in_flight.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let db = self.store.inner().db.clone();
        let in_flight = Arc::clone(&self.flush_in_flight);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name("janitor flush".into())
            .spawn(move || {
                let result = db.flush().map(|_| ());
                drop(db);
                in_flight.store(false, Ordering::Release);
                let _ = tx.send(result);
            });
        if let Err(error) = spawned {
            self.flush_in_flight.store(false, Ordering::Release);
            tracing::warn!(%error, "cannot start the flush before measuring the data dir");
            return;
        }
        match rx.recv_timeout(FLUSH_TIMEOUT) {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "flush before measuring the data dir failed"),
            Err(_) => tracing::warn!(
                timeout_s = FLUSH_TIMEOUT.as_secs(),
                "flush before measuring the data dir did not finish in time; measuring without it"
            ),
        }
    }

    /// Measures the data dir and hands the measurement to admission's estimate.
    fn measure(&self) -> Result<u64, StoreError> {
        let dir = self.store.data_dir();
        let counted = self.store.shared.meter.measure_begins();
        self.flush_before_measuring();
        let disk_bytes = disk::dir_disk_bytes(dir).map_err(StoreError::file("measure", dir))?;
        if self.enforcing {
            self.store.shared.meter.set_measured(disk_bytes, counted);
        }
        if let Ok(mut m) = self.measured.lock() {
            m.disk_bytes = disk_bytes;
        }
        Ok(disk_bytes)
    }
}

impl DiskBudget for StoreBudget {
    fn usage(&self) -> Result<DiskUsage, BudgetError> {
        let disk_bytes = self.measure().map_err(BudgetError::new)?;
        let db_bytes = self.db_bytes().map_err(BudgetError::new)?;
        if let Ok(mut m) = self.measured.lock() {
            m.db_bytes = db_bytes;
        }
        Ok(DiskUsage {
            disk_bytes,
            limit_bytes: self.limit_bytes,
            high_water_bytes: self.high_water_bytes,
        })
    }

    fn reclaim(&self, usage: &DiskUsage, enforce: bool) -> Result<ReclaimReport, BudgetError> {
        self.reclaim_inner(usage, enforce).map_err(BudgetError::new)
    }
}

impl Store {
    /// Why a new message must be refused for lack of disk space, if it must: the data dir's
    /// estimated size (see `disk::UsageMeter`), plus what the turns of the messages already
    /// acknowledged will write, plus the room the next rewrite needs (the newest fresh
    /// generation's size) has reached `ADMIT_BELOW` of `max_disk_bytes`. Without that
    /// reserve the janitor could only rewrite by passing the budget. Wakes the janitor then,
    /// so the refusal lasts only until a pass frees space. Cheap: a few atomic loads. `None`
    /// while no janitor has measured the data dir.
    pub fn disk_full(&self) -> Option<String> {
        let limit = self.shared.config.max_disk_bytes as f64;
        let estimate = self.shared.meter.disk_estimate();
        // Never below high water: sled's fixed overhead makes a fresh generation a large part
        // of a small budget, and a line the janitor cannot get under would refuse for good.
        let line = (limit * ADMIT_BELOW - self.shared.meter.rewrite_reserve() as f64)
            .max(limit * self.shared.config.high_water);
        if estimate == 0
            || (estimate.saturating_add(self.shared.meter.pending_disk_bytes()) as f64) < line
        {
            return None;
        }
        let limit = self.shared.config.max_disk_bytes;
        self.shared.meter.wake();
        Some(format!(
            "the data dir is at about {} of its {} byte budget and nothing more can be evicted yet",
            estimate, limit
        ))
    }
}
