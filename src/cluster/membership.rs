//! `Member`: one node's membership task — heartbeat, renew, balance, publish.
//!
//! Every `lease_ms / 3` the task writes its heartbeat, renews every lease it holds, and
//! applies [`placement::plan`] to what it has heard (the `View` fed by watching both
//! buckets): it acquires free partitions up to its share and releases the surplus, trying
//! first those it keeps a copy of (a standby is caught up, or nearly). It publishes the
//! partitions it holds on a `watch` channel, and on another the partitions it replicates
//! (holds, or is a standby of by [`placement::replica_set`]): the follower applies those. A round that failed somewhere is
//! retried after a tenth of a lease rather than a third. A lease whose renewal was refused
//! is lost at once; one whose renewals failed otherwise (no quorum, timeouts) is given up
//! locally once a lease has passed since its last successful write started, which is no
//! later than the server lets it expire. Stopping gracefully releases every lease and the
//! heartbeat, so the other nodes take over without waiting for expiry.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_nats::jetstream::kv::{Entry, Operation, Watch, WatcherError};
use async_nats::jetstream::Context;
use futures_util::stream::{self, StreamExt};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::error::ClusterError;
use super::lease::{holder_node, partition_of_key, Lease, LeaseStore};
use super::placement::{self, Partition};
use super::view::View;
use crate::config::ClusterConfig;

/// Lease operations one round runs at once (renewals, acquisitions, releases). With up to
/// 4,096 partitions a round's writes must overlap to fit in a third of a lease, and a bound
/// keeps one node from flooding its NATS server.
pub(super) const LEASE_CONCURRENCY: usize = 64;

/// Shortest and longest wait for one JetStream answer: a third of a lease, within these.
const MIN_REQUEST_TIMEOUT: Duration = Duration::from_millis(250);
const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Shortest pause before a failed round is retried.
const MIN_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// The partitions a node holds, each with the epoch of its tenure (the revision of the
/// acquiring write; see [`Lease::epoch`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owned {
    partitions: BTreeMap<Partition, u64>,
}

impl Owned {
    /// Whether `partition` is held.
    pub fn contains(&self, partition: Partition) -> bool {
        self.partitions.contains_key(&partition)
    }

    /// How many partitions are held.
    pub fn len(&self) -> usize {
        self.partitions.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.partitions.is_empty()
    }

    /// The held partitions, ascending.
    pub fn partitions(&self) -> impl Iterator<Item = Partition> + '_ {
        self.partitions.keys().copied()
    }

    /// The epoch of `partition`'s tenure, if held.
    pub fn epoch(&self, partition: Partition) -> Option<u64> {
        self.partitions.get(&partition).copied()
    }
}

/// A running membership task. [`Member::stop`] leaves gracefully; dropping it aborts the
/// task, as a crash would: its leases then expire after `lease_ms`.
#[derive(Debug)]
pub struct Member {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    owned: watch::Receiver<Owned>,
    follow: watch::Receiver<BTreeSet<Partition>>,
}

impl Member {
    /// Connects to `config.nats`, opens the buckets and starts the task.
    pub async fn connect(config: &ClusterConfig) -> Result<Member, ClusterError> {
        Member::open(&connect(config).await?, config).await
    }

    /// Opens the buckets through `js` and starts the task.
    pub async fn open(js: &Context, config: &ClusterConfig) -> Result<Member, ClusterError> {
        let store = LeaseStore::open(js, config).await?;
        Ok(Member::start(
            store,
            Duration::from_millis(config.lease_ms),
            config.replicas,
        ))
    }

    /// Starts the task on buckets already open; `lease` must be theirs, `replicas` is
    /// `[cluster] replicas`.
    pub fn start(store: LeaseStore, lease: Duration, replicas: u32) -> Member {
        let (stop, stop_rx) = oneshot::channel();
        let (owned_tx, owned) = watch::channel(Owned::default());
        let (follow_tx, follow) = watch::channel(BTreeSet::new());
        let state = State {
            view: View::new(store.partitions(), lease),
            holdings: Holdings::new(lease),
            store,
            lease,
            replicas,
            owned: owned_tx,
            follow: follow_tx,
        };
        Member {
            stop: Some(stop),
            task: Some(tokio::spawn(state.run(stop_rx))),
            owned,
            follow,
        }
    }

    /// The partitions this node holds, updated as they change.
    pub fn owned(&self) -> watch::Receiver<Owned> {
        self.owned.clone()
    }

    /// The partitions this node keeps a copy of (those it holds and those it is a standby
    /// of), updated as they change; empty until the first round.
    pub fn follow(&self) -> watch::Receiver<BTreeSet<Partition>> {
        self.follow.clone()
    }

    /// Releases every lease and the heartbeat, then ends the task.
    pub async fn stop(mut self) -> Result<(), ClusterError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.map_err(|_| ClusterError::Stopped),
            None => Ok(()),
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Connects to `config.nats` (the client fails over between the servers) and gives the
/// JetStream context every cluster request goes through.
pub(super) async fn connect(config: &ClusterConfig) -> Result<Context, ClusterError> {
    let lease = Duration::from_millis(config.lease_ms);
    let client = connect_client(
        config,
        format!("turnstile {}", config.node_id),
        request_timeout(lease).max(Duration::from_secs(2)),
    )
    .await?;
    Ok(async_nats::jetstream::ContextBuilder::new()
        .timeout(request_timeout(lease))
        .build(client))
}

/// A NATS connection to `config.nats` named `name` (as the servers list their clients), the
/// one way a node, `cluster status` and `cluster snapshot` connect.
pub(super) async fn connect_client(
    config: &ClusterConfig,
    name: String,
    timeout: Duration,
) -> Result<async_nats::Client, ClusterError> {
    async_nats::ConnectOptions::new()
        .name(name)
        .connection_timeout(timeout)
        .connect(config.nats.clone())
        .await
        .map_err(|e| ClusterError::Connect {
            urls: config.nats.join(","),
            source: Box::new(e),
        })
}

/// How long one JetStream request may wait: a third of a lease, within bounds.
pub(crate) fn request_timeout(lease: Duration) -> Duration {
    (lease / 3).clamp(MIN_REQUEST_TIMEOUT, MAX_REQUEST_TIMEOUT)
}

/// How soon a round that failed is retried: a tenth of a lease, at least [`MIN_RETRY_PAUSE`].
fn retry_pause(lease: Duration) -> Duration {
    (lease / 10).max(MIN_RETRY_PAUSE)
}

/// What woke the task.
enum Event {
    Stop,
    Abort,
    Tick,
    /// A held lease reached its deadline between rounds.
    Deadline,
    Lease(Option<Result<Entry, WatcherError>>),
    Node(Option<Result<Entry, WatcherError>>),
}

struct State {
    store: LeaseStore,
    lease: Duration,
    view: View,
    holdings: Holdings,
    /// `[cluster] replicas`.
    replicas: u32,
    owned: watch::Sender<Owned>,
    follow: watch::Sender<BTreeSet<Partition>>,
}

impl State {
    async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        let mut tick = tokio::time::interval(self.lease / 3);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut leases: Option<Watch> = None;
        let mut nodes: Option<Watch> = None;
        loop {
            let deadline = self.holdings.next_deadline();
            let event = tokio::select! {
                biased;
                stopped = &mut stop => if stopped.is_ok() { Event::Stop } else { Event::Abort },
                _ = until(deadline) => Event::Deadline,
                _ = tick.tick() => Event::Tick,
                entry = next(&mut leases) => Event::Lease(entry),
                entry = next(&mut nodes) => Event::Node(entry),
            };
            match event {
                Event::Stop => return self.leave().await,
                Event::Abort => return,
                Event::Tick => {
                    self.open_watches(&mut leases, &mut nodes).await;
                    if !self.round().await {
                        // Something failed (no quorum while JetStream elects a leader, a
                        // timeout): try again well before the leases run out.
                        tick.reset_after(retry_pause(self.lease));
                    }
                }
                Event::Deadline => {
                    self.expire(Instant::now());
                    self.publish();
                }
                Event::Lease(Some(Ok(entry))) => {
                    let owner = match entry.operation {
                        Operation::Put => holder_node(&entry.value),
                        Operation::Delete | Operation::Purge => None,
                    };
                    self.view
                        .lease(partition_of_key(&entry.key), owner, Instant::now());
                }
                Event::Node(Some(Ok(entry))) => {
                    let alive = entry.operation == Operation::Put;
                    self.view.node(&entry.key, alive, Instant::now());
                }
                Event::Lease(ended) => {
                    tracing::warn!(error = ?ended.and_then(Result::err), "lease watch ended; reopening");
                    leases = None;
                }
                Event::Node(ended) => {
                    tracing::warn!(error = ?ended.and_then(Result::err), "node watch ended; reopening");
                    nodes = None;
                }
            }
        }
    }

    /// Reopens a watch that ended; the view of that bucket starts over from what it delivers.
    async fn open_watches(&mut self, leases: &mut Option<Watch>, nodes: &mut Option<Watch>) {
        if leases.is_none() {
            match self.store.watch_leases().await {
                Ok(w) => {
                    self.view.clear_leases();
                    *leases = Some(w);
                }
                Err(e) => tracing::warn!(error = %e, "cannot watch the leases"),
            }
        }
        if nodes.is_none() {
            match self.store.watch_nodes().await {
                Ok(w) => {
                    self.view.clear_nodes();
                    *nodes = Some(w);
                }
                Err(e) => tracing::warn!(error = %e, "cannot watch the nodes"),
            }
        }
    }

    /// One round: heartbeat and renew (at once), balance, publish. Returns whether the
    /// heartbeat and every renewal went through.
    async fn round(&mut self) -> bool {
        let store = self.store.clone();
        let (heartbeat, renewed) = tokio::join!(store.heartbeat(), self.renew_all());
        if let Err(e) = &heartbeat {
            tracing::warn!(error = %e, "heartbeat failed");
        }
        let now = Instant::now();
        let me = self.store.node_id().to_string();
        let live = self.view.live_nodes(&me, now);
        let owners = self.view.owners(now);
        let mine: BTreeSet<Partition> = self.holdings.partitions().collect();
        let standby = self.follows(now);
        let step = placement::plan(
            &me,
            &live,
            &owners,
            &mine,
            &standby,
            self.store.partitions(),
        );
        let giving_up: Vec<Lease> = step
            .release
            .iter()
            .filter_map(|p| self.holdings.remove(*p))
            .collect();
        // Published before the deletes: nothing may run on a partition being given up.
        self.publish();
        self.release(giving_up).await;
        self.acquire(step.acquire).await;
        self.publish();
        heartbeat.is_ok() && renewed
    }

    /// Renews every held lease; returns whether all went through.
    async fn renew_all(&mut self) -> bool {
        let store = &self.store;
        let started = Instant::now();
        let results: Vec<(Lease, Result<(), ClusterError>)> = stream::iter(self.holdings.leases())
            .map(|mut lease| async move {
                let result = store.renew(&mut lease).await;
                (lease, result)
            })
            .buffer_unordered(LEASE_CONCURRENCY)
            .collect()
            .await;
        let now = Instant::now();
        let mut all_renewed = true;
        for (lease, result) in results {
            all_renewed &= result.is_ok();
            match result {
                Ok(()) => self.holdings.renewed(lease, started),
                Err(ClusterError::Lost { partition }) => {
                    tracing::warn!(partition, "lease lost: another node holds it");
                    self.holdings.remove(partition);
                }
                Err(e) => {
                    tracing::warn!(partition = lease.partition, error = %e, "renewal failed");
                }
            }
        }
        self.expire(now);
        all_renewed
    }

    /// Gives up the leases not renewed for a whole lease: the server may have dropped them.
    fn expire(&mut self, now: Instant) {
        for partition in self.holdings.expire(now) {
            tracing::warn!(partition, "lease given up: not renewed for a whole lease");
        }
    }

    async fn acquire(&mut self, partitions: Vec<Partition>) {
        let store = &self.store;
        let started = Instant::now();
        let results: Vec<(Partition, Result<Option<Lease>, ClusterError>)> =
            stream::iter(partitions)
                .map(|p| async move { (p, store.acquire(p).await) })
                .buffer_unordered(LEASE_CONCURRENCY)
                .collect()
                .await;
        for (partition, result) in results {
            match result {
                Ok(Some(lease)) => {
                    tracing::info!(partition, epoch = lease.epoch, "partition acquired");
                    self.holdings.renewed(lease, started);
                }
                Ok(None) => tracing::debug!(partition, "partition already held"),
                Err(e) => tracing::warn!(partition, error = %e, "acquiring failed"),
            }
        }
    }

    async fn release(&self, leases: Vec<Lease>) {
        let store = &self.store;
        let results: Vec<(Partition, Result<(), ClusterError>)> = stream::iter(leases)
            .map(|lease| async move { (lease.partition, store.release(&lease).await) })
            .buffer_unordered(LEASE_CONCURRENCY)
            .collect()
            .await;
        for (partition, result) in results {
            match result {
                Ok(()) => tracing::info!(partition, "partition released"),
                // Not released, it expires after a lease anyway.
                Err(e) => tracing::warn!(partition, error = %e, "releasing failed"),
            }
        }
    }

    /// Graceful leave: hand every partition back and stop heartbeating.
    async fn leave(mut self) {
        let all: Vec<Lease> = self.holdings.leases();
        for lease in &all {
            self.holdings.remove(lease.partition);
        }
        self.publish();
        self.release(all).await;
        if let Err(e) = self.store.leave().await {
            tracing::warn!(error = %e, "removing the heartbeat failed");
        }
    }

    /// Publishes the partitions held, then those replicated. The follower must follow a
    /// partition before its owner task waits for it to catch up; the owner task waits for
    /// the follower to say it follows it (`follower::Progress`), so the order is not critical.
    fn publish(&mut self) {
        let now = self.holdings.owned();
        self.owned.send_if_modified(|owned| {
            let changed = *owned != now;
            *owned = now;
            changed
        });
        let follow = self.follows(Instant::now());
        self.follow.send_if_modified(|old| {
            let changed = *old != follow;
            *old = follow;
            changed
        });
    }

    /// The partitions this node keeps a copy of: those it holds, and those whose replica set
    /// (by the owner the view knows, or none) names it.
    fn follows(&mut self, now: Instant) -> BTreeSet<Partition> {
        let me = self.store.node_id().to_string();
        let live = self.view.live_nodes(&me, now);
        let owners = self.view.owners(now);
        (0..self.store.partitions())
            .filter(|p| {
                self.holdings.held.contains_key(p)
                    || placement::replicates(
                        &me,
                        *p,
                        owners.get(p).map(String::as_str),
                        &live,
                        self.replicas,
                    )
            })
            .collect()
    }
}

/// Sleeps until `deadline`, or forever if there is none.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The next entry of a watch, or never if there is none.
async fn next(watch: &mut Option<Watch>) -> Option<Result<Entry, WatcherError>> {
    match watch {
        Some(w) => w.next().await,
        None => std::future::pending().await,
    }
}

/// The leases this node holds, each with the instant after which it must count as expired.
#[derive(Debug)]
struct Holdings {
    lease: Duration,
    held: BTreeMap<Partition, (Lease, Instant)>,
}

impl Holdings {
    fn new(lease: Duration) -> Holdings {
        Holdings {
            lease,
            held: BTreeMap::new(),
        }
    }

    /// `lease` was written by a request sent at `sent`: the server stamped the write no
    /// earlier, so it expires no earlier than `sent + lease`.
    fn renewed(&mut self, lease: Lease, sent: Instant) {
        self.held
            .insert(lease.partition, (lease, sent + self.lease));
    }

    fn remove(&mut self, partition: Partition) -> Option<Lease> {
        self.held.remove(&partition).map(|(lease, _)| lease)
    }

    /// Drops the leases whose time is up; returns their partitions.
    fn expire(&mut self, now: Instant) -> Vec<Partition> {
        let gone: Vec<Partition> = self
            .held
            .iter()
            .filter(|(_, (_, until))| *until <= now)
            .map(|(p, _)| *p)
            .collect();
        for p in &gone {
            self.held.remove(p);
        }
        gone
    }

    /// The earliest deadline of a held lease.
    fn next_deadline(&self) -> Option<Instant> {
        self.held.values().map(|(_, until)| *until).min()
    }

    fn leases(&self) -> Vec<Lease> {
        self.held.values().map(|(lease, _)| lease.clone()).collect()
    }

    fn partitions(&self) -> impl Iterator<Item = Partition> + '_ {
        self.held.keys().copied()
    }

    fn owned(&self) -> Owned {
        Owned {
            partitions: self
                .held
                .iter()
                .map(|(p, (lease, _))| (*p, lease.epoch))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_millis(3000);

    fn lease(partition: Partition, revision: u64) -> Lease {
        Lease {
            partition,
            revision,
            epoch: 1,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_counts_from_when_its_last_write_was_sent() {
        let mut h = Holdings::new(LEASE);
        let sent = Instant::now();
        h.renewed(lease(1, 5), sent);
        tokio::time::advance(Duration::from_millis(1000)).await;
        h.renewed(lease(2, 6), Instant::now());
        assert_eq!(h.next_deadline(), Some(sent + LEASE));
        tokio::time::advance(Duration::from_millis(1999)).await;
        assert!(h.expire(Instant::now()).is_empty());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(h.expire(Instant::now()), vec![1]);
        // A renewal moves the deadline; the epoch stays that of the tenure.
        h.renewed(lease(2, 9), Instant::now());
        tokio::time::advance(Duration::from_millis(2999)).await;
        assert!(h.expire(Instant::now()).is_empty());
        let owned = h.owned();
        assert_eq!(owned.partitions().collect::<Vec<_>>(), vec![2]);
        assert_eq!(owned.epoch(2), Some(1));
        assert_eq!(h.leases()[0].revision, 9);
    }

    #[test]
    fn the_request_timeout_is_a_third_of_a_lease_within_bounds() {
        assert_eq!(
            request_timeout(Duration::from_millis(500)),
            MIN_REQUEST_TIMEOUT
        );
        assert_eq!(
            request_timeout(Duration::from_millis(3000)),
            Duration::from_secs(1)
        );
        assert_eq!(
            request_timeout(Duration::from_secs(600)),
            MAX_REQUEST_TIMEOUT
        );
    }
}
