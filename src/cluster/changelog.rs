//! [`Changelog`]: the partitions' changelogs as this node writes them. A turn is appended to
//! its partition's subject with JetStream's expected-last-subject-sequence set to the last
//! sequence this node's tenure wrote, so once another node has appended (its tenure record
//! first of all) this node's appends are refused: that refusal is the fence. After an append
//! the inbox messages the turn answered are acknowledged (their answer is in the log).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::publish::PublishAck;
use async_nats::jetstream::stream::{LastRawMessageErrorKind, Stream};
use async_nats::jetstream::{AckKind, Context, Message};
use bytes::Bytes;
use dashmap::DashMap;
use futures_util::future::BoxFuture;

use super::names::log_subject;
use super::record::LogRecord;
use super::{partition_of, Partition};
use crate::clock::now_ms;
use crate::metrics;
use crate::pipeline::{ReplicatedTurn, Replication, ReplicationError};
use crate::schedules::RunChange;
use crate::store::ReplicaMarks;

/// How long a node remembers that a message was answered (the marks live in its `dedupe`
/// tree and are pruned with it). A message still unanswered in an inbox after this long
/// would be answered again by a new owner; replies are due within `reply_timeout_ms`.
pub(super) const ANSWERED_MARK_TTL_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// Most tries at one append. A failed try (no quorum while JetStream elects a leader, a
/// timeout) is retried while the tenure lasts; a tenure ends at most `lease_ms` after its
/// last renewal, so the lease bounds the retries as well.
const MAX_APPEND_ATTEMPTS: u32 = 120;

/// First and longest pause between tries.
const APPEND_RETRY_FIRST: Duration = Duration::from_millis(50);
const APPEND_RETRY_MAX: Duration = Duration::from_secs(1);

/// One tenure of a partition on this node: appends go after `last`.
pub(super) struct Tenure {
    /// The lease's epoch.
    pub epoch: u64,
    /// The last changelog sequence of the partition this tenure wrote (or read, at takeover).
    last: Arc<tokio::sync::Mutex<u64>>,
}

/// This node's side of the changelogs, shared by the turns (appends), the partitions' owner
/// tasks (tenures, held acknowledgements) and the follower (which skips this tenure's turns).
pub(super) struct Changelog {
    js: Context,
    log: Stream,
    /// Numbers this node's turn records (see [`LogRecord::Turn`]'s `id`).
    appended: AtomicU64,
    node_id: String,
    partitions: u32,
    tenures: DashMap<Partition, Arc<Tenure>>,
    /// Inbox messages admitted here and not yet answered, by (session key, message id): they
    /// are acknowledged once the answering turn is in the changelog. Bounded by the inbox
    /// consumers' `max_ack_pending` per owned partition.
    held: DashMap<(String, String), (Partition, Message)>,
    /// How many of `held` each partition has (for its gauge).
    held_by_partition: DashMap<Partition, usize>,
}

impl Changelog {
    /// A changelog writer for node `node_id`.
    pub(super) fn new(js: Context, log: Stream, node_id: String, partitions: u32) -> Self {
        Self {
            js,
            log,
            appended: AtomicU64::new(0),
            node_id,
            partitions,
            tenures: DashMap::new(),
            held: DashMap::new(),
            held_by_partition: DashMap::new(),
        }
    }

    /// This node's id.
    pub(super) fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The partition of `session_key`.
    pub(super) fn partition_of(&self, session_key: &str) -> Partition {
        partition_of(session_key, self.partitions)
    }

    /// Starts a tenure of `partition` whose takeover record has sequence `last`.
    pub(super) fn begin(&self, partition: Partition, epoch: u64, last: u64) {
        self.tenures.insert(
            partition,
            Arc::new(Tenure {
                epoch,
                last: Arc::new(tokio::sync::Mutex::new(last)),
            }),
        );
    }

    /// Ends this node's tenure of `partition`: its turns are fenced from now on, and the inbox
    /// messages it held stay unacknowledged for the next owner.
    pub(super) fn end(&self, partition: Partition) {
        self.tenures.remove(&partition);
        self.held.retain(|_, (p, _)| *p != partition);
        self.held_by_partition.remove(&partition);
        metrics::cluster_partition_held(partition, 0);
    }

    /// The partitions this node has a tenure of now.
    pub(super) fn owned_partitions(&self) -> Vec<Partition> {
        let mut owned: Vec<Partition> = self.tenures.iter().map(|t| *t.key()).collect();
        owned.sort_unstable();
        owned
    }

    /// Whether this node has a tenure of `partition` now (its copy is its own commits').
    pub(super) fn has_tenure(&self, partition: Partition) -> bool {
        self.tenures.contains_key(&partition)
    }

    /// Whether `epoch` is this node's current tenure of `partition`.
    pub(super) fn is_current(&self, partition: Partition, epoch: u64) -> bool {
        self.tenures
            .get(&partition)
            .is_some_and(|t| t.epoch == epoch)
    }

    /// Holds `message` (admitted here) until the turn answering it is appended.
    pub(super) fn hold(
        &self,
        partition: Partition,
        session_key: String,
        message_id: String,
        message: Message,
    ) {
        if self
            .held
            .insert((session_key, message_id), (partition, message))
            .is_none()
        {
            self.count_held(partition, true);
        }
    }

    /// Counts a held message of `partition` in (`true`) or out, for its gauge.
    fn count_held(&self, partition: Partition, added: bool) {
        let mut count = self.held_by_partition.entry(partition).or_insert(0);
        *count = if added {
            count.saturating_add(1)
        } else {
            count.saturating_sub(1)
        };
        metrics::cluster_partition_held(partition, *count);
    }

    /// Stops holding a message (its answer is known some other way).
    pub(super) fn release(&self, session_key: &str, message_id: &str) {
        if let Some((_, (partition, _))) = self
            .held
            .remove(&(session_key.to_string(), message_id.to_string()))
        {
            self.count_held(partition, false);
        }
    }

    /// Messages held, over all partitions.
    pub(super) fn held_count(&self) -> usize {
        self.held.len()
    }

    /// Takes `partition`'s append lock for this node's current tenure; `None` if this node
    /// does not own the partition. Appends go one at a time per partition: each names the
    /// sequence the previous one got.
    pub(super) async fn lock(&self, partition: Partition) -> Option<AppendLock> {
        let tenure = self.tenures.get(&partition).map(|t| Arc::clone(&t))?;
        let last = Arc::clone(&tenure.last).lock_owned().await;
        Some(AppendLock {
            partition,
            tenure,
            last,
        })
    }

    /// [`Self::lock`] for an append of this node's own: without a tenure the append is
    /// fenced (counted as such).
    async fn lock_to_append(&self, partition: Partition) -> Result<AppendLock, ReplicationError> {
        match self.lock(partition).await {
            Some(lock) => Ok(lock),
            None => {
                metrics::cluster_append(partition, "fenced");
                Err(ReplicationError::Fenced { partition })
            }
        }
    }

    /// A fresh record id of this node's `epoch` (see [`LogRecord::Turn`]'s `id`).
    fn next_id(&self, epoch: u64) -> String {
        format!(
            "{}/{}/{}",
            self.node_id,
            epoch,
            self.appended.fetch_add(1, Ordering::Relaxed)
        )
    }

    async fn append_turn(&self, turn: &ReplicatedTurn) -> Result<ReplicaMarks, ReplicationError> {
        let partition = partition_of(&turn.session_key, self.partitions);
        let mut lock = self.lock_to_append(partition).await?;
        let epoch = lock.tenure.epoch;
        let id = self.next_id(epoch);
        let record = LogRecord::Turn {
            id: id.clone(),
            node: self.node_id.clone(),
            epoch,
            turn: Box::new(turn.clone()),
        };
        let sequence = self.append_locked(&mut lock, &id, &record).await?;
        drop(lock);
        for id in &turn.reply.in_reply_to {
            if let Some((_, (_, message))) =
                self.held.remove(&(turn.session_key.clone(), id.clone()))
            {
                self.count_held(partition, false);
                if let Err(e) = message.ack_with(AckKind::Ack).await {
                    // The answer is in the log: a redelivery finds its answered mark.
                    tracing::warn!(partition, error = %e, "could not acknowledge an answered inbox message");
                }
            }
        }
        Ok(ReplicaMarks {
            partition,
            log_seq: sequence,
            answered: turn.reply.in_reply_to.clone(),
            expires_at_ms: now_ms().saturating_add(ANSWERED_MARK_TTL_MS),
        })
    }

    /// Appends the deletion of `session_key` under `lock` (its partition's) and answers its
    /// sequence. The caller deletes the session here before it lets the lock go, so that on
    /// this node too the deletion comes after the turns appended before it and before those
    /// appended after it.
    pub(super) async fn append_delete(
        &self,
        lock: &mut AppendLock,
        session_key: &str,
    ) -> Result<u64, ReplicationError> {
        let epoch = lock.tenure.epoch;
        let id = self.next_id(epoch);
        let record = LogRecord::Delete {
            id: id.clone(),
            node: self.node_id.clone(),
            epoch,
            session_key: session_key.to_string(),
        };
        self.append_locked(lock, &id, &record).await
    }

    /// Appends a scheduled run's `change` (its job's turns run in `session_key`), fenced by
    /// this node's tenure of the session's partition.
    async fn append_schedule_run(
        &self,
        session_key: &str,
        change: &RunChange,
    ) -> Result<(), ReplicationError> {
        let partition = partition_of(session_key, self.partitions);
        let mut lock = self.lock_to_append(partition).await?;
        let epoch = lock.tenure.epoch;
        let id = self.next_id(epoch);
        let record = LogRecord::ScheduleRun {
            id: id.clone(),
            node: self.node_id.clone(),
            epoch,
            change: change.clone(),
        };
        self.append_locked(&mut lock, &id, &record).await?;
        Ok(())
    }

    /// Appends a marker under `lock` (a [`LogRecord::Tenure`] restating the tenure, which
    /// every follower ignores) and answers its sequence: the partition's last record, which a
    /// snapshot is then taken as of. One try: a refusal means a new owner (its next turn's
    /// append finds out too), a failure that this snapshot waits for the next round.
    pub(super) async fn append_marker(
        &self,
        lock: &mut AppendLock,
    ) -> Result<u64, ReplicationError> {
        let partition = lock.partition;
        let epoch = lock.tenure.epoch;
        if !self.is_current(partition, epoch) {
            return Err(ReplicationError::Fenced { partition });
        }
        let record = LogRecord::Tenure {
            node: self.node_id.clone(),
            epoch,
        };
        let body = Bytes::from(
            serde_json::to_vec(&record)
                .map_err(|e| ReplicationError::Failed(format!("cannot encode the record: {e}")))?,
        );
        let message = PublishMessage::build()
            .payload(body)
            .expected_last_subject_sequence(*lock.last);
        let sent = self.publish(partition, message).await;
        match sent {
            Ok(ack) => {
                *lock.last = ack.sequence;
                Ok(ack.sequence)
            }
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
                Err(ReplicationError::Fenced { partition })
            }
            Err(e) => Err(ReplicationError::Failed(e.to_string())),
        }
    }

    /// The epoch of the tenure `lock` is under.
    pub(super) fn lock_epoch(lock: &AppendLock) -> u64 {
        lock.tenure.epoch
    }

    /// The partition's last record as `lock`'s tenure knows it (it wrote or read it).
    pub(super) fn lock_last(lock: &AppendLock) -> u64 {
        *lock.last
    }

    /// Acknowledges the inbox messages of `session_key` held here: the session was deleted
    /// with them unanswered (as a single node deletes its pending messages), so they must not
    /// be delivered again.
    pub(super) async fn drop_held(&self, session_key: &str) {
        let ids: Vec<(String, String)> = self
            .held
            .iter()
            .filter(|e| e.key().0 == session_key)
            .map(|e| e.key().clone())
            .collect();
        for key in ids {
            if let Some((_, (partition, message))) = self.held.remove(&key) {
                self.count_held(partition, false);
                if let Err(e) = message.ack_with(AckKind::Ack).await {
                    tracing::warn!(partition, error = %e, "could not acknowledge a deleted session's inbox message; it may be answered anew");
                }
            }
        }
    }

    /// Publishes `message` to the partition's changelog subject and waits for JetStream's
    /// acknowledgement (a fenced append is refused as `WrongLastSequence`).
    async fn publish(
        &self,
        partition: Partition,
        message: PublishMessage,
    ) -> Result<PublishAck, PublishError> {
        self.js
            .send_publish(log_subject(partition), message)
            .await?
            .await
    }

    /// Appends `record` (its id `id`) to the partition of `lock`, fenced by its tenure, with
    /// retries; answers the sequence it landed at.
    async fn append_locked(
        &self,
        lock: &mut AppendLock,
        id: &str,
        record: &LogRecord,
    ) -> Result<u64, ReplicationError> {
        let partition = lock.partition;
        let epoch = lock.tenure.epoch;
        let fenced = ReplicationError::Fenced { partition };
        let body = Bytes::from(
            serde_json::to_vec(record)
                .map_err(|e| ReplicationError::Failed(format!("cannot encode the record: {e}")))?,
        );
        let mut pause = APPEND_RETRY_FIRST;
        let mut appended = None;
        for attempt in 1..=MAX_APPEND_ATTEMPTS {
            if !self.is_current(partition, epoch) {
                metrics::cluster_append(partition, "fenced");
                return Err(fenced);
            }
            let message = PublishMessage::build()
                .payload(body.clone())
                .message_id(id)
                .expected_last_subject_sequence(*lock.last);
            let sent = self.publish(partition, message).await;
            match sent {
                Ok(ack) => {
                    appended = Some(ack.sequence);
                    break;
                }
                Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
                    // Our own earlier try may have landed with its answer lost; otherwise
                    // someone else appended: another node holds the partition.
                    match self.last_record_is(partition, id).await {
                        Ok(Some(seq)) => {
                            appended = Some(seq);
                            break;
                        }
                        Ok(None) => {
                            tracing::warn!(
                                partition,
                                epoch,
                                "changelog append refused: the partition has a new owner"
                            );
                            self.tenures.remove_if(&partition, |_, t| t.epoch == epoch);
                            return Err(fenced);
                        }
                        Err(e) => {
                            tracing::warn!(partition, attempt, error = %e, "cannot read the changelog's last record; retrying");
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(partition, attempt, error = %e, "changelog append failed; retrying");
                }
            }
            metrics::cluster_append(partition, "retried");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(APPEND_RETRY_MAX);
        }
        let Some(sequence) = appended else {
            metrics::cluster_append(partition, "failed");
            return Err(ReplicationError::Failed(format!(
                "partition {partition}'s changelog took no append in {MAX_APPEND_ATTEMPTS} tries"
            )));
        };
        metrics::cluster_append(partition, "ok");
        *lock.last = sequence;
        Ok(sequence)
    }
}

/// A partition's append lock under this node's tenure: appends (and a delete's local
/// deletion) happen one at a time while it is held.
pub(super) struct AppendLock {
    partition: Partition,
    tenure: Arc<Tenure>,
    /// The last sequence the tenure wrote.
    last: tokio::sync::OwnedMutexGuard<u64>,
}

impl Changelog {
    /// The sequence of `partition`'s last changelog record if it is the record `id`.
    async fn last_record_is(
        &self,
        partition: Partition,
        id: &str,
    ) -> Result<Option<u64>, Box<dyn std::error::Error + Send + Sync>> {
        let last = match self
            .log
            .get_last_raw_message_by_subject(&log_subject(partition))
            .await
        {
            Ok(m) => m,
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => return Ok(None),
            Err(e) => return Err(Box::new(e)),
        };
        Ok(match serde_json::from_slice::<LogRecord>(&last.payload) {
            Ok(
                LogRecord::Turn { id: found, .. }
                | LogRecord::Delete { id: found, .. }
                | LogRecord::ScheduleRun { id: found, .. },
            ) if found == id => Some(last.sequence),
            _ => None,
        })
    }
}

impl Replication for Changelog {
    fn owns(&self, session_key: &str) -> bool {
        self.tenures
            .contains_key(&partition_of(session_key, self.partitions))
    }

    fn append<'a>(
        &'a self,
        turn: &'a ReplicatedTurn,
    ) -> BoxFuture<'a, Result<ReplicaMarks, ReplicationError>> {
        Box::pin(self.append_turn(turn))
    }

    fn append_run<'a>(
        &'a self,
        session_key: &'a str,
        change: &'a RunChange,
    ) -> BoxFuture<'a, Result<(), ReplicationError>> {
        Box::pin(self.append_schedule_run(session_key, change))
    }
}
