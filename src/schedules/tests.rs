//! The scheduler on virtual time (`start_paused`, which the one wall clock follows) against a
//! real store and a test double for the turns.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::*;
use crate::config::{Durability, Missed, StorageConfig};

const MIN: u64 = 60_000;

/// A test double for the runtime's turns: records each run and answers after `takes`.
#[derive(Default)]
struct FakeTurns {
    calls: Mutex<Vec<(String, u64)>>,
    takes: Duration,
}

impl RunTurns for FakeTurns {
    fn run(
        &self,
        job: ScheduleConfig,
        due_ms: u64,
    ) -> Pin<Box<dyn Future<Output = Option<RunOutcome>> + Send>> {
        self.calls
            .lock()
            .expect("calls")
            .push((job.id.clone(), due_ms));
        let takes = self.takes;
        Box::pin(async move {
            tokio::time::sleep(takes).await;
            Some(RunOutcome::Answered {
                reply: format!("done {due_ms}"),
            })
        })
    }
}

fn spec(id: &str, every_ms: u64, missed: Missed) -> ScheduleConfig {
    ScheduleConfig {
        id: id.into(),
        cron: None,
        every_ms: Some(every_ms),
        time_zone: None,
        agent: None,
        session_key: None,
        message: Some("report".into()),
        missed,
        heartbeat: false,
    }
}

struct Harness {
    schedules: Arc<Schedules>,
    turns: Arc<FakeTurns>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

/// A store holding `jobs` (and `runs`), and a scheduler over it.
async fn start(jobs: &[JobRecord], runs: &[(&str, RunRecord)], takes: Duration) -> Harness {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = StorageConfig {
        data_dir: dir.path().to_path_buf(),
        durability: Durability::Batched,
        ..StorageConfig::default()
    };
    let store = Store::open(&storage).expect("store");
    for job in jobs {
        store.put_schedule(job).expect("put");
    }
    for (id, run) in runs {
        let next = store
            .schedule(id)
            .expect("read")
            .and_then(|j| j.next_due_ms);
        store.record_schedule_run(id, run, next).expect("run");
    }
    let schedules = Arc::new(Schedules::new(store, Arc::new(Config::default())));
    let turns = Arc::new(FakeTurns {
        takes,
        ..FakeTurns::default()
    });
    let (stop, stopping) = watch::channel(false);
    let task = tokio::spawn(run_scheduler(
        Arc::clone(&schedules),
        Arc::clone(&turns) as Arc<dyn RunTurns>,
        stopping,
    ));
    Harness {
        schedules,
        turns,
        stop,
        task,
        _dir: dir,
    }
}

impl Harness {
    fn calls(&self) -> Vec<(String, u64)> {
        self.turns.calls.lock().expect("calls").clone()
    }

    fn runs(&self, id: &str) -> Vec<RunRecord> {
        self.schedules.store().schedule_runs(id, 100).expect("runs")
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        self.task.await.expect("the scheduler ended");
    }
}

fn api_job(spec: ScheduleConfig, created_at_ms: u64, next_due_ms: u64) -> JobRecord {
    JobRecord {
        spec,
        origin: JobOrigin::Api,
        created_at_ms,
        next_due_ms: Some(next_due_ms),
    }
}

#[tokio::test(start_paused = true)]
async fn an_interval_job_runs_each_time_it_is_due_and_records_its_outcome() {
    let now = now_ms();
    let h = start(
        &[api_job(spec("tick", MIN, Missed::RunOnce), now, now + MIN)],
        &[],
        Duration::ZERO,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(3 * MIN + MIN / 2)).await;
    let dues: Vec<u64> = h.calls().into_iter().map(|(_, d)| d).collect();
    assert_eq!(dues, [now + MIN, now + 2 * MIN, now + 3 * MIN]);
    let runs = h.runs("tick");
    assert_eq!(runs.len(), 3);
    assert!(
        runs.iter().all(
            |r| matches!(&r.outcome, RunOutcome::Answered { reply } if reply.starts_with("done"))
                && r.finished_at_ms.is_some()
        ),
        "{runs:?}"
    );
    let job = h.schedules.get("tick").expect("read").expect("the job");
    assert_eq!(job.next_due_ms, Some(now + 4 * MIN));
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_run_missed_while_down_runs_once_or_is_skipped_by_its_policy() {
    let now = now_ms();
    // Both were due ten times while the server was down.
    let h = start(
        &[
            api_job(
                spec("once", MIN, Missed::RunOnce),
                now - 10 * MIN,
                now - 9 * MIN,
            ),
            api_job(
                spec("skip", MIN, Missed::Skip),
                now - 10 * MIN,
                now - 9 * MIN,
            ),
        ],
        &[],
        Duration::ZERO,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(MIN / 2)).await;
    assert_eq!(h.calls(), [("once".to_string(), now - 9 * MIN)], "one run");
    let skipped = h.runs("skip");
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].outcome, RunOutcome::Skipped);
    for id in ["once", "skip"] {
        let job = h.schedules.get(id).expect("read").expect("a job");
        assert_eq!(job.next_due_ms, Some(now + MIN), "{id}: the next after now");
    }
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_run_left_running_by_the_last_process_is_resumed_once() {
    let now = now_ms();
    let left = started(now - MIN, now - MIN, RunOutcome::Running);
    let h = start(
        &[api_job(
            spec("left", 60 * MIN, Missed::RunOnce),
            now - 2 * MIN,
            now + 59 * MIN,
        )],
        &[("left", left)],
        Duration::ZERO,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(MIN)).await;
    assert_eq!(h.calls(), [("left".to_string(), now - MIN)]);
    let runs = h.runs("left");
    assert_eq!(runs.len(), 1);
    assert!(
        matches!(runs[0].outcome, RunOutcome::Answered { .. }),
        "{runs:?}"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_job_still_running_when_due_again_skips_that_run() {
    let now = now_ms();
    let h = start(
        &[api_job(spec("slow", MIN, Missed::RunOnce), now, now + MIN)],
        &[],
        Duration::from_millis(MIN + MIN / 2),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(2 * MIN + MIN / 4)).await;
    assert_eq!(h.calls().len(), 1, "never two at once");
    let runs = h.runs("slow");
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(
        runs[0].outcome,
        RunOutcome::Skipped,
        "the one due meanwhile"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_api_adds_and_deletes_jobs_and_refuses_bad_ones() {
    let h = start(&[], &[], Duration::ZERO).await;
    let now = now_ms();
    let job = h
        .schedules
        .create(spec("new", MIN, Missed::RunOnce))
        .await
        .expect("created");
    assert_eq!(job.next_due_ms, Some(now + MIN));
    assert_eq!(job.session_key, "agent:main:schedule:new");
    assert!(matches!(
        h.schedules.create(spec("new", MIN, Missed::RunOnce)).await,
        Err(ScheduleError::Exists(_))
    ));
    let mut bad = spec("bad", MIN, Missed::RunOnce);
    bad.cron = Some("61 * * * *".into());
    let e = h.schedules.create(bad).await.expect_err("two cadences");
    assert!(e.to_string().contains("exactly one"), "{e}");
    let mut bad = spec("bad", MIN, Missed::RunOnce);
    bad.every_ms = None;
    bad.cron = Some("61 * * * *".into());
    let e = h.schedules.create(bad).await.expect_err("a bad minute");
    assert!(e.to_string().contains("outside 0-59"), "{e}");
    // The scheduler hears of the new job and runs it when due.
    tokio::time::sleep(Duration::from_millis(MIN + 1_000)).await;
    assert_eq!(h.calls(), [("new".to_string(), now + MIN)]);
    h.schedules.delete("new").await.expect("deleted");
    assert!(matches!(
        h.schedules.delete("new").await,
        Err(ScheduleError::NotFound(_))
    ));
    tokio::time::sleep(Duration::from_millis(3 * MIN)).await;
    assert_eq!(h.calls().len(), 1, "a deleted job runs no more");
    h.stop().await;
}

#[test]
fn a_heartbeat_reply_is_quiet_only_when_it_says_nothing() {
    let reply = |id: &str, text: &str| Reply {
        session_key: "s".into(),
        text: text.into(),
        in_reply_to: vec![id.into()],
        seq: 1,
        error: false,
        route: None,
        tool_calls: Vec::new(),
        usage: None,
        finish_reason: None,
        model: None,
        error_kind: None,
    };
    assert!(is_quiet_heartbeat(&reply(
        "heartbeat:hb:1",
        " **HEARTBEAT_OK** "
    )));
    assert!(!is_quiet_heartbeat(&reply(
        "heartbeat:hb:1",
        "HEARTBEAT_OK, but the disk is full"
    )));
    assert!(!is_quiet_heartbeat(&reply("schedule:j:1", "HEARTBEAT_OK")));
    assert!(!is_quiet_heartbeat(&reply("m1", "HEARTBEAT_OK")));
}

/// A config reload's `[[schedules]]` reach the running scheduler: an added job runs when due,
/// a removed one is deleted and runs no more, and an API job is left alone.
#[tokio::test(start_paused = true)]
async fn a_reload_adds_and_removes_config_jobs_in_the_running_scheduler() {
    let now = now_ms();
    let h = start(
        &[api_job(
            spec("api", 10 * MIN, Missed::Skip),
            now,
            now + 10 * MIN,
        )],
        &[],
        Duration::ZERO,
    )
    .await;
    h.schedules
        .reload(&[spec("tick", MIN, Missed::Skip)])
        .await
        .expect("reload");
    let listed = h.schedules.list(0).expect("list");
    let origins: Vec<(&str, JobOrigin)> = listed
        .iter()
        .map(|j| (j.spec.id.as_str(), j.origin))
        .collect();
    assert_eq!(
        origins,
        [("api", JobOrigin::Api), ("tick", JobOrigin::Config)]
    );
    tokio::time::sleep(Duration::from_millis(2 * MIN + MIN / 2)).await;
    let ticks = h.calls().iter().filter(|(id, _)| id == "tick").count();
    assert_eq!(ticks, 2, "{:?}", h.calls());

    h.schedules.reload(&[]).await.expect("reload");
    assert!(h.schedules.get("tick").expect("get").is_none());
    assert!(h.schedules.get("api").expect("get").is_some());
    tokio::time::sleep(Duration::from_millis(3 * MIN)).await;
    let ticks = h.calls().iter().filter(|(id, _)| id == "tick").count();
    assert_eq!(ticks, 2, "a removed job runs no more: {:?}", h.calls());
    h.stop().await;
}
