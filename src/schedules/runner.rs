//! The scheduler task: one per runtime, started after the inbox replay. It sleeps until the
//! earliest due time (or until the API adds or removes a job, or the runtime stops), records
//! each due run with the job's next due time in one transaction, waits until that is durable,
//! and only then runs the turn, on a task of its own, recording its outcome when it ends.
//! A run still going when the process died is found `running` at start and run again: its
//! message id makes that join the first attempt's turn rather than ask twice.
//!
//! In a cluster only the jobs whose session's partition this node owns are looked at
//! ([`RunTurns::owns`]); the others' records are kept up to date by the changelog's follower.
//! A job is *taken up* when it is first seen owned (at start on a single node, on gaining
//! its partition in a cluster): its unfinished run is resumed, and a due time before that
//! moment was missed (nobody ran it), so its `missed` policy applies. Every run's start and
//! end is recorded in the changelog ([`RunTurns::record`]) before it is written here; a
//! refused record (another node owns the partition now) runs nothing.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

use super::plan::{step, Cadence, Step};
use super::{started, RunChange, RunTurns, Schedules};
use crate::clock::now_ms;
use crate::config::{Missed, ScheduleConfig};
use crate::store::{JobOrigin, JobRecord, RunOutcome, RunRecord, MAX_RUNS_KEPT};

/// Longest sleep between looks at the jobs: a wall clock set forward is noticed within it.
const MAX_SLEEP: Duration = Duration::from_secs(60);
/// Wait after a store error before looking again.
const RETRY_AFTER: Duration = Duration::from_secs(5);
/// How often a missed due time (`run_once`) waiting for its job's run still going looks
/// again: it runs once that run ends (typically one just resumed, whose answer is often
/// stored already) rather than being skipped as overlapping it.
const MISSED_WAIT: Duration = Duration::from_secs(1);
/// Longest sleep between looks on a cluster node: how late a job is taken up after its
/// partition is gained (ownership changes wake nothing here).
const CLUSTER_LOOK_EVERY: Duration = Duration::from_secs(1);

/// Jobs with a run in progress: a job never runs twice at once (a run due meanwhile is
/// recorded as skipped). At most one entry per job.
type InFlight = Arc<Mutex<HashSet<String>>>;

/// The jobs this node runs now, each with when it took it up (ms): a due time before that
/// was missed. At most one entry per stored job ([`crate::config::MAX_SCHEDULES`]).
type TakenUp = HashMap<String, u64>;

/// Runs the scheduler until `stopping` turns true.
pub(crate) async fn run_scheduler(
    schedules: Arc<Schedules>,
    turns: Arc<dyn RunTurns>,
    mut stopping: watch::Receiver<bool>,
) {
    if let Err(error) = schedules.sync_config().await {
        tracing::error!(%error, "could not store the [[schedules]] of the config; scheduled turns are off");
        return;
    }
    let started_ms = now_ms();
    let in_flight: InFlight = Arc::default();
    let mut taken_up = TakenUp::new();
    let max_sleep = if schedules.clustered() {
        CLUSTER_LOOK_EVERY
    } else {
        MAX_SLEEP
    };
    loop {
        let look = fire_due(&schedules, &turns, &in_flight, &mut taken_up, started_ms);
        let wait = match look.await {
            Ok(Some(next_due)) => Duration::from_millis(next_due.saturating_sub(now_ms())),
            Ok(None) => MAX_SLEEP,
            Err(error) => {
                tracing::warn!(%error, "scheduler: could not read or record the jobs; trying again");
                RETRY_AFTER
            }
        };
        tokio::select! {
            () = tokio::time::sleep(wait.min(max_sleep)) => {}
            () = schedules.changed() => {}
            _ = stopping.changed() => return,
        }
        if *stopping.borrow() {
            return;
        }
    }
}

/// Starts again `job`'s newest run recorded as `running` (the previous process, or the
/// partition's previous owner, stopped before its outcome), unless it runs here already.
fn resume_unfinished(
    schedules: &Arc<Schedules>,
    turns: &Arc<dyn RunTurns>,
    in_flight: &InFlight,
    job: &JobRecord,
) {
    let id = &job.spec.id;
    if in_flight
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .contains(id)
    {
        return;
    }
    let runs = match schedules.store().schedule_runs(id, MAX_RUNS_KEPT) {
        Ok(runs) => runs,
        Err(error) => {
            tracing::warn!(schedule = %id, %error, "scheduler: could not read a job's runs to resume them");
            return;
        }
    };
    // The newest unfinished run (older ones, if any, were superseded by it).
    if let Some(run) = runs.into_iter().find(|r| r.outcome == RunOutcome::Running) {
        tracing::info!(schedule = %id, due_ms = run.due_ms, "resuming a run left unfinished");
        spawn_run(schedules, turns, in_flight, job.spec.clone(), run);
    }
}

/// Records and starts every job due now that this node runs; returns the earliest due time
/// still ahead.
async fn fire_due(
    schedules: &Arc<Schedules>,
    turns: &Arc<dyn RunTurns>,
    in_flight: &InFlight,
    taken_up: &mut TakenUp,
    started_ms: u64,
) -> Result<Option<u64>, crate::error::StoreError> {
    let store = schedules.store();
    let now = now_ms();
    let mut earliest: Option<u64> = None;
    let jobs = store.schedules()?;
    let ids: HashSet<&str> = jobs.iter().map(|j| j.spec.id.as_str()).collect();
    taken_up.retain(|id, _| ids.contains(id.as_str()));
    for job in jobs {
        let key = schedules.session_of(&job.spec);
        // A job the API stored before this node joined a cluster is known to this node only.
        let api_in_cluster = schedules.clustered() && job.origin == JobOrigin::Api;
        if api_in_cluster || !turns.owns(&key) {
            taken_up.remove(&job.spec.id);
            continue;
        }
        let since = match taken_up.get(&job.spec.id) {
            Some(since) => *since,
            None => {
                resume_unfinished(schedules, turns, in_flight, &job);
                // On a single node everything is taken up at start; due times before it
                // were missed while the server was down.
                let since = if schedules.clustered() {
                    now
                } else {
                    started_ms
                };
                taken_up.insert(job.spec.id.clone(), since);
                since
            }
        };
        let Some(due) = job.next_due_ms else { continue };
        let Ok(cadence) = Cadence::of(&job.spec, schedules.anchor(job.created_at_ms)) else {
            continue;
        };
        if due > now {
            earliest = Some(earliest.map_or(due, |e| e.min(due)));
            continue;
        }
        let busy = in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&job.spec.id);
        if busy && due < since && job.spec.missed == Missed::RunOnce {
            let again = now.saturating_add(MISSED_WAIT.as_millis() as u64);
            earliest = Some(earliest.map_or(again, |e| e.min(again)));
            continue;
        }
        let (record, next_due) = match step(&cadence, job.spec.missed, due, now, since) {
            Step::Run {
                due_ms,
                next_due_ms,
            } if !busy => (started(due_ms, now, RunOutcome::Running), next_due_ms),
            Step::Run {
                due_ms,
                next_due_ms,
            }
            | Step::Skip {
                due_ms,
                next_due_ms,
            } => (started(due_ms, now, RunOutcome::Skipped), next_due_ms),
        };
        let change = RunChange::Started {
            job_id: job.spec.id.clone(),
            run: record.clone(),
            next_due_ms: next_due,
        };
        // The fence: in a cluster, only the partition's owner gets its record into the
        // changelog, and the next owner reads it there before it runs anything.
        if let Err(error) = turns.record(&key, &change).await {
            tracing::warn!(schedule = %job.spec.id, due_ms = due, %error, "a run was not recorded in the changelog; not run here");
            continue;
        }
        let Some(ticket) = change.apply(store)? else {
            continue;
        };
        crate::metrics::schedule_run(&job.spec.id, record.outcome == RunOutcome::Running);
        if let Some(next) = next_due {
            earliest = Some(earliest.map_or(next, |e| e.min(next)));
        }
        // Durable before the turn: a crash after it finds the run and resumes it.
        store.commit().wait(ticket).await?;
        if record.outcome == RunOutcome::Running {
            spawn_run(schedules, turns, in_flight, job.spec, record);
        } else {
            tracing::info!(schedule = %job.spec.id, due_ms = due, busy, "scheduled run skipped");
        }
    }
    Ok(earliest)
}

/// Runs `run` of `spec` on a task of its own and records its outcome.
fn spawn_run(
    schedules: &Arc<Schedules>,
    turns: &Arc<dyn RunTurns>,
    in_flight: &InFlight,
    spec: ScheduleConfig,
    run: RunRecord,
) {
    let id = spec.id.clone();
    in_flight
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(id.clone());
    let (schedules, turns, in_flight) = (
        Arc::clone(schedules),
        Arc::clone(turns),
        Arc::clone(in_flight),
    );
    tokio::spawn(async move {
        let outcome = turns.run(spec.clone(), run.due_ms).await;
        in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        // No outcome: the runtime is stopping; the run stays `running` and resumes at start.
        let Some(outcome) = outcome else { return };
        let done = RunRecord {
            finished_at_ms: Some(now_ms()),
            outcome,
            ..run
        };
        let key = schedules.session_of(&spec);
        let change = RunChange::Ended {
            job_id: id.clone(),
            run: done,
        };
        // Refused (fenced): the partition's new owner resumes the run and records its end.
        if let Err(error) = turns.record(&key, &change).await {
            tracing::warn!(schedule = %id, %error, "a run's outcome was not recorded in the changelog");
        }
        let store = schedules.store();
        match change.apply(store) {
            Ok(Some(ticket)) => {
                if let Err(error) = store.commit().wait(ticket).await {
                    tracing::warn!(schedule = %id, %error, "a run's outcome may not be durable");
                }
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(schedule = %id, %error, "could not record a run's outcome")
            }
        }
    });
}
