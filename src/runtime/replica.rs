//! What the cluster layer (`crate::cluster`, feature `cluster`) uses of a runtime: the seams
//! for accepted messages ([`Ingress`]: into the partition's replicated inbox instead of this
//! node's) and for session deletes ([`ClusterDeletes`]: done by the partition's owner), local
//! admission of what the partition's owner takes from that inbox, and applying other nodes'
//! turns and deletes from the changelog. A single node uses none of it.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::{Ack, Deleted, Runtime, SubmitError};
use crate::error::Error;
use crate::inbound::{normalize_session_key, InboundEvent, Refusal};
use crate::metrics;
use crate::pipeline::{ReplicatedTurn, Replication};
use crate::replies::Reply;
use crate::store::{ReplicaMarks, TurnCommit};

/// Where a cluster node puts the messages it accepts: the partition's replicated inbox. `Ok`
/// only once that inbox acknowledged the message (it is then as durable as the cluster).
pub(crate) trait Ingress: Send + Sync + 'static {
    /// Publishes `event` (validated) for the session `session_key`; `streamed`: a streaming
    /// request here waits for its answer (the owner's turn then streams its deltas here).
    fn publish<'a>(
        &'a self,
        session_key: &'a str,
        event: &'a InboundEvent,
        streamed: bool,
    ) -> BoxFuture<'a, Result<(), Refusal>>;
}

/// How a cluster node deletes a session: the partition's owner deletes it and appends the
/// delete to the changelog; `Ok` once this node has applied it too.
pub(crate) trait ClusterDeletes: Send + Sync + 'static {
    /// Deletes `session_key` (normalised) everywhere; `Ok(None)` if there is no such session.
    fn delete<'a>(&'a self, session_key: &'a str) -> BoxFuture<'a, Result<Option<Deleted>, Error>>;
}

#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
impl Runtime {
    /// Whether this runtime was configured as a cluster node (`[cluster]`).
    pub fn is_clustered(&self) -> bool {
        self.inner.config.cluster.is_some()
    }

    /// Installs the cluster layer's ingress, changelog and deletes; a cluster node accepts,
    /// answers and deletes nothing before. Errs if already installed or not a cluster node.
    pub(crate) fn install_cluster(
        &self,
        ingress: Arc<dyn Ingress>,
        replication: Arc<dyn Replication>,
        deletes: Arc<dyn ClusterDeletes>,
    ) -> Result<(), Error> {
        if !self.is_clustered() {
            return Err(Error::from(crate::error::StoreError::Invariant(
                "the cluster layer was installed on a single node",
            )));
        }
        if !self.inner.engine.replication().install(replication)
            || self.inner.ingress.set(ingress).is_err()
            || self.inner.deletes.set(deletes).is_err()
        {
            return Err(Error::from(crate::error::StoreError::Invariant(
                "the cluster layer was installed twice",
            )));
        }
        Ok(())
    }

    /// The session `event` goes to (its explicit key, else the one derived from it).
    pub(crate) fn session_key_of(&self, event: &InboundEvent) -> String {
        match &event.session_key {
            Some(explicit) => normalize_session_key(explicit),
            None => {
                self.inner
                    .directory
                    .session_key(&event.message, &event.route)
                    .0
            }
        }
    }

    /// A cluster node's accepting of a message: into the replicated inbox of its partition.
    pub(super) async fn publish_replicated(
        &self,
        channel: &str,
        event: InboundEvent,
    ) -> Result<Ack, SubmitError> {
        let Some(ingress) = self.inner.ingress.get() else {
            return Err(
                Refusal::Unavailable("the node has not joined its cluster yet".into()).into(),
            );
        };
        let session_key = self.session_key_of(&event);
        // The streaming waiter registers before it submits.
        let streamed = self.inner.replies.streams_to(&event.message.message_id);
        ingress
            .publish(&session_key, &event, streamed)
            .await
            .inspect_err(|r| metrics::inbound_dropped(channel, r.metric_reason()))?;
        metrics::inbound_accepted(channel);
        Ok(Ack {
            session_key,
            message_id: event.message.message_id,
        })
    }

    /// The partition owner's admission of a message taken from the replicated inbox: through
    /// preflight into this node's inbox and lane, as on a single node, without waiting for
    /// a local flush (the replicated inbox keeps the message until its answer is in the
    /// changelog). `streamed`: a streaming request on another node waits for the answer, so
    /// the turn streams (see `ReplyHub::watch_remote`).
    pub(crate) async fn admit_replicated(
        &self,
        event: InboundEvent,
        streamed: bool,
    ) -> Result<Ack, SubmitError> {
        if streamed {
            self.inner.replies.watch_remote(&event.message.message_id);
        }
        let admitted = self.admit_local(&self.inner.api, "cluster", event).await?;
        Ok(admitted.ack)
    }

    /// Whether this node's inbox still holds `message_id` of `session_key`, unanswered.
    pub(crate) fn inbox_holds(&self, session_key: &str, message_id: &str) -> Result<bool, Error> {
        let limit = self.inner.config.lanes.queue_cap.max(1);
        Ok(self
            .inner
            .store
            .inbox_holds(session_key, message_id, limit)?)
    }

    /// Whether a turn applied on this node answered `message_id` of `session_key`.
    pub(crate) fn replica_answered(
        &self,
        session_key: &str,
        message_id: &str,
    ) -> Result<bool, Error> {
        Ok(self
            .inner
            .store
            .replica_answered(session_key, message_id, crate::clock::now_ms())?)
    }

    /// The highest changelog sequence applied on this node for `partition`.
    pub(crate) fn replica_applied(&self, partition: u32) -> Result<u64, Error> {
        Ok(self.inner.store.replica_applied(partition)?)
    }

    /// Applies another node's turn from the changelog to this node's copy of the session (with
    /// `marks`, in one transaction), then hands its reply to whoever waits for it here.
    pub(crate) async fn apply_replicated(
        &self,
        turn: ReplicatedTurn,
        marks: ReplicaMarks,
    ) -> Result<(), Error> {
        let store = self.inner.store.clone();
        let ReplicatedTurn {
            session_key,
            entries,
            mut reply,
        } = turn;
        let key = session_key.clone();
        let committed = on_blocking_pool("applying a replicated turn panicked", move || {
            store.thaw_session(&key)?;
            store.commit_turn(&TurnCommit {
                session_key: key,
                entries,
                consumed: Vec::new(),
                now_ms: crate::clock::now_ms(),
                channel_messages: Vec::new(),
                replica: Some(marks),
            })
        })
        .await?;
        self.inner
            .engine
            .agents()
            .for_key(&session_key)
            .context
            .invalidate(&session_key);
        reply.seq = committed.seqs.last().copied().unwrap_or_default();
        self.publish_remote_reply(reply);
        Ok(())
    }

    /// Whether this node stores anything of `session_key` (a record, hot or cold, or an
    /// unanswered message): what a delete would remove.
    pub(crate) fn stores_session(&self, session_key: &str) -> Result<bool, Error> {
        let store = &self.inner.store;
        Ok(store.find_session(session_key)?.is_some()
            || !store.pending(session_key, 0, 1)?.is_empty())
    }

    /// Applies another node's delete from the changelog (`seq` of `partition`) to this node's
    /// copy: the session's stored data goes, as on a single node, then the applied position
    /// moves past it. A crash between the two applies the delete again, which changes nothing
    /// (nothing after it in the changelog was applied yet).
    pub(crate) async fn apply_replicated_delete(
        &self,
        session_key: &str,
        partition: u32,
        seq: u64,
    ) -> Result<(), Error> {
        let store = self.inner.store.clone();
        let key = session_key.to_string();
        let gone = on_blocking_pool("applying a replicated delete panicked", move || {
            let gone = store.delete_session(&key)?;
            store.set_replica_applied(partition, seq)?;
            Ok::<_, crate::error::StoreError>(gone)
        })
        .await?;
        self.inner
            .engine
            .agents()
            .for_key(session_key)
            .context
            .invalidate(session_key);
        if let Some(gone) = gone {
            tracing::info!(
                session_key,
                entries = gone.entries,
                "session deleted by its owner"
            );
        }
        Ok(())
    }

    /// Records `seq` as applied for `partition` if it is past what is recorded (a changelog
    /// record that changes no session).
    #[cfg(feature = "cluster")]
    pub(crate) async fn advance_replica(&self, partition: u32, seq: u64) -> Result<(), Error> {
        let store = self.inner.store.clone();
        on_blocking_pool("recording an applied position panicked", move || {
            if store.replica_applied(partition)? < seq {
                store.set_replica_applied(partition, seq)?;
            }
            Ok::<_, crate::error::StoreError>(())
        })
        .await?;
        Ok(())
    }

    /// Replaces this node's copy of `partition` (of `partitions`) with a snapshot's: its
    /// `sessions` (every other local session of the partition goes) and its jobs' latest
    /// `runs`, then records `seq` as applied. The applied position is set to 0 first, so a
    /// crash half-way loads the snapshot again at the next start. Each session's messages
    /// are marked answered until `answered_until_ms` (the snapshot holds only answered turns).
    #[cfg(feature = "cluster")]
    pub(crate) async fn restore_replica(
        &self,
        partition: u32,
        partitions: u32,
        sessions: std::collections::BTreeMap<String, Vec<crate::store::TranscriptEntry>>,
        runs: std::collections::BTreeMap<String, Vec<crate::schedules::RunChange>>,
        seq: u64,
        answered_until_ms: u64,
    ) -> Result<(), Error> {
        /// Local sessions listed per page while looking for the partition's stale ones.
        const LIST_PAGE: usize = 1000;
        let store = self.inner.store.clone();
        let keys: Vec<String> = sessions.keys().cloned().collect();
        on_blocking_pool(
            "restoring a partition from its snapshot panicked",
            move || {
                store.set_replica_applied(partition, 0)?;
                let mut stale = Vec::new();
                let mut after: Option<String> = None;
                loop {
                    let page = store.list_sessions(after.as_deref(), LIST_PAGE)?;
                    let Some((last, _)) = page.last() else { break };
                    after = Some(last.clone());
                    stale.extend(page.into_iter().map(|(key, _)| key).filter(|key| {
                        crate::cluster::partition_of(key, partitions) == partition
                            && !sessions.contains_key(key)
                    }));
                }
                for key in stale {
                    store.delete_session(&key)?;
                }
                let now = crate::clock::now_ms();
                for (key, entries) in sessions {
                    store.delete_session(&key)?;
                    let answered = entries
                        .iter()
                        .filter_map(|e| e.message_id.clone())
                        .collect();
                    store.commit_turn(&TurnCommit {
                        session_key: key,
                        entries,
                        consumed: Vec::new(),
                        now_ms: now,
                        channel_messages: Vec::new(),
                        replica: Some(ReplicaMarks {
                            partition,
                            log_seq: 0,
                            answered,
                            expires_at_ms: answered_until_ms,
                        }),
                    })?;
                }
                for change in runs.into_values().flatten() {
                    change.apply(&store)?;
                }
                store.set_replica_applied(partition, seq)
            },
        )
        .await?;
        for key in keys {
            self.inner
                .engine
                .agents()
                .for_key(&key)
                .context
                .invalidate(&key);
        }
        Ok(())
    }

    /// Applies another node's scheduled run (its start or end, from the changelog at `seq`
    /// of `partition`) to this node's record of the job. Applied again after a crash before
    /// the position is written: it writes the same record.
    pub(crate) async fn apply_replicated_run(
        &self,
        change: crate::schedules::RunChange,
        partition: u32,
        seq: u64,
    ) -> Result<(), Error> {
        let store = self.inner.store.clone();
        on_blocking_pool("applying a replicated scheduled run panicked", move || {
            change.apply(&store)?;
            store.set_replica_applied(partition, seq)
        })
        .await?;
        Ok(())
    }

    /// This node's turns' streaming deltas, for the other cluster nodes (see
    /// `ReplyHub::export_deltas`); `None` if taken before.
    pub(crate) fn export_deltas(
        &self,
    ) -> Option<tokio::sync::mpsc::Receiver<Arc<crate::replies::Delta>>> {
        self.inner.replies.export_deltas()
    }

    /// Hands a streaming delta of another node's turn to this node's waiters and stream.
    pub(crate) fn publish_remote_delta(&self, delta: crate::replies::Delta) {
        self.inner.replies.publish_remote_delta(delta);
    }

    /// This node's turns' final replies, for the cluster nodes that do not keep their
    /// partitions (see `ReplyHub::export_replies`); `None` if taken before.
    pub(crate) fn export_replies(&self) -> Option<tokio::sync::mpsc::Receiver<Arc<Reply>>> {
        self.inner.replies.export_replies()
    }

    /// Hands a reply made on another node to this node's waiters and stream.
    pub(crate) fn publish_remote_reply(&self, reply: Reply) {
        self.inner.replies.publish_remote(reply);
    }
}

/// Runs store work `f` on the blocking pool (sled blocks); a panic in it is an invariant
/// error named by `what`.
async fn on_blocking_pool<T, E>(
    what: &'static str,
    f: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, Error>
where
    T: Send + 'static,
    E: Into<Error> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| Error::from(crate::error::StoreError::Invariant(what)))?
        .map_err(Into::into)
}
