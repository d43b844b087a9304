//! `ClusterError`: what can go wrong between a node and NATS JetStream.

use super::Partition;

/// A boxed error from the NATS client (its error types are generic over a kind).
pub(crate) type NatsError = Box<dyn std::error::Error + Send + Sync>;

/// A cluster failure, with what was being done.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No NATS server of the list answered.
    #[error("cannot connect to NATS at {urls}: {source}")]
    Connect {
        /// The configured URLs, comma-separated.
        urls: String,
        /// The client's error.
        source: NatsError,
    },
    /// A bucket could not be created or opened.
    #[error("cannot open the JetStream KV bucket {bucket}: {source}")]
    Bucket {
        /// The bucket.
        bucket: &'static str,
        /// The client's error.
        source: NatsError,
    },
    /// A bucket exists with settings this node does not share (every node must have the same
    /// `partitions` and `lease_ms`).
    #[error("the JetStream KV bucket {bucket} was made for another cluster config: {why}")]
    Mismatch {
        /// The bucket.
        bucket: &'static str,
        /// What differs.
        why: String,
    },
    /// The lease was taken over or expired: its revision is no longer the latest, so the
    /// compare-and-set was refused. The node no longer owns the partition.
    #[error("lost the lease of partition {partition}")]
    Lost {
        /// The partition.
        partition: Partition,
    },
    /// A KV operation failed (timeout, no quorum, connection lost); it may be retried.
    #[error("{op} of {key} in {bucket} failed: {source}")]
    Kv {
        /// What was being done (`create`, `renew`, `release`, `heartbeat`, ...).
        op: &'static str,
        /// The bucket.
        bucket: &'static str,
        /// The key.
        key: String,
        /// The client's error.
        source: NatsError,
    },
    /// A stream could not be created or opened.
    #[error("cannot open the JetStream stream {stream}: {source}")]
    Stream {
        /// The stream.
        stream: String,
        /// The client's error.
        source: NatsError,
    },
    /// A stream or consumer operation failed (timeout, no quorum, connection lost).
    #[error("{op} on partition {partition} failed: {source}")]
    Jet {
        /// What was being done.
        op: &'static str,
        /// The partition.
        partition: Partition,
        /// The client's error.
        source: NatsError,
    },
    /// The runtime refused what the cluster layer asked of it.
    #[error("the runtime: {0}")]
    Runtime(String),
    /// The membership task is gone (stopped or panicked).
    #[error("the cluster membership task has stopped")]
    Stopped,
}
