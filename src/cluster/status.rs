//! `ClusterStatus`: the operator's view of a cluster (`turnstile cluster status`) — the live
//! nodes, who holds each partition and how long ago the lease was written, and each
//! partition's lag — read from JetStream without joining the cluster (nothing is written).
//!
//! Sources: the heartbeats in [`NODES_BUCKET`] (one key per node id), the leases in
//! [`LEASES_BUCKET`] (`p.<n>`, value naming the holder), per partition the inbox consumer's
//! pending count on [`INBOX_STREAM`] and the last sequence of its changelog subject on
//! [`LOG_STREAM`]. A bucket, stream or consumer that does not exist (yet) reads as empty: a
//! cluster that never ran shows every partition unowned, with no lag.
//!
//! Ages compare this machine's clock with the NATS server's timestamp of the entry, so clock
//! skew shows up in them; an entry stamped in the future reads as age 0.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::consumer::Info as ConsumerInfo;
use async_nats::jetstream::context::{ConsumerInfoErrorKind, GetStreamErrorKind};
use async_nats::jetstream::kv::{Operation, Store};
use async_nats::jetstream::stream::{LastRawMessageErrorKind, Stream};
use async_nats::jetstream::{Context, ErrorCode};
use futures_util::stream::{self, StreamExt, TryStreamExt};
use serde::Serialize;

use super::error::ClusterError;
use super::lease::{holder_node, kv_error, lease_key};
use super::names::{
    inbox_consumer, log_subject, INBOX_STREAM, LEASES_BUCKET, LOG_STREAM, NODES_BUCKET,
};
use super::view::MAX_NODES;
use super::Partition;
use crate::config::ClusterConfig;

/// JetStream lookups in flight at once while reading: with up to 4,096 partitions (three
/// lookups each) they must overlap to answer within seconds, and the bound keeps an operator
/// command from flooding the servers the nodes depend on. It also bounds memory: a
/// changelog's last message is fetched whole (JetStream's get has no headers-only form), so
/// at most this many are held at once.
pub const STATUS_CONCURRENCY: usize = 32;

/// Shortest wait for one JetStream answer; otherwise a third of a lease, as the nodes use.
const MIN_STATUS_TIMEOUT: Duration = Duration::from_secs(2);

/// The whole view, as `turnstile cluster status --json` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterStatus {
    /// Every node with a heartbeat, and every lease holder without one, by node id.
    pub nodes: Vec<NodeStatus>,
    /// Every partition, ascending.
    pub partitions: Vec<PartitionStatus>,
    /// Partitions nobody holds a lease on.
    pub unowned: u32,
}

/// One node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeStatus {
    /// Its `[cluster] node_id`.
    pub node_id: String,
    /// Time since its last heartbeat; `None` for a node that holds leases but has no
    /// heartbeat (it stopped, and its leases have not expired yet).
    pub heartbeat_age_ms: Option<u64>,
    /// Partitions whose lease it holds.
    pub partitions: u32,
}

/// One partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionStatus {
    /// The partition.
    pub partition: Partition,
    /// The lease holder's node id; `None` when unowned.
    pub owner: Option<String>,
    /// Time since the lease was last written (acquired or renewed); `None` when unowned.
    pub lease_age_ms: Option<u64>,
    /// Inbox messages not yet acknowledged by the owner (pending + in flight): the lag. 0 when
    /// the inbox consumer does not exist.
    pub inbox_pending: u64,
    /// The changelog's last sequence number for this partition; 0 when it has none.
    pub log_last_seq: u64,
}

impl ClusterStatus {
    /// Builds the view from what was read: `heartbeats` (node id → age in ms) and one entry
    /// per partition, in any order.
    pub fn assemble(
        heartbeats: BTreeMap<String, u64>,
        mut partitions: Vec<PartitionStatus>,
    ) -> ClusterStatus {
        partitions.sort_by_key(|p| p.partition);
        let mut held: BTreeMap<&str, u32> = BTreeMap::new();
        for owner in partitions.iter().filter_map(|p| p.owner.as_deref()) {
            *held.entry(owner).or_default() += 1;
        }
        let mut nodes: Vec<NodeStatus> = heartbeats
            .iter()
            .map(|(id, age)| NodeStatus {
                node_id: id.clone(),
                heartbeat_age_ms: Some(*age),
                partitions: held.get(id.as_str()).copied().unwrap_or(0),
            })
            .collect();
        nodes.extend(
            held.iter()
                .filter(|(id, _)| !heartbeats.contains_key(**id))
                .map(|(id, count)| NodeStatus {
                    node_id: id.to_string(),
                    heartbeat_age_ms: None,
                    partitions: *count,
                }),
        );
        nodes.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        let unowned = partitions.iter().filter(|p| p.owner.is_none()).count() as u32;
        ClusterStatus {
            nodes,
            partitions,
            unowned,
        }
    }

    /// Partitions with an owner.
    pub fn owned(&self) -> u32 {
        self.partitions.len() as u32 - self.unowned
    }

    /// Inbox messages waiting over all partitions.
    pub fn total_lag(&self) -> u64 {
        self.partitions.iter().map(|p| p.inbox_pending).sum()
    }

    /// Partitions with inbox messages waiting.
    pub fn lagging(&self) -> usize {
        self.partitions
            .iter()
            .filter(|p| p.inbox_pending > 0)
            .count()
    }
}

/// Connects to `config.nats` and reads the view of its `partitions`.
pub async fn read(config: &ClusterConfig) -> Result<ClusterStatus, ClusterError> {
    let timeout = request_timeout(config);
    let client =
        super::membership::connect_client(config, "turnstile cluster status".into(), timeout)
            .await?;
    let js = async_nats::jetstream::ContextBuilder::new()
        .timeout(timeout)
        .build(client);
    read_with(&js, config.partitions).await
}

/// Reads the view of `partitions` partitions through `js`.
pub async fn read_with(js: &Context, partitions: Partition) -> Result<ClusterStatus, ClusterError> {
    let heartbeats = match open_bucket(js, NODES_BUCKET).await? {
        Some(nodes) => read_heartbeats(&nodes).await?,
        None => BTreeMap::new(),
    };
    let sources = Sources {
        leases: open_bucket(js, LEASES_BUCKET).await?,
        inbox: open_stream(js, INBOX_STREAM).await?,
        log: open_stream(js, LOG_STREAM).await?,
    };
    if let Some(leases) = &sources.leases {
        check_partitions(leases, partitions)?;
    }
    let sources = &sources;
    let read: Vec<PartitionStatus> = stream::iter(0..partitions)
        .map(|p| sources.partition(p))
        .buffer_unordered(STATUS_CONCURRENCY)
        .try_collect()
        .await?;
    Ok(ClusterStatus::assemble(heartbeats, read))
}

/// A third of a lease, at least [`MIN_STATUS_TIMEOUT`]: an operator command can wait longer
/// than a node's renewal.
fn request_timeout(config: &ClusterConfig) -> Duration {
    (Duration::from_millis(config.lease_ms) / 3).max(MIN_STATUS_TIMEOUT)
}

/// What is read per partition; `None` where it does not exist.
struct Sources {
    leases: Option<Store>,
    inbox: Option<Stream>,
    log: Option<Stream>,
}

impl Sources {
    async fn partition(&self, partition: Partition) -> Result<PartitionStatus, ClusterError> {
        let (owner, lease_age_ms) = match &self.leases {
            Some(leases) => read_lease(leases, partition).await?,
            None => (None, None),
        };
        let inbox_pending = match &self.inbox {
            Some(inbox) => read_pending(inbox, partition).await?,
            None => 0,
        };
        let log_last_seq = match &self.log {
            Some(log) => read_last_seq(log, partition).await?,
            None => 0,
        };
        Ok(PartitionStatus {
            partition,
            owner,
            lease_age_ms,
            inbox_pending,
            log_last_seq,
        })
    }
}

/// The node ids with a heartbeat and its age; at most [`MAX_NODES`], as a node's view.
async fn read_heartbeats(nodes: &Store) -> Result<BTreeMap<String, u64>, ClusterError> {
    let keys: Vec<String> = nodes
        .keys()
        .await
        .map_err(|e| kv_error("list", NODES_BUCKET, ">".into(), e))?
        .take(MAX_NODES)
        .try_collect()
        .await
        .map_err(|e| kv_error("list", NODES_BUCKET, ">".into(), e))?;
    let read: Vec<Option<(String, u64)>> = stream::iter(keys)
        .map(|key| async move {
            let entry = nodes
                .entry(key.clone())
                .await
                .map_err(|e| kv_error("read", NODES_BUCKET, key.clone(), e))?;
            Ok::<_, ClusterError>(
                entry
                    .filter(|e| e.operation == Operation::Put)
                    .map(|e| (key, age_ms(e.created.unix_timestamp_nanos(), now_nanos()))),
            )
        })
        .buffer_unordered(STATUS_CONCURRENCY)
        .try_collect()
        .await?;
    Ok(read.into_iter().flatten().collect())
}

/// `partition`'s holder and lease age, if held.
async fn read_lease(
    leases: &Store,
    partition: Partition,
) -> Result<(Option<String>, Option<u64>), ClusterError> {
    let key = lease_key(partition);
    let entry = leases
        .entry(key.clone())
        .await
        .map_err(|e| kv_error("read", LEASES_BUCKET, key, e))?;
    let Some(entry) = entry.filter(|e| e.operation == Operation::Put) else {
        return Ok((None, None));
    };
    // A value that names nobody is not a lease this version wrote; show it as a holder
    // anyway rather than as free, since `create` would be refused.
    let owner = holder_node(&entry.value).unwrap_or("?").to_string();
    let age = age_ms(entry.created.unix_timestamp_nanos(), now_nanos());
    Ok((Some(owner), Some(age)))
}

/// `partition`'s inbox lag; 0 without its consumer.
async fn read_pending(inbox: &Stream, partition: Partition) -> Result<u64, ClusterError> {
    let name = inbox_consumer(partition);
    match inbox.consumer_info(&name).await {
        Ok(info) => Ok(pending(&info)),
        Err(e)
            if matches!(
                e.kind(),
                ConsumerInfoErrorKind::NotFound | ConsumerInfoErrorKind::StreamNotFound
            ) =>
        {
            Ok(0)
        }
        Err(e) => Err(kv_error("consumer info", INBOX_STREAM, name, e)),
    }
}

/// Not yet delivered plus delivered but not acknowledged.
fn pending(info: &ConsumerInfo) -> u64 {
    info.num_pending.saturating_add(info.num_ack_pending as u64)
}

/// The last sequence of `partition`'s changelog subject; 0 without one.
async fn read_last_seq(log: &Stream, partition: Partition) -> Result<u64, ClusterError> {
    let subject = log_subject(partition);
    match log.get_last_raw_message_by_subject(&subject).await {
        Ok(message) => Ok(message.sequence),
        Err(e) => match e.kind() {
            LastRawMessageErrorKind::NoMessageFound => Ok(0),
            LastRawMessageErrorKind::JetStream(js)
                if js.error_code() == ErrorCode::STREAM_NOT_FOUND =>
            {
                Ok(0)
            }
            _ => Err(kv_error("last message", LOG_STREAM, subject, e)),
        },
    }
}

/// `bucket`, or `None` if it does not exist.
async fn open_bucket(js: &Context, bucket: &'static str) -> Result<Option<Store>, ClusterError> {
    if open_stream(js, &format!("KV_{bucket}")).await?.is_none() {
        return Ok(None);
    }
    js.get_key_value(bucket)
        .await
        .map(Some)
        .map_err(|e| ClusterError::Bucket {
            bucket,
            source: Box::new(e),
        })
}

/// The stream `name`, or `None` if it does not exist.
async fn open_stream(js: &Context, name: &str) -> Result<Option<Stream>, ClusterError> {
    match js.get_stream(name).await {
        Ok(stream) => Ok(Some(stream)),
        Err(e) => match e.kind() {
            GetStreamErrorKind::JetStream(js) if js.error_code() == ErrorCode::STREAM_NOT_FOUND => {
                Ok(None)
            }
            _ => Err(ClusterError::Kv {
                op: "stream info",
                bucket: "JetStream",
                key: name.to_string(),
                source: Box::new(e),
            }),
        },
    }
}

/// Refuses to read a leases bucket made for another partition count: the view would leave
/// some partitions out or report ones that do not exist. The count is in the bucket's
/// description (`...; partitions=<n>`), as the nodes write it.
fn check_partitions(leases: &Store, partitions: Partition) -> Result<(), ClusterError> {
    let description = leases.stream.cached_info().config.description.as_deref();
    match bucket_partitions(description.unwrap_or("")) {
        Some(found) if found != partitions => Err(ClusterError::Mismatch {
            bucket: LEASES_BUCKET,
            why: format!("it has {found} partitions, this config says {partitions}"),
        }),
        _ => Ok(()),
    }
}

/// The partition count in a leases bucket's description, if it names one.
fn bucket_partitions(description: &str) -> Option<Partition> {
    description
        .rsplit_once("partitions=")?
        .1
        .trim()
        .parse()
        .ok()
}

/// Milliseconds from `created` to `now` (both in ns since the epoch); 0 if `created` is later.
fn age_ms(created: i128, now: i128) -> u64 {
    u64::try_from(now.saturating_sub(created).max(0) / 1_000_000).unwrap_or(u64::MAX)
}

/// This machine's clock, in ns since the epoch (0 for a clock set before 1970).
fn now_nanos() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(p: Partition, owner: Option<&str>, pending: u64) -> PartitionStatus {
        PartitionStatus {
            partition: p,
            owner: owner.map(str::to_string),
            lease_age_ms: owner.map(|_| 100),
            inbox_pending: pending,
            log_last_seq: 0,
        }
    }

    #[test]
    fn counts_add_up_and_holders_without_heartbeat_are_listed() {
        let heartbeats = BTreeMap::from([("b".to_string(), 20), ("a".to_string(), 10)]);
        let status = ClusterStatus::assemble(
            heartbeats,
            vec![
                partition(3, Some("gone"), 0),
                partition(0, Some("a"), 2),
                partition(2, None, 5),
                partition(1, Some("a"), 0),
            ],
        );
        let order: Vec<Partition> = status.partitions.iter().map(|p| p.partition).collect();
        assert_eq!(order, [0, 1, 2, 3]);
        let nodes: Vec<(&str, Option<u64>, u32)> = status
            .nodes
            .iter()
            .map(|n| (n.node_id.as_str(), n.heartbeat_age_ms, n.partitions))
            .collect();
        assert_eq!(
            nodes,
            [("a", Some(10), 2), ("b", Some(20), 0), ("gone", None, 1)]
        );
        assert_eq!(status.unowned, 1);
        assert_eq!(status.owned(), 3);
        assert_eq!(status.total_lag(), 7);
        assert_eq!(status.lagging(), 2);
    }

    #[test]
    fn an_empty_cluster_is_all_unowned() {
        let status = ClusterStatus::assemble(
            BTreeMap::new(),
            (0..4).map(|p| partition(p, None, 0)).collect(),
        );
        assert!(status.nodes.is_empty());
        assert_eq!(
            (status.owned(), status.unowned, status.total_lag()),
            (0, 4, 0)
        );
    }

    #[test]
    fn json_has_the_documented_shape() {
        let status = ClusterStatus::assemble(
            BTreeMap::from([("a".to_string(), 5)]),
            vec![partition(0, Some("a"), 1), partition(1, None, 0)],
        );
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "nodes": [{"node_id": "a", "heartbeat_age_ms": 5, "partitions": 1}],
                "partitions": [
                    {"partition": 0, "owner": "a", "lease_age_ms": 100,
                     "inbox_pending": 1, "log_last_seq": 0},
                    {"partition": 1, "owner": null, "lease_age_ms": null,
                     "inbox_pending": 0, "log_last_seq": 0},
                ],
                "unowned": 1,
            })
        );
    }

    #[test]
    fn ages_never_go_negative() {
        assert_eq!(age_ms(1_000_000_000, 3_500_000_000), 2_500);
        assert_eq!(age_ms(5_000_000_000, 1_000_000_000), 0);
        assert_eq!(age_ms(i128::MIN, i128::MAX), u64::MAX);
    }

    #[test]
    fn the_partition_count_is_read_from_the_bucket_description() {
        assert_eq!(
            bucket_partitions("turnstile partition leases; partitions=64"),
            Some(64)
        );
        assert_eq!(bucket_partitions("something else"), None);
        assert_eq!(bucket_partitions("partitions=x"), None);
    }
}
