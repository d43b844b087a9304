//! `turnstile cluster status`: the reader and the binary against a real cluster with two
//! members, and the refusal of a config without `[cluster]`.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

use async_nats::jetstream::{consumer, stream};
use futures_util::StreamExt;
use serde_json::Value;
use turnstile::cluster::names::{
    inbox_consumer, inbox_subject, log_subject, INBOX_STREAM, LOG_STREAM,
};
use turnstile::cluster::{status, ClusterError, ClusterStatus};

use super::{config, held, member, NatsCluster};
use crate::support::{eventually, PATIENCE};

const PARTITIONS: u32 = 6;
const LEASE_MS: u64 = 1500;

/// Runs the real binary: `turnstile cluster status <args>`.
fn run_status(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["cluster", "status"])
        .args(args)
        .output()
        .expect("running the turnstile binary")
}

/// A config file whose `[cluster]` section names `cluster`, beside sections the command
/// must not read (a model provider no build knows).
fn write_config(dir: &Path, cluster: &NatsCluster) -> String {
    let nats: Vec<String> = cluster.urls().iter().map(|u| format!("{u:?}")).collect();
    let text = format!(
        "[model]\nprovider = \"not-a-provider\"\n[cluster]\nnats = [{}]\nnode_id = \"operator\"\n\
         partitions = {PARTITIONS}\nlease_ms = {LEASE_MS}\n",
        nats.join(", ")
    );
    let path = dir.join("turnstile.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// The partitions `node` owns in `status`.
fn owned_by(status: &ClusterStatus, node: &str) -> BTreeSet<u32> {
    status
        .partitions
        .iter()
        .filter(|p| p.owner.as_deref() == Some(node))
        .map(|p| p.partition)
        .collect()
}

/// Publishes `payload` on `subject` and returns its stream sequence, trying again while the
/// stream just created does not answer yet (its leader, on another server of the cluster, may
/// not have taken the subjects yet: the publish then comes back "stream not found"). The
/// payload is the message id too, so a try whose ack was lost is not stored twice.
async fn publish_when_ready(
    js: &async_nats::jetstream::Context,
    subject: String,
    payload: String,
) -> u64 {
    eventually(PATIENCE, "the new stream to take a publish", || {
        let (subject, payload) = (subject.clone(), payload.clone());
        async move {
            let publish = async_nats::jetstream::message::PublishMessage::build()
                .message_id(&payload)
                .payload(payload.into());
            let ack = js
                .send_publish(subject, publish)
                .await
                .map_err(|e| e.to_string())?;
            ack.await.map(|a| a.sequence).map_err(|e| e.to_string())
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_members_their_partitions_and_the_lag() {
    let Some(cluster) = NatsCluster::start().await else {
        return;
    };
    let viewer = config(&cluster, "operator", PARTITIONS, LEASE_MS);
    // Nobody has joined: no buckets, no streams — every partition unowned, nothing written.
    let empty = status::read(&viewer).await.unwrap();
    assert!(empty.nodes.is_empty(), "{empty:?}");
    assert_eq!((empty.unowned, empty.partitions.len()), (PARTITIONS, 6));

    let a = member(&cluster, "a", PARTITIONS, LEASE_MS).await;
    let b = member(&cluster, "b", PARTITIONS, LEASE_MS).await;
    eventually(PATIENCE, "3 partitions each, all held", || async {
        let (ha, hb) = (held(&a), held(&b));
        if (ha.len(), hb.len()) == (3, 3) && ha.union(&hb).count() == 6 {
            Ok(())
        } else {
            Err(format!("{ha:?} {hb:?}"))
        }
    })
    .await;

    // An inbox with a consumer three messages behind on partition 1 (one of them delivered
    // and not acknowledged), and a changelog with two commits on partition 2.
    let client = async_nats::connect(cluster.urls()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let inbox = js
        .create_stream(stream::Config {
            name: INBOX_STREAM.into(),
            subjects: vec!["turnstile.inbox.*".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let lagging = inbox
        .create_consumer(consumer::pull::Config {
            durable_name: Some(inbox_consumer(1)),
            filter_subject: inbox_subject(1),
            ..Default::default()
        })
        .await
        .unwrap();
    inbox
        .create_consumer(consumer::pull::Config {
            durable_name: Some(inbox_consumer(3)),
            filter_subject: inbox_subject(3),
            ..Default::default()
        })
        .await
        .unwrap();
    for n in 0..3 {
        publish_when_ready(&js, inbox_subject(1), format!("m{n}")).await;
    }
    let mut in_flight = lagging.fetch().max_messages(1).messages().await.unwrap();
    let _unacked = in_flight.next().await.unwrap().unwrap();
    js.create_stream(stream::Config {
        name: LOG_STREAM.into(),
        subjects: vec!["turnstile.log.*".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let mut last_commit = 0;
    for n in 0..2 {
        last_commit = publish_when_ready(&js, log_subject(2), format!("c{n}")).await;
    }

    let seen = status::read(&viewer).await.unwrap();
    let (ha, hb) = (held(&a), held(&b));
    assert_eq!(owned_by(&seen, "a"), ha);
    assert_eq!(owned_by(&seen, "b"), hb);
    assert_eq!(seen.unowned, 0);
    let nodes: Vec<(&str, u32)> = seen
        .nodes
        .iter()
        .map(|n| (n.node_id.as_str(), n.partitions))
        .collect();
    assert_eq!(nodes, [("a", 3), ("b", 3)]);
    for n in &seen.nodes {
        let age = n.heartbeat_age_ms.expect("a live node has a heartbeat");
        assert!(age <= 2 * LEASE_MS, "{n:?}: an expired heartbeat is gone");
    }
    let sum: u32 = seen.nodes.iter().map(|n| n.partitions).sum();
    assert_eq!(sum + seen.unowned, PARTITIONS);
    for p in &seen.partitions {
        assert!(p.lease_age_ms.is_some_and(|ms| ms <= 2 * LEASE_MS), "{p:?}");
        let (pending, seq) = match p.partition {
            1 => (3, 0),
            2 => (0, last_commit),
            _ => (0, 0),
        };
        assert_eq!((p.inbox_pending, p.log_last_seq), (pending, seq), "{p:?}");
    }

    // The binary prints the same view as JSON, reading only [cluster] of the file.
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &cluster);
    let out = run_status(&["--config", &path, "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(json["unowned"], 0);
    assert_eq!(json["nodes"][0]["node_id"], "a");
    assert_eq!(json["nodes"][0]["partitions"], 3);
    assert_eq!(json["nodes"][1]["node_id"], "b");
    let rows = json["partitions"].as_array().expect("a partitions array");
    assert_eq!(rows.len(), PARTITIONS as usize);
    for (p, row) in rows.iter().enumerate() {
        assert_eq!(row["partition"], p);
        let owner = if ha.contains(&(p as u32)) { "a" } else { "b" };
        assert_eq!(row["owner"], owner, "{row}");
    }
    assert_eq!(rows[1]["inbox_pending"], 3);
    assert_eq!(rows[2]["log_last_seq"], last_commit);
    // The text form: the nodes, the summary, and the lagging partition listed.
    let out = run_status(&["--config", &path]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("NODE "), "{text}");
    assert!(
        text.contains(
            "partitions: 6 owned, 0 unowned (of 6); lag: 3 inbox messages in 1 partition\n"
        ),
        "{text}"
    );
    assert!(text.lines().any(|l| l.starts_with("1 ")), "{text}");

    // A viewer configured for another partition count is refused, naming both.
    match status::read(&config(&cluster, "operator", 4, LEASE_MS)).await {
        Err(e @ ClusterError::Mismatch { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("6 partitions") && text.contains("says 4"),
                "{text}"
            );
        }
        other => panic!("a mismatched view was read: {other:?}"),
    }

    // b leaves: its heartbeat goes, and a holds every partition.
    b.stop().await.unwrap();
    let after = eventually(PATIENCE, "a to hold all 6 in the status", || async {
        let s = status::read(&viewer).await.map_err(|e| e.to_string())?;
        if owned_by(&s, "a").len() == 6 && s.nodes.len() == 1 {
            Ok(s)
        } else {
            Err(format!("{:?}", s.nodes))
        }
    })
    .await;
    assert_eq!(after.nodes[0].node_id, "a");
    assert_eq!(after.nodes[0].partitions, PARTITIONS);
    a.stop().await.unwrap();
}

#[test]
fn status_without_a_cluster_section_fails_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("turnstile.toml");
    std::fs::write(&path, "[server]\nlisten = \"127.0.0.1:7878\"\n").unwrap();
    let out = run_status(&["--config", &path.display().to_string()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("has no [cluster] section"), "{stderr}");
    assert!(out.stdout.is_empty());
}
