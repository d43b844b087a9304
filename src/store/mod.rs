//! Storage on sled: sessions, transcripts and the durable inbox, in one database per data dir.
//!
//! Trees: `sessions` (session key → [`SessionRecord`]), `transcript` (session id + seq →
//! [`TranscriptEntry`]), `inbox` (session key + NUL + inbox seq → [`InboxRecord`]),
//! `by_updated` (updated_at + session key → (), the eviction order), `quarantine` (values
//! that could not be decoded, kept for inspection), `dedupe` (preflight dedupe key → expiry
//! ms, see `dedupe.rs`), `channel_messages` (chat messages by id, time and parent, for reply
//! threads; see `channel.rs`), `channel_state` (durable per-channel state, e.g. a Telegram
//! offset), `meta` (schema version). A turn's commit touches `sessions`, `transcript`, `inbox`,
//! `channel_messages` and `by_updated` in one transaction, so a turn is either wholly stored
//! and consumed or not at all.
//!
//! Disk budget, repair and interchange live in their own files: `disk` (measuring, the live
//! byte meter), `evict` (removing whole sessions), `archive` (compressed JSONL of evicted
//! sessions), `cold` (the cold tier: evicted sessions as compressed frames in packs,
//! `cold_pack`, named by the `cold` tree, `cold_index`; thawed by their next turn),
//! `cold_reads` (reads, exports, deletes and the listing of cold sessions in place, without a
//! thaw), `cold_tidy` (the janitor's upkeep of packs), `cold_legacy` (the old
//! one-file-per-session layout, read and migrated), `budget` (the janitor's [`StoreBudget`] and admission's `disk_full`), `doctor`
//! (checks, repair, quarantine), `migrate` (schema migrations on open), `compact` (a prefix
//! replaced by a summary), `export` and `import_openclaw`, `delete` (one session, on request),
//! `backup` (a consistent snapshot of a running store) and `backup_file` (its file, restore).
//!
//! Surviving damage and a full disk: `generations` (the `db`, `db.<n>` directories and
//! `CURRENT`, never deleted on doubt), `ledger` (how far the database was durable, to detect a
//! lost tail), `health` (cannot write / damaged, the probe), `recover` (a fresh generation from what
//! was durable, after a full disk), `contain` (sled's
//! panics on damaged data become errors).

mod archive;
mod audit;
mod backup;
mod backup_file;
mod budget;
mod by_updated;
mod changes;
mod channel;
mod channel_state;
mod codec;
mod cold;
mod cold_index;
mod cold_legacy;
mod cold_pack;
mod cold_reads;
#[cfg(test)]
mod cold_tests;
mod cold_tidy;
mod committer;
mod compact;
mod contain;
mod dedupe;
mod delete;
mod disk;
mod doctor;
mod durability;
mod evict;
mod export;
mod generations;
mod health;
mod import_openclaw;
mod instructions;
mod keys;
mod ledger;
mod memo;
mod migrate;
mod pre_migration;
mod queued_events;
mod quotas;
mod records;
mod recover;
mod replica;
mod rewrite;
mod schedules;
mod sled_config;
mod tails;
mod thread_starters;
mod totals;
mod turn_commit;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

pub(crate) use audit::{AuditRecord, MAX_AUDIT_PAGE};
pub use backup::BackupReport;
pub(crate) use backup::BUSY as BACKUP_BUSY;
pub use backup_file::{restore_backup, verify_backup, RestoreReport};
pub use budget::StoreBudget;
pub(crate) use channel::{walk_back, Scan, MAX_CHAT_SCAN};
pub(crate) use codec::{decode, encode, MAX_VALUE_BYTES};
pub(crate) use cold_reads::FoundSession;
pub use committer::TurnCommitter;
pub(crate) use compact::{SummarySwap, SwapOutcome};
pub use dedupe::DedupeMark;
pub(crate) use dedupe::DEDUPE_PRUNE_ON_OPEN;
pub use disk::dir_disk_bytes;
pub use doctor::Depth;
pub(crate) use doctor::DoctorReport;
pub(crate) use durability::GroupCommit;
pub use health::PROBE_BYTES;
pub(crate) use health::PROBE_INTERVAL;
pub use import_openclaw::import_openclaw;
pub(crate) use ledger::Loss;
pub(crate) use memo::SharedEntry;
pub(crate) use records::{
    ChannelMessage, EntrySender, HistoryLine, SessionRecord, SystemEvent, ToolInfo,
};
pub use records::{EntryKind, InboxRecord, TranscriptEntry};
pub use schedules::{JobOrigin, JobRecord, RunOutcome, RunRecord, MAX_RUNS_KEPT};
pub(crate) use tails::TailStamp;
pub use thread_starters::{ThreadStarter, MAX_THREAD_STARTER_CHARS};
pub(crate) use totals::Totals;
pub use turn_commit::TurnCommit;
pub(crate) use turn_commit::{Committed, ReplicaMarks, MAX_TURNS_PER_COMMIT};

use crate::config::StorageConfig;
use crate::error::StoreError;
#[cfg(test)]
use migrate::SCHEMA_KEY;
#[cfg(test)]
pub(crate) use {
    budget::Liveness,
    cold::COLD_DIR,
    cold_pack::MAX_OPEN_PACKS,
    dedupe::DEDUPE_PRUNE_PER_WRITE,
    export::{ExportEntry, ExportHeader},
};

/// Attempts to open a database whose lock is held before reporting it in use.
pub const OPEN_LOCK_ATTEMPTS: u32 = 10;
/// Wait between those attempts.
pub const OPEN_LOCK_RETRY_WAIT: Duration = Duration::from_millis(50);

/// Most sessions without entries remembered for the janitor between its passes (the rest
/// are found again by the next start-up checks).
pub const MAX_EMPTY_FOUND: usize = 10_000;

/// The `meta` key of the totals kept at a clean stop.
const TOTALS_KEY: &[u8] = b"totals";

/// The database's directory under the data dir.
pub const DB_DIR: &str = "db";

/// The schema version this build writes. Older stores are migrated on open (`migrate`).
pub const SCHEMA_VERSION: u8 = 3;

/// The sled database and its trees. Cheap to clone.
///
/// The database can be replaced while the store is in use (`rewrite`: the janitor copies the
/// live data into a fresh database to give space back), so every operation first takes the
/// current generation with [`Store::inner`]; writes also hold the write gate shared, which a
/// rewrite holds exclusively while it copies.
#[derive(Clone)]
pub struct Store {
    shared: Arc<Shared>,
}

/// What stays the same across database generations.
struct Shared {
    current: RwLock<Arc<StoreInner>>,
    /// Writers hold it shared; a rewrite holds it exclusively while it copies.
    write_gate: RwLock<()>,
    queued: AtomicUsize,
    data_dir: PathBuf,
    config: StorageConfig,
    /// Live logical bytes and the janitor's high-water trigger.
    meter: disk::UsageMeter,
    /// Sessions, entries, tokens, bytes and compactions, kept as records are written.
    totals: totals::TotalsMeter,
    /// Sessions found without entries (by the start-up checks or an import), for the
    /// janitor's next pass; at most [`MAX_EMPTY_FOUND`].
    empty_found: std::sync::Mutex<Vec<(String, u64)>>,
    /// What the repair on open found and did.
    open_report: std::sync::OnceLock<DoctorReport>,
    /// The schema version this open migrated from, if it migrated (`pre_migration.rs`).
    migrated_at_open: Option<u8>,
    /// Where the incremental prune of `dedupe` continues (see `dedupe.rs`).
    dedupe_cursor: std::sync::Mutex<Vec<u8>>,
    /// System events queued across all sessions, counted on first use (`None` until then), so
    /// an admission with none queued anywhere skips the lookup (see `queued_events.rs`).
    queued_events: std::sync::Mutex<Option<usize>>,
    /// Whether the store can write now (see `health.rs`).
    health: Arc<health::Health>,
    /// The counters and marks that detect a lost tail (see `ledger.rs`).
    ledger: Arc<ledger::Ledger>,
    /// What the ledger found missing on open, if anything.
    loss: Option<Loss>,
    /// Held by the one rewrite that may run at a time (janitor, recovery probe), and by a
    /// backup while it copies.
    rewriting: std::sync::Mutex<()>,
    /// Held by the one backup that may run at a time (it owns the staging directory).
    backing_up: std::sync::Mutex<()>,
    /// Tests: called by a rewrite once its bulk copy is done, writes still going on.
    #[cfg(test)]
    after_copy: std::sync::Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
    /// Per-session locks (striped) that a freeze and an inbox write of the same session take,
    /// so a message never lands in a session while it moves to the cold tier (see `cold.rs`).
    cold_locks: cold::ColdLocks,
    /// False while the cold tier is known to be empty (nothing under its directory at open,
    /// no frame written since): then a turn skips the index lookup.
    cold_used: std::sync::atomic::AtomicBool,
    /// True while old-layout segment files may remain (`cold_legacy.rs`): reads look for
    /// them; the janitor clears it once it finds none.
    legacy_cold: std::sync::atomic::AtomicBool,
    /// The cold tier's pack files: the writer and the open readers (`cold_pack.rs`).
    packs: cold_pack::Packs,
    /// Cold sessions with a queued message, and the bytes their thaw will write (counted in
    /// admission's disk estimate until the thaw; see `cold.rs`); at most
    /// `cold::MAX_OWED_THAWS`.
    owed_thaws: std::sync::Mutex<std::collections::HashMap<String, u64>>,
    /// Tests: called by a thaw after reading its frame's header (`cold.rs`).
    #[cfg(test)]
    thaw_hook: std::sync::Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
}

/// One generation of the database: the sled instance, its trees and its group commit.
struct StoreInner {
    db: sled::Db,
    sessions: sled::Tree,
    transcript: sled::Tree,
    inbox: sled::Tree,
    by_updated: sled::Tree,
    quarantine: sled::Tree,
    dedupe: sled::Tree,
    channel_messages: sled::Tree,
    channel_state: sled::Tree,
    /// The cold tier's index (`cold_index.rs`).
    cold: sled::Tree,
    /// The audit log (`audit.rs`) and how many records it holds (counted on open: it is
    /// bounded by `MAX_AUDIT_RECORDS`).
    audit: sled::Tree,
    audit_len: std::sync::atomic::AtomicUsize,
    /// Quota usage per subject (`quotas.rs`).
    quotas: sled::Tree,
    /// Scheduled jobs and their runs (`schedules.rs`).
    schedules: sled::Tree,
    commit: GroupCommit,
    /// Added to sled's `generate_id`, so ids keep increasing across generations.
    id_base: u64,
    /// The newest entries of recently used sessions (see `tails.rs`).
    tails: tails::TailCache,
    /// This generation's directory.
    dir: PathBuf,
}

impl StoreInner {
    /// Opens the database in `dir` (sled's panics on damaged files contained), running schema
    /// migrations after a backup of the old layout (`pre_migration.rs`).
    fn open_db(dir: &Path, config: &StorageConfig) -> Result<(sled::Db, Option<u8>), StoreError> {
        let open = || {
            contain::contain("opening the database", || {
                sled_config::sled_config(dir, config)
                    .open()
                    .map_err(|source| StoreError::from_open(dir, source))
            })
        };
        let mut attempt = 1;
        let db = loop {
            match open() {
                // sled lets go of its file lock when its last background write ends, which can
                // be a moment after the previous owner in this process closed the store.
                Err(StoreError::Locked { .. }) if attempt < OPEN_LOCK_ATTEMPTS => {
                    attempt += 1;
                    std::thread::sleep(OPEN_LOCK_RETRY_WAIT);
                }
                other => break other?,
            }
        };
        if let Some(from) = contain::contain("reading the schema", || migrate::pending(&db))? {
            let path = contain::contain("backing up before a migration", || {
                pre_migration::back_up(&db, &config.data_dir, from)
            })?;
            tracing::warn!(
                from,
                to = SCHEMA_VERSION,
                backup = %path.display(),
                "migrating the store to a new layout; the old one is backed up (kept until the \
                 next start; `turnstile restore --from <backup> --data-dir <new dir>` brings it back)"
            );
        }
        let migrated_from = contain::contain("migrating the schema", || migrate::run(&db))?;
        Ok((db, migrated_from))
    }

    /// The generation over an open database; group-commit tickets continue after
    /// `first_ticket`.
    fn from_db(
        db: sled::Db,
        dir: PathBuf,
        config: &StorageConfig,
        tickets: (u64, u64),
        ledger: &Arc<ledger::Ledger>,
        health: &Arc<health::Health>,
    ) -> Result<Self, StoreError> {
        let open = |name: &'static str| {
            db.open_tree(name)
                .map_err(StoreError::sled("opening a tree"))
        };
        let inner = StoreInner {
            sessions: open("sessions")?,
            transcript: open("transcript")?,
            inbox: open("inbox")?,
            by_updated: open(by_updated::TREE)?,
            quarantine: open(doctor::QUARANTINE_TREE)?,
            dedupe: open("dedupe")?,
            channel_messages: open("channel_messages")?,
            channel_state: open(channel_state::TREE)?,
            cold: open(cold_index::TREE)?,
            audit_len: std::sync::atomic::AtomicUsize::new(0),
            audit: open(audit::TREE)?,
            quotas: open(quotas::TREE)?,
            schedules: open(schedules::TREE)?,
            id_base: rewrite::id_base(&db)?,
            tails: tails::TailCache::new(config.transcript_cache_bytes),
            commit: GroupCommit::start_for_store(
                db.clone(),
                config.durability,
                Duration::from_millis(config.flush_every_ms.max(1)),
                tickets,
                Some(Arc::clone(ledger)),
                Some(Arc::clone(health)),
            ),
            db,
            dir,
        };
        // Bounded (at most MAX_AUDIT_RECORDS), so counting it on open is cheap.
        inner
            .audit_len
            .store(inner.audit.len(), std::sync::atomic::Ordering::SeqCst);
        Ok(inner)
    }

    /// A new id, larger than every id handed out before in any generation. Call it holding
    /// the store's write gate: a rewrite takes the next generation's id base under the gate
    /// held exclusively, so only then is an id from this generation below that base.
    fn next_id(&self) -> Result<u64, StoreError> {
        Ok(self.id_base
            + self
                .db
                .generate_id()
                .map_err(StoreError::sled("allocating an id"))?)
    }
}

/// One accepted inbox item, as handed to a lane.
#[derive(Debug, Clone)]
pub struct InboxItem {
    /// Position in the inbox (monotonic across the database).
    pub seq: u64,
    /// The stored record.
    pub record: Arc<InboxRecord>,
}

impl Store {
    /// Opens (or creates) the database under `config.data_dir`. Must be called inside a tokio
    /// runtime (it starts the group-commit flusher).
    pub fn open(config: &StorageConfig) -> Result<Self, StoreError> {
        Self::open_with(config, true)
    }

    /// Opens the store without the repairs on open (schema migrations still run), so that
    /// `turnstile doctor` can report problems before fixing them.
    pub fn open_unrepaired(config: &StorageConfig) -> Result<Self, StoreError> {
        Self::open_with(config, false)
    }

    /// Opens the store for a serving runtime: only what replaying the inbox depends on is
    /// checked now (schema migrations, the inbox); the checks proportional to the stored
    /// sessions and the dedupe prune are left to [`Store::run_deferred_checks`], so start-up
    /// does not grow with the number of sessions.
    ///
    /// Refuses a store whose ledger says durable data is missing ([`StoreError::DataLoss`];
    /// see [`Store::accept_data_loss`]).
    pub fn open_for_serving(config: &StorageConfig) -> Result<Self, StoreError> {
        let (store, migrated_from) = Self::open_generation(config)?;
        if let Some(loss) = &store.shared.loss {
            store.inner().commit.stop();
            return Err(StoreError::DataLoss(loss.describe()));
        }
        let mut report = DoctorReport {
            schema_version: store.schema_version()?,
            repaired: true,
            migrated_from,
            ..DoctorReport::default()
        };
        if let Ok(Some(kept)) = store.meta_value(TOTALS_KEY) {
            if let Some(totals) = Totals::from_bytes(&kept) {
                store.shared.totals.set(&totals);
            }
        }
        store.contained("checking the inbox", || {
            store.check_inbox(&mut report, true)
        })?;
        if !report.is_clean() {
            tracing::warn!(report = %report, "inbox repaired on open");
        }
        store.recount_queued();
        Ok(store)
    }

    fn open_with(config: &StorageConfig, repair: bool) -> Result<Self, StoreError> {
        let (store, migrated_from) = Self::open_generation(config)?;
        // Quick checks and repairs on every open; `turnstile doctor` runs the full ones.
        let mut report = store.doctor(Depth::Quick, repair)?;
        report.migrated_from = migrated_from;
        if !report.is_clean() {
            tracing::warn!(report = %report, "store repaired on open");
        }
        store.recount_queued();
        store.after_quick_checks(report)?;
        Ok(store)
    }

    /// Records what the quick checks found (the live-byte meter, the open report) and prunes
    /// expired dedupe keys.
    fn after_quick_checks(&self, report: DoctorReport) -> Result<(), StoreError> {
        self.shared.meter.set_live(report.live_bytes);
        self.shared.totals.set(&report.totals);
        let _ = self.shared.open_report.set(report);
        self.prune_dedupe(crate::clock::now_ms(), DEDUPE_PRUNE_ON_OPEN)?;
        Ok(())
    }

    /// Opens the current database generation (running schema migrations), unchecked but for
    /// the ledger. Generations are cleaned up (`generations::remove_stale`) only when the
    /// ledger finds nothing missing.
    fn open_generation(config: &StorageConfig) -> Result<(Self, Option<u8>), StoreError> {
        let data_dir = config.data_dir.clone();
        std::fs::create_dir_all(&data_dir).map_err(|source| StoreError::DataDir {
            path: data_dir.clone(),
            source,
        })?;
        let dir = generations::current_dir(&data_dir)?;
        let (db, migrated_from) = StoreInner::open_db(&dir, config)?;
        let (ledger, loss) = contain::contain("reading the ledger mark", || {
            ledger::Ledger::open(&data_dir, &db)
        })?;
        if let Some(loss) = &loss {
            tracing::error!(loss = %loss.describe(), "the store lost data it had made durable");
        }
        let ledger = Arc::new(ledger);
        let health = Arc::new(health::Health::default());
        let inner = StoreInner::from_db(db, dir, config, (0, 0), &ledger, &health)?;
        if loss.is_none() {
            // Leftovers of an interrupted rewrite or of a retired generation.
            generations::remove_stale(&data_dir, &inner.dir);
        }
        let cold_used = cold::may_hold_files(&data_dir) || !cold_index::is_empty(&inner.cold);
        let legacy_cold = cold_legacy::may_exist(&data_dir);
        let packs = cold_pack::Packs::new(&data_dir, config.max_disk_bytes);
        let store = Self {
            shared: Arc::new(Shared {
                current: RwLock::new(Arc::new(inner)),
                write_gate: RwLock::new(()),
                queued: AtomicUsize::new(0),
                queued_events: std::sync::Mutex::new(None),
                data_dir,
                config: config.clone(),
                meter: disk::UsageMeter::default(),
                totals: totals::TotalsMeter::default(),
                empty_found: std::sync::Mutex::default(),
                open_report: std::sync::OnceLock::new(),
                migrated_at_open: migrated_from,
                dedupe_cursor: std::sync::Mutex::new(Vec::new()),
                health,
                ledger,
                loss,
                rewriting: std::sync::Mutex::new(()),
                backing_up: std::sync::Mutex::new(()),
                #[cfg(test)]
                after_copy: std::sync::Mutex::new(None),
                cold_locks: cold::ColdLocks::default(),
                cold_used: std::sync::atomic::AtomicBool::new(cold_used),
                legacy_cold: std::sync::atomic::AtomicBool::new(legacy_cold),
                packs,
                owed_thaws: std::sync::Mutex::default(),
                #[cfg(test)]
                thaw_hook: std::sync::Mutex::new(None),
            }),
        };
        store.start_recovery_probe();
        Ok((store, migrated_from))
    }

    /// Accepts what the ledger found missing (`turnstile serve --accept-data-loss`): logs it
    /// and re-baselines the ledger on what the database holds. Returns the loss, if any. The
    /// store must not be open elsewhere; must be called inside a tokio runtime.
    pub async fn accept_data_loss(config: &StorageConfig) -> Result<Option<Loss>, StoreError> {
        let (store, _) = Self::open_generation(config)?;
        let loss = store.shared.loss.clone();
        if let Some(loss) = &loss {
            tracing::warn!(loss = %loss.describe(), "accepting the data loss: serving what is left");
            store.shared.ledger.unfreeze();
        }
        store.close().await?;
        Ok(loss)
    }

    /// What the ledger found missing when the store was opened.
    pub fn data_loss(&self) -> Option<&Loss> {
        self.shared.loss.as_ref()
    }

    /// Why the store is not ready (cannot write, damaged), or `None` when it is.
    pub fn not_ready_reason(&self) -> Option<String> {
        self.shared.health.not_ready_reason()
    }

    /// Refuses a write while the store cannot write.
    fn check_writable(&self) -> Result<(), StoreError> {
        self.shared.health.check_writable()
    }

    /// Notes a failed write: an I/O failure puts the store in "cannot write" and is answered
    /// as [`StoreError::CannotWrite`].
    /// `e`, or [`StoreError::CannotWrite`] (507 to a client, and the store's "cannot write"
    /// state) when it is a failed write: an I/O error from sled, a failed flush, or a file
    /// write that found the disk full. Callers outside the store that write through it
    /// (admission) map their errors with it, so a full disk is never a 500.
    pub fn classify_failure(&self, e: StoreError) -> StoreError {
        let disk_full = matches!(
            &e,
            StoreError::File { source, .. }
                if source.raw_os_error() == Some(28) // ENOSPC
                    || source.raw_os_error() == Some(122) // EDQUOT
        );
        if disk_full {
            self.shared.health.write_failed(&e.to_string());
            return StoreError::CannotWrite {
                reason: health::describe_failure(&e.to_string()),
            };
        }
        self.write_failed(e)
    }

    fn write_failed(&self, e: StoreError) -> StoreError {
        if health::is_write_failure(&e) {
            self.shared.health.write_failed(&e.to_string());
            return StoreError::CannotWrite {
                reason: health::describe_failure(&e.to_string()),
            };
        }
        e
    }

    /// Runs a sled call with its panics contained; a contained panic marks the store damaged.
    fn contained<T>(
        &self,
        what: &'static str,
        f: impl FnOnce() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        contain::contain(what, f).inspect_err(|e| {
            if let StoreError::Corrupt { reason, .. } = e {
                self.shared.health.damaged(reason);
            }
        })
    }

    /// Starts the task that brings a store that cannot write back (see `health.rs`): every
    /// [`PROBE_INTERVAL`], if writes are refused for lack of space, write a probe file; when
    /// that works, open what was durable as a fresh generation (`recover.rs`). Ends when the
    /// store is dropped.
    fn start_recovery_probe(&self) {
        let Ok(tokio) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let weak = Arc::downgrade(&self.shared);
        tokio.spawn(async move {
            loop {
                tokio::time::sleep(PROBE_INTERVAL).await;
                let Some(shared) = weak.upgrade() else {
                    return;
                };
                if !shared.health.cannot_write() {
                    continue;
                }
                let store = Store { shared };
                let attempt = tokio::task::spawn_blocking(move || {
                    if let Err(e) = health::probe(&store.shared.data_dir) {
                        tracing::debug!(error = %e, "the store still cannot write");
                        return;
                    }
                    match store.recover_from_disk() {
                        Ok(_) => store.shared.health.writable_again(),
                        Err(e) => {
                            tracing::warn!(error = %e, "there is room again, but the recovery copy failed; retrying")
                        }
                    }
                })
                .await;
                if let Err(e) = attempt {
                    tracing::error!(error = %e, "the recovery probe failed");
                }
            }
        });
    }

    /// Sets the queued-message count and the pending bytes from the inbox (one scan of it).
    fn recount_queued(&self) {
        let (mut queued, mut bytes) = (0usize, 0u64);
        for (k, v) in self.inner().inbox.iter().flatten() {
            queued += 1;
            bytes += (k.len() + v.len()) as u64;
        }
        self.shared.queued.store(queued, Ordering::Relaxed);
        self.shared.meter.set_pending(bytes);
    }

    /// The checks [`Store::open_for_serving`] left out, while the store is in use: the quick
    /// checks run read-only beside the writers; only if they find a problem do they run again
    /// with repairs, holding writes off (a concurrent write can look like a problem to the
    /// read-only pass, never to the repairing one). Then the live-byte meter is set and expired
    /// dedupe keys are pruned. Returns what the (last) pass found.
    pub fn run_deferred_checks(&self) -> Result<DoctorReport, StoreError> {
        let mut report = self.doctor(Depth::Quick, false)?;
        if !report.is_clean() {
            let _exclusive = self
                .shared
                .write_gate
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            report = self.doctor(Depth::Quick, true)?;
            if !report.is_clean() {
                tracing::warn!(report = %report, "store repaired after opening");
            }
        }
        self.after_quick_checks(report.clone())?;
        Ok(report)
    }

    /// Whether `storage.compression` is on while the current database was created without
    /// it: the janitor then copies it into a compressed one (`StoreBudget::reclaim`).
    pub(super) fn recompression_due(&self) -> bool {
        self.shared.config.compression
            && sled_config::created_compressed(&self.inner().dir) == Some(false)
    }

    /// The current database generation.
    fn inner(&self) -> Arc<StoreInner> {
        let current = self
            .shared
            .current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(&current)
    }

    /// Held (shared) by every write, so a rewrite can exclude writes while it copies.
    fn write_gate(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        self.shared
            .write_gate
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// True when `data_dir` holds a store.
    pub fn exists(data_dir: &Path) -> bool {
        data_dir.join(generations::CURRENT_FILE).exists()
            || generations::current_dir(data_dir).is_ok_and(|d| d.exists())
            || !generations::list(data_dir).is_empty()
    }

    /// What the checks on open found and repaired.
    pub fn open_report(&self) -> Option<&DoctorReport> {
        self.shared.open_report.get()
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.shared.data_dir
    }

    /// Group commit for the current database.
    pub fn commit(&self) -> GroupCommit {
        self.inner().commit.clone()
    }

    /// Unconsumed inbox items across all sessions.
    pub fn queued(&self) -> usize {
        self.shared.queued.load(Ordering::Relaxed)
    }

    /// Writes an accepted message to the inbox (not yet flushed) and returns its item and the
    /// group-commit ticket to wait on before acknowledging.
    pub fn enqueue(
        &self,
        session_key: &str,
        record: InboxRecord,
    ) -> Result<(InboxItem, u64), StoreError> {
        self.enqueue_deduped(session_key, record, None)
    }

    /// Unconsumed inbox items of one session with `seq > after`, oldest first, at most `limit`.
    pub fn pending(
        &self,
        session_key: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<InboxItem>, StoreError> {
        self.contained("reading the inbox", || {
            let start = keys::inbox_key(session_key, after.saturating_add(1));
            let end = keys::inbox_key(session_key, u64::MAX);
            let mut out = Vec::new();
            for kv in self.inner().inbox.range(start..=end).take(limit) {
                let (k, v) = kv.map_err(StoreError::sled("reading the inbox"))?;
                let Some((_, seq)) = keys::split_inbox_key(&k) else {
                    continue;
                };
                let record: InboxRecord = decode("inbox", &v)?;
                out.push(InboxItem {
                    seq,
                    record: Arc::new(record),
                });
            }
            Ok(out)
        })
    }

    /// Session keys that have unconsumed inbox items (for replay after a restart).
    pub fn sessions_with_pending(&self) -> Result<Vec<String>, StoreError> {
        let mut keys = BTreeSet::new();
        for kv in self.inner().inbox.iter().keys() {
            let k = kv.map_err(StoreError::sled("scanning the inbox"))?;
            if let Some((session, _)) = keys::split_inbox_key(&k) {
                keys.insert(session.to_string());
            }
        }
        Ok(keys.into_iter().collect())
    }

    /// The session stored under `key`.
    pub fn session(&self, key: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.contained("reading a session", || {
            self.inner()
                .sessions
                .get(key)
                .map_err(StoreError::sled("reading a session"))?
                .map(|b| decode("sessions", &b))
                .transpose()
        })
    }

    /// Sessions in key order, starting after `after`, at most `limit`.
    pub fn list_sessions(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, SessionRecord)>, StoreError> {
        self.contained("listing sessions", || {
            let iter = match after {
                Some(a) => self.inner().sessions.range::<&[u8], _>((
                    std::ops::Bound::Excluded(a.as_bytes()),
                    std::ops::Bound::Unbounded,
                )),
                None => self.inner().sessions.iter(),
            };
            let mut out = Vec::new();
            for kv in iter.take(limit) {
                let (k, v) = kv.map_err(StoreError::sled("listing sessions"))?;
                let key = String::from_utf8_lossy(&k).into_owned();
                out.push((key, decode("sessions", &v)?));
            }
            Ok(out)
        })
    }

    /// Number of sessions in the database, counted key by key: O(sessions), for tools and
    /// tests. A server reads [`Store::totals`] instead.
    pub fn session_count(&self) -> usize {
        self.inner().sessions.len()
    }

    /// A small value of the store's own bookkeeping in the `meta` tree (copied by rewrites).
    pub(super) fn meta_value(&self, key: &[u8]) -> Result<Option<sled::IVec>, StoreError> {
        self.inner()
            .db
            .open_tree("meta")
            .and_then(|meta| meta.get(key))
            .map_err(StoreError::sled("reading meta"))
    }

    /// Sets a `meta` value (durable with the next flush).
    pub(super) fn set_meta_value(&self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        let _write = self.write_gate();
        self.inner()
            .db
            .open_tree("meta")
            .and_then(|meta| meta.insert(key, value))
            .map(|_| ())
            .map_err(StoreError::sled("writing meta"))
    }

    /// The data dir's estimated size: the janitor's newest measurement plus what was written
    /// since (see `disk::UsageMeter`); 0 before a janitor measured it.
    pub fn disk_estimate(&self) -> u64 {
        self.shared.meter.disk_estimate()
    }

    /// Remembers session `key` (updated at `updated_at_ms`) as holding no entries.
    pub(super) fn found_empty(&self, key: &str, updated_at_ms: u64) {
        let mut found = self
            .shared
            .empty_found
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if found.len() < MAX_EMPTY_FOUND {
            found.push((key.to_string(), updated_at_ms));
        }
    }

    /// The sessions found without entries since the last call.
    pub(super) fn take_empty_found(&self) -> Vec<(String, u64)> {
        std::mem::take(
            &mut *self
                .shared
                .empty_found
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Sessions, entries, tokens, bytes and compactions across the database, as kept while
    /// records are written (`totals.rs`): constant time, no walk.
    pub fn totals(&self) -> Totals {
        self.shared.totals.get()
    }

    /// A session's transcript entries with `seq > after`, oldest first, at most `limit`.
    pub fn transcript(
        &self,
        session_id: u64,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, TranscriptEntry)>, StoreError> {
        self.contained("reading a transcript", || {
            let start = keys::transcript_key(session_id, after.saturating_add(1));
            let end = keys::transcript_key(session_id, u64::MAX);
            let mut out = Vec::new();
            for kv in self.inner().transcript.range(start..=end).take(limit) {
                let (k, v) = kv.map_err(StoreError::sled("reading a transcript"))?;
                let seq = keys::transcript_seq(&k).unwrap_or_default();
                out.push((seq, decode("transcript", &v)?));
            }
            Ok(out)
        })
    }

    /// The newest entries of a session, newest first, while `keep(entry)` says to continue.
    pub fn newest_entries(
        &self,
        session_id: u64,
        keep: impl FnMut(&TranscriptEntry) -> bool,
    ) -> Result<Vec<(u64, TranscriptEntry)>, StoreError> {
        let mut out = Vec::new();
        self.newest_entries_below(session_id, u64::MAX, keep, &mut out)?;
        Ok(out
            .into_iter()
            .map(|(seq, e)| (seq, SharedEntry::into_entry(e)))
            .collect())
    }

    /// Like [`Store::newest_entries`], for the session whose record has `stamp`, through the
    /// transcript tail cache (`tails.rs`). Assembly uses this to read only as much history as
    /// fits its budget, and usually none of it from sled.
    pub fn window_entries(
        &self,
        session_key: &str,
        stamp: TailStamp,
        keep: &mut dyn FnMut(&TranscriptEntry) -> bool,
    ) -> Result<Vec<(u64, Arc<SharedEntry>)>, StoreError> {
        let inner = self.inner();
        let (mut out, below) = match inner.tails.replay(stamp, keep) {
            tails::Replay::Done(out) => return Ok(out),
            tails::Replay::Partial(out, below) => (out, below),
            tails::Replay::Miss => (Vec::new(), u64::MAX),
        };
        let complete = self.newest_entries_below(stamp.id, below, keep, &mut out)?;
        // Kept only if nothing changed the transcript meanwhile: every change moves the
        // record's stamp, and the read lies between two reads of the same stamp.
        if self.session(session_key)?.map(|r| TailStamp::of(&r)) == Some(stamp) {
            inner.tails.fill(stamp, &out, complete);
        }
        Ok(out)
    }

    /// Appends to `out` the entries of a session below seq `below`, newest first, while
    /// `keep(entry)` says to continue. True when it read them all.
    fn newest_entries_below(
        &self,
        session_id: u64,
        below: u64,
        mut keep: impl FnMut(&TranscriptEntry) -> bool,
        out: &mut Vec<(u64, Arc<SharedEntry>)>,
    ) -> Result<bool, StoreError> {
        self.contained("reading a transcript", || {
            let start = keys::transcript_key(session_id, 0);
            let end = keys::transcript_key(session_id, below);
            for kv in self.inner().transcript.range(start..end).rev() {
                let (k, v) = kv.map_err(StoreError::sled("reading a transcript"))?;
                let entry: TranscriptEntry = decode("transcript", &v)?;
                if !keep(&entry) {
                    return Ok(false);
                }
                out.push((
                    keys::transcript_seq(&k).unwrap_or_default(),
                    Arc::new(entry.into()),
                ));
            }
            Ok(true)
        })
    }

    /// The oldest entry of the session of `stamp`: from its tail in the cache when that holds
    /// the whole transcript (one read of sled per assembly less), else from sled.
    pub fn oldest_entry_at(
        &self,
        stamp: TailStamp,
    ) -> Result<Option<(u64, Arc<SharedEntry>)>, StoreError> {
        if let Some(oldest) = self.inner().tails.oldest(stamp) {
            return Ok(oldest);
        }
        Ok(self
            .oldest_entry(stamp.id)?
            .map(|(seq, e)| (seq, Arc::new(e.into()))))
    }

    /// The oldest entry of session `session_id` (a compaction summary sits there).
    pub fn oldest_entry(
        &self,
        session_id: u64,
    ) -> Result<Option<(u64, TranscriptEntry)>, StoreError> {
        let Some(kv) = self
            .inner()
            .transcript
            .scan_prefix(keys::transcript_prefix(session_id))
            .next()
        else {
            return Ok(None);
        };
        let (k, v) = kv.map_err(StoreError::sled("reading a transcript"))?;
        let entry: TranscriptEntry = decode("transcript", &v)?;
        Ok(Some((keys::transcript_seq(&k).unwrap_or_default(), entry)))
    }

    /// Flushes everything and stops the flusher.
    pub async fn close(&self) -> Result<(), StoreError> {
        // The totals as of this clean stop: the next start shows them until its start-up
        // checks have counted every record again.
        if let Err(error) = self.set_meta_value(TOTALS_KEY, &self.totals().to_bytes()) {
            tracing::warn!(%error, "could not keep the store's totals");
        }
        let inner = self.inner();
        inner.commit.close().await
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod commit_tests;

#[cfg(test)]
mod storage_tests;

#[cfg(test)]
mod model_tests;
