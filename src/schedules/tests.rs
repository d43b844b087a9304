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

/// A test double for a cluster's changelog and ownership: which node owns the jobs'
/// partition, the records appended (only the owner's get in: the fence), each applied at
/// once to every other node's store (their followers).
#[derive(Default)]
struct FakeCluster {
    owner: Mutex<Option<usize>>,
    stores: Mutex<Vec<Store>>,
    log: Mutex<Vec<(usize, RunChange)>>,
}

impl FakeCluster {
    fn set_owner(&self, owner: Option<usize>) {
        *self.owner.lock().expect("owner") = owner;
    }
}

/// One node's turns in a [`FakeCluster`]: records each run; a node marked dead learns no
/// outcome (as a runtime that stops).
struct NodeTurns {
    node: usize,
    cluster: Arc<FakeCluster>,
    calls: Mutex<Vec<(String, u64)>>,
    takes: Duration,
    dead: Arc<std::sync::atomic::AtomicBool>,
}

impl RunTurns for NodeTurns {
    fn run(
        &self,
        job: ScheduleConfig,
        due_ms: u64,
    ) -> Pin<Box<dyn Future<Output = Option<RunOutcome>> + Send>> {
        self.calls.lock().expect("calls").push((job.id, due_ms));
        let (takes, dead) = (self.takes, Arc::clone(&self.dead));
        Box::pin(async move {
            tokio::time::sleep(takes).await;
            (!dead.load(std::sync::atomic::Ordering::SeqCst)).then(|| RunOutcome::Answered {
                reply: format!("done {due_ms}"),
            })
        })
    }

    fn owns(&self, _session_key: &str) -> bool {
        *self.cluster.owner.lock().expect("owner") == Some(self.node)
    }

    fn record<'a>(
        &'a self,
        _session_key: &'a str,
        change: &'a RunChange,
    ) -> futures_util::future::BoxFuture<'a, Result<(), crate::pipeline::ReplicationError>> {
        Box::pin(async move {
            if !self.owns("") {
                return Err(crate::pipeline::ReplicationError::Fenced { partition: 0 });
            }
            self.cluster
                .log
                .lock()
                .expect("log")
                .push((self.node, change.clone()));
            for (i, store) in self
                .cluster
                .stores
                .lock()
                .expect("stores")
                .iter()
                .enumerate()
            {
                if i != self.node {
                    change.apply(store).expect("a follower applies the record");
                }
            }
            Ok(())
        })
    }
}

/// A node of a [`FakeCluster`]: its own store with `jobs` (as `[[schedules]]` on every
/// node), its scheduler.
struct FakeNode {
    schedules: Arc<Schedules>,
    turns: Arc<NodeTurns>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

fn clustered_config() -> Config {
    Config {
        cluster: Some(crate::config::ClusterConfig {
            nats: vec!["nats://127.0.0.1:4222".into()],
            node_id: "n".into(),
            partitions: 4,
            lease_ms: 5_000,
            replicas: 2,
            snapshot_interval_ms: 300_000,
        }),
        ..Config::default()
    }
}

async fn start_nodes(
    cluster: &Arc<FakeCluster>,
    jobs: &[JobRecord],
    takes: Duration,
) -> Vec<FakeNode> {
    // The same `[[schedules]]` on every node, or the scheduler's start removes the jobs.
    let config = Arc::new(Config {
        schedules: jobs.iter().map(|j| j.spec.clone()).collect(),
        ..clustered_config()
    });
    let mut nodes = Vec::new();
    for node in 0..2 {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&StorageConfig {
            data_dir: dir.path().to_path_buf(),
            durability: Durability::Batched,
            ..StorageConfig::default()
        })
        .expect("store");
        for job in jobs {
            store.put_schedule(job).expect("put");
        }
        cluster.stores.lock().expect("stores").push(store.clone());
        let schedules = Arc::new(Schedules::new(store, Arc::clone(&config)));
        let turns = Arc::new(NodeTurns {
            node,
            cluster: Arc::clone(cluster),
            calls: Mutex::default(),
            takes,
            dead: Arc::default(),
        });
        let (stop, stopping) = watch::channel(false);
        let task = tokio::spawn(run_scheduler(
            Arc::clone(&schedules),
            Arc::clone(&turns) as Arc<dyn RunTurns>,
            stopping,
        ));
        nodes.push(FakeNode {
            schedules,
            turns,
            stop,
            task,
            _dir: dir,
        });
    }
    nodes
}

/// Stops every node's scheduler and waits for it to end.
async fn stop_nodes(nodes: Vec<FakeNode>) {
    for node in nodes {
        let _ = node.stop.send(true);
        node.task.await.expect("the scheduler ended");
    }
}

impl FakeNode {
    fn dues(&self) -> Vec<u64> {
        let calls = self.turns.calls.lock().expect("calls");
        calls.iter().map(|(_, d)| *d).collect()
    }

    fn runs(&self, id: &str) -> Vec<RunRecord> {
        self.schedules.store().schedule_runs(id, 100).expect("runs")
    }

    /// Stops the node as a crash would: no outcome is learnt any more.
    fn kill(&self) {
        self.turns
            .dead
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = self.stop.send(true);
    }
}

fn config_job(spec: ScheduleConfig, next_due_ms: u64) -> JobRecord {
    JobRecord {
        spec,
        origin: JobOrigin::Config,
        created_at_ms: 0,
        next_due_ms: Some(next_due_ms),
    }
}

/// The first multiple of `every` after `t`: the due times every node of a cluster computes.
fn next_multiple(t: u64, every: u64) -> u64 {
    (t / every + 1) * every
}

#[tokio::test(start_paused = true)]
async fn in_a_cluster_only_the_owner_runs_a_job_and_its_successor_goes_on_from_its_records() {
    let cluster = Arc::new(FakeCluster::default());
    cluster.set_owner(Some(0));
    let now = now_ms();
    let first = next_multiple(now, MIN);
    let nodes = start_nodes(
        &cluster,
        &[config_job(spec("tick", MIN, Missed::RunOnce), first)],
        Duration::ZERO,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(first - now + 2 * MIN + MIN / 2)).await;
    assert_eq!(nodes[0].dues(), [first, first + MIN, first + 2 * MIN]);
    assert!(nodes[1].dues().is_empty(), "not the owner: runs nothing");
    // The other node keeps the same runs and next due time (its follower applied them).
    assert_eq!(nodes[1].runs("tick"), nodes[0].runs("tick"));
    let next = |n: &FakeNode| {
        n.schedules
            .get("tick")
            .expect("read")
            .expect("job")
            .next_due_ms
    };
    assert_eq!(next(&nodes[1]), Some(first + 3 * MIN));

    // The partition moves at once (a graceful handover): the new owner runs the next due time,
    // and the old one, still running, runs nothing more.
    cluster.set_owner(Some(1));
    tokio::time::sleep(Duration::from_millis(2 * MIN)).await;
    assert_eq!(nodes[0].dues().len(), 3);
    assert_eq!(nodes[1].dues(), [first + 3 * MIN, first + 4 * MIN]);

    // The owner dies and nobody owns the partition for 2.5 due times; the node taking it up
    // runs the newest missed due time once (`run_once`), then goes on as before.
    nodes[1].kill();
    cluster.set_owner(None);
    tokio::time::sleep(Duration::from_millis(2 * MIN + MIN / 2)).await;
    cluster.set_owner(Some(0));
    tokio::time::sleep(Duration::from_millis(MIN + MIN / 2)).await;
    let after: Vec<u64> = nodes[0].dues()[3..].to_vec();
    assert_eq!(
        after,
        [first + 5 * MIN, first + 8 * MIN],
        "one missed run, then on time"
    );
    // Never two runs for one due time across the nodes.
    let mut all: Vec<u64> = nodes.iter().flat_map(FakeNode::dues).collect();
    let count = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), count, "{all:?}");
    // Every start went through the changelog, from the node that owned the partition then.
    let log = cluster.log.lock().expect("log").clone();
    let starts: Vec<(usize, u64)> = log
        .iter()
        .filter_map(|(node, c)| match c {
            RunChange::Started { run, .. } => Some((*node, run.due_ms)),
            RunChange::Ended { .. } => None,
        })
        .collect();
    let expected = [0, 0, 0, 1, 1, 0, 0];
    let nodes_of: Vec<usize> = starts.iter().map(|(n, _)| *n).collect();
    assert_eq!(nodes_of, expected, "{starts:?}");
    let _ = nodes[0].stop.send(true);
}

#[tokio::test(start_paused = true)]
async fn in_a_cluster_a_run_cut_short_by_its_owners_death_is_resumed_by_the_next_owner() {
    let cluster = Arc::new(FakeCluster::default());
    cluster.set_owner(Some(0));
    let now = now_ms();
    let first = next_multiple(now, 10 * MIN);
    let nodes = start_nodes(
        &cluster,
        &[
            config_job(spec("long", 10 * MIN, Missed::RunOnce), first),
            config_job(spec("skip", 10 * MIN, Missed::Skip), first),
        ],
        Duration::from_millis(MIN),
    )
    .await;
    // Both start at `first`; the owner dies while they run.
    tokio::time::sleep(Duration::from_millis(first - now + MIN / 2)).await;
    assert_eq!(nodes[0].dues(), [first, first]);
    nodes[0].kill();
    cluster.set_owner(Some(1));
    // The next owner resumes both unfinished runs (same due time, so the same message id:
    // in a real cluster it joins the first attempt's turn) and records their outcomes.
    tokio::time::sleep(Duration::from_millis(2 * MIN)).await;
    assert_eq!(nodes[1].dues(), [first, first]);
    for id in ["long", "skip"] {
        let runs = nodes[1].runs(id);
        assert_eq!(runs.len(), 1, "{id}: {runs:?}");
        assert!(
            matches!(runs[0].outcome, RunOutcome::Answered { .. }),
            "{runs:?}"
        );
    }
    // It was taken up between two due times: nothing was missed, and it goes on on time.
    tokio::time::sleep(Duration::from_millis(10 * MIN)).await;
    assert_eq!(
        nodes[1].dues(),
        [first, first, first + 10 * MIN, first + 10 * MIN]
    );
    let _ = nodes[1].stop.send(true);
    stop_nodes(nodes).await;
}

#[tokio::test(start_paused = true)]
async fn in_a_cluster_a_due_time_missed_between_owners_is_skipped_by_policy() {
    let cluster = Arc::new(FakeCluster::default());
    let now = now_ms();
    let first = next_multiple(now, MIN);
    let nodes = start_nodes(
        &cluster,
        &[config_job(spec("skip", MIN, Missed::Skip), first)],
        Duration::ZERO,
    )
    .await;
    // Nobody owns the partition for two due times; then node 1 takes it up.
    tokio::time::sleep(Duration::from_millis(first - now + MIN + MIN / 2)).await;
    cluster.set_owner(Some(1));
    tokio::time::sleep(Duration::from_millis(MIN)).await;
    assert_eq!(
        nodes[1].dues(),
        [first + 2 * MIN],
        "only the one due after it took it up"
    );
    let runs = nodes[1].runs("skip");
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[1].outcome, RunOutcome::Skipped);
    assert_eq!(
        runs[1].due_ms, first,
        "the missed one, recorded as skipped once"
    );
    assert_eq!(
        nodes[0].runs("skip"),
        runs,
        "and the same on the other node"
    );
    stop_nodes(nodes).await;
}

#[tokio::test(start_paused = true)]
async fn in_a_cluster_a_due_time_missed_after_an_unfinished_run_runs_once_after_its_resume() {
    let cluster = Arc::new(FakeCluster::default());
    cluster.set_owner(Some(0));
    let now = now_ms();
    let first = next_multiple(now, MIN);
    let nodes = start_nodes(
        &cluster,
        &[config_job(spec("tick", MIN, Missed::RunOnce), first)],
        Duration::from_millis(500),
    )
    .await;
    // The owner dies during its run due at `first` (its end is never recorded), and nobody
    // owns the partition for two more due times.
    tokio::time::sleep(Duration::from_millis(first - now + 250)).await;
    nodes[0].kill();
    cluster.set_owner(None);
    tokio::time::sleep(Duration::from_millis(2 * MIN + MIN / 2)).await;
    cluster.set_owner(Some(1));
    tokio::time::sleep(Duration::from_millis(MIN)).await;
    // The next owner resumes the unfinished run, then runs the missed due time once (not
    // skipped as overlapping the resumed run), then the next on time.
    assert_eq!(nodes[1].dues(), [first, first + MIN, first + 3 * MIN]);
    let runs = nodes[1].runs("tick");
    assert!(
        runs.iter()
            .all(|r| matches!(r.outcome, RunOutcome::Answered { .. })),
        "{runs:?}"
    );
    stop_nodes(nodes).await;
}

#[tokio::test(start_paused = true)]
async fn a_missed_run_waits_for_a_resumed_run_to_end_then_runs_once() {
    let now = now_ms();
    // Stopped mid-run 15 minutes ago; due again 5 minutes ago, while down.
    let left = started(now - 15 * MIN, now - 15 * MIN, RunOutcome::Running);
    let h = start(
        &[api_job(
            spec("slow", 10 * MIN, Missed::RunOnce),
            now - 30 * MIN,
            now - 5 * MIN,
        )],
        &[("slow", left)],
        Duration::from_millis(MIN + MIN / 2),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(3 * MIN)).await;
    assert_eq!(
        h.calls(),
        [
            ("slow".to_string(), now - 15 * MIN),
            ("slow".to_string(), now - 5 * MIN)
        ],
        "resumed, then the missed one once it ended"
    );
    let runs = h.runs("slow");
    assert!(
        runs.iter().all(|r| r.outcome != RunOutcome::Skipped),
        "{runs:?}"
    );
    let job = h.schedules.get("slow").expect("read").expect("the job");
    assert_eq!(job.next_due_ms, Some(now + 10 * MIN));
    h.stop().await;
}
