//! The JetStream names the cluster uses, in one place: every node and every operator tool
//! must agree on them, so nobody spells one by hand.
//!
//! Per partition `p`: its inbox subject [`inbox_subject`] on [`INBOX_STREAM`], drained by the
//! durable pull consumer [`inbox_consumer`] (filtered to that subject); its changelog subject
//! [`log_subject`] on [`LOG_STREAM`]; on core NATS (no stream), the subject its owner answers
//! deletes on ([`delete_subject`]), the one it publishes its turns' streaming deltas on
//! ([`delta_subject`]), the one it answers forwarded reads on ([`read_subject`]) and the one
//! it publishes its turns' final replies on ([`reply_subject`]). The leases and heartbeats live in the KV buckets [`LEASES_BUCKET`] and
//! [`NODES_BUCKET`]; the partitions' snapshots in [`SNAPSHOTS_BUCKET`], asked for on
//! [`SNAPSHOT_SUBJECT`].

pub use super::lease::{LEASES_BUCKET, NODES_BUCKET};
pub use super::snapshots::{SNAPSHOTS_BUCKET, SNAPSHOT_SUBJECT};
use super::Partition;

/// The replicated stream holding every partition's inbox.
pub const INBOX_STREAM: &str = "TURNSTILE_INBOX";

/// The replicated stream holding every partition's changelog (turn commits).
pub const LOG_STREAM: &str = "TURNSTILE_LOG";

/// The subject of `partition`'s inbox on [`INBOX_STREAM`].
pub fn inbox_subject(partition: Partition) -> String {
    format!("turnstile.inbox.{partition}")
}

/// The durable pull consumer of `partition`'s inbox (filtered to [`inbox_subject`]).
pub fn inbox_consumer(partition: Partition) -> String {
    format!("inbox-{partition}")
}

/// The subject of `partition`'s changelog on [`LOG_STREAM`].
pub fn log_subject(partition: Partition) -> String {
    format!("turnstile.log.{partition}")
}

/// Every changelog subject.
pub const LOG_SUBJECTS: &str = "turnstile.log.>";

/// Every inbox subject.
pub const INBOX_SUBJECTS: &str = "turnstile.inbox.>";

/// The core NATS subject `partition`'s owner answers session deletes on.
pub fn delete_subject(partition: Partition) -> String {
    format!("turnstile.delete.{partition}")
}

/// Every delete subject.
pub const DELETE_SUBJECTS: &str = "turnstile.delete.*";

/// The core NATS subject `partition`'s owner publishes its turns' streaming deltas on.
pub fn delta_subject(partition: Partition) -> String {
    format!("turnstile.delta.{partition}")
}

/// Every delta subject.
pub const DELTA_SUBJECTS: &str = "turnstile.delta.*";

/// The core NATS subject `partition`'s owner answers the session reads of nodes that do not
/// keep the partition on.
pub fn read_subject(partition: Partition) -> String {
    format!("turnstile.read.{partition}")
}

/// Every read subject.
pub const READ_SUBJECTS: &str = "turnstile.read.*";

/// The core NATS subject `partition`'s owner publishes its turns' final replies on, for the
/// waiters of nodes that do not keep the partition.
pub fn reply_subject(partition: Partition) -> String {
    format!("turnstile.reply.{partition}")
}

/// Every reply subject.
pub const REPLY_SUBJECTS: &str = "turnstile.reply.*";

/// The partition of an inbox, changelog, delete, delta, read or reply subject.
pub fn partition_of_subject(subject: &str) -> Option<Partition> {
    subject.rsplit('.').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_per_partition() {
        assert_eq!(inbox_subject(7), "turnstile.inbox.7");
        assert_eq!(inbox_consumer(4095), "inbox-4095");
        assert_eq!(log_subject(0), "turnstile.log.0");
        assert_eq!(partition_of_subject(&log_subject(12)), Some(12));
        assert_eq!(partition_of_subject(&inbox_subject(3)), Some(3));
        assert_eq!(partition_of_subject("turnstile.log.x"), None);
        assert_eq!(partition_of_subject(&delete_subject(5)), Some(5));
        assert_eq!(partition_of_subject(&delta_subject(11)), Some(11));
        assert_eq!(partition_of_subject(&read_subject(2)), Some(2));
        assert_eq!(partition_of_subject(&reply_subject(9)), Some(9));
    }
}
