//! A bounded changelog: the owners' periodic snapshots, and those `turnstile cluster snapshot`
//! asks for, have the changelog purged below what they cover (its first sequence moves up),
//! and a node whose data dir was wiped rejoins from the snapshots plus the changelog's tail,
//! holding and answering every session again with the same content.

use std::process::Command;

use reqwest::StatusCode;
use turnstile::cluster::names::LOG_STREAM;
use turnstile::cluster::SnapshotReport;

use super::nats::NatsCluster;
use super::serve::{wait_balanced, Nodes, PARTITIONS, SERIAL};
use super::support::{encode_key, eventually, wait_all_answered_within, Msg, PATIENCE};

/// Lease of this test: only the start and the wiped node's rejoining wait on it.
const LEASE_MS: u64 = 2_000;

fn patience() -> std::time::Duration {
    PATIENCE + std::time::Duration::from_millis(3 * LEASE_MS)
}

/// The changelog stream's first and last sequences, read as an operator would.
async fn log_range(nats: &NatsCluster) -> (u64, u64) {
    let client = async_nats::connect(nats.urls()).await.expect("connecting");
    let js = async_nats::jetstream::new(client);
    let mut log = js.get_stream(LOG_STREAM).await.expect("the changelog");
    let state = &log.info().await.expect("its info").state;
    (state.first_sequence, state.last_sequence)
}

async fn first_seq(nats: &NatsCluster) -> u64 {
    log_range(nats).await.0
}

/// Runs the real binary: `turnstile cluster snapshot --json`; every node's answer.
fn snapshot(nats: &NatsCluster, dir: &std::path::Path) -> Vec<SnapshotReport> {
    let urls: Vec<String> = nats.urls().iter().map(|u| format!("{u:?}")).collect();
    let path = dir.join("operator.toml");
    std::fs::write(
        &path,
        format!(
            "[cluster]\nnats = [{}]\nnode_id = \"operator\"\npartitions = {PARTITIONS}\n\
             lease_ms = {LEASE_MS}\n",
            urls.join(", ")
        ),
    )
    .expect("writing the operator's config");
    let out = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["cluster", "snapshot", "--json", "--config"])
        .arg(&path)
        .output()
        .expect("running the turnstile binary");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the reports as JSON")
}

/// Periodic snapshots (every second here) purge the changelog past every turn so far, and so
/// do those asked for; a node wiped after that rejoins, loads every partition from its
/// snapshot and the tail after it, and then stores every session (a deleted one stays
/// deleted) with the same transcript as a node that never left, and answers new messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_node_rejoins_from_the_snapshots_and_answers_every_session() {
    const SESSIONS: usize = 12;
    let _serial = SERIAL.lock().await;
    let Some(nats) = NatsCluster::start().await else {
        return;
    };
    let operator = tempfile::tempdir().expect("a dir");
    // Every node keeps every partition, so the wiped one must load all of them.
    let mut nodes = Nodes::start(
        &nats,
        3,
        LEASE_MS,
        "replicas = 3\nsnapshot_interval_ms = 1000\n",
    )
    .await;
    wait_balanced(&nats, &["n1", "n2", "n3"], patience()).await;

    let mut sent = Vec::new();
    for i in 0..SESSIONS {
        let (chat, id) = (format!("snap-{i}"), format!("a-{i}"));
        let key = nodes
            .node(i % 3)
            .api
            .send(&Msg::group(&chat, &id, "before the snapshot"))
            .await;
        sent.push((key, vec![id]));
    }
    for i in 0..3 {
        wait_all_answered_within(&nodes.node(i).api, &sent, patience()).await;
    }
    let (deleted, _) = sent.pop().expect("a session to delete");
    let (status, body) = nodes
        .node(0)
        .api
        .delete(&format!("/v1/sessions/{}", encode_key(&deleted)))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let (_, last) = log_range(&nats).await;
    eventually(
        patience(),
        "periodic snapshots to purge every turn",
        || async {
            match first_seq(&nats).await {
                first if first > last => Ok(()),
                first => Err(format!("first {first}, the delete's record ≤ {last}")),
            }
        },
    )
    .await;

    let before = first_seq(&nats).await;
    let reports = snapshot(&nats, operator.path());
    assert_eq!(reports.len(), 3, "{reports:?}");
    let taken: usize = reports.iter().map(|r| r.taken.len()).sum();
    assert_eq!(taken, PARTITIONS as usize, "{reports:?}");
    assert!(reports.iter().all(|r| r.failed.is_empty()), "{reports:?}");
    let floor = reports
        .iter()
        .filter_map(|r| r.floor)
        .max()
        .expect("a floor");
    let after = first_seq(&nats).await;
    assert!(
        after > before && after >= floor,
        "first {before} → {after}, floor {floor}"
    );

    // The tail: turns after the snapshots, one in a session the snapshot holds.
    let mut tail = Vec::new();
    for (i, (chat, id)) in [("snap-0", "b-0"), ("snap-tail", "b-1")]
        .into_iter()
        .enumerate()
    {
        let key = nodes
            .node(i)
            .api
            .send(&Msg::group(chat, id, "after the snapshot"))
            .await;
        tail.push((key, vec![id.to_string()]));
    }
    for i in 0..3 {
        wait_all_answered_within(&nodes.node(i).api, &tail, patience()).await;
    }

    nodes.wipe(2).await;
    wait_balanced(&nats, &["n1", "n2", "n3"], patience()).await;
    let mut keys: Vec<String> = sent.iter().map(|(k, _)| k.clone()).collect();
    keys.push(tail[1].0.clone());
    let wiped = &nodes.node(2).api;
    eventually(
        patience(),
        "the wiped node to store every session",
        || async {
            let (status, body) = wiped.get("/v1/stats").await;
            match body["sessions"].as_u64() {
                Some(n) if status == StatusCode::OK && n == keys.len() as u64 => Ok(()),
                _ => Err(format!("{status} {body}")),
            }
        },
    )
    .await;
    for key in &keys {
        let here = nodes.node(0).api.transcript_json(key).await;
        assert!(here.is_some(), "{key} on n1");
        assert_eq!(
            wiped.transcript_json(key).await,
            here,
            "{key} on the wiped node"
        );
    }
    let (status, body) = wiped.session(&deleted).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "the deleted session came back: {body}"
    );

    // It answers as before: a message to every session, sent to the wiped node.
    let mut again = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let chat = key.rsplit(':').next().expect("a chat id");
        let id = format!("c-{i}");
        wiped.send(&Msg::group(chat, &id, "after the rejoin")).await;
        again.push((key.clone(), vec![id]));
    }
    for i in 0..3 {
        wait_all_answered_within(&nodes.node(i).api, &again, patience()).await;
    }
    // And a second round moves the changelog's start again.
    let reports = snapshot(&nats, operator.path());
    assert_eq!(reports.len(), 3, "{reports:?}");
    let later = first_seq(&nats).await;
    assert!(later > after, "first {after} → {later}");
    nodes.stop().await;
}
