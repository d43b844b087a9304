//! The follower: one task per node reading the changelog in order and applying other nodes'
//! turns of the partitions this node replicates (owns or is a standby of: `membership`'s
//! follow set) to this node's sled (a cache of the changelog), then handing their replies to
//! whoever waits for them here. So a replica serves its sessions' reads and answers its own
//! HTTP waiters, and a standby taking a partition over has it restored already.
//!
//! It reads the records of every partition (one ordered consumer, so one position to wait
//! for) and skips those it does not follow. When the follow set gains a partition whose
//! applied position is behind the follower's, it reads again from there: the records of the
//! partitions it already had are skipped by their applied positions. [`Progress`] says which
//! partitions are complete up to its position, which is what an owner taking a partition
//! over waits for, and which are caught up (the follower reached the changelog's end since
//! it gained them; until then this node forwards their reads to a node that keeps them).
//!
//! A turn is applied once: the position applied per partition is written in the turn's own
//! transaction, and a turn at or below it is skipped; this node's current tenures' turns are
//! skipped too (their delivery committed them here). A delete (`deletes`) is applied the
//! same way, in changelog order, except on the owner that appended it (it deleted its copy
//! under the partition's append lock); so is a scheduled run's start or end (the job's runs
//! and next due time, written again harmlessly if a crash comes before the position).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{pull, DeliverPolicy};
use async_nats::jetstream::stream::Stream;
use futures_util::StreamExt;
use tokio::sync::watch;

use super::changelog::{Changelog, ANSWERED_MARK_TTL_MS};
use super::names::{partition_of_subject, LOG_SUBJECTS};
use super::record::LogRecord;
use super::snapshot::{behind_hole, must_load};
use super::snapshots::Snapshots;
use super::Partition;
use crate::clock::now_ms;
use crate::runtime::Runtime;
use crate::store::ReplicaMarks;

/// Pause before the follower reopens its consumer after an error.
const REOPEN_PAUSE: Duration = Duration::from_millis(200);

/// How long the follower's consumer may deliver nothing before the follower compares its
/// position with the changelog's last record ([`StallWatch`]).
const STALL_CHECK: Duration = Duration::from_secs(5);

/// Tells a consumer that went quiet because nothing is new from one that stopped delivering
/// (the likely cause of a replica found stale for good after a NATS server's death: its
/// follower logged no error, so its consumer delivered nothing and said nothing). At each quiet
/// [`STALL_CHECK`] the changelog's last sequence is noted; if a record that was already
/// there at the previous check is still not processed, the consumer is stalled and is
/// reopened from the position. A record published during a check is only counted at the
/// next one, so a delivery on its way is not taken for a stall.
#[derive(Debug, Default)]
struct StallWatch {
    /// The changelog's last sequence at the previous quiet check, when beyond the position.
    behind: Option<u64>,
}

impl StallWatch {
    /// A quiet check: `processed` the follower's position, `last` the changelog's last
    /// sequence now. Whether the consumer is stalled.
    fn check(&mut self, processed: u64, last: u64) -> bool {
        let stalled = self.behind.is_some_and(|earlier| processed < earlier);
        self.behind = (last > processed).then_some(last);
        stalled
    }

    /// A record came: the consumer delivers.
    fn delivered(&mut self) {
        self.behind = None;
    }
}

/// The follower's consumer delivered nothing while the changelog had records past its
/// position.
#[derive(Debug, thiserror::Error)]
#[error("the changelog consumer delivered nothing up to sequence {last} for {STALL_CHECK:?} (position {processed}): stalled")]
struct Stalled {
    processed: u64,
    last: u64,
}

/// Where the follower is: what an owner taking a partition over, a delete and a read wait
/// for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Progress {
    /// The last changelog stream sequence processed (applied, or skipped as not followed).
    pub(crate) seq: u64,
    /// The partitions followed: each one's records up to `seq` are applied here.
    pub(crate) followed: BTreeSet<Partition>,
    /// Followed partitions gained since the follower last reached the changelog's end: their
    /// copies here may lag far behind.
    pub(crate) catching_up: BTreeSet<Partition>,
    /// Whether the last record processed was the changelog's last (nothing pending then).
    pub(crate) at_end: bool,
}

impl Progress {
    /// Whether every record of `partition` up to `seq` is applied here.
    pub(crate) fn covers(&self, partition: Partition, seq: u64) -> bool {
        self.seq >= seq && self.followed.contains(&partition)
    }

    /// Whether this node keeps `partition` and has caught up with it: it serves its reads.
    pub(crate) fn keeps(&self, partition: Partition) -> bool {
        self.followed.contains(&partition) && !self.catching_up.contains(&partition)
    }

    /// The follower processed `seq`, with `pending` records after it in the changelog.
    fn processed(&mut self, seq: u64, pending: u64) {
        self.seq = seq;
        self.reached(pending == 0);
    }

    /// Whether the follower is at the changelog's end: then every followed partition is
    /// caught up.
    fn reached(&mut self, at_end: bool) {
        self.at_end = at_end;
        if at_end {
            self.catching_up.clear();
        }
    }

    /// Follows `wanted` from now on; `restart`: the sequence the follower goes back to (to
    /// read gained partitions again), if it does.
    fn refollow(&mut self, wanted: BTreeSet<Partition>, restart: Option<u64>) {
        let already_there = restart.is_none() && self.at_end;
        if !already_there {
            let gained: Vec<Partition> = wanted.difference(&self.followed).copied().collect();
            self.catching_up.extend(gained);
        }
        self.catching_up.retain(|p| wanted.contains(p));
        self.followed = wanted;
        if let Some(seq) = restart {
            self.seq = seq;
            self.at_end = false;
        }
    }
}

/// The follower's state: where it is in the changelog stream.
pub(super) struct Follower {
    runtime: Runtime,
    log: Stream,
    changelog: Arc<Changelog>,
    partitions: u32,
    position: watch::Sender<Progress>,
    /// Where a partition whose records were purged before they were applied here is loaded
    /// from.
    snapshots: Snapshots,
}

impl Follower {
    /// A follower of `log` for `runtime`; `position` hears its progress.
    pub(super) fn new(
        runtime: Runtime,
        log: Stream,
        changelog: Arc<Changelog>,
        partitions: u32,
        position: watch::Sender<Progress>,
        snapshots: Snapshots,
    ) -> Self {
        Self {
            runtime,
            log,
            changelog,
            partitions,
            position,
            snapshots,
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

    /// Follows the partitions `follow` names until the task is aborted.
    pub(super) async fn run(self, mut follow: watch::Receiver<BTreeSet<Partition>>) {
        let start = self.start();
        // Everything up to `start` is applied for every partition: a partition gained later
        // and applied only below it is read again from there.
        self.position.send_modify(|p| p.seq = start);
        let mut next = start + 1;
        let wanted = follow.borrow_and_update().clone();
        if let Some(restart) = self.refollow(wanted) {
            next = next.min(restart);
        }
        loop {
            match self.follow_from(next, &mut follow).await {
                Ok(Some(restart)) => {
                    next = restart;
                    continue;
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, from = next, "changelog follower: reopening"),
            }
            next = self.position.borrow().seq + 1;
            tokio::time::sleep(REOPEN_PAUSE).await;
        }
    }

    /// Follows `wanted` from now on. When it gains a partition applied only up to below the
    /// position, the position goes back there (so nobody takes the partition for caught up
    /// before it is) and the sequence to read again from is returned.
    fn refollow(&self, wanted: BTreeSet<Partition>) -> Option<u64> {
        let current = self.position.borrow().clone();
        let behind = wanted
            .difference(&current.followed)
            .map(|p| self.runtime.replica_applied(*p).unwrap_or(0))
            .min()
            .filter(|applied| *applied < current.seq);
        if let Some(applied) = behind {
            tracing::info!(
                from = applied + 1,
                "changelog follower: catching up gained partitions"
            );
        }
        self.position.send_modify(|p| p.refollow(wanted, behind));
        behind.map(|applied| applied + 1)
    }

    /// Reads from `from` until an error, or until `follow` gains a partition that needs an
    /// earlier start (`Ok(Some(start))`).
    async fn follow_from(
        &self,
        from: u64,
        follow: &mut watch::Receiver<BTreeSet<Partition>>,
    ) -> Result<Option<u64>, crate::cluster::NatsError> {
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
        if consumer.cached_info().num_pending == 0 {
            self.position.send_modify(|p| p.reached(true));
        }
        let mut messages = consumer.messages().await?;
        // Without a membership (it stopped) the follow set stays as it is.
        let mut membership = true;
        let mut watch = StallWatch::default();
        loop {
            tokio::select! {
                biased;
                changed = follow.changed(), if membership => {
                    if changed.is_err() {
                        membership = false;
                        continue;
                    }
                    let wanted = follow.borrow_and_update().clone();
                    if let Some(restart) = self.refollow(wanted) {
                        return Ok(Some(restart));
                    }
                }
                message = messages.next() => {
                    let Some(message) = message else { return Ok(None) };
                    let message = message?;
                    let info = message.info()?;
                    let (seq, pending) = (info.stream_sequence, info.pending);
                    let last = self.position.borrow().seq;
                    if seq <= last {
                        continue;
                    }
                    if seq > last + 1 {
                        // Records were purged before this node applied them: the partitions
                        // that had some there are loaded from their snapshots first.
                        self.bootstrap(seq).await?;
                    }
                    self.apply(&message.subject, seq, &message.payload).await;
                    self.position.send_modify(|p| p.processed(seq, pending));
                    watch.delivered();
                }
                () = tokio::time::sleep(STALL_CHECK) => {
                    let last = self.log.get_info().await?.state.last_sequence;
                    let processed = self.position.borrow().seq;
                    if watch.check(processed, last) {
                        return Err(Box::new(Stalled { processed, last }));
                    }
                }
            }
        }
    }

    /// The changelog goes on at `next`, after a purged stretch: every followed partition
    /// applied here only below it whose newest snapshot is newer than its copy here is loaded
    /// from that snapshot (its records up to the snapshot are skipped afterwards by the
    /// applied position). A partition this node has a tenure of is its own commits' and is
    /// left alone. An error stops the follower before `next` (it reopens and tries again):
    /// nothing is skipped silently.
    async fn bootstrap(&self, next: u64) -> Result<(), crate::cluster::NatsError> {
        let followed = self.position.borrow().followed.clone();
        for partition in followed {
            if self.changelog.has_tenure(partition) {
                continue;
            }
            let applied = self.runtime.replica_applied(partition)?;
            if !behind_hole(applied, next) {
                continue;
            }
            let Some((head, _)) = self.snapshots.head(partition).await? else {
                continue;
            };
            if !must_load(applied, next, Some(head.seq)) {
                continue;
            }
            let state = self.snapshots.load(partition, &head).await?;
            let sessions = state.sessions.len();
            self.runtime
                .restore_replica(
                    partition,
                    self.partitions,
                    state.sessions,
                    state.runs,
                    head.seq,
                    now_ms().saturating_add(ANSWERED_MARK_TTL_MS),
                )
                .await?;
            tracing::info!(
                partition,
                seq = head.seq,
                sessions,
                "partition loaded from its snapshot"
            );
        }
        Ok(())
    }

    /// A tenure record (a takeover, or an owner's snapshot marker) changes no session, but
    /// this node's copy of the partition is complete up to it: recording that keeps a
    /// restart here from taking the copy for behind a purge (and loading the snapshot for
    /// nothing). Not on the partition's owner: its own turns before the record may not be
    /// committed here yet.
    async fn pass_marker(&self, partition: Partition, seq: u64) {
        if self.changelog.has_tenure(partition) {
            return;
        }
        if let Err(e) = self.runtime.advance_replica(partition, seq).await {
            tracing::warn!(partition, seq, error = %e, "cannot record the applied position");
        }
    }

    async fn apply(&self, subject: &str, seq: u64, payload: &[u8]) {
        let Some(partition) = partition_of_subject(subject) else {
            tracing::warn!(subject, "changelog record on an unknown subject: skipped");
            return;
        };
        if !self.position.borrow().followed.contains(&partition) {
            return;
        }
        let record: LogRecord = match serde_json::from_slice(payload) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(partition, seq, error = %e, "undecodable changelog record: skipped");
                return;
            }
        };
        let (node, epoch) = match &record {
            LogRecord::Tenure { .. } => {
                self.pass_marker(partition, seq).await;
                return;
            }
            LogRecord::Turn { node, epoch, .. }
            | LogRecord::Delete { node, epoch, .. }
            | LogRecord::ScheduleRun { node, epoch, .. } => (node, *epoch),
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
            LogRecord::ScheduleRun { change, .. } => {
                if let Err(e) = self
                    .runtime
                    .apply_replicated_run(change, partition, seq)
                    .await
                {
                    tracing::error!(partition, seq, error = %e, "could not apply a replicated scheduled run here");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_consumer_is_stalled_when_a_record_there_a_check_ago_is_still_not_delivered() {
        let mut watch = StallWatch::default();
        // Quiet and at the end: nothing is missing.
        assert!(!watch.check(10, 10));
        assert!(!watch.check(10, 10));
        // Records 11..=12 appear: on their way, not yet a stall.
        assert!(!watch.check(10, 12));
        // A check later they still have not come: stalled.
        assert!(watch.check(10, 12));
        // Delivered in between: the next check starts afresh.
        let mut watch = StallWatch::default();
        assert!(!watch.check(10, 12));
        watch.delivered();
        assert!(!watch.check(12, 14), "13 and 14 were published since");
        // Processed past what was there, though more came: delivering, not stalled.
        assert!(!watch.check(14, 16));
        assert!(watch.check(14, 16));
    }

    fn set(partitions: &[Partition]) -> BTreeSet<Partition> {
        partitions.iter().copied().collect()
    }

    #[test]
    fn a_gained_partition_is_kept_once_the_follower_reaches_the_end() {
        let mut p = Progress::default();
        // At start the follower is behind: everything gained is catching up.
        p.refollow(set(&[1, 2]), None);
        assert!(p.followed.contains(&1) && !p.keeps(1));
        p.processed(10, 5);
        assert!(!p.keeps(2));
        p.processed(15, 0);
        assert!(p.keeps(1) && p.keeps(2) && p.at_end);
        assert!(p.covers(1, 15) && !p.covers(3, 15) && !p.covers(1, 16));
        // Gained at the end without reading again: kept at once.
        p.refollow(set(&[1, 2, 3]), None);
        assert!(p.keeps(3));
        // Gained with a restart: the position goes back, and it catches up first.
        p.refollow(set(&[1, 3, 4]), Some(4));
        assert_eq!(p.seq, 4);
        assert!(!p.keeps(4) && !p.keeps(2) && p.keeps(1));
        assert!(!p.covers(4, 15));
        p.processed(15, 0);
        assert!(p.keeps(4) && p.covers(4, 15));
    }
}
