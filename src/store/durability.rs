//! Group commit: one flush makes every write that finished before it durable.
//!
//! A writer takes a ticket after its write and waits until the flushed ticket reaches it. The
//! flusher loop wakes on demand, reads the newest ticket *before* flushing (every write with a
//! ticket up to it has completed, so the flush covers it), flushes on a blocking thread, and
//! publishes the ticket. Many concurrent acks thus share one fsync.
//!
//! The store's group commit also stamps the ledger's mark before each flush and writes the
//! ledger file after it (`ledger.rs`), and reports a failed or hung flush to the store's
//! health (`health.rs`): a flush runs on the blocking pool under [`FLUSH_TIMEOUT`], and while
//! the store cannot write, waiters get [`StoreError::CannotWrite`] at once instead of a flush
//! that may never end.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};

use super::health::{Health, FLUSH_TIMEOUT};
use super::ledger::Ledger;
use crate::config::Durability;
use crate::error::StoreError;

/// Progress of the flusher, published to waiters.
#[derive(Debug, Clone, Default)]
struct Flushed {
    /// Every ticket up to this one is on disk.
    upto: u64,
    /// The newest failed flush: tickets up to `.0` that are not yet flushed get the error.
    failed: Option<(u64, Arc<str>)>,
}

/// The group-commit coordinator of one sled database.
#[derive(Clone)]
pub struct GroupCommit {
    inner: Arc<Inner>,
}

struct Inner {
    db: sled::Db,
    /// The flusher task, awaited on close so the database is released when the store drops.
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    mode: Durability,
    written: AtomicU64,
    flushed: watch::Sender<Flushed>,
    wake: Notify,
    stop: Notify,
    /// The store's ledger and health (absent for a bare group commit).
    ledger: Option<Arc<Ledger>>,
    health: Option<Arc<Health>>,
}

impl GroupCommit {
    /// Starts the flusher task for `db`. In `batched` mode it flushes every `period`; in
    /// `strict` mode whenever a writer waits.
    pub fn start(db: sled::Db, mode: Durability, period: Duration) -> Self {
        Self::start_at(db, mode, period, 0)
    }

    /// Like [`GroupCommit::start`], with tickets continuing after `first_ticket`, which counts
    /// as flushed: a database generation that replaces a fully flushed one continues its
    /// ticket numbers, so a ticket taken before the swap is satisfied by either.
    pub fn start_at(db: sled::Db, mode: Durability, period: Duration, first_ticket: u64) -> Self {
        Self::start_for_store(db, mode, period, first_ticket, None, None)
    }

    /// Like [`GroupCommit::start_at`], stamping `ledger` around flushes and reporting
    /// failures to `health`.
    pub(super) fn start_for_store(
        db: sled::Db,
        mode: Durability,
        period: Duration,
        first_ticket: u64,
        ledger: Option<Arc<Ledger>>,
        health: Option<Arc<Health>>,
    ) -> Self {
        let (flushed, _) = watch::channel(Flushed {
            upto: first_ticket,
            failed: None,
        });
        let inner = Arc::new(Inner {
            db,
            task: std::sync::Mutex::new(None),
            mode,
            written: AtomicU64::new(first_ticket),
            flushed,
            wake: Notify::new(),
            stop: Notify::new(),
            ledger,
            health,
        });
        let me = Self { inner };
        let flusher = me.clone();
        let task = tokio::spawn(async move { flusher.run(period).await });
        if let Ok(mut slot) = me.inner.task.lock() {
            *slot = Some(task);
        }
        me
    }

    /// Call after a write: the ticket to wait on.
    pub fn ticket(&self) -> u64 {
        self.inner.written.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Waits until the write behind `ticket` is durable (at once in `batched` mode).
    pub async fn wait(&self, ticket: u64) -> Result<(), StoreError> {
        if self.inner.mode == Durability::Batched {
            return Ok(());
        }
        let mut rx = self.inner.flushed.subscribe();
        self.inner.wake.notify_one();
        let state = rx
            .wait_for(|f| f.upto >= ticket || f.failed.as_ref().is_some_and(|(t, _)| *t >= ticket))
            .await
            .map_err(|_| StoreError::Flush("flusher stopped".into()))?;
        if state.upto >= ticket {
            return Ok(());
        }
        let reason = state
            .failed
            .as_ref()
            .map(|(_, e)| e.to_string())
            .unwrap_or_default();
        Err(StoreError::CannotWrite {
            reason: super::health::describe_failure(&reason),
        })
    }

    /// The newest ticket handed out.
    pub fn written(&self) -> u64 {
        self.inner.written.load(Ordering::Acquire)
    }

    /// Asks the flusher to stop without waiting (see [`GroupCommit::is_stopped`]).
    pub(super) fn stop(&self) {
        self.inner.stop.notify_one();
    }

    /// True once the flusher task has ended (or was never started).
    pub(super) fn is_stopped(&self) -> bool {
        self.inner
            .task
            .lock()
            .map(|t| t.as_ref().is_none_or(|t| t.is_finished()))
            .unwrap_or(true)
    }

    /// Flushes everything now and stops the flusher; the ledger records the final flush.
    pub async fn close(&self) -> Result<(), StoreError> {
        self.inner.stop.notify_one();
        let task = self.inner.task.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = task {
            let _ = task.await;
        }
        self.flush_now().await?;
        if let Some(ledger) = &self.inner.ledger {
            // The last mark stamped is durable now; write it whether or not it is due.
            let (ledger, db) = (Arc::clone(ledger), self.inner.db.clone());
            let _ = tokio::task::spawn_blocking(move || {
                let mark = ledger.stamp(&db)?;
                db.flush().map_err(|e| StoreError::Flush(e.to_string()))?;
                ledger.write_now(mark);
                Ok::<(), StoreError>(())
            })
            .await;
        }
        Ok(())
    }

    async fn flush_now(&self) -> Result<(), StoreError> {
        let target = self.inner.written.load(Ordering::Acquire);
        let result = match self.inner.health.as_ref().map(|h| h.check_writable()) {
            // While the store cannot write, nothing is flushed (sled would fail or hang) and
            // nothing waiting is acknowledged.
            Some(Err(e)) => Err(e),
            _ => self.flush_on_blocking_pool().await,
        };
        if let (Err(e), Some(health)) = (&result, &self.inner.health) {
            health.write_failed(&e.to_string());
        }
        self.inner.flushed.send_modify(|f| match &result {
            Ok(_) => f.upto = f.upto.max(target),
            Err(e) => f.failed = Some((target, e.to_string().into())),
        });
        let mark = result?;
        if let (Some(mark), Some(ledger)) = (mark, &self.inner.ledger) {
            if ledger.due() {
                let ledger = Arc::clone(ledger);
                tokio::task::spawn_blocking(move || ledger.write(mark));
            }
        }
        Ok(())
    }

    /// Stamps the ledger (if any) and flushes, on the blocking pool, giving up after
    /// [`FLUSH_TIMEOUT`] (the blocking thread may stay stuck in sled; no worker waits on it).
    async fn flush_on_blocking_pool(&self) -> Result<Option<super::ledger::Mark>, StoreError> {
        let db = self.inner.db.clone();
        let ledger = self.inner.ledger.clone();
        let flush = tokio::task::spawn_blocking(move || {
            let mark = ledger.map(|l| l.stamp(&db)).transpose()?;
            db.flush().map_err(|e| StoreError::Flush(e.to_string()))?;
            Ok(mark)
        });
        match tokio::time::timeout(FLUSH_TIMEOUT, flush).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(StoreError::Flush(join.to_string())),
            Err(_) => Err(StoreError::Flush(format!(
                "the flush did not finish within {} s",
                FLUSH_TIMEOUT.as_secs()
            ))),
        }
    }

    async fn run(self, period: Duration) {
        loop {
            let flushed_upto = self.inner.flushed.borrow().upto;
            let pending = self.inner.written.load(Ordering::Acquire) > flushed_upto;
            match self.inner.mode {
                Durability::Strict if !pending => {
                    tokio::select! {
                        _ = self.inner.wake.notified() => {}
                        _ = self.inner.stop.notified() => return,
                    }
                    continue;
                }
                Durability::Strict => {}
                Durability::Batched => {
                    tokio::select! {
                        _ = tokio::time::sleep(period) => {}
                        _ = self.inner.stop.notified() => return,
                    }
                    if !pending && self.inner.written.load(Ordering::Acquire) <= flushed_upto {
                        continue;
                    }
                }
            }
            if let Err(e) = self.flush_now().await {
                tracing::error!(error = %e, "sled flush failed; writes waiting on it are not acknowledged");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
