//! One partition's owner task, run while this node holds the partition's lease.
//!
//! Takeover, in order: append a tenure record to the partition's changelog against the last
//! sequence there (from then on the previous owner's appends are refused); wait until the
//! follower has applied everything before it (the sessions are restored here); start the
//! tenure (turns may append); then read the partition's inbox from its oldest unanswered
//! message, through a fresh consumer, admitting each message into this node's runtime in
//! inbox order — answered ones (a mark says so) are only acknowledged.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{LastRawMessageErrorKind, Stream};
use async_nats::jetstream::{AckKind, Context, Message};
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::{watch, Semaphore};

use super::changelog::Changelog;
use super::error::{ClusterError, NatsError};
use super::follower::Progress;
use super::names::{inbox_consumer, inbox_subject, log_subject};
use super::record::{InboxEnvelope, LogRecord};
use super::Partition;
use crate::inbound::Refusal;
use crate::metrics;
use crate::runtime::{Runtime, SubmitError};

/// Most inbox messages of one partition admitted here and not yet answered; JetStream stops
/// delivering past it, so a slow partition holds back its own inbox, nothing else.
pub(super) const MAX_UNANSWERED_PER_PARTITION: i64 = 4_096;

/// How long JetStream waits for an acknowledgement before it delivers a message again. It
/// bounds how late a delivery lost in transit (the connection cut as the server sent it) is
/// repeated; a message still queued here when it comes again is only held anew (see
/// `Owner::admit`), so a long turn costs a redelivery per period, nothing more.
pub(super) const INBOX_ACK_WAIT: Duration = Duration::from_secs(15);

/// How long a message the runtime refused for now (queue cap, disk budget) waits before it is
/// delivered again.
pub(super) const REFUSED_RETRY: Duration = Duration::from_secs(1);

/// First and longest pause between attempts to append the tenure record. An append fails
/// while JetStream elects the changelog's new leader (4–9 s after a server dies); the task
/// keeps trying, ever later up to the cap, for as long as this node holds the partition (it
/// is aborted when the lease is lost). It once gave up after five tries (about 1 s), and
/// nothing tried again while the lease was held: the partition's inbox was never served.
const TAKEOVER_RETRY_FIRST: Duration = Duration::from_millis(100);
const TAKEOVER_RETRY_MAX: Duration = Duration::from_secs(5);

/// How often a takeover still waiting for the follower to apply the changelog up to its
/// tenure record says so (a follower stuck there keeps the partition unserved).
const TAKEOVER_WAIT_REPORT: Duration = Duration::from_secs(10);

/// Inbox consumers this node replaces (delete and create) at once, over all its partitions.
/// A takeover gains many partitions together; creating all their consumers at once floods
/// JetStream's meta leader, which answers "temporarily unavailable" (10008) and stalls
/// partitions nobody moved. The rest wait for a permit.
pub(super) const MAX_CONSUMER_CREATES: usize = 4;

/// Pause before an inbox consumer that ended without an error is opened again.
const REOPEN_PAUSE: Duration = Duration::from_millis(200);

/// First and longest pause before an inbox consumer that failed (a create refused with 10008,
/// a timeout) is tried again: the back-off doubles per failure in a row, jittered, so the
/// partitions of one takeover do not come back together.
const REOPEN_RETRY_FIRST: Duration = Duration::from_millis(200);
const REOPEN_RETRY_MAX: Duration = Duration::from_secs(5);

/// The pause before the inbox consumer is opened again after `failures` failures in a row.
fn reopen_pause(failures: u32) -> Duration {
    match failures {
        0 => REOPEN_PAUSE,
        n => crate::backoff::jittered(REOPEN_RETRY_FIRST, REOPEN_RETRY_MAX, n - 1),
    }
}

/// Checks that a consumer's deliveries come without a gap: JetStream numbers each delivery
/// of a consumer (redeliveries included) 1, 2, 3…, so a skipped number is a delivery that
/// never arrived.
#[derive(Debug, Default)]
struct DeliveryOrder {
    last: u64,
}

impl DeliveryOrder {
    /// Whether a delivery numbered `seq` (`None`: unreadable) follows the last one.
    fn next_is(&mut self, seq: Option<u64>) -> bool {
        match seq {
            Some(seq) if seq == self.last + 1 => {
                self.last = seq;
                true
            }
            _ => false,
        }
    }
}

/// The error of a JetStream request `op` on partition `p`, from its boxed source.
fn jet(op: &'static str, p: Partition) -> impl Fn(NatsError) -> ClusterError {
    move |source| ClusterError::Jet {
        op,
        partition: p,
        source,
    }
}

/// The pause after `failures` failed appends of a tenure record in a row (1 for the first).
fn takeover_pause(failures: u32) -> Duration {
    crate::backoff::jittered(
        TAKEOVER_RETRY_FIRST,
        TAKEOVER_RETRY_MAX,
        failures.saturating_sub(1),
    )
}

/// Runs `append` (the tenure record's) until it succeeds, pausing [`takeover_pause`] after
/// each failure; the record's sequence. Never gives up: the owner task is aborted when the
/// partition is lost, and a task that stopped trying would leave its partition unserved
/// for as long as this node holds the lease.
async fn append_until_done<F, Fut>(p: Partition, mut append: F) -> u64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<u64, ClusterError>>,
{
    let mut failures = 0u32;
    loop {
        match append().await {
            Ok(seq) => return seq,
            Err(e) => {
                failures = failures.saturating_add(1);
                tracing::warn!(partition = p, error = %e, failures, "takeover: retrying");
                tokio::time::sleep(takeover_pause(failures)).await;
            }
        }
    }
}

/// What an owner task needs.
pub(super) struct Owner {
    pub(crate) runtime: Runtime,
    pub(crate) js: Context,
    pub(crate) inbox: Stream,
    pub(crate) log: Stream,
    pub(crate) changelog: Arc<Changelog>,
    pub(crate) position: watch::Receiver<Progress>,
    pub(crate) partition: Partition,
    pub(crate) epoch: u64,
    /// This node's permits to replace an inbox consumer ([`MAX_CONSUMER_CREATES`]).
    pub(crate) creates: Arc<Semaphore>,
}

impl Owner {
    /// Takes the partition over and serves its inbox until aborted.
    pub(super) async fn run(mut self) {
        let p = self.partition;
        let marker = append_until_done(p, || self.append_tenure()).await;
        // Every turn before the marker is applied here before this tenure runs one.
        loop {
            let applied = tokio::time::timeout(
                TAKEOVER_WAIT_REPORT,
                self.position.wait_for(|seen| seen.covers(p, marker)),
            )
            .await
            .map(|seen| seen.is_ok());
            match applied {
                Ok(true) => break,
                // The follower is gone: the node is stopping.
                Ok(false) => return,
                Err(_) => {
                    let seq = self.position.borrow().seq;
                    tracing::warn!(
                        partition = p,
                        marker,
                        applied = seq,
                        "takeover: still waiting for the changelog follower to reach the tenure record"
                    );
                }
            }
        }
        self.changelog.begin(p, self.epoch, marker);
        tracing::info!(
            partition = p,
            epoch = self.epoch,
            marker,
            "partition taken over"
        );
        let mut order = DeliveryOrder::default();
        let mut fresh = true;
        let mut failures = 0;
        loop {
            match self.serve_inbox(&mut order, &mut fresh).await {
                Ok(()) => failures = 0,
                Err(e) => {
                    failures += 1;
                    tracing::warn!(partition = p, error = %e, failures, "inbox consumer: reopening");
                }
            }
            tokio::time::sleep(reopen_pause(failures)).await;
        }
    }

    /// Appends this tenure's record after the partition's last; its sequence.
    async fn append_tenure(&self) -> Result<u64, ClusterError> {
        let p = self.partition;
        let jet = |op| jet(op, p);
        let last = match self
            .log
            .get_last_raw_message_by_subject(&log_subject(p))
            .await
        {
            Ok(m) => m.sequence,
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => 0,
            Err(e) => return Err(jet("reading the changelog's last record")(Box::new(e))),
        };
        let record = LogRecord::Tenure {
            node: self.changelog.node_id().to_string(),
            epoch: self.epoch,
        };
        let body = serde_json::to_vec(&record).map_err(|e| jet("encoding")(Box::new(e)))?;
        let ack = self
            .js
            .send_publish(
                log_subject(p),
                PublishMessage::build()
                    .payload(Bytes::from(body))
                    .expected_last_subject_sequence(last),
            )
            .await
            .map_err(|e| jet("appending the tenure record")(Box::new(e)))?
            .await
            .map_err(|e| jet("appending the tenure record")(Box::new(e)))?;
        Ok(ack.sequence)
    }

    /// Admits what the partition's inbox consumer delivers. `fresh`: replace the consumer
    /// first (at takeover the previous owner's may still be pulling; after a lost delivery a
    /// new one delivers everything unanswered again, in order); after any other failure the
    /// consumer is reused, so a slow server's half-finished create is not thrown away.
    /// `order` follows its deliveries across reuses: a consumer this task did not create
    /// fresh shows up as a gap, and is replaced.
    async fn serve_inbox(
        &self,
        order: &mut DeliveryOrder,
        fresh: &mut bool,
    ) -> Result<(), ClusterError> {
        let p = self.partition;
        let jet = |op| jet(op, p);
        let name = inbox_consumer(p);
        let permit = Arc::clone(&self.creates)
            .acquire_owned()
            .await
            .map_err(|e| jet("waiting to open the inbox consumer")(Box::new(e)))?;
        if *fresh {
            // A missing consumer is fine: this is the partition's first owner.
            let _ = self.inbox.delete_consumer(&name).await;
            *order = DeliveryOrder::default();
            *fresh = false;
        }
        let consumer = self
            .inbox
            .get_or_create_consumer(
                &name,
                pull::Config {
                    durable_name: Some(name.clone()),
                    filter_subject: inbox_subject(p),
                    // A work queue keeps only unacknowledged messages: "all" is the oldest
                    // unanswered one.
                    deliver_policy: DeliverPolicy::All,
                    ack_policy: AckPolicy::Explicit,
                    ack_wait: INBOX_ACK_WAIT,
                    max_ack_pending: MAX_UNANSWERED_PER_PARTITION,
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| jet("opening the inbox consumer")(Box::new(e)))?;
        drop(permit);
        let mut messages = consumer
            .messages()
            .await
            .map_err(|e| jet("reading the inbox")(Box::new(e)))?;
        while let Some(message) = messages.next().await {
            let message = message.map_err(|e| jet("reading the inbox")(Box::new(e)))?;
            let consumer_seq = message.info().map(|i| i.consumer_sequence).ok();
            if !order.next_is(consumer_seq) {
                // A delivery was lost on the way (a connection cut): taking this one would
                // answer it before the lost one, out of order. A new consumer delivers
                // everything unanswered again, in inbox order.
                tracing::warn!(
                    partition = p,
                    "inbox delivery lost in transit; reading the inbox again in order"
                );
                *fresh = true;
                return Ok(());
            }
            self.admit(message).await;
        }
        Ok(())
    }

    async fn admit(&self, message: Message) {
        let p = self.partition;
        let envelope: InboxEnvelope = match serde_json::from_slice(&message.payload) {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(partition = p, error = %e, "undecodable inbox message: dropped");
                let _ = message.ack_with(AckKind::Term).await;
                return;
            }
        };
        let streamed = envelope.streamed;
        let event = envelope.into_event();
        let key = self.runtime.session_key_of(&event);
        let id = event.message.message_id.clone();
        let (stream_seq, delivered) = message
            .info()
            .map(|i| (i.stream_sequence, i.delivered))
            .unwrap_or_default();
        tracing::debug!(partition = p, session_key = %key, message_id = %id, stream_seq, delivered, "inbox message");
        // Still queued here (delivered again while its turn is coming, or left from an earlier
        // tenure): its turn acknowledges this delivery. Read before the answered mark: the
        // commit that consumes the entry writes the mark in the same transaction, so one of
        // the two reads sees it. Neither: admitted (again, if an earlier copy here ended
        // without an answer).
        match self.runtime.inbox_holds(&key, &id) {
            Ok(true) => {
                metrics::cluster_inbox(p, "queued");
                self.changelog.hold(p, key, id, message);
                return;
            }
            Ok(false) => {}
            Err(e) => {
                tracing::error!(partition = p, error = %e, "cannot read the inbox; retried later");
                let _ = message.ack_with(AckKind::Nak(Some(REFUSED_RETRY))).await;
                return;
            }
        }
        match self.runtime.replica_answered(&key, &id) {
            Ok(true) => {
                metrics::cluster_inbox(p, "answered");
                self.changelog.release(&key, &id);
                let _ = message.ack_with(AckKind::Ack).await;
                return;
            }
            Ok(false) => {}
            Err(e) => {
                tracing::error!(partition = p, error = %e, "cannot read answered marks; retried later");
                let _ = message.ack_with(AckKind::Nak(Some(REFUSED_RETRY))).await;
                return;
            }
        }
        match self.runtime.admit_replicated(event, streamed).await {
            Ok(_) => {
                metrics::cluster_inbox(p, "admitted");
                self.changelog.hold(p, key, id, message);
            }
            Err(SubmitError::Refused(Refusal::Dropped(_) | Refusal::OverQuota(_))) => {
                metrics::cluster_inbox(p, "dropped");
                let _ = message.ack_with(AckKind::Ack).await;
            }
            Err(SubmitError::Refused(refusal)) => {
                metrics::cluster_inbox(p, "refused");
                tracing::debug!(partition = p, %refusal, "inbox message refused for now");
                let _ = message.ack_with(AckKind::Nak(Some(REFUSED_RETRY))).await;
            }
            Err(SubmitError::Failed(crate::error::Error::Inbound(e))) => {
                // Validated where it was accepted; a node with other limits may refuse it.
                metrics::cluster_inbox(p, "invalid");
                tracing::error!(partition = p, error = %e, "invalid inbox message: dropped");
                let _ = message.ack_with(AckKind::Term).await;
            }
            Err(SubmitError::Failed(e)) => {
                metrics::cluster_inbox(p, "refused");
                tracing::warn!(partition = p, error = %e, "inbox message not admitted; retried later");
                let _ = message.ack_with(AckKind::Nak(Some(REFUSED_RETRY))).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::{
        append_until_done, reopen_pause, takeover_pause, DeliveryOrder, REOPEN_PAUSE,
        REOPEN_RETRY_FIRST, REOPEN_RETRY_MAX, TAKEOVER_RETRY_FIRST, TAKEOVER_RETRY_MAX,
    };
    use crate::cluster::error::ClusterError;

    /// A changelog leader election longer than any fixed number of quick tries: the
    /// takeover keeps appending until the record goes in.
    #[tokio::test(start_paused = true)]
    async fn a_takeover_outlasts_a_changelog_leader_election() {
        let tries = AtomicU32::new(0);
        let started = tokio::time::Instant::now();
        let marker = append_until_done(3, || {
            let n = tries.fetch_add(1, Ordering::SeqCst) + 1;
            let now = tokio::time::Instant::now();
            async move {
                // JetStream has no changelog leader for the first 30 s (virtual).
                if now.duration_since(started) < std::time::Duration::from_secs(30) {
                    Err(ClusterError::Runtime(format!("no leader ({n})")))
                } else {
                    Ok(42)
                }
            }
        })
        .await;
        assert_eq!(marker, 42);
        assert!(
            tries.load(Ordering::SeqCst) > 5,
            "more than the old five tries"
        );
    }

    #[test]
    fn takeover_tries_come_ever_later_up_to_the_cap() {
        assert!(takeover_pause(1) <= TAKEOVER_RETRY_FIRST);
        assert!(
            takeover_pause(5) >= TAKEOVER_RETRY_FIRST * 8,
            "doubled per failure"
        );
        for failures in [1, 2, 10, u32::MAX] {
            assert!(takeover_pause(failures) <= TAKEOVER_RETRY_MAX, "{failures}");
        }
        assert!(takeover_pause(u32::MAX) >= TAKEOVER_RETRY_MAX / 2);
    }

    #[test]
    fn a_consumer_that_keeps_failing_is_retried_ever_later_up_to_the_cap() {
        assert_eq!(reopen_pause(0), REOPEN_PAUSE);
        let first = reopen_pause(1);
        assert!(
            first >= REOPEN_RETRY_FIRST / 2 && first <= REOPEN_RETRY_FIRST,
            "{first:?}"
        );
        let fourth = reopen_pause(4);
        assert!(
            fourth >= REOPEN_RETRY_FIRST * 4,
            "doubled per failure: {fourth:?}"
        );
        for failures in [10, 100, u32::MAX] {
            let pause = reopen_pause(failures);
            assert!(
                pause >= REOPEN_RETRY_MAX / 2 && pause <= REOPEN_RETRY_MAX,
                "{failures}: {pause:?}"
            );
        }
    }

    #[test]
    fn a_skipped_or_unreadable_delivery_number_is_a_gap() {
        let mut order = DeliveryOrder::default();
        assert!(order.next_is(Some(1)));
        assert!(order.next_is(Some(2)));
        assert!(!order.next_is(Some(4)), "3 never came");
        let mut order = DeliveryOrder::default();
        assert!(!order.next_is(Some(2)), "1 never came");
        assert!(!DeliveryOrder::default().next_is(None));
    }
}
