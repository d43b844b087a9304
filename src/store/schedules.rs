//! Scheduled jobs and their runs (`src/schedules/`), in the `schedules` tree: `j\0<id>` holds a
//! job (its spec, where it came from, its next due time), `r\0<id>\0<due>` one run (big-endian
//! due time, so a job's runs read in order). A run is recorded and the job's next due time
//! moved in one transaction, so a restart finds either both or neither; the run's message id
//! (`schedule:<id>:<due>`) makes its turn happen once whatever the scheduler retries.

use serde::{Deserialize, Serialize};
use sled::transaction::{ConflictableTransactionError, TransactionError};

use super::{decode, encode, Store};
use crate::config::ScheduleConfig;
use crate::error::StoreError;

/// The tree's name.
pub(super) const TREE: &str = "schedules";
/// Runs kept per job, newest; older ones are removed as new ones are recorded.
pub const MAX_RUNS_KEPT: usize = 50;

/// Where a job was defined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobOrigin {
    /// `[[schedules]]` in the config: replaced from it at every start.
    Config,
    /// `POST /v1/schedules`: kept until deleted.
    Api,
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    /// What to run and when.
    pub spec: ScheduleConfig,
    /// Where it was defined.
    pub origin: JobOrigin,
    /// When it was first stored, ms since the epoch (intervals count from it).
    pub created_at_ms: u64,
    /// When it is next due; `None`: never again (a cron expression with no further match).
    pub next_due_ms: Option<u64>,
}

/// The stored form: the spec as JSON (the API's shape, whose optional fields bincode could
/// not skip).
#[derive(Serialize, Deserialize)]
struct StoredJob {
    spec_json: String,
    origin: JobOrigin,
    created_at_ms: u64,
    next_due_ms: Option<u64>,
}

/// How a run ended (or that it has not yet).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum RunOutcome {
    /// Its message is submitted and its turn not yet answered.
    Running,
    /// The turn answered (the reply's start).
    Answered {
        /// The reply, cut to [`crate::schedules::MAX_OUTCOME_CHARS`].
        reply: String,
    },
    /// A heartbeat had nothing to report: the reply was not delivered.
    Quiet,
    /// The turn failed (its error reply), or the message was refused.
    Failed {
        /// Why.
        error: String,
    },
    /// It was due while the server was down and the job's `missed` policy is `skip`.
    Skipped,
}

/// One run of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The due time it ran for, ms since the epoch.
    pub due_ms: u64,
    /// When it started.
    pub started_at_ms: u64,
    /// When it ended, if it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<u64>,
    /// How.
    #[serde(flatten)]
    pub outcome: RunOutcome,
}

/// Bincode form of [`RunRecord`] (its JSON form flattens the outcome).
#[derive(Serialize, Deserialize)]
struct StoredRun {
    due_ms: u64,
    started_at_ms: u64,
    finished_at_ms: Option<u64>,
    outcome: StoredOutcome,
}

#[derive(Serialize, Deserialize)]
enum StoredOutcome {
    Running,
    Answered(String),
    Quiet,
    Failed(String),
    Skipped,
}

fn job_key(id: &str) -> Vec<u8> {
    let mut k = b"j\0".to_vec();
    k.extend_from_slice(id.as_bytes());
    k
}

fn runs_prefix(id: &str) -> Vec<u8> {
    let mut k = b"r\0".to_vec();
    k.extend_from_slice(id.as_bytes());
    k.push(0);
    k
}

fn run_key(id: &str, due_ms: u64) -> Vec<u8> {
    let mut k = runs_prefix(id);
    k.extend_from_slice(&due_ms.to_be_bytes());
    k
}

fn encode_job(job: &JobRecord) -> Result<Vec<u8>, StoreError> {
    let spec_json =
        serde_json::to_string(&job.spec).map_err(|e| StoreError::Encode(e.to_string()))?;
    encode(&StoredJob {
        spec_json,
        origin: job.origin,
        created_at_ms: job.created_at_ms,
        next_due_ms: job.next_due_ms,
    })
}

fn decode_job(bytes: &[u8]) -> Result<JobRecord, StoreError> {
    let s: StoredJob = decode(TREE, bytes)?;
    let spec = serde_json::from_str(&s.spec_json).map_err(|e| StoreError::Decode {
        tree: TREE,
        reason: format!("a schedule's spec: {e}"),
    })?;
    Ok(JobRecord {
        spec,
        origin: s.origin,
        created_at_ms: s.created_at_ms,
        next_due_ms: s.next_due_ms,
    })
}

fn encode_run(run: &RunRecord) -> Result<Vec<u8>, StoreError> {
    encode(&StoredRun {
        due_ms: run.due_ms,
        started_at_ms: run.started_at_ms,
        finished_at_ms: run.finished_at_ms,
        outcome: match &run.outcome {
            RunOutcome::Running => StoredOutcome::Running,
            RunOutcome::Answered { reply } => StoredOutcome::Answered(reply.clone()),
            RunOutcome::Quiet => StoredOutcome::Quiet,
            RunOutcome::Failed { error } => StoredOutcome::Failed(error.clone()),
            RunOutcome::Skipped => StoredOutcome::Skipped,
        },
    })
}

fn decode_run(bytes: &[u8]) -> Result<RunRecord, StoreError> {
    let s: StoredRun = decode(TREE, bytes)?;
    Ok(RunRecord {
        due_ms: s.due_ms,
        started_at_ms: s.started_at_ms,
        finished_at_ms: s.finished_at_ms,
        outcome: match s.outcome {
            StoredOutcome::Running => RunOutcome::Running,
            StoredOutcome::Answered(reply) => RunOutcome::Answered { reply },
            StoredOutcome::Quiet => RunOutcome::Quiet,
            StoredOutcome::Failed(error) => RunOutcome::Failed { error },
            StoredOutcome::Skipped => RunOutcome::Skipped,
        },
    })
}

/// Removes job `id`'s runs but the newest `keep`.
fn remove_runs(tree: &sled::Tree, id: &str, keep: usize) -> Result<(), StoreError> {
    let old: Vec<sled::IVec> = tree
        .scan_prefix(runs_prefix(id))
        .keys()
        .rev()
        .skip(keep)
        .collect::<Result<_, _>>()
        .map_err(StoreError::sled("reading a schedule's runs"))?;
    for k in old {
        tree.remove(k)
            .map_err(StoreError::sled("removing a schedule's runs"))?;
    }
    Ok(())
}

impl Store {
    /// Every stored job, in id order (at most [`crate::config::MAX_SCHEDULES`] are ever
    /// stored).
    pub(crate) fn schedules(&self) -> Result<Vec<JobRecord>, StoreError> {
        self.inner()
            .schedules
            .scan_prefix(b"j\0")
            .values()
            .map(|v| decode_job(&v.map_err(StoreError::sled("reading schedules"))?))
            .collect()
    }

    /// The stored job `id`.
    pub(crate) fn schedule(&self, id: &str) -> Result<Option<JobRecord>, StoreError> {
        self.inner()
            .schedules
            .get(job_key(id))
            .map_err(StoreError::sled("reading a schedule"))?
            .map(|v| decode_job(&v))
            .transpose()
    }

    /// Stores `job` (replacing one of its id); returns the group-commit ticket of the write.
    pub(crate) fn put_schedule(&self, job: &JobRecord) -> Result<u64, StoreError> {
        let bytes = encode_job(job)?;
        let _write = self.write_gate();
        let inner = self.inner();
        inner
            .schedules
            .insert(job_key(&job.spec.id), bytes)
            .map_err(StoreError::sled("writing a schedule"))?;
        Ok(inner.commit.ticket())
    }

    /// Removes job `id` and its runs; false when there was no such job.
    pub(crate) fn delete_schedule(&self, id: &str) -> Result<(bool, u64), StoreError> {
        let _write = self.write_gate();
        let inner = self.inner();
        let existed = inner
            .schedules
            .remove(job_key(id))
            .map_err(StoreError::sled("deleting a schedule"))?
            .is_some();
        remove_runs(&inner.schedules, id, 0)?;
        Ok((existed, inner.commit.ticket()))
    }

    /// Records `run` of job `id` and sets the job's next due time, in one transaction; then
    /// removes the job's runs beyond the newest [`MAX_RUNS_KEPT`]. `Ok(None)` when the job
    /// is gone (deleted meanwhile), else the ticket of the write.
    pub(crate) fn record_schedule_run(
        &self,
        id: &str,
        run: &RunRecord,
        next_due_ms: Option<u64>,
    ) -> Result<Option<u64>, StoreError> {
        let run_bytes = encode_run(run)?;
        let _write = self.write_gate();
        let inner = self.inner();
        let (jk, rk) = (job_key(id), run_key(id, run.due_ms));
        let result = inner.schedules.transaction(|tx| {
            let Some(bytes) = tx.get(&jk)? else {
                return Ok(false);
            };
            let mut job = decode_job(&bytes).map_err(ConflictableTransactionError::Abort)?;
            job.next_due_ms = next_due_ms;
            let job_bytes = encode_job(&job).map_err(ConflictableTransactionError::Abort)?;
            tx.insert(jk.as_slice(), job_bytes)?;
            tx.insert(rk.as_slice(), run_bytes.as_slice())?;
            Ok(true)
        });
        let recorded = match result {
            Ok(r) => r,
            Err(TransactionError::Abort(e)) => return Err(e),
            Err(TransactionError::Storage(e)) => {
                return Err(StoreError::sled("recording a schedule run")(e))
            }
        };
        if !recorded {
            return Ok(None);
        }
        remove_runs(&inner.schedules, id, MAX_RUNS_KEPT)?;
        Ok(Some(inner.commit.ticket()))
    }

    /// Updates the stored run of job `id` due at `run.due_ms` (its outcome); nothing when the
    /// job or the run is gone.
    pub(crate) fn update_schedule_run(&self, id: &str, run: &RunRecord) -> Result<u64, StoreError> {
        let bytes = encode_run(run)?;
        let _write = self.write_gate();
        let inner = self.inner();
        // Only over a run still there: a job deleted meanwhile took its runs.
        inner
            .schedules
            .fetch_and_update(run_key(id, run.due_ms), |old| old.map(|_| bytes.clone()))
            .map_err(StoreError::sled("writing a schedule run"))?;
        Ok(inner.commit.ticket())
    }

    /// The runs of job `id`, newest first, at most `limit`.
    pub(crate) fn schedule_runs(
        &self,
        id: &str,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.inner()
            .schedules
            .scan_prefix(runs_prefix(id))
            .values()
            .rev()
            .take(limit)
            .map(|v| decode_run(&v.map_err(StoreError::sled("reading a schedule's runs"))?))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Missed, StorageConfig};

    fn job(id: &str) -> JobRecord {
        JobRecord {
            spec: ScheduleConfig {
                id: id.into(),
                cron: Some("@daily".into()),
                every_ms: None,
                time_zone: None,
                agent: None,
                session_key: None,
                message: Some("digest".into()),
                missed: Missed::RunOnce,
                heartbeat: false,
            },
            origin: JobOrigin::Api,
            created_at_ms: 1,
            next_due_ms: Some(100),
        }
    }

    fn run(due_ms: u64) -> RunRecord {
        RunRecord {
            due_ms,
            started_at_ms: due_ms,
            finished_at_ms: None,
            outcome: RunOutcome::Running,
        }
    }

    #[tokio::test]
    async fn a_run_moves_the_next_due_time_and_old_runs_are_trimmed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&StorageConfig {
            data_dir: dir.path().to_path_buf(),
            ..StorageConfig::default()
        })
        .expect("store");
        store.put_schedule(&job("a")).expect("put");
        store.put_schedule(&job("b")).expect("put");
        for due in 0..(MAX_RUNS_KEPT as u64 + 5) {
            let t = store
                .record_schedule_run("a", &run(due), Some(due + 1))
                .expect("record");
            assert!(t.is_some());
        }
        let a = store.schedule("a").expect("read").expect("a job");
        assert_eq!(a.next_due_ms, Some(MAX_RUNS_KEPT as u64 + 5));
        let runs = store.schedule_runs("a", 1_000).expect("runs");
        assert_eq!(runs.len(), MAX_RUNS_KEPT);
        assert_eq!(runs[0].due_ms, MAX_RUNS_KEPT as u64 + 4, "newest first");
        assert!(store.schedule_runs("b", 10).expect("runs").is_empty());

        let mut done = run(MAX_RUNS_KEPT as u64 + 4);
        done.outcome = RunOutcome::Answered { reply: "ok".into() };
        done.finished_at_ms = Some(7);
        store.update_schedule_run("a", &done).expect("update");
        assert_eq!(store.schedule_runs("a", 1).expect("runs")[0], done);

        // A deleted job takes its runs; a run of a deleted job is not recorded.
        assert!(store.delete_schedule("a").expect("delete").0);
        assert!(store.schedule_runs("a", 10).expect("runs").is_empty());
        assert_eq!(
            store
                .record_schedule_run("a", &run(1), None)
                .expect("no job"),
            None
        );
        let ids: Vec<String> = store
            .schedules()
            .expect("list")
            .into_iter()
            .map(|j| j.spec.id)
            .collect();
        assert_eq!(ids, ["b"]);
    }
}
