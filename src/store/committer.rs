//! Groups concurrent turn commits into one transaction (see `turn_commit.rs` for why a
//! transaction per turn is costly with sled 0.34). Turns that finish while a commit runs wait
//! in a bounded queue and go into the next transaction together, and the committer yields a
//! few times before each commit so that turns finishing on its worker join it
//! ([`GATHER_YIELDS`]); under light load a turn is committed alone, at once. In `strict` mode a
//! turn hears of its commit once the flush covering it has settled.

use std::panic::AssertUnwindSafe;

use tokio::sync::{mpsc, oneshot};

use super::health::{FLUSH_TIMEOUT, RECOVERY_WAIT};
use super::{Committed, Store, TurnCommit, MAX_TURNS_PER_COMMIT};
use crate::error::StoreError;

/// Batches of at most this many turns are committed on the committer's own task; larger ones
/// on the blocking pool.
pub(crate) const INLINE_COMMIT_TURNS: usize = 2;

/// Times the committer yields to the other tasks of its worker before it commits what it
/// received, taking the turns that finished meanwhile into the same transaction. Every sled
/// transaction writes two log buffers of its own (`turn_commit.rs`), so fewer, larger
/// transactions save disk writes and thread wake-ups; a yield costs about a microsecond when
/// nothing else is runnable, so a lone turn is not held back. Measured with
/// `benches/loadtest/http_ab.sh` (BENCHMARKS.md): 2 yields took 8% off the CPU per turn at 16
/// connections, 6 another 3.5%, 16 nothing more; 6 against none, 11% at 16 and 6% at 64. Again
/// once a flush synced those buffers together (sled patch 6): 6 still answered most (3 and 1
/// yields: 1.6% and 4.7% fewer turns/s at 16 connections).
pub(crate) const GATHER_YIELDS: usize = 6;

/// Turns waiting for the committer; a lane finishing a turn waits for room when it is full.
pub(crate) const COMMIT_QUEUE: usize = 1_024;

/// The handle lanes commit through. Cheap to clone; the committer task ends when the last
/// handle is dropped. It holds no store between commits, so dropping the store still releases
/// the database.
#[derive(Clone)]
pub struct TurnCommitter {
    tx: mpsc::Sender<Job>,
}

struct Job {
    store: Store,
    turn: TurnCommit,
    done: oneshot::Sender<Result<Committed, Failed>>,
}

impl TurnCommitter {
    /// Starts the committer task (inside a tokio runtime).
    pub fn start() -> Self {
        let (tx, rx) = mpsc::channel(COMMIT_QUEUE);
        tokio::spawn(run(rx));
        Self { tx }
    }

    /// Commits `turn` into `store`, atomically, possibly together with other turns. While the
    /// store cannot write (a full disk), the turn waits for the recovery (at most
    /// [`RECOVERY_WAIT`]) instead of failing: a failed turn would be retried and abandoned, and
    /// its messages left unanswered until the lane restarts.
    pub async fn commit(&self, store: &Store, turn: TurnCommit) -> Result<Committed, StoreError> {
        if store.check_writable().is_err() {
            store.shared.health.wait_writable(RECOVERY_WAIT).await;
        }
        match self.commit_once(store, turn).await {
            Err(Failed {
                error,
                turn: Some(turn),
            }) if error.is_cannot_write() => {
                if store.shared.health.wait_writable(RECOVERY_WAIT).await {
                    self.commit_once(store, turn).await.map_err(|f| f.error)
                } else {
                    Err(error)
                }
            }
            other => other.map_err(|f| f.error),
        }
    }

    async fn commit_once(&self, store: &Store, turn: TurnCommit) -> Result<Committed, Failed> {
        let (done, result) = oneshot::channel();
        let job = Job {
            store: store.clone(),
            turn,
            done,
        };
        self.tx.send(job).await.map_err(|_| Failed {
            error: StoreError::Invariant("the turn committer has stopped"),
            turn: None,
        })?;
        result.await.map_err(|_| Failed {
            error: StoreError::Invariant("the turn committer dropped a commit"),
            turn: None,
        })?
    }
}

/// A commit that failed, with its turn handed back for a retry (none when the committer lost
/// it). Handing it back spares every turn a copy made in case its commit fails.
struct Failed {
    error: StoreError,
    turn: Option<TurnCommit>,
}

async fn run(mut rx: mpsc::Receiver<Job>) {
    let mut jobs = Vec::with_capacity(MAX_TURNS_PER_COMMIT);
    while rx.recv_many(&mut jobs, MAX_TURNS_PER_COMMIT).await > 0 {
        for _ in 0..GATHER_YIELDS {
            if jobs.len() >= MAX_TURNS_PER_COMMIT {
                break;
            }
            tokio::task::yield_now().await;
            while jobs.len() < MAX_TURNS_PER_COMMIT {
                match rx.try_recv() {
                    Ok(job) => jobs.push(job),
                    Err(_) => break,
                }
            }
        }
        let batch = std::mem::take(&mut jobs);
        if batch.len() <= INLINE_COMMIT_TURNS {
            // A short transaction: committing right here saves the hand-off to the blocking
            // pool, most of a lightly loaded turn's persist time. A panic must not end the
            // committer: its callers see their commit dropped and the lane retries the turn.
            match std::panic::catch_unwind(AssertUnwindSafe(|| commit_batch(batch))) {
                Ok(settled) => settle(settled).await,
                Err(_) => tracing::error!("a turn commit panicked"),
            }
            continue;
        }
        // A long one would stall this worker (and the tasks behind it) for its whole length.
        match tokio::task::spawn_blocking(move || commit_batch(batch)).await {
            Ok(settled) => settle(settled).await,
            // The jobs' senders were dropped with the task, so their callers see an error.
            Err(e) => tracing::error!(error = %e, "a turn commit panicked"),
        }
    }
}

/// A committed batch: the answers for its turns and what to wait on before sending them.
struct Settled {
    /// The store and the group-commit ticket of the last transaction, if any committed.
    flush: Option<(Store, u64)>,
    answers: Vec<(oneshot::Sender<Result<Committed, Failed>>, Committed)>,
}

/// Answers the batch's turns once its flush has settled. Every turn waits for that flush
/// before it publishes anyway; answering after it wakes each turn once instead of twice (once
/// for the commit, once for the flush). A turn still checks its own ticket, which is then
/// settled, and so still gets a failed flush as its error.
async fn settle(settled: Settled) {
    if let Some((store, ticket)) = &settled.flush {
        wait_flushed(store, *ticket).await;
    }
    for (waiter, committed) in settled.answers {
        let _ = waiter.send(Ok(committed));
    }
}

/// Waits until the batch's commit is durable before the next batch starts (strict mode; at
/// once in batched mode): every turn of a batch waits for that flush anyway, and the turns that
/// finish meanwhile go into the next transaction together. Otherwise each small transaction
/// wrote its own log buffer out and a flush wrote another one, about 1.4 disk writes per turn.
/// A failed flush is not the committer's to report, nor to wait out: each turn's own wait on
/// its ticket gets it.
///
/// The group commit is looked up after the commit, never before: a rewrite may swap the
/// database generation in between, and a retired generation's flusher never reaches a ticket
/// of its successor (the successor counts every ticket of its predecessor as flushed).
/// Bounded by [`FLUSH_TIMEOUT`] all the same: the committer must never wait for ever.
async fn wait_flushed(store: &Store, ticket: u64) {
    let commit = store.commit();
    if tokio::time::timeout(FLUSH_TIMEOUT, commit.wait_settled(ticket))
        .await
        .is_err()
    {
        tracing::warn!("a turn commit's flush did not settle in time; committing on");
    }
}

/// Commits `batch` in one transaction, into the store of its first job (a committer serves
/// one runtime, hence one store). If that fails, each turn is committed alone into its own
/// job's store, so one bad turn gets its own error and the others are stored. A failed turn is
/// answered at once; the committed ones wait in the returned [`Settled`] for the flush.
fn commit_batch(batch: Vec<Job>) -> Settled {
    let mut settled = Settled {
        flush: None,
        answers: Vec::with_capacity(batch.len()),
    };
    let Some(store) = batch.first().map(|j| j.store.clone()) else {
        return settled;
    };
    let (turns, waiters): (Vec<TurnCommit>, Vec<_>) = batch
        .into_iter()
        .map(|j| (j.turn, (j.store, j.done)))
        .unzip();
    match store.commit_turns(&turns) {
        Ok(done) => {
            settled.flush = done.first().map(|c| (store, c.ticket));
            for ((_, waiter), committed) in waiters.into_iter().zip(done) {
                settled.answers.push((waiter, committed));
            }
        }
        Err(e) if turns.len() == 1 => {
            if let Some((turn, (_, waiter))) = turns.into_iter().zip(waiters).next() {
                let _ = waiter.send(Err(Failed {
                    error: e,
                    turn: Some(turn),
                }));
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, turns = turns.len(), "a grouped commit failed; committing its turns one by one");
            for (turn, (store, waiter)) in turns.into_iter().zip(waiters) {
                match store.commit_turn(&turn) {
                    Ok(committed) => {
                        settled.flush = Some((store, committed.ticket));
                        settled.answers.push((waiter, committed));
                    }
                    Err(error) => {
                        let _ = waiter.send(Err(Failed {
                            error,
                            turn: Some(turn),
                        }));
                    }
                }
            }
        }
    }
    settled
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::commit_tests::{config, turn};

    /// Real time: the store's recovery probe runs on it (tokio's `test-util` is not enabled
    /// in this crate); the committer's wait for it is bounded by [`RECOVERY_WAIT`].
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_the_store_cannot_write_gets_its_turn_back_and_is_retried() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&config(dir.path())).unwrap();
        // As a full disk does: a write fails with an I/O error.
        let failed = store.write_failed(StoreError::Flush("No space left on device".into()));
        assert!(failed.is_cannot_write(), "{failed}");
        let (done, answer) = oneshot::channel();
        let settled = commit_batch(vec![Job {
            store: store.clone(),
            turn: turn("s", "kept", vec![]),
            done,
        }]);
        assert!(settled.answers.is_empty() && settled.flush.is_none());
        let Err(failed) = answer.await.unwrap() else {
            panic!("a store that cannot write committed a turn");
        };
        assert!(failed.error.is_cannot_write(), "{}", failed.error);
        let back = failed.turn.expect("the failed turn is handed back");
        assert_eq!(&*back.entries[0].text, "kept");
        let committed = TurnCommitter::start().commit(&store, back).await.unwrap();
        assert_eq!(committed.seqs, [1, 2]);
        store.close().await.unwrap();
    }
}
