//! The follower: one task per node reading every partition's changelog in order and applying
//! other nodes' turns to this node's sled (a cache of the changelog), then handing their
//! replies to whoever waits for them here. So every node serves every session's reads and
//! answers its own HTTP waiters, and a node taking a partition over has it restored already.
//!
//! A turn is applied once: the position applied per partition is written in the turn's own
//! transaction, and a turn at or below it is skipped; this node's current tenures' turns are
//! skipped too (their delivery committed them here). A delete (`deletes`) is applied the
//! same way, in changelog order, except on the owner that appended it (it deleted its copy
//! under the partition's append lock).

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{pull, DeliverPolicy};
use async_nats::jetstream::stream::Stream;
use futures_util::StreamExt;
use tokio::sync::watch;

use super::changelog::{Changelog, ANSWERED_MARK_TTL_MS};
use super::names::{partition_of_subject, LOG_SUBJECTS};
use super::record::LogRecord;
use crate::clock::now_ms;
use crate::runtime::Runtime;
use crate::store::ReplicaMarks;

/// Pause before the follower reopens its consumer after an error.
const REOPEN_PAUSE: Duration = Duration::from_millis(200);

/// The follower's state: where it is in the changelog stream.
pub(super) struct Follower {
    runtime: Runtime,
    log: Stream,
    changelog: Arc<Changelog>,
    partitions: u32,
    /// The last changelog stream sequence processed.
    position: watch::Sender<u64>,
}

impl Follower {
    /// A follower of `log` for `runtime`; `position` hears its progress.
    pub(super) fn new(
        runtime: Runtime,
        log: Stream,
        changelog: Arc<Changelog>,
        partitions: u32,
        position: watch::Sender<u64>,
    ) -> Self {
        Self {
            runtime,
            log,
            changelog,
            partitions,
            position,
        }
    }

    /// Where to start: after the lowest position applied over all partitions (every turn
    /// above a partition's own position is applied; those below are skipped by it).
    fn start(&self) -> u64 {
        (0..self.partitions)
            .map(|p| self.runtime.replica_applied(p).unwrap_or(0))
            .min()
            .unwrap_or(0)
    }

    /// Follows until the task is aborted.
    pub(super) async fn run(self) {
        let mut next = self.start() + 1;
        loop {
            match self.follow_from(next).await {
                Ok(()) => {}
                Err(e) => tracing::warn!(error = %e, from = next, "changelog follower: reopening"),
            }
            next = *self.position.borrow() + 1;
            tokio::time::sleep(REOPEN_PAUSE).await;
        }
    }

    async fn follow_from(&self, from: u64) -> Result<(), crate::cluster::NatsError> {
        let consumer = self
            .log
            .create_consumer(pull::OrderedConfig {
                filter_subject: LOG_SUBJECTS.into(),
                deliver_policy: DeliverPolicy::ByStartSequence {
                    start_sequence: from.max(1),
                },
                ..Default::default()
            })
            .await?;
        let mut messages = consumer.messages().await?;
        while let Some(message) = messages.next().await {
            let message = message?;
            let seq = message.info()?.stream_sequence;
            if seq <= *self.position.borrow() {
                continue;
            }
            self.apply(&message.subject, seq, &message.payload).await;
            self.position.send_replace(seq);
        }
        Ok(())
    }

    async fn apply(&self, subject: &str, seq: u64, payload: &[u8]) {
        let Some(partition) = partition_of_subject(subject) else {
            tracing::warn!(subject, "changelog record on an unknown subject: skipped");
            return;
        };
        let record: LogRecord = match serde_json::from_slice(payload) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(partition, seq, error = %e, "undecodable changelog record: skipped");
                return;
            }
        };
        let (node, epoch) = match &record {
            LogRecord::Tenure { .. } => return,
            LogRecord::Turn { node, epoch, .. } | LogRecord::Delete { node, epoch, .. } => {
                (node, *epoch)
            }
        };
        if node == self.changelog.node_id() && self.changelog.is_current(partition, epoch) {
            return;
        }
        match self.runtime.replica_applied(partition) {
            Ok(applied) if applied >= seq => return,
            Ok(_) => {}
            Err(e) => {
                tracing::error!(partition, seq, error = %e, "cannot read the applied position; the record is not applied here");
                return;
            }
        }
        let turn = match record {
            LogRecord::Turn { turn, .. } => turn,
            LogRecord::Delete { session_key, .. } => {
                if let Err(e) = self
                    .runtime
                    .apply_replicated_delete(&session_key, partition, seq)
                    .await
                {
                    tracing::error!(partition, seq, session_key, error = %e, "could not apply a replicated delete here");
                }
                return;
            }
            LogRecord::Tenure { .. } => return,
        };
        let marks = ReplicaMarks {
            partition,
            log_seq: seq,
            answered: turn.reply.in_reply_to.clone(),
            expires_at_ms: now_ms().saturating_add(ANSWERED_MARK_TTL_MS),
        };
        let session_key = turn.session_key.clone();
        match self.runtime.apply_replicated(*turn, marks).await {
            Ok(()) => crate::metrics::cluster_applied(partition),
            Err(e) => {
                tracing::error!(partition, seq, session_key, error = %e, "could not apply a replicated turn here")
            }
        }
    }
}
