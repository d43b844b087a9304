//! The JetStream names a cluster shares: every node, and `turnstile cluster status`, use
//! these (changing one splits the cluster).

use super::Partition;

/// The replicated inboxes: one subject per partition.
pub const INBOX_STREAM: &str = "TURNSTILE_INBOX";
/// The changelogs: one subject per partition.
pub const LOG_STREAM: &str = "TURNSTILE_LOG";

/// Partition `p`'s inbox subject.
pub fn inbox_subject(p: Partition) -> String {
    format!("turnstile.inbox.{p}")
}

/// Partition `p`'s inbox consumer (durable, pull, filtered to its subject), used by its owner.
pub fn inbox_consumer(p: Partition) -> String {
    format!("inbox-{p}")
}

/// Partition `p`'s changelog subject.
pub fn log_subject(p: Partition) -> String {
    format!("turnstile.log.{p}")
}

/// Every changelog subject.
pub const LOG_SUBJECTS: &str = "turnstile.log.>";

/// Every inbox subject.
pub const INBOX_SUBJECTS: &str = "turnstile.inbox.>";

/// The partition of a changelog or inbox subject.
pub fn partition_of_subject(subject: &str) -> Option<Partition> {
    subject.rsplit('.').next()?.parse().ok()
}
