//! [`ClusterNode`]: a runtime joined to its cluster. It installs the ingress (accepted
//! messages go to their partition's replicated inbox), the changelog (turns append before
//! they commit) and the deletes (asked of the partition's owner), starts the follower, the
//! owner side of deletes and the exchange of streaming deltas, joins the membership, and runs
//! an owner task for each
//! partition the membership says this node holds — started when one is gained, aborted (and
//! its tenure ended, so its turns are fenced) when one is lost.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::stream::Stream;
use async_nats::jetstream::Context;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

use super::changelog::Changelog;
use super::deletes::{self, DeleteClient};
use super::deltas;
use super::error::ClusterError;
use super::follower::{Follower, Progress};
use super::ingress::JetStreamIngress;
use super::membership::{connect, Member, Owned};
use super::owner::{Owner, MAX_CONSUMER_CREATES};
use super::reads::{self, ReadClient};
use super::replies;
use super::snapshots::{self, Snapshots};
use super::{streams, Partition};
use crate::config::ClusterConfig;
use crate::runtime::Runtime;

/// Shortest wait for a JetStream request that makes or replaces a consumer.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A runtime's membership of its cluster. [`ClusterNode::stop`] leaves gracefully (after the
/// runtime has shut down, so its last turns could still append).
pub struct ClusterNode {
    member: Member,
    follower: JoinHandle<()>,
    /// Answers the deletes of the partitions this node owns.
    deletes: JoinHandle<()>,
    /// Exchange streaming deltas and final replies with the other nodes, answer their
    /// reads of this node's partitions, and take its partitions' snapshots.
    delta_tasks: Vec<JoinHandle<()>>,
    coordinator: JoinHandle<()>,
    changelog: Arc<Changelog>,
}

/// What the coordinator starts owner tasks with.
struct Shared {
    runtime: Runtime,
    js: Context,
    inbox: Stream,
    log: Stream,
    changelog: Arc<Changelog>,
    position: watch::Receiver<Progress>,
    /// The owner tasks' permits to replace their inbox consumers.
    creates: Arc<Semaphore>,
}

impl ClusterNode {
    /// Joins `runtime` (built with this `[cluster]` config) to its cluster.
    pub async fn start(
        runtime: &Runtime,
        config: &ClusterConfig,
    ) -> Result<ClusterNode, ClusterError> {
        let js = connect(config).await?;
        let window = Duration::from_millis(runtime.config().preflight.dedupe_ttl_ms);
        // Consumers are made and replaced through a patient context: a create that times out
        // on a loaded server may still complete there, and a fence needs no haste.
        let admin = async_nats::jetstream::ContextBuilder::new()
            .timeout(ADMIN_TIMEOUT.max(Duration::from_millis(config.lease_ms)))
            .build(js.client());
        let inbox = streams::inbox(&admin, window).await?;
        let log = streams::changelog(&js).await?;
        let snapshot_store = Snapshots::open(&js, log.clone(), config.partitions).await?;
        let changelog = Arc::new(Changelog::new(
            js.clone(),
            log.clone(),
            config.node_id.clone(),
            config.partitions,
        ));
        let (position_tx, position) = watch::channel(Progress::default());
        let read_client = ReadClient::new(js.client(), config.partitions, position.clone());
        let delete_client = DeleteClient::new(
            js.client(),
            config.partitions,
            position.clone(),
            deletes::delete_timeout(Duration::from_millis(config.lease_ms)),
        );
        runtime
            .install_cluster(
                Arc::new(JetStreamIngress::new(js.clone(), config.partitions)),
                Arc::clone(&changelog) as _,
                Arc::new(delete_client),
            )
            .map_err(|e| ClusterError::Runtime(e.to_string()))?;
        runtime
            .install_reads(Arc::new(read_client))
            .map_err(|e| ClusterError::Runtime(e.to_string()))?;
        let deletes = tokio::spawn(deletes::serve(
            js.client(),
            runtime.clone(),
            Arc::clone(&changelog),
        ));
        let mut delta_tasks = vec![
            tokio::spawn(deltas::import(
                js.client(),
                config.node_id.clone(),
                runtime.clone(),
            )),
            tokio::spawn(reads::serve(
                js.client(),
                runtime.clone(),
                Arc::clone(&changelog),
                position.clone(),
            )),
            tokio::spawn(replies::import(
                js.client(),
                config.node_id.clone(),
                runtime.clone(),
                position.clone(),
            )),
        ];
        if let Some(exported) = runtime.export_replies() {
            delta_tasks.push(tokio::spawn(replies::export(
                js.client(),
                config.node_id.clone(),
                config.partitions,
                exported,
            )));
        }
        if let Some(exported) = runtime.export_deltas() {
            delta_tasks.push(tokio::spawn(deltas::export(
                js.client(),
                config.node_id.clone(),
                config.partitions,
                exported,
            )));
        }
        let member = Member::open(&js, config).await?;
        let follower = tokio::spawn(
            Follower::new(
                runtime.clone(),
                log.clone(),
                Arc::clone(&changelog),
                config.partitions,
                position_tx,
                snapshot_store.clone(),
            )
            .run(member.follow()),
        );
        delta_tasks.push(tokio::spawn(snapshots::run(
            js.client(),
            snapshot_store,
            Arc::clone(&changelog),
            Duration::from_millis(config.snapshot_interval_ms),
        )));
        let shared = Shared {
            runtime: runtime.clone(),
            js,
            inbox,
            log,
            changelog: Arc::clone(&changelog),
            position,
            creates: Arc::new(Semaphore::new(MAX_CONSUMER_CREATES)),
        };
        let coordinator = tokio::spawn(coordinate(member.owned(), shared));
        tracing::info!(node_id = %config.node_id, partitions = config.partitions, "joined the cluster");
        Ok(ClusterNode {
            member,
            follower,
            deletes,
            delta_tasks,
            coordinator,
            changelog,
        })
    }

    /// Inbox messages admitted here and not yet answered.
    pub fn held(&self) -> usize {
        self.changelog.held_count()
    }

    /// The partitions this node holds, as they change.
    pub fn owned(&self) -> watch::Receiver<Owned> {
        self.member.owned()
    }

    /// Stops the owner tasks and the follower, then releases every lease (the other nodes
    /// take the partitions over at once instead of after `lease_ms`).
    pub async fn stop(self) -> Result<(), ClusterError> {
        self.coordinator.abort();
        let _ = self.coordinator.await;
        self.follower.abort();
        self.deletes.abort();
        for task in &self.delta_tasks {
            task.abort();
        }
        self.member.stop().await
    }
}

/// Owner tasks by partition, aborted when dropped (with the coordinator).
#[derive(Default)]
struct Tasks {
    running: HashMap<Partition, (u64, JoinHandle<()>)>,
}

impl Drop for Tasks {
    fn drop(&mut self) {
        for (_, (_, task)) in self.running.drain() {
            task.abort();
        }
    }
}

async fn coordinate(mut owned: watch::Receiver<Owned>, shared: Shared) {
    let mut tasks = Tasks::default();
    loop {
        let now = owned.borrow_and_update().clone();
        let lost: Vec<Partition> = tasks
            .running
            .iter()
            .filter(|(p, (epoch, _))| now.epoch(**p) != Some(*epoch))
            .map(|(p, _)| *p)
            .collect();
        for p in lost {
            if let Some((_, task)) = tasks.running.remove(&p) {
                task.abort();
            }
            shared.changelog.end(p);
            crate::metrics::cluster_partition_owned(p, false);
            tracing::info!(partition = p, "partition lost: its turns are fenced");
        }
        for p in now.partitions() {
            let Some(epoch) = now.epoch(p) else { continue };
            if tasks.running.contains_key(&p) {
                continue;
            }
            let owner = Owner {
                runtime: shared.runtime.clone(),
                js: shared.js.clone(),
                inbox: shared.inbox.clone(),
                log: shared.log.clone(),
                changelog: Arc::clone(&shared.changelog),
                position: shared.position.clone(),
                partition: p,
                epoch,
                creates: Arc::clone(&shared.creates),
            };
            crate::metrics::cluster_partition_owned(p, true);
            tasks.running.insert(p, (epoch, tokio::spawn(owner.run())));
        }
        if owned.changed().await.is_err() {
            return;
        }
    }
}
