//! Scheduled turns in a cluster: a `[[schedules]]` job (the same on every node) fires only on
//! the node owning its session's partition, once per due time; when that node is killed, the
//! partition's next owner goes on with it, never running a due time the old owner ran. The
//! API cannot add a job to a cluster (`501`).

use std::collections::BTreeSet;
use std::time::Duration;

use super::nats::NatsCluster;
use super::serve::{holders, leases, wait_balanced, Nodes, PARTITIONS, SERIAL};
use super::support::{eventually, Api, PATIENCE};
use turnstile::cluster::partition_of;

/// Lease of this test: a killed owner's partition moves after about this long.
const LEASE_MS: u64 = 2_000;
/// The job's interval: the shortest allowed, so a test sees many due times quickly.
const EVERY_MS: u64 = 1_000;
/// The job's session.
const KEY: &str = "ops-ticks";
/// Due times to see on each owner.
const TICKS: usize = 4;

fn patience() -> Duration {
    PATIENCE + Duration::from_millis(3 * LEASE_MS)
}

/// The node (0-based) holding `KEY`'s partition's lease, unless it is `not`.
async fn owner(nats: &NatsCluster, not: Option<usize>) -> usize {
    let kv = leases(nats).await;
    let kv = &kv;
    eventually(
        patience(),
        "the job's partition to have an owner",
        || async move {
            let held = holders(kv).await;
            let node = held
                .get(&partition_of(KEY, PARTITIONS))
                .and_then(|id| id.strip_prefix('n'))
                .and_then(|i| i.parse::<usize>().ok())
                .map(|i| i - 1);
            match node {
                Some(n) if Some(n) != not => Ok(n),
                other => Err(format!("held by {other:?}")),
            }
        },
    )
    .await
}

/// How many runs of `tick` node `api` started (`turnstile_schedule_runs_total`).
async fn started(api: &Api) -> u64 {
    let text = reqwest::get(api.url("/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    text.lines()
        .filter(|l| {
            l.starts_with("turnstile_schedule_runs_total{")
                && l.contains("schedule=\"tick\"")
                && l.contains("outcome=\"started\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// The due times of the job's messages in its session's transcript, read on `api`, in
/// transcript order (duplicates kept).
async fn dues(api: &Api) -> Vec<u64> {
    let Some(entries) = api.transcript(KEY).await else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|e| e.kind == "user")
        .filter_map(|e| e.message_id.as_deref()?.strip_prefix("schedule:tick:"))
        .map(|d| d.parse::<u64>().expect("a due time"))
        .collect()
}

/// Waits until `api` shows at least `n` due times after `after` with their answers.
async fn wait_dues(api: &Api, after: u64, n: usize) -> Vec<u64> {
    eventually(patience(), "more scheduled runs answered", || async move {
        let all = dues(api).await;
        let fresh = all.iter().filter(|d| **d > after).count();
        let answered = api
            .transcript(KEY)
            .await
            .and_then(|e| e.last().map(|l| l.kind == "assistant"))
            .unwrap_or(false);
        if fresh >= n && answered {
            Ok(all)
        } else {
            Err(format!("{fresh} after {after}: {all:?}"))
        }
    })
    .await
}

fn assert_once_each(dues: &[u64]) {
    let distinct: BTreeSet<u64> = dues.iter().copied().collect();
    assert_eq!(distinct.len(), dues.len(), "a due time ran twice: {dues:?}");
    assert!(
        dues.iter().all(|d| d % EVERY_MS == 0),
        "due times are the cluster's common ones: {dues:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_fires_once_per_due_time_on_its_owner_and_goes_on_after_the_owner_dies() {
    let _serial = SERIAL.lock().await;
    let Some(nats) = NatsCluster::start().await else {
        return;
    };
    let extra = format!(
        "replicas = 2\n\n[[schedules]]\nid = \"tick\"\nevery_ms = {EVERY_MS}\n\
         session_key = \"{KEY}\"\nmessage = \"tick\"\n"
    );
    let mut nodes = Nodes::start(&nats, 3, LEASE_MS, &extra).await;
    wait_balanced(&nats, &["n1", "n2", "n3"], patience()).await;

    // Jobs come from every node's config; the API cannot add one to a cluster.
    let apis = nodes.apis();
    let (status, body) = apis[0]
        .post_raw(
            "/v1/schedules",
            serde_json::json!({"id": "api", "every_ms": 1000, "message": "m"}).to_string(),
        )
        .await;
    assert_eq!(status, 501, "{body}");
    assert!(body.to_string().contains("[[schedules]]"), "{body}");

    // Ownership has settled: from now on only the owner starts runs.
    let first = owner(&nats, None).await;
    let mut before = Vec::new();
    for api in &apis {
        before.push(started(api).await);
    }
    let settled = dues(&apis[first]).await.last().copied().unwrap_or(0);
    let seen = wait_dues(&apis[(first + 1) % 3], settled, TICKS).await;
    assert_once_each(&seen);
    for (i, api) in apis.iter().enumerate() {
        let more = started(api).await - before[i];
        if i == first {
            assert!(more >= TICKS as u64, "the owner n{} started {more}", i + 1);
        } else {
            assert_eq!(more, 0, "n{} is not the owner but started runs", i + 1);
        }
    }

    // The owner dies; the partition's next owner goes on, and never runs a due time twice.
    nodes.kill9(first);
    let killed = std::time::Instant::now();
    let last_before_kill = seen.last().copied().unwrap_or(0);
    let next = owner(&nats, Some(first)).await;
    let other = (0..3)
        .find(|i| *i != first && *i != next)
        .expect("a third node");
    let other_before = started(&nodes.node(other).api).await;
    // Its run records include the old owner's runs: it saw they were done (read at its
    // first own run, while the newest runs shown still reach back before the kill).
    wait_dues(&nodes.node(next).api, last_before_kill, 1).await;
    let resumed = killed.elapsed();
    let (status, job) = nodes.node(next).api.get("/v1/schedules/tick").await;
    assert_eq!(status, 200, "{job}");
    let runs: Vec<u64> = job["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter_map(|r| r["due_ms"].as_u64())
        .collect();
    let distinct: BTreeSet<u64> = runs.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        runs.len(),
        "one record per due time: {runs:?}"
    );
    assert!(
        runs.iter().any(|d| seen.contains(d)),
        "the old owner's runs are recorded on the new owner: {runs:?} / {seen:?}"
    );
    let after = wait_dues(&nodes.node(next).api, last_before_kill, TICKS).await;
    assert_once_each(&after);
    assert!(
        after.starts_with(&seen),
        "the new owner's copy has every earlier run: {seen:?} / {after:?}"
    );
    assert!(
        started(&nodes.node(next).api).await > 0,
        "the new owner ran it"
    );
    assert_eq!(
        started(&nodes.node(other).api).await,
        other_before,
        "only the owner runs it"
    );
    eprintln!(
        "n{} ran {} due times; n{} went on {resumed:?} after the kill: {after:?}",
        first + 1,
        seen.len(),
        next + 1
    );
    nodes.stop().await;
}
