//! Group commit: one flush makes every write that finished before it durable.
//!
//! A writer takes a ticket after its write and waits until the flushed ticket reaches it. The
//! flusher loop wakes on demand, reads the newest ticket *before* flushing (every write with a
//! ticket up to it has completed, so the flush covers it), flushes on a blocking thread, and
//! publishes the ticket. Many concurrent acks thus share one fsync.
//!
//! In `strict` mode the flusher flushes only for a ticket somebody waits on
//! ([`GroupCommit::wait`] *demands* it). A write nobody waits on yet rides along with the next
//! demanded flush (or sled's own periodic one): `POST /v1/chat/completions` answers nothing
//! before the reply, whose commit flush covers the inbox write too, so a turn costs one flush
//! instead of two ([`GroupCommit::wait_passive`]).
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

use super::health::{Health, FLUSH_TIMEOUT, RECOVERY_WAIT};
use super::ledger::Ledger;
use crate::config::Durability;
use crate::error::StoreError;

/// How long the flusher pauses after a failed flush before trying again.
const FAILED_FLUSH_PAUSE: Duration = Duration::from_millis(50);

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
    /// Taken out when the generation retires ([`GroupCommit::stop`]): a waiter still holding
    /// this coordinator after a rewrite must not hold the old database, or the last handle
    /// may drop on an async worker. sled flushes a database as its last handle drops, under
    /// its process-wide concurrency lock, and that flush beside a running transaction hung
    /// the server; the rewrite drops the old generation itself, on its blocking thread.
    db: std::sync::Mutex<Option<sled::Db>>,
    /// The flusher task, awaited on close so the database is released when the store drops.
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    mode: Durability,
    written: AtomicU64,
    /// The newest ticket a waiter asked to be flushed (strict mode flushes only up to demand).
    demanded: AtomicU64,
    flushed: watch::Sender<Flushed>,
    wake: Notify,
    stop: Notify,
    /// Tickets up to this one were handed out by an earlier generation; of those, only the
    /// ones up to `inherited_durable` are durable (a recovery from disk lost the rest).
    first_ticket: u64,
    inherited_durable: u64,
    /// Set by [`GroupCommit::stop`]: a retired generation's flusher ends, and its failures no
    /// longer speak for the store.
    retired: std::sync::atomic::AtomicBool,
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
        Self::start_for_store(db, mode, period, (first_ticket, first_ticket), None, None)
    }

    /// Like [`GroupCommit::start_at`], stamping `ledger` around flushes and reporting
    /// failures to `health`. `tickets` is (first ticket, the newest inherited ticket that is
    /// durable).
    pub(super) fn start_for_store(
        db: sled::Db,
        mode: Durability,
        period: Duration,
        tickets: (u64, u64),
        ledger: Option<Arc<Ledger>>,
        health: Option<Arc<Health>>,
    ) -> Self {
        let (first_ticket, inherited_durable) = tickets;
        let (flushed, _) = watch::channel(Flushed {
            upto: first_ticket,
            failed: None,
        });
        let inner = Arc::new(Inner {
            db: std::sync::Mutex::new(Some(db)),
            task: std::sync::Mutex::new(None),
            mode,
            written: AtomicU64::new(first_ticket),
            demanded: AtomicU64::new(first_ticket),
            flushed,
            wake: Notify::new(),
            stop: Notify::new(),
            first_ticket,
            inherited_durable,
            retired: std::sync::atomic::AtomicBool::new(false),
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

    /// Waits until the write behind `ticket` is durable (at once in `batched` mode), asking
    /// the flusher for a flush that covers it.
    pub async fn wait(&self, ticket: u64) -> Result<(), StoreError> {
        self.wait_for_ticket(ticket, true).await
    }

    /// Waits until the write behind `ticket` is durable without asking for a flush: it ends
    /// when a flush somebody else asked for covers it (or fails for it). For a write whose
    /// durability is only needed together with a later write that will be waited on.
    pub async fn wait_passive(&self, ticket: u64) -> Result<(), StoreError> {
        self.wait_for_ticket(ticket, false).await
    }

    /// Asks for a flush covering `ticket` and waits until one succeeded or failed for it,
    /// without the bounded wait for a recovery that [`GroupCommit::wait`] adds after a
    /// failure: for the turn committer, which must not stall every later commit on a full disk
    /// (each turn's own wait still reports the outcome).
    pub(super) async fn wait_settled(&self, ticket: u64) {
        if self.inner.mode == Durability::Batched || ticket <= self.inner.first_ticket {
            return;
        }
        if self.inner.flushed.borrow().upto >= ticket {
            return;
        }
        let mut rx = self.inner.flushed.subscribe();
        self.inner.demanded.fetch_max(ticket, Ordering::AcqRel);
        self.inner.wake.notify_one();
        let _ = rx
            .wait_for(|f| f.upto >= ticket || f.failed.as_ref().is_some_and(|(t, _)| *t >= ticket))
            .await;
    }

    async fn wait_for_ticket(&self, ticket: u64, demand: bool) -> Result<(), StoreError> {
        if self.inner.mode == Durability::Batched {
            return Ok(());
        }
        if ticket <= self.inner.first_ticket && ticket > self.inner.inherited_durable {
            return Err(StoreError::CannotWrite {
                reason: "the write was not flushed before the disk filled".into(),
            });
        }
        if self.inner.flushed.borrow().upto >= ticket {
            return Ok(());
        }
        let mut rx = self.inner.flushed.subscribe();
        if demand {
            self.inner.demanded.fetch_max(ticket, Ordering::AcqRel);
            self.inner.wake.notify_one();
        }
        let (durable, reason) = {
            let state = rx
                .wait_for(|f| {
                    f.upto >= ticket || f.failed.as_ref().is_some_and(|(t, _)| *t >= ticket)
                })
                .await
                .map_err(|_| StoreError::Flush("flusher stopped".into()))?;
            let reason = state.failed.as_ref().map(|(_, e)| e.to_string());
            (state.upto >= ticket, reason.unwrap_or_default())
        };
        if durable {
            return Ok(());
        }
        // A rewrite running into the failure may still make it durable (`all_durable`): wait
        // a bounded time before refusing.
        if self.inner.health.is_some() && self.durable_within(&mut rx, ticket).await {
            return Ok(());
        }
        Err(StoreError::CannotWrite {
            reason: super::health::describe_failure(&reason),
        })
    }

    async fn durable_within(&self, rx: &mut watch::Receiver<Flushed>, ticket: u64) -> bool {
        let recovered = async { rx.wait_for(|f| f.upto >= ticket).await.is_ok() };
        tokio::time::timeout(RECOVERY_WAIT, recovered)
            .await
            .unwrap_or(false)
    }

    /// Every ticket up to this one is durable.
    pub(super) fn flushed_upto(&self) -> u64 {
        self.inner.flushed.borrow().upto
    }

    /// The newest ticket handed out.
    pub fn written(&self) -> u64 {
        self.inner.written.load(Ordering::Acquire)
    }

    /// Every ticket handed out is durable: a rewrite copied and flushed their writes into the
    /// generation that replaces this one.
    pub(super) fn all_durable(&self) {
        let written = self.inner.written.load(Ordering::Acquire);
        self.inner
            .flushed
            .send_modify(|f| f.upto = f.upto.max(written));
    }

    /// Asks the flusher to stop without waiting (see [`GroupCommit::is_stopped`]) and lets go
    /// of the database: a retired generation is flushed no more.
    pub(super) fn stop(&self) {
        self.inner.retired.store(true, Ordering::Release);
        self.inner.stop.notify_one();
        if let Ok(mut db) = self.inner.db.lock() {
            db.take();
        }
    }

    /// The database, unless the generation retired.
    fn db(&self) -> Result<sled::Db, StoreError> {
        self.inner
            .db
            .lock()
            .ok()
            .and_then(|db| db.clone())
            .ok_or_else(|| StoreError::Flush("the database generation was retired".into()))
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
        // The flag, not only the notification: a flusher retrying a failed flush never waits
        // on the notification.
        self.inner.retired.store(true, Ordering::Release);
        self.inner.stop.notify_one();
        let task = self.inner.task.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = task {
            let _ = task.await;
        }
        self.flush_now().await?;
        if let Some(ledger) = &self.inner.ledger {
            // The last mark stamped is durable now; write it whether or not it is due.
            let (ledger, db) = (Arc::clone(ledger), self.db()?);
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
            if !self.inner.retired.load(Ordering::Acquire) {
                health.write_failed(&e.to_string());
            }
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
        let db = self.db()?;
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
            if self.inner.retired.load(Ordering::Acquire) {
                return;
            }
            let flushed_upto = self.inner.flushed.borrow().upto;
            let pending = match self.inner.mode {
                Durability::Strict => self.inner.demanded.load(Ordering::Acquire) > flushed_upto,
                Durability::Batched => self.inner.written.load(Ordering::Acquire) > flushed_upto,
            };
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
                // A store that cannot write said so once (`health.rs`); no line per attempt.
                if !e.is_cannot_write() {
                    tracing::error!(error = %e, "sled flush failed; writes waiting on it are not acknowledged");
                }
                tokio::time::sleep(FAILED_FLUSH_PAUSE).await;
            }
        }
    }
}
