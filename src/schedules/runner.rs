//! The scheduler task: one per runtime, started after the inbox replay. It sleeps until the
//! earliest due time (or until the API adds or removes a job, or the runtime stops), records
//! each due run with the job's next due time in one transaction, waits until that is durable,
//! and only then runs the turn, on a task of its own, recording its outcome when it ends.
//! A run still going when the process died is found `running` at start and run again: its
//! message id makes that join the first attempt's turn rather than ask twice.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

use super::plan::{step, Cadence, Step};
use super::{started, RunTurns, Schedules};
use crate::clock::now_ms;
use crate::config::ScheduleConfig;
use crate::store::{RunOutcome, RunRecord, MAX_RUNS_KEPT};

/// Longest sleep between looks at the jobs: a wall clock set forward is noticed within it.
const MAX_SLEEP: Duration = Duration::from_secs(60);
/// Wait after a store error before looking again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Jobs with a run in progress: a job never runs twice at once (a run due meanwhile is
/// recorded as skipped). At most one entry per job.
type InFlight = Arc<Mutex<HashSet<String>>>;

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
    resume_unfinished(&schedules, &turns, &in_flight);
    loop {
        let wait = match fire_due(&schedules, &turns, &in_flight, started_ms).await {
            Ok(Some(next_due)) => Duration::from_millis(next_due.saturating_sub(now_ms())),
            Ok(None) => MAX_SLEEP,
            Err(error) => {
                tracing::warn!(%error, "scheduler: could not read or record the jobs; trying again");
                RETRY_AFTER
            }
        };
        tokio::select! {
            () = tokio::time::sleep(wait.min(MAX_SLEEP)) => {}
            () = schedules.changed() => {}
            _ = stopping.changed() => return,
        }
        if *stopping.borrow() {
            return;
        }
    }
}

/// Starts again every run recorded as `running` (the previous process stopped before its
/// outcome).
fn resume_unfinished(schedules: &Arc<Schedules>, turns: &Arc<dyn RunTurns>, in_flight: &InFlight) {
    let store = schedules.store();
    let jobs = match store.schedules() {
        Ok(jobs) => jobs,
        Err(error) => {
            tracing::warn!(%error, "scheduler: could not read the jobs to resume their runs");
            return;
        }
    };
    for job in jobs {
        let runs = store
            .schedule_runs(&job.spec.id, MAX_RUNS_KEPT)
            .unwrap_or_default();
        // The newest unfinished run (older ones, if any, were superseded by it).
        if let Some(run) = runs.into_iter().find(|r| r.outcome == RunOutcome::Running) {
            tracing::info!(schedule = %job.spec.id, due_ms = run.due_ms, "resuming a run the last process left unfinished");
            spawn_run(schedules, turns, in_flight, job.spec, run);
        }
    }
}

/// Records and starts every job due now; returns the earliest due time still ahead.
async fn fire_due(
    schedules: &Arc<Schedules>,
    turns: &Arc<dyn RunTurns>,
    in_flight: &InFlight,
    started_ms: u64,
) -> Result<Option<u64>, crate::error::StoreError> {
    let store = schedules.store();
    let now = now_ms();
    let mut earliest: Option<u64> = None;
    for job in store.schedules()? {
        let Some(due) = job.next_due_ms else { continue };
        let Ok(cadence) = Cadence::of(&job.spec, job.created_at_ms) else {
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
        let (record, next_due) = match step(&cadence, job.spec.missed, due, now, started_ms) {
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
        let Some(ticket) = store.record_schedule_run(&job.spec.id, &record, next_due)? else {
            continue;
        };
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
        let outcome = turns.run(spec, run.due_ms).await;
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
        let store = schedules.store();
        match store.update_schedule_run(&id, &done) {
            Ok(ticket) => {
                if let Err(error) = store.commit().wait(ticket).await {
                    tracing::warn!(schedule = %id, %error, "a run's outcome may not be durable");
                }
            }
            Err(error) => {
                tracing::warn!(schedule = %id, %error, "could not record a run's outcome")
            }
        }
    });
}
