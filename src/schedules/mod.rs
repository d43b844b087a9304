//! Scheduled turns: `[[schedules]]` and `/v1/schedules` jobs that ask an agent something on a
//! cron expression or an interval, in a session of their own or a named one.
//!
//! - `cron.rs` — five-field cron expressions in a time zone; `plan.rs` — due times and the
//!   `missed` policy, as plain functions.
//! - `runner.rs` — the scheduler task: sleeps until the next due time, records each run and
//!   the job's next due time in one transaction (`store/schedules.rs`), then runs it through
//!   [`RunTurns`] (the runtime: `runtime/schedules.rs`) and records its real outcome.
//! - Here: [`Schedules`], the handle the API and the runtime use (list, create, delete).
//!
//! In a cluster (`docs/schedules.md`): every node runs the scheduler, and a job fires only on
//! the node owning its session's partition ([`RunTurns::owns`]); each run's start and end go
//! to the partition's changelog first ([`RunTurns::record`], fenced by the owner's tenure), so
//! the partition's replicas keep the same runs and next due times and a new owner goes on
//! where the old one stopped. Intervals count from the epoch there, so every node computes
//! the same due times.
//!
//! Exactly once: a run's message id is `schedule:<job>:<due>` (`heartbeat:` for heartbeats),
//! submitted as a platform id would be, so the inbox's durable dedupe refuses it a second time;
//! a run found unfinished at start is submitted again and joins its turn (or reads its stored
//! answer). A heartbeat's reply of [`HEARTBEAT_OK`] is kept in the transcript and not
//! delivered ([`is_quiet_heartbeat`]).

mod cron;
mod plan;
mod runner;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

pub(crate) use self::cron::Cron;
pub(crate) use plan::Cadence;
pub(crate) use runner::run_scheduler;

use crate::clock::now_ms;
use crate::config::{Config, ScheduleConfig, MAX_SCHEDULES};
use crate::error::{ConfigError, StoreError};
use crate::pipeline::ReplicationError;
use crate::replies::Reply;
use crate::store::{JobOrigin, JobRecord, RunOutcome, RunRecord, Store};

/// What a heartbeat answers when it has nothing to report (OpenClaw's token): not delivered.
pub const HEARTBEAT_OK: &str = "HEARTBEAT_OK";
/// Longest reply kept in a run's outcome, in characters.
pub(crate) const MAX_OUTCOME_CHARS: usize = 500;
/// The message id prefix of a scheduled run's message.
pub(crate) const SCHEDULE_ID_PREFIX: &str = "schedule:";
/// The message id prefix of a heartbeat run's message.
pub(crate) const HEARTBEAT_ID_PREFIX: &str = "heartbeat:";
/// Runs shown per job by `GET /v1/schedules/{id}`.
pub const RUNS_SHOWN: usize = 20;

/// The message id of `job`'s run due at `due_ms`.
pub(crate) fn run_message_id(job: &ScheduleConfig, due_ms: u64) -> String {
    let prefix = if job.heartbeat {
        HEARTBEAT_ID_PREFIX
    } else {
        SCHEDULE_ID_PREFIX
    };
    format!("{prefix}{}:{due_ms}", job.id)
}

/// Whether `reply` is a heartbeat's "nothing to report" (see [`quiet_text`]).
pub(crate) fn is_quiet_heartbeat(reply: &Reply) -> bool {
    !reply.error
        && !reply.in_reply_to.is_empty()
        && reply
            .in_reply_to
            .iter()
            .all(|id| id.starts_with(HEARTBEAT_ID_PREFIX))
        && quiet_text(&reply.text)
}

/// Whether `text`, trimmed of white space and markup around it, is [`HEARTBEAT_OK`].
pub(crate) fn quiet_text(text: &str) -> bool {
    text.trim_matches(|c: char| c.is_whitespace() || "*_`.!".contains(c)) == HEARTBEAT_OK
}

/// The session a job's turns run in: its `session_key`, else `agent:<agent>:schedule:<id>`.
pub(crate) fn job_session(job: &ScheduleConfig, config: &Config) -> String {
    match &job.session_key {
        Some(k) => crate::inbound::normalize_session_key(k),
        None => {
            let agent = job.agent.as_deref().map_or_else(
                || crate::config::default_agent_id(config),
                crate::inbound::normalize_agent_id,
            );
            format!("agent:{agent}:schedule:{}", job.id)
        }
    }
}

/// A change to a job's runs as a cluster's changelog carries it (`record.rs`): what every
/// replica of the session's partition applies to its own store, so they all keep the same
/// runs and next due time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub(crate) enum RunChange {
    /// A run was recorded (`running` or `skipped`) and the job's next due time moved.
    Started {
        /// The job.
        job_id: String,
        /// The run.
        run: RunRecord,
        /// The job's next due time from now on.
        next_due_ms: Option<u64>,
    },
    /// A run ended: its outcome.
    Ended {
        /// The job.
        job_id: String,
        /// The run, with its outcome.
        run: RunRecord,
    },
}

impl RunChange {
    /// Applies the change to `store`; the ticket of the write (`None`: the job is not
    /// stored here, e.g. a node whose config lacks it).
    pub(crate) fn apply(&self, store: &Store) -> Result<Option<u64>, StoreError> {
        match self {
            Self::Started {
                job_id,
                run,
                next_due_ms,
            } => store.record_schedule_run(job_id, run, *next_due_ms),
            Self::Ended { job_id, run } => store.update_schedule_run(job_id, run).map(Some),
        }
    }
}

/// Runs one job's turn and says how it ended: the runtime, or a test double. In a cluster it
/// also says which jobs are this node's and records their runs in the changelog.
pub(crate) trait RunTurns: Send + Sync + 'static {
    /// Runs `job`'s turn for `due_ms` to its end; `None` when it could not learn the end
    /// (the runtime is stopping: the run is resumed at the next start).
    fn run(
        &self,
        job: ScheduleConfig,
        due_ms: u64,
    ) -> Pin<Box<dyn Future<Output = Option<RunOutcome>> + Send>>;

    /// Whether this node runs the jobs of `session_key` now: always on a single node; in a
    /// cluster, while it owns the session's partition.
    fn owns(&self, _session_key: &str) -> bool {
        true
    }

    /// Records `change` where the other nodes find it, before this node writes it: nothing
    /// on a single node; in a cluster, the session's partition's changelog, fenced by this
    /// node's tenure (`Fenced`: another node owns it now, and this node must not run it).
    fn record<'a>(
        &'a self,
        _session_key: &'a str,
        _change: &'a RunChange,
    ) -> BoxFuture<'a, Result<(), ReplicationError>> {
        Box::pin(async { Ok(()) })
    }
}

/// A job as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct JobView {
    /// What and when.
    #[serde(flatten)]
    pub spec: ScheduleConfig,
    /// `config` or `api`.
    pub origin: JobOrigin,
    /// The session its turns run in.
    pub session_key: String,
    /// When it is next due, ms since the epoch (none: never again).
    pub next_due_ms: Option<u64>,
    /// Its newest runs, newest first.
    pub runs: Vec<RunRecord>,
}

/// Why the API refused a change.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// The job is not valid.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    /// A job of that id exists.
    #[error("a schedule {0:?} exists already")]
    Exists(String),
    /// No job of that id.
    #[error("no schedule {0:?}")]
    NotFound(String),
    /// A config job: change it in the config.
    #[error("schedule {0:?} is defined in the config file; change it there")]
    FromConfig(String),
    /// Too many jobs.
    #[error("at most {MAX_SCHEDULES} schedules")]
    TooMany,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The jobs: what the API reads and changes, and the scheduler's wake-up.
pub struct Schedules {
    store: Store,
    config: Arc<Config>,
    /// Woken when a job is added or removed, so the scheduler looks again.
    changed: Notify,
    /// Serialises API changes (the count check and the write) and config syncs.
    writing: Mutex<()>,
    /// The config's `[[schedules]]` in force: the start's, then a reload's
    /// ([`Schedules::reload`]).
    from_config: Mutex<Vec<ScheduleConfig>>,
}

impl Schedules {
    /// The jobs of `store`, configured by `config`.
    pub(crate) fn new(store: Store, config: Arc<Config>) -> Self {
        Self {
            store,
            from_config: Mutex::new(config.schedules.clone()),
            config,
            changed: Notify::new(),
            writing: Mutex::new(()),
        }
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// Whether this runtime is a cluster node.
    pub(crate) fn clustered(&self) -> bool {
        self.config.cluster.is_some()
    }

    /// The session `job`'s turns run in.
    pub(crate) fn session_of(&self, job: &ScheduleConfig) -> String {
        job_session(job, &self.config)
    }

    /// What `every_ms` counts from for a job first stored at `created_at_ms`: then, on a
    /// single node; the epoch in a cluster, where each node stored the job at its own time
    /// and all must compute the same due times (the same run message ids).
    pub(crate) fn anchor(&self, created_at_ms: u64) -> u64 {
        if self.clustered() {
            0
        } else {
            created_at_ms
        }
    }

    pub(crate) async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Every job, in id order, with its newest `runs` runs.
    pub fn list(&self, runs: usize) -> Result<Vec<JobView>, StoreError> {
        self.store
            .schedules()?
            .into_iter()
            .map(|job| self.view(job, runs))
            .collect()
    }

    /// Job `id` with its newest [`RUNS_SHOWN`] runs.
    pub fn get(&self, id: &str) -> Result<Option<JobView>, StoreError> {
        self.store
            .schedule(id)?
            .map(|job| self.view(job, RUNS_SHOWN))
            .transpose()
    }

    fn view(&self, job: JobRecord, runs: usize) -> Result<JobView, StoreError> {
        Ok(JobView {
            runs: self.store.schedule_runs(&job.spec.id, runs)?,
            session_key: job_session(&job.spec, &self.config),
            spec: job.spec,
            origin: job.origin,
            next_due_ms: job.next_due_ms,
        })
    }

    /// Adds `spec` (checked as `[[schedules]]` entries are), durably; its first due time is
    /// the first after now.
    pub async fn create(&self, spec: ScheduleConfig) -> Result<JobView, ScheduleError> {
        spec.check(&self.config)?;
        let now = now_ms();
        let cadence = Cadence::of(&spec, self.anchor(now))
            .map_err(|e| ConfigError::Invalid(format!("schedules.{}: {e}", spec.id)))?;
        let ticket = {
            let _one = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
            if self.store.schedule(&spec.id)?.is_some() {
                return Err(ScheduleError::Exists(spec.id));
            }
            if self.store.schedules()?.len() >= MAX_SCHEDULES {
                return Err(ScheduleError::TooMany);
            }
            self.store.put_schedule(&JobRecord {
                next_due_ms: cadence.next_after(now),
                spec: spec.clone(),
                origin: JobOrigin::Api,
                created_at_ms: now,
            })?
        };
        self.store.commit().wait(ticket).await?;
        self.changed.notify_one();
        self.get(&spec.id)?
            .ok_or_else(|| ScheduleError::NotFound(spec.id.clone()))
    }

    /// Deletes API job `id` and its runs (a run in progress finishes; its outcome is not
    /// kept).
    pub async fn delete(&self, id: &str) -> Result<(), ScheduleError> {
        let ticket = {
            let _one = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
            match self.store.schedule(id)? {
                None => return Err(ScheduleError::NotFound(id.to_string())),
                Some(job) if job.origin == JobOrigin::Config => {
                    return Err(ScheduleError::FromConfig(id.to_string()))
                }
                Some(_) => self.store.delete_schedule(id)?.1,
            }
        };
        self.store.commit().wait(ticket).await?;
        self.changed.notify_one();
        Ok(())
    }

    /// Makes the stored config jobs what `[[schedules]]` says, at start: new ones are added
    /// (first due after now), changed ones replaced (keeping their runs), removed ones
    /// deleted; a config job replaces an API job of its id. A job whose spec is unchanged
    /// keeps its next due time, so one due while the server was down is found missed.
    pub(crate) async fn sync_config(&self) -> Result<(), StoreError> {
        let ticket = {
            let _one = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
            let specs = self
                .from_config
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            self.write_config_jobs(&specs)?
        };
        if let Some(t) = ticket {
            self.store.commit().wait(t).await?;
        }
        Ok(())
    }

    /// A config reload's `[[schedules]]` (validated with the config): stored as at start
    /// ([`Schedules::sync_config`]), and the scheduler wakes to look at the jobs again. A run
    /// in progress of a removed or changed job finishes.
    pub(crate) async fn reload(&self, specs: &[ScheduleConfig]) -> Result<(), StoreError> {
        *self
            .from_config
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = specs.to_vec();
        self.sync_config().await?;
        self.changed.notify_one();
        Ok(())
    }

    /// Writes the config jobs `specs` over the stored ones; the ticket of the last write.
    fn write_config_jobs(&self, specs: &[ScheduleConfig]) -> Result<Option<u64>, StoreError> {
        let now = now_ms();
        let stored = self.store.schedules()?;
        let mut ticket = None;
        for spec in specs {
            let old = stored.iter().find(|j| j.spec.id == spec.id);
            if old.is_some_and(|j| j.origin == JobOrigin::Config && j.spec == *spec) {
                continue;
            }
            if old.is_some_and(|j| j.origin == JobOrigin::Api) {
                tracing::warn!(schedule = %spec.id, "a [[schedules]] entry replaces the API's job of its id");
            }
            let Ok(cadence) = Cadence::of(spec, self.anchor(now)) else {
                continue;
            };
            ticket = Some(self.store.put_schedule(&JobRecord {
                next_due_ms: cadence.next_after(now),
                spec: spec.clone(),
                origin: JobOrigin::Config,
                created_at_ms: now,
            })?);
        }
        for job in &stored {
            if job.origin == JobOrigin::Config && !specs.iter().any(|s| s.id == job.spec.id) {
                ticket = Some(self.store.delete_schedule(&job.spec.id)?.1);
            }
        }
        Ok(ticket)
    }
}

/// `text` cut to [`MAX_OUTCOME_CHARS`].
pub(crate) fn excerpt(text: &str) -> String {
    match text.char_indices().nth(MAX_OUTCOME_CHARS) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// The outcome of a turn that answered with `reply`.
pub(crate) fn outcome_of(reply: &Reply) -> RunOutcome {
    answer_outcome(&reply.text, reply.error, is_quiet_heartbeat(reply))
}

/// The outcome of a turn whose answer is `text`: a failure notice (`error`), a heartbeat's
/// nothing to report (`quiet`), or an answer.
pub(crate) fn answer_outcome(text: &str, error: bool, quiet: bool) -> RunOutcome {
    if error {
        RunOutcome::Failed {
            error: excerpt(text),
        }
    } else if quiet {
        RunOutcome::Quiet
    } else {
        RunOutcome::Answered {
            reply: excerpt(text),
        }
    }
}

/// A run's record when it starts.
pub(crate) fn started(due_ms: u64, now: u64, outcome: RunOutcome) -> RunRecord {
    let finished_at_ms = (outcome != RunOutcome::Running).then_some(now);
    RunRecord {
        due_ms,
        started_at_ms: now,
        finished_at_ms,
        outcome,
    }
}
