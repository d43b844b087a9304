//! Cluster mode against a real 3-node NATS JetStream cluster (feature `cluster`): the
//! harness is `cluster/nats.rs`; every test starts a cluster of its own and kills it at the end.

#[path = "cluster/nats.rs"]
mod nats;
mod support;

use std::time::Duration;

use async_nats::jetstream::kv::{Config as KvConfig, CreateErrorKind, UpdateErrorKind};

use nats::NatsCluster;
use support::{eventually, PATIENCE};

/// What the leases rely on, checked on the raw client: on a 3-replica bucket, `create` fails
/// while the key is held, `update` is a compare-and-set on the revision, and the bucket's
/// `max_age` removes a key nobody rewrote, after which `create` succeeds and the old revision
/// is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_kv_gives_create_cas_and_expiry_on_three_replicas() {
    let cluster = NatsCluster::start().await;
    let client = async_nats::connect(cluster.urls()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let kv = js
        .create_key_value(KvConfig {
            bucket: "raw".into(),
            num_replicas: nats::SERVERS,
            history: 1,
            max_age: Duration::from_millis(1000),
            ..Default::default()
        })
        .await
        .unwrap();
    let first = kv.create("p.0", "a".into()).await.unwrap();
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
