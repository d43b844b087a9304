//! Cluster mode against a real 3-node NATS JetStream cluster (feature `cluster`): the
//! harness is `cluster/nats.rs`, the `cluster status` tests are `cluster/status.rs`, the
//! API on nodes that do not own the session (delete, streaming) `cluster/any_node.rs`,
//! scheduled turns on the owner `cluster/schedules.rs`, snapshots and a wiped node's
//! rejoining `cluster/snapshots.rs`; every
//! test starts a cluster of its own and kills it at the end.

#[path = "cluster/any_node.rs"]
mod any_node;
// The streaming model double of the `it` suite (some of its helpers go unused here).
#[allow(dead_code)]
#[path = "it/fake_streaming_model.rs"]
mod fake_streaming_model;
#[path = "cluster/nats.rs"]
mod nats;
#[path = "cluster/schedules.rs"]
mod schedules;
#[path = "cluster/serve.rs"]
mod serve;
#[path = "cluster/snapshots.rs"]
mod snapshots;
#[path = "cluster/status.rs"]
mod status;
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use async_nats::jetstream::kv::{Config as KvConfig, CreateErrorKind, UpdateErrorKind};
use turnstile::cluster::{ClusterError, LeaseStore, Member, LEASES_BUCKET};
use turnstile::config::ClusterConfig;

use nats::NatsCluster;
use support::{eventually, PATIENCE};

/// What the leases rely on, checked on the raw client: on a 3-replica bucket, `create` fails
/// while the key is held, `update` is a compare-and-set on the revision, and the bucket's
/// `max_age` removes a key nobody rewrote, after which `create` succeeds and the old revision
/// is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_kv_gives_create_cas_and_expiry_on_three_replicas() {
    let Some(cluster) = NatsCluster::start().await else {
        return;
    };
    let client = async_nats::connect(cluster.urls()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    // Creating a bucket with the same config again is a no-op: a create whose answer timed out
    // on a loaded machine is retried.
    let kv = eventually(PATIENCE, "the 3-replica bucket to be created", || async {
        js.create_key_value(KvConfig {
            bucket: "raw".into(),
            num_replicas: nats::SERVERS,
            history: 1,
            max_age: Duration::from_millis(1000),
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())
    })
    .await;
    // A new replicated stream elects its leader first; until then a write finds no responder.
    let first = eventually(PATIENCE, "the new bucket to accept a write", || async {
        kv.create("p.0", "a".into())
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    let held = kv.create("p.0", "b".into()).await.unwrap_err();
    assert_eq!(held.kind(), CreateErrorKind::AlreadyExists);
    let renewed = kv.update("p.0", "a".into(), first).await.unwrap();
    assert!(renewed > first);
    let stale = kv.update("p.0", "b".into(), first).await.unwrap_err();
    assert_eq!(stale.kind(), UpdateErrorKind::WrongLastRevision);
    eventually(PATIENCE, "the unrenewed key to expire", || async {
        kv.create("p.0", "b".into())
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    let fenced = kv.update("p.0", "a".into(), renewed).await.unwrap_err();
    assert_eq!(fenced.kind(), UpdateErrorKind::WrongLastRevision);
}

/// A member's config on `cluster`.
fn config(cluster: &NatsCluster, node: &str, partitions: u32, lease_ms: u64) -> ClusterConfig {
    ClusterConfig {
        nats: cluster.urls(),
        node_id: node.into(),
        partitions,
        lease_ms,
        replicas: 2,
        snapshot_interval_ms: 300_000,
    }
}

async fn member(cluster: &NatsCluster, node: &str, partitions: u32, lease_ms: u64) -> Member {
    Member::connect(&config(cluster, node, partitions, lease_ms))
        .await
        .unwrap_or_else(|e| panic!("member {node}: {e}"))
}

/// A client of its own, reading the buckets as an operator would.
async fn leases_bucket(cluster: &NatsCluster) -> async_nats::jetstream::kv::Store {
    let client = async_nats::connect(cluster.urls()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    js.get_key_value(LEASES_BUCKET).await.unwrap()
}

/// The node id in partition `p`'s lease, if anyone holds it.
async fn holder(kv: &async_nats::jetstream::kv::Store, p: u32) -> Option<String> {
    let entry = kv.entry(format!("p.{p}")).await.ok()??;
    let text = String::from_utf8(entry.value.to_vec()).ok()?;
    text.split(' ').next().map(str::to_string)
}

fn held(m: &Member) -> BTreeSet<u32> {
    m.owned().borrow().partitions().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_contend_for_one_partition_and_one_holds_it() {
    let Some(cluster) = NatsCluster::start().await else {
        return;
    };
    let (a, b) = tokio::join!(
        member(&cluster, "a", 1, 1500),
        member(&cluster, "b", 1, 1500)
    );
    eventually(PATIENCE, "one member to hold partition 0", || async {
        match (held(&a).len(), held(&b).len()) {
            (1, 0) | (0, 1) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // It stays that way over two leases: never both, never neither for long.
    let kv = leases_bucket(&cluster).await;
    let deadline = Instant::now() + Duration::from_millis(3000);
    while Instant::now() < deadline {
        assert!(
            !(held(&a).contains(&0) && held(&b).contains(&0)),
            "both hold 0"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (winner, loser, loser_name) = if held(&a).contains(&0) {
        (a, b, "b")
    } else {
        (b, a, "a")
    };
    let winner_name = if loser_name == "a" { "b" } else { "a" };
    assert_eq!(holder(&kv, 0).await.as_deref(), Some(winner_name));
    // A graceful stop hands the partition over without waiting for the lease to expire.
    winner.stop().await.unwrap();
    eventually(PATIENCE, "the other member to take partition 0", || async {
        if held(&loser).contains(&0) {
            Ok(())
        } else {
            Err(format!("{loser_name} holds {:?}", held(&loser)))
        }
    })
    .await;
    assert_eq!(holder(&kv, 0).await.as_deref(), Some(loser_name));
    loser.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_balance_twelve_partitions_and_take_over_from_one_that_leaves() {
    const LEASE_MS: u64 = 1500;
    let Some(cluster) = NatsCluster::start().await else {
        return;
    };
    let a = member(&cluster, "a", 12, LEASE_MS).await;
    let b = member(&cluster, "b", 12, LEASE_MS).await;
    let c = member(&cluster, "c", 12, LEASE_MS).await;
    eventually(PATIENCE, "4 partitions each, all 12 held", || async {
        let (ha, hb, hc) = (held(&a), held(&b), held(&c));
        let all: BTreeSet<u32> = ha.iter().chain(&hb).chain(&hc).copied().collect();
        if (ha.len(), hb.len(), hc.len()) == (4, 4, 4) && all.len() == 12 {
            Ok(())
        } else {
            Err(format!("{ha:?} {hb:?} {hc:?}"))
        }
    })
    .await;
    let from_c = held(&c);
    // Graceful: c releases its leases and its heartbeat.
    let stopped = Instant::now();
    c.stop().await.unwrap();
    let margin = Duration::from_millis(LEASE_MS) + Duration::from_secs(5);
    eventually(margin, "a and b to hold 6 each", || async {
        let (ha, hb) = (held(&a), held(&b));
        if (ha.len(), hb.len()) == (6, 6) && ha.union(&hb).count() == 12 {
            Ok(())
        } else {
            Err(format!("{ha:?} {hb:?}"))
        }
    })
    .await;
    eprintln!("graceful takeover of {from_c:?} in {:?}", stopped.elapsed());
    // A crash (the task aborted, nothing released): a's share grows once b's heartbeat and
    // leases expire.
    let crashed = Instant::now();
    drop(b);
    eventually(
        margin + Duration::from_millis(LEASE_MS),
        "a to hold all 12",
        || async {
            let ha = held(&a);
            if ha.len() == 12 {
                Ok(())
            } else {
                Err(format!("{ha:?}"))
            }
        },
    )
    .await;
    eprintln!("takeover after a crash in {:?}", crashed.elapsed());
    a.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_stopped_renewing_is_fenced_once_another_took_over() {
    const LEASE_MS: u64 = 1500;
    let Some(cluster) = NatsCluster::start().await else {
        return;
    };
    // "a" holds partition 0 through the raw lease API, renewing by hand.
    let client = async_nats::connect(cluster.urls()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let paused = LeaseStore::open(&js, &config(&cluster, "a", 1, LEASE_MS))
        .await
        .unwrap();
    let mut lease = paused
        .acquire(0)
        .await
        .unwrap()
        .expect("partition 0 is free");
    // Held: not by another process, even one with the same node id (a restart).
    let restarted = LeaseStore::open(&js, &config(&cluster, "a", 1, LEASE_MS))
        .await
        .unwrap();
    assert_eq!(restarted.acquire(0).await.unwrap(), None);
    // A node configured differently is refused the buckets, naming what differs.
    for (partitions, lease_ms, differs) in [(1, 3000, "lease"), (2, LEASE_MS, "partitions=1")] {
        let other = config(&cluster, "x", partitions, lease_ms);
        match LeaseStore::open(&js, &other).await {
            Err(e @ ClusterError::Mismatch { .. }) => {
                assert!(e.to_string().contains(differs), "{e}")
            }
            other => panic!("a mismatched config opened the buckets: {other:?}"),
        }
    }
    // The holder itself gets its own lease back (an answer it lost, retried).
    assert_eq!(paused.acquire(0).await.unwrap(), Some(lease.clone()));
    let b = member(&cluster, "b", 1, LEASE_MS).await;
    // While a renews, b cannot take it.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(LEASE_MS / 4)).await;
        let before = lease.revision;
        paused.renew(&mut lease).await.unwrap();
        assert!(lease.revision > before);
        assert!(held(&b).is_empty(), "b took a held partition");
    }
    // a stops renewing (as if SIGSTOPped): its lease expires and b takes the partition.
    eventually(PATIENCE, "b to take partition 0", || async {
        if held(&b).contains(&0) {
            Ok(())
        } else {
            Err("not yet".to_string())
        }
    })
    .await;
    let epoch = b.owned().borrow().epoch(0).unwrap();
    assert!(epoch > lease.epoch, "a later tenure has a larger epoch");
    // a wakes up: its compare-and-set is refused, and so is its release.
    let stale = lease.clone();
    match paused.renew(&mut lease).await {
        Err(ClusterError::Lost { partition: 0 }) => {}
        other => panic!("a renewed a lease b holds: {other:?}"),
    }
    assert_eq!(lease, stale, "a refused renewal changes nothing");
    assert!(matches!(
        paused.release(&lease).await,
        Err(ClusterError::Lost { partition: 0 })
    ));
    let kv = leases_bucket(&cluster).await;
    assert_eq!(holder(&kv, 0).await.as_deref(), Some("b"));
    assert!(held(&b).contains(&0));
    b.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_renewed_across_the_sigkill_of_the_leases_stream_leader() {
    // Longer than JetStream's leader election after a SIGKILL (about 4-9 s), so the leases
    // are renewed through it rather than lost.
    const LEASE_MS: u64 = 20_000;
    let Some(mut cluster) = NatsCluster::start().await else {
        return;
    };
    let a = member(&cluster, "a", 4, LEASE_MS).await;
    let mut owned = a.owned();
    eventually(PATIENCE, "a to hold all 4", || async {
        if held(&a).len() == 4 {
            Ok(())
        } else {
            Err(format!("{:?}", held(&a)))
        }
    })
    .await;
    owned.borrow_and_update();
    let kv = leases_bucket(&cluster).await;
    let mut before = Vec::new();
    for p in 0..4 {
        before.push(kv.entry(format!("p.{p}")).await.unwrap().unwrap().revision);
    }
    let client = async_nats::connect(cluster.urls()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let mut stream = js.get_stream(format!("KV_{LEASES_BUCKET}")).await.unwrap();
    let info = stream.info().await.unwrap();
    let leader = info
        .cluster
        .as_ref()
        .and_then(|c| c.leader.clone())
        .unwrap();
    let killed = Instant::now();
    cluster.kill(NatsCluster::index_of(&leader).unwrap());
    eventually(PATIENCE, "every lease renewed after the kill", || async {
        for (p, old) in before.iter().enumerate() {
            let entry = kv
                .entry(format!("p.{p}"))
                .await
                .map_err(|e| e.to_string())?
                .ok_or(format!("p.{p} is gone"))?;
            if entry.revision <= *old {
                return Err(format!("p.{p} still at {}", entry.revision));
            }
        }
        Ok(())
    })
    .await;
    eprintln!(
        "renewed through the loss of {leader} after {:?}",
        killed.elapsed()
    );
    for p in 0..4 {
        assert_eq!(holder(&kv, p).await.as_deref(), Some("a"));
    }
    assert!(
        !owned.has_changed().unwrap(),
        "a lost a partition on the way"
    );
    assert_eq!(held(&a).len(), 4);
    a.stop().await.unwrap();
}

/// A runtime built with a `[cluster]` section that has not joined its cluster (no
/// `ClusterNode` yet) accepts nothing: it cannot put a message where the cluster would see it,
/// so it answers 503 instead of running alone on a cluster's config.
#[tokio::test]
async fn a_cluster_runtime_accepts_nothing_before_it_joins() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[storage]\ndata_dir = {:?}\n[cluster]\nnats = [\"nats://127.0.0.1:4222\"]\n\
         node_id = \"n1\"\npartitions = 8\nlease_ms = 5000\n",
        dir.path().display().to_string()
    );
    let parsed = turnstile::Config::parse(&text).expect("this build accepts [cluster]");
    let runtime = turnstile::Runtime::builder()
        .config(parsed)
        .build()
        .await
        .expect("a cluster runtime builds");
    assert!(runtime.is_clustered());
    let message: turnstile::inbound::InboundMessage =
        serde_json::from_value(support::message("c", "m1", "hello")).unwrap();
    let refused = runtime
        .submit(message)
        .await
        .expect_err("nothing is accepted");
    assert!(
        matches!(
            refused,
            turnstile::SubmitError::Refused(turnstile::Refusal::Unavailable(_))
        ),
        "{refused}"
    );
    assert_eq!(runtime.queued(), 0);
    runtime.shutdown().await.unwrap();
}

/// What the changelog's fence relies on, checked on the raw client: a publish with
/// expected-last-subject-sequence is refused once anyone else appended to the subject, and
/// other subjects of the stream do not count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_against_a_stale_subject_sequence_is_refused() {
    use async_nats::jetstream::context::PublishErrorKind;
    use async_nats::jetstream::message::PublishMessage;

    let Some(cluster) = NatsCluster::start().await else {
        return;
    };
    let client = async_nats::connect(cluster.urls()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    // Creating a stream with the same config again is a no-op, so a create whose answer timed
    // out on a loaded machine (the meta leader still placing the replicas) is simply retried.
    eventually(PATIENCE, "the 3-replica stream to be created", || async {
        js.create_stream(async_nats::jetstream::stream::Config {
            name: "fence".into(),
            subjects: vec!["fence.>".into()],
            num_replicas: nats::SERVERS,
            ..Default::default()
        })
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
    })
    .await;
    let append = |subject: &'static str, expected: u64| {
        let js = js.clone();
        async move {
            js.send_publish(
                subject,
                PublishMessage::build()
                    .payload("x".into())
                    .expected_last_subject_sequence(expected),
            )
            .await?
            .await
        }
    };
    // The stream's leader is elected first; until then a publish finds no responder.
    let first = eventually(PATIENCE, "the new stream to take an append", || async {
        append("fence.1", 0).await.map_err(|e| e.to_string())
    })
    .await;
    // The old owner's tenure read `first`; the new owner's tenure record lands after it.
    let takeover = append("fence.1", first.sequence).await.unwrap();
    // Another partition's appends do not move this subject's sequence.
    append("fence.2", 0).await.unwrap();
    let stale = append("fence.1", first.sequence).await.unwrap_err();
    assert_eq!(stale.kind(), PublishErrorKind::WrongLastSequence);
    append("fence.1", takeover.sequence).await.unwrap();
}
