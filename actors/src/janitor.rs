//! The janitor: keeps the data dir inside its disk budget.
//!
//! The actor owns *when* space is reclaimed — on a periodic tick and as soon as the storage
//! layer signals that writes may have crossed high water — and the bookkeeping (totals, last
//! measurement, last error). *What* is reclaimed and how is the [`DiskBudget`]'s business, which
//! the `turnstile` crate implements over sled (archives first, then whole sessions, oldest
//! first) and the tests here implement with a fake.
//!
//! Signals are coalesced: [`JanitorHandle::high_water`] sends at most one message until the
//! janitor has started the pass it asked for, so a write storm cannot flood the mailbox.
//! A pass does blocking disk work, so it runs on tokio's blocking pool; the actor awaits it,
//! which also means at most one pass runs at a time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::JoinHandle;

use crate::handle::ActorsError;

/// A measurement of the data dir.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Bytes really allocated on disk under the data dir.
    pub disk_bytes: u64,
    /// The budget (`max_disk_bytes`).
    pub limit_bytes: u64,
    /// Above this the janitor frees space (`high_water` × budget).
    pub high_water_bytes: u64,
}

impl DiskUsage {
    /// True when usage is above the high-water mark.
    pub fn over_high_water(&self) -> bool {
        self.disk_bytes > self.high_water_bytes
    }
}

/// What one pass freed (or, in warn mode, would have freed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReclaimReport {
    /// Archive files deleted.
    pub archives_deleted: u64,
    /// Sessions evicted (budget, age, count or emptiness).
    pub sessions_evicted: u64,
    /// Sessions passed over because they had a live turn or unconsumed messages.
    pub sessions_skipped_busy: u64,
    /// Logical bytes (stored keys and values, archive files) released.
    pub bytes_freed: u64,
    /// Of the sessions evicted, those moved into the cold tier (kept, compressed) rather than
    /// deleted.
    pub sessions_frozen: u64,
    /// Cold sessions deleted (with their pack files, oldest first).
    pub cold_deleted: u64,
}

impl ReclaimReport {
    fn add(&mut self, other: &ReclaimReport) {
        self.archives_deleted += other.archives_deleted;
        self.sessions_evicted += other.sessions_evicted;
        self.sessions_skipped_busy += other.sessions_skipped_busy;
        self.bytes_freed += other.bytes_freed;
        self.sessions_frozen += other.sessions_frozen;
        self.cold_deleted += other.cold_deleted;
    }
}

/// Why the storage side of the disk budget failed: the storage's own error, shown as it is.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct BudgetError(Box<dyn std::error::Error + Send + Sync>);

impl BudgetError {
    /// Wraps the storage's error (or a message).
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self(error.into())
    }
}

/// The storage side of the disk budget. Both calls may block on disk I/O; the janitor runs
/// them on the blocking pool.
pub trait DiskBudget: Send + Sync + 'static {
    /// Measures the data dir.
    fn usage(&self) -> Result<DiskUsage, BudgetError>;

    /// One reclamation pass given the measurement `usage`: below high water it only applies
    /// the standing rules (age, session count, empty sessions); above it, it frees space until
    /// usage is projected below high water. With `enforce == false` nothing is deleted and the
    /// report says what would have been.
    fn reclaim(&self, usage: &DiskUsage, enforce: bool) -> Result<ReclaimReport, BudgetError>;
}

/// How the janitor behaves.
#[derive(Debug, Clone)]
pub struct JanitorSettings {
    /// Period of the routine measurement.
    pub interval: Duration,
    /// False: only measure and report (`mode = "warn"`).
    pub enforce: bool,
}

/// What the janitor has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JanitorStatus {
    /// Passes run.
    pub passes: u64,
    /// The newest measurement.
    pub last_usage: Option<DiskUsage>,
    /// When the newest pass ended (ms since the Unix epoch), failed or not; `None` before the
    /// first. Operators ask "is the janitor still running?" (the console shows it).
    pub last_pass_at_ms: Option<u64>,
    /// What the newest successful pass freed.
    pub last_pass: ReclaimReport,
    /// Totals over all passes.
    pub totals: ReclaimReport,
    /// The newest pass failure, if the newest pass failed.
    pub last_error: Option<String>,
    /// False in warn mode.
    pub enforcing: bool,
}

/// Messages the janitor accepts.
#[derive(Debug)]
pub enum JanitorMsg {
    /// The routine measurement.
    Tick,
    /// Writes may have pushed usage over high water: run a pass now.
    HighWater,
}

/// The janitor actor.
pub struct Janitor<D: DiskBudget> {
    budget: Arc<D>,
    settings: JanitorSettings,
    signalled: Arc<AtomicBool>,
    /// The status as of the newest pass, read by [`JanitorHandle::status`] without a message:
    /// a pass can run for seconds (a rewrite's copy), and a reader must not wait for it.
    published: Arc<Mutex<JanitorStatus>>,
}

/// The janitor's state.
pub struct JanitorState {
    status: JanitorStatus,
    ticker: JoinHandle<()>,
}

impl<D: DiskBudget> Janitor<D> {
    async fn pass(&self, status: &mut JanitorStatus) {
        // Cleared before measuring: a signal raised during the pass asks for another one.
        self.signalled.store(false, Ordering::Release);
        let budget = Arc::clone(&self.budget);
        let enforce = self.settings.enforce;
        let outcome = tokio::task::spawn_blocking(move || {
            let usage = budget.usage()?;
            let report = budget.reclaim(&usage, enforce)?;
            Ok::<_, BudgetError>((usage, report))
        })
        .await
        .map_err(|e| BudgetError::new(format!("janitor pass panicked: {e}")))
        .and_then(|r| r);
        status.passes += 1;
        status.last_pass_at_ms = Some(crate::clock::now_ms());
        match outcome {
            Ok((usage, report)) => {
                status.last_usage = Some(usage);
                status.last_pass = report;
                status.totals.add(&report);
                status.last_error = None;
                if usage.over_high_water() || report != ReclaimReport::default() {
                    tracing::info!(
                        disk_bytes = usage.disk_bytes,
                        high_water_bytes = usage.high_water_bytes,
                        archives_deleted = report.archives_deleted,
                        sessions_evicted = report.sessions_evicted,
                        skipped_busy = report.sessions_skipped_busy,
                        frozen = report.sessions_frozen,
                        cold_deleted = report.cold_deleted,
                        bytes_freed = report.bytes_freed,
                        enforce,
                        "janitor pass"
                    );
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "janitor pass failed");
                status.last_error = Some(e.to_string());
            }
        }
    }
}

impl<D: DiskBudget> Actor for Janitor<D> {
    type Msg = JanitorMsg;
    type State = JanitorState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<JanitorMsg>,
        _: (),
    ) -> Result<JanitorState, ActorProcessingErr> {
        let period = self.settings.interval;
        let ticker = tokio::spawn(async move {
            let mut interval = tokio::time::interval(period);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                if myself.cast(JanitorMsg::Tick).is_err() {
                    return;
                }
            }
        });
        Ok(JanitorState {
            status: JanitorStatus {
                enforcing: self.settings.enforce,
                ..JanitorStatus::default()
            },
            ticker,
        })
    }

    async fn post_stop(
        &self,
        _: ActorRef<JanitorMsg>,
        state: &mut JanitorState,
    ) -> Result<(), ActorProcessingErr> {
        state.ticker.abort();
        Ok(())
    }

    async fn handle(
        &self,
        _: ActorRef<JanitorMsg>,
        msg: JanitorMsg,
        state: &mut JanitorState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            JanitorMsg::Tick | JanitorMsg::HighWater => {
                self.pass(&mut state.status).await;
                *self
                    .published
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = state.status.clone();
            }
        }
        Ok(())
    }
}

/// A cheap-clone handle to the janitor.
pub struct JanitorHandle {
    actor: ActorRef<JanitorMsg>,
    signalled: Arc<AtomicBool>,
    published: Arc<Mutex<JanitorStatus>>,
}

impl Clone for JanitorHandle {
    fn clone(&self) -> Self {
        Self {
            actor: self.actor.clone(),
            signalled: Arc::clone(&self.signalled),
            published: Arc::clone(&self.published),
        }
    }
}

impl JanitorHandle {
    /// Starts a janitor over `budget`. Its first pass runs at once.
    pub async fn start<D: DiskBudget>(
        budget: Arc<D>,
        settings: JanitorSettings,
    ) -> Result<Self, ActorsError> {
        let signalled = Arc::new(AtomicBool::new(false));
        let published = Arc::new(Mutex::new(JanitorStatus {
            enforcing: settings.enforce,
            ..JanitorStatus::default()
        }));
        let janitor = Janitor {
            budget,
            settings,
            signalled: Arc::clone(&signalled),
            published: Arc::clone(&published),
        };
        let (actor, _) = Actor::spawn(None, janitor, ())
            .await
            .map_err(|e| ActorsError::Spawn(e.to_string()))?;
        Ok(Self {
            actor,
            signalled,
            published,
        })
    }

    /// Asks for a pass now. Cheap and safe to call on every write: only the first call since
    /// the janitor last started a pass sends a message.
    pub fn high_water(&self) {
        if !self.signalled.swap(true, Ordering::AcqRel) {
            let _ = self.actor.cast(JanitorMsg::HighWater);
        }
    }

    /// The janitor's status as of its newest pass (no message: it answers while a pass runs).
    pub async fn status(&self) -> Result<JanitorStatus, ActorsError> {
        Ok(self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone())
    }

    /// Stops the janitor (a running pass finishes first).
    pub async fn stop(&self, deadline: Duration) {
        let _ = self
            .actor
            .stop_and_wait(Some("shutdown".into()), Some(deadline))
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A disk whose usage grows by `write` and shrinks by what `reclaim` evicts.
    #[derive(Default)]
    struct FakeDisk {
        used: Mutex<u64>,
        calls: Mutex<Vec<bool>>,
    }

    const LIMIT: u64 = 1_000;
    const HIGH: u64 = 800;

    impl DiskBudget for FakeDisk {
        fn usage(&self) -> Result<DiskUsage, BudgetError> {
            Ok(DiskUsage {
                disk_bytes: *self.used.lock().unwrap(),
                limit_bytes: LIMIT,
                high_water_bytes: HIGH,
            })
        }

        fn reclaim(&self, usage: &DiskUsage, enforce: bool) -> Result<ReclaimReport, BudgetError> {
            self.calls.lock().unwrap().push(enforce);
            if !usage.over_high_water() {
                return Ok(ReclaimReport::default());
            }
            let freed = usage.disk_bytes - HIGH / 2;
            if enforce {
                *self.used.lock().unwrap() -= freed;
            }
            Ok(ReclaimReport {
                sessions_evicted: 1,
                bytes_freed: freed,
                ..ReclaimReport::default()
            })
        }
    }

    async fn wait_until(mut f: impl FnMut() -> bool) {
        for _ in 0..200 {
            if f() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("condition not reached");
    }

    /// The status once `f` holds for it (it is published at the end of each pass).
    async fn status_when(
        janitor: &JanitorHandle,
        f: impl Fn(&JanitorStatus) -> bool,
    ) -> JanitorStatus {
        for _ in 0..200 {
            let status = janitor.status().await.unwrap();
            if f(&status) {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("status not reached");
    }

    fn settings(enforce: bool) -> JanitorSettings {
        JanitorSettings {
            interval: Duration::from_secs(3600),
            enforce,
        }
    }

    #[tokio::test]
    async fn high_water_signal_triggers_an_enforcing_pass() {
        let disk = Arc::new(FakeDisk::default());
        let janitor = JanitorHandle::start(Arc::clone(&disk), settings(true))
            .await
            .unwrap();
        // The first tick runs at start.
        wait_until(|| disk.calls.lock().unwrap().len() == 1).await;
        *disk.used.lock().unwrap() = 950;
        janitor.high_water();
        wait_until(|| *disk.used.lock().unwrap() == HIGH / 2).await;
        let status = status_when(&janitor, |s| s.passes == 2).await;
        assert_eq!(status.totals.sessions_evicted, 1);
        assert_eq!(status.totals.bytes_freed, 950 - HIGH / 2);
        assert_eq!(status.last_usage.unwrap().disk_bytes, 950);
        assert_eq!(
            status.last_pass.sessions_evicted, 1,
            "the newest pass evicted"
        );
        assert!(status.last_pass_at_ms.is_some_and(|t| t > 0));
        assert!(status.enforcing);
        janitor.stop(Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn warn_mode_reports_without_freeing() {
        let disk = Arc::new(FakeDisk::default());
        *disk.used.lock().unwrap() = 900;
        let janitor = JanitorHandle::start(Arc::clone(&disk), settings(false))
            .await
            .unwrap();
        let status = status_when(&janitor, |s| s.passes >= 1).await;
        assert_eq!(*disk.used.lock().unwrap(), 900, "warn mode frees nothing");
        assert_eq!(
            status.totals.sessions_evicted, 1,
            "but reports what it would"
        );
        assert!(!status.enforcing);
        assert_eq!(disk.calls.lock().unwrap().as_slice(), &[false]);
    }

    #[tokio::test]
    async fn the_status_answers_while_a_pass_runs() {
        struct Slow(std::sync::mpsc::Receiver<()>);
        impl DiskBudget for Mutex<Slow> {
            fn usage(&self) -> Result<DiskUsage, BudgetError> {
                // Held until the test lets go: a pass as long as a rewrite's copy.
                let _ = self.lock().unwrap().0.recv();
                Err(BudgetError::new("done"))
            }
            fn reclaim(&self, _: &DiskUsage, _: bool) -> Result<ReclaimReport, BudgetError> {
                unreachable!("usage failed first")
            }
        }
        let (release, held) = std::sync::mpsc::channel();
        let janitor = JanitorHandle::start(Arc::new(Mutex::new(Slow(held))), settings(true))
            .await
            .unwrap();
        // The first pass is running and blocked; the status answers anyway.
        let status = tokio::time::timeout(Duration::from_secs(30), janitor.status())
            .await
            .expect("the status waited for a running pass")
            .unwrap();
        assert_eq!(status.passes, 0);
        release.send(()).unwrap();
        status_when(&janitor, |s| s.passes == 1).await;
    }

    #[tokio::test]
    async fn a_signal_storm_is_coalesced() {
        let disk = Arc::new(FakeDisk::default());
        let janitor = JanitorHandle::start(Arc::clone(&disk), settings(true))
            .await
            .unwrap();
        wait_until(|| disk.calls.lock().unwrap().len() == 1).await;
        for _ in 0..10_000 {
            janitor.high_water();
        }
        let status = janitor.status().await.unwrap();
        assert!(
            status.passes <= 3,
            "10,000 signals gave {} passes",
            status.passes
        );
    }

    #[tokio::test]
    async fn failures_are_reported_and_the_janitor_keeps_going() {
        struct Broken;
        impl DiskBudget for Broken {
            fn usage(&self) -> Result<DiskUsage, BudgetError> {
                Err(BudgetError::new("disk on fire"))
            }
            fn reclaim(&self, _: &DiskUsage, _: bool) -> Result<ReclaimReport, BudgetError> {
                unreachable!("usage failed first")
            }
        }
        let janitor = JanitorHandle::start(Arc::new(Broken), settings(true))
            .await
            .unwrap();
        janitor.high_water();
        let status = status_when(&janitor, |s| s.last_error.is_some()).await;
        assert_eq!(status.last_error.as_deref(), Some("disk on fire"));
        let passes = status.passes;
        janitor.high_water();
        status_when(&janitor, |s| s.passes > passes).await;
    }
}
