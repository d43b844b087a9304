//! Partition leases and node heartbeats in two replicated JetStream KV buckets.
//!
//! A lease is the key `p.<partition>` in [`LEASES_BUCKET`], holding the holder's node id and
//! a per-process incarnation. Acquire is `create` (refused while the key holds a value);
//! renew is `update` with the revision last written (a compare-and-set); release is a
//! delete with that revision. The bucket's `max_age` is `lease_ms`, so a lease nobody renews
//! disappears and can be created again. The revision is the fencing token: once another node
//! has created the key anew, the old holder's compare-and-set is refused
//! ([`ClusterError::Lost`]).
//!
//! Liveness is the key `<node_id>` in [`NODES_BUCKET`], rewritten every round with the same
//! `max_age`: a node that stops heartbeating disappears from the balancer's view.

use std::time::Duration;

use async_nats::jetstream::kv::{self, CreateErrorKind, Operation, Store, UpdateErrorKind};
use async_nats::jetstream::Context;
use bytes::Bytes;

use super::error::{ClusterError, NatsError};
use super::Partition;
use crate::config::ClusterConfig;

/// The partition leases.
pub const LEASES_BUCKET: &str = "turnstile_leases";
/// The node heartbeats.
pub const NODES_BUCKET: &str = "turnstile_nodes";
/// Replicas of both buckets: a lease survives the loss of one of three NATS servers.
pub(super) const REPLICAS: usize = 3;
/// Largest value either bucket accepts (a node id and an incarnation are far smaller).
const MAX_VALUE_BYTES: i32 = 256;

/// A lease this node holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The partition.
    pub partition: Partition,
    /// The revision this node last wrote: the next renewal's expected revision.
    pub revision: u64,
    /// The revision of the acquiring write; it stays the same across renewals, so it names
    /// this tenure of the partition (a later holder's epoch is larger).
    pub epoch: u64,
}

/// The two buckets, as one node uses them.
#[derive(Debug, Clone)]
pub struct LeaseStore {
    leases: Store,
    nodes: Store,
    node_id: String,
    /// What this process writes into its leases: node id and incarnation, so that it can
    /// recognise its own write after a timed-out answer, and tell its leases from those of
    /// an earlier run under the same node id.
    holder: Bytes,
    partitions: u32,
}

impl LeaseStore {
    /// Creates the buckets, or opens them if they exist with this config's `partitions` and
    /// `lease_ms`.
    pub async fn open(js: &Context, config: &ClusterConfig) -> Result<LeaseStore, ClusterError> {
        let lease = Duration::from_millis(config.lease_ms);
        let leases = open_bucket(
            js,
            LEASES_BUCKET,
            format!(
                "turnstile partition leases; partitions={}",
                config.partitions
            ),
            lease,
        )
        .await?;
        let nodes =
            open_bucket(js, NODES_BUCKET, "turnstile node heartbeats".into(), lease).await?;
        let holder = format!("{} {:016x}", config.node_id, fastrand::u64(..));
        Ok(LeaseStore {
            leases,
            nodes,
            node_id: config.node_id.clone(),
            holder: Bytes::from(holder),
            partitions: config.partitions,
        })
    }

    /// This node's id.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The partition count the buckets were made for.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// Acquires `partition`'s lease if nobody holds it: `Ok(None)` if someone does.
    pub async fn acquire(&self, partition: Partition) -> Result<Option<Lease>, ClusterError> {
        let key = lease_key(partition);
        match self.leases.create(&key, self.holder.clone()).await {
            Ok(revision) => Ok(Some(Lease {
                partition,
                revision,
                epoch: revision,
            })),
            // A create that raced another node's for the same key: the client reports it as
            // "other" with the stream's wrong-last-sequence refusal (error code 10071 or
            // 10164). It is the same answer as AlreadyExists.
            Err(e)
                if e.kind() == CreateErrorKind::AlreadyExists
                    || e.to_string().contains("wrong last sequence") =>
            {
                // Ours if an earlier attempt landed but its answer was lost.
                Ok(self.own_entry(&key).await?.map(|revision| Lease {
                    partition,
                    revision,
                    epoch: revision,
                }))
            }
            Err(e) => Err(kv_error("create", LEASES_BUCKET, key, e)),
        }
    }

    /// Renews `lease` (compare-and-set on its revision), advancing its revision.
    /// [`ClusterError::Lost`] if the lease expired or another node holds it now.
    pub async fn renew(&self, lease: &mut Lease) -> Result<(), ClusterError> {
        let key = lease_key(lease.partition);
        match self
            .leases
            .update(&key, self.holder.clone(), lease.revision)
            .await
        {
            Ok(revision) => {
                lease.revision = revision;
                Ok(())
            }
            Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => {
                // A renewal whose answer timed out may have landed: then the latest value is
                // still ours, at a newer revision.
                match self.own_entry(&key).await? {
                    Some(revision) if revision > lease.revision => {
                        lease.revision = revision;
                        Ok(())
                    }
                    _ => Err(ClusterError::Lost {
                        partition: lease.partition,
                    }),
                }
            }
            Err(e) => Err(kv_error("renew", LEASES_BUCKET, key, e)),
        }
    }

    /// Gives `lease` up (a delete with its revision), so another node can acquire it without
    /// waiting for it to expire. [`ClusterError::Lost`] if it was no longer ours anyway.
    pub async fn release(&self, lease: &Lease) -> Result<(), ClusterError> {
        let key = lease_key(lease.partition);
        match self
            .leases
            .delete_expect_revision(&key, Some(lease.revision))
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => Err(ClusterError::Lost {
                partition: lease.partition,
            }),
            Err(e) => Err(kv_error("release", LEASES_BUCKET, key, e)),
        }
    }

    /// Writes this node's heartbeat.
    pub async fn heartbeat(&self) -> Result<(), ClusterError> {
        self.nodes
            .put(&self.node_id, self.holder.clone())
            .await
            .map(drop)
            .map_err(|e| kv_error("heartbeat", NODES_BUCKET, self.node_id.clone(), e))
    }

    /// Removes this node's heartbeat: it is leaving.
    pub async fn leave(&self) -> Result<(), ClusterError> {
        self.nodes
            .delete(&self.node_id)
            .await
            .map_err(|e| kv_error("leave", NODES_BUCKET, self.node_id.clone(), e))
    }

    /// Watches every lease: the latest of each first, then every change.
    pub(crate) async fn watch_leases(&self) -> Result<kv::Watch, ClusterError> {
        self.leases
            .watch_all()
            .await
            .map_err(|e| kv_error("watch", LEASES_BUCKET, ">".into(), e))
    }

    /// Watches every heartbeat.
    pub(crate) async fn watch_nodes(&self) -> Result<kv::Watch, ClusterError> {
        self.nodes
            .watch_all()
            .await
            .map_err(|e| kv_error("watch", NODES_BUCKET, ">".into(), e))
    }

    /// The revision of `key`'s latest entry if this process wrote it.
    async fn own_entry(&self, key: &str) -> Result<Option<u64>, ClusterError> {
        let entry = self
            .leases
            .entry(key)
            .await
            .map_err(|e| kv_error("read", LEASES_BUCKET, key.to_string(), e))?;
        Ok(entry
            .filter(|e| e.operation == Operation::Put && e.value == self.holder)
            .map(|e| e.revision))
    }
}

/// The key of `partition`'s lease.
pub(crate) fn lease_key(partition: Partition) -> String {
    format!("p.{partition}")
}

/// The partition a lease key names, if it is one.
pub(crate) fn partition_of_key(key: &str) -> Option<Partition> {
    key.strip_prefix("p.")?.parse().ok()
}

/// The node id in a lease or heartbeat value (`<node id> <incarnation>`).
pub(crate) fn holder_node(value: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(value).ok()?;
    text.split(' ').next().filter(|n| !n.is_empty())
}

/// A failed KV (or stream) operation, with what it was on.
pub(super) fn kv_error(
    op: &'static str,
    bucket: &'static str,
    key: String,
    e: impl std::error::Error + Send + Sync + 'static,
) -> ClusterError {
    ClusterError::Kv {
        op,
        bucket,
        key,
        source: Box::new(e),
    }
}

/// Creates `bucket` (R[`REPLICAS`], `max_age` = `lease`, one revision per key) or, if it
/// exists with other settings, says which.
/// Tries at opening a bucket: a request of a node starting with (or just after) its NATS
/// cluster may time out while JetStream elects its leaders; a config that differs is final.
const OPEN_ATTEMPTS: u32 = 10;

/// Pause between those tries.
const OPEN_RETRY: Duration = Duration::from_millis(500);

async fn open_bucket(
    js: &Context,
    bucket: &'static str,
    description: String,
    lease: Duration,
) -> Result<Store, ClusterError> {
    let mut attempt = 1;
    loop {
        match try_open_bucket(js, bucket, description.clone(), lease).await {
            Err(ClusterError::Bucket { source, .. }) if attempt < OPEN_ATTEMPTS => {
                tracing::info!(bucket, error = %source, attempt, "opening the bucket: retrying");
                attempt += 1;
                tokio::time::sleep(OPEN_RETRY).await;
            }
            other => return other,
        }
    }
}

async fn try_open_bucket(
    js: &Context,
    bucket: &'static str,
    description: String,
    lease: Duration,
) -> Result<Store, ClusterError> {
    let config = kv::Config {
        bucket: bucket.to_string(),
        description: description.clone(),
        history: 1,
        max_age: lease,
        max_value_size: MAX_VALUE_BYTES,
        num_replicas: REPLICAS,
        ..Default::default()
    };
    match js.create_key_value(config).await {
        Ok(store) => {
            wait_for_leader(&store, bucket, lease).await?;
            Ok(store)
        }
        Err(create) => {
            let bucket_error = |source: NatsError| ClusterError::Bucket { bucket, source };
            let Ok(store) = js.get_key_value(bucket).await else {
                return Err(bucket_error(Box::new(create)));
            };
            let found = &store.stream.cached_info().config;
            if found.max_age != lease {
                return Err(ClusterError::Mismatch {
                    bucket,
                    why: format!(
                        "its lease is {} ms, this node's lease_ms is {}",
                        found.max_age.as_millis(),
                        lease.as_millis()
                    ),
                });
            }
            if found.description.as_deref() != Some(description.as_str()) {
                return Err(ClusterError::Mismatch {
                    bucket,
                    why: format!(
                        "it says {:?}, this node expects {description:?}",
                        found.description.as_deref().unwrap_or("")
                    ),
                });
            }
            Err(bucket_error(Box::new(create)))
        }
    }
}

/// Pause between two looks for a new bucket's leader.
const LEADER_POLL: Duration = Duration::from_millis(25);

/// Waits until `bucket`'s stream has a leader: a new replicated stream elects one first, and
/// writes before that find no responder. Bounded by a lease (at least 2 s).
async fn wait_for_leader(
    store: &Store,
    bucket: &'static str,
    lease: Duration,
) -> Result<(), ClusterError> {
    let patience = lease.max(Duration::from_secs(2));
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let why = match store.stream.get_info().await {
            Ok(info) if info.cluster.as_ref().is_some_and(|c| c.leader.is_some()) => return Ok(()),
            Ok(_) => "no leader yet".to_string(),
            Err(e) => e.to_string(),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(ClusterError::Bucket {
                bucket,
                source: format!("no leader within {patience:?}: {why}").into(),
            });
        }
        tokio::time::sleep(LEADER_POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_round_trip() {
        assert_eq!(partition_of_key(&lease_key(4095)), Some(4095));
        assert_eq!(partition_of_key("p.x"), None);
        assert_eq!(partition_of_key("q.1"), None);
        assert_eq!(holder_node(b"n1 00ff"), Some("n1"));
        assert_eq!(holder_node(b""), None);
        assert_eq!(holder_node(&[0xff, 0xfe]), None);
    }
}
