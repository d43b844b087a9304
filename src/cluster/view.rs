//! `View`: what a node last heard of the leases and the live nodes, from watching the two
//! buckets.
//!
//! JetStream says nothing when `max_age` removes an entry, so an entry counts as current for
//! one lease after this node *received* it (never after its server timestamp: no clocks are
//! compared). That errs towards "still held": a partition of a dead node is tried up to a
//! lease late, never early — and a wrong guess costs one refused `create`, because the
//! leases themselves, not this view, decide who holds what.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;

use super::Partition;

/// Most nodes a view tracks: heartbeats of further nodes are ignored (and counted), so a
/// misconfigured fleet cannot grow a node's memory without bound.
pub(crate) const MAX_NODES: usize = 1024;

/// A lease as last seen: its holder's node id and when this node heard of it.
#[derive(Debug, Clone)]
struct Seen {
    owner: String,
    at: Instant,
}

/// The watched state of the leases and nodes buckets.
#[derive(Debug)]
pub(crate) struct View {
    partitions: u32,
    lease: Duration,
    leases: HashMap<Partition, Seen>,
    nodes: HashMap<String, Instant>,
    /// Heartbeats ignored because [`MAX_NODES`] were tracked.
    pub(crate) ignored_nodes: u64,
}

impl View {
    pub(crate) fn new(partitions: u32, lease: Duration) -> View {
        View {
            partitions,
            lease,
            leases: HashMap::new(),
            nodes: HashMap::new(),
            ignored_nodes: 0,
        }
    }

    /// A lease entry: `owner` is `Some(node id)` for a put, `None` for a delete or purge.
    /// Keys that are no partition of this cluster are ignored.
    pub(crate) fn lease(
        &mut self,
        partition: Option<Partition>,
        owner: Option<&str>,
        now: Instant,
    ) {
        let Some(partition) = partition.filter(|p| *p < self.partitions) else {
            return;
        };
        match owner {
            Some(owner) => {
                self.leases.insert(
                    partition,
                    Seen {
                        owner: owner.to_string(),
                        at: now,
                    },
                );
            }
            None => {
                self.leases.remove(&partition);
            }
        }
    }

    /// A node's heartbeat (`alive`) or its leaving (`!alive`).
    pub(crate) fn node(&mut self, node: &str, alive: bool, now: Instant) {
        if !alive {
            self.nodes.remove(node);
            return;
        }
        if self.nodes.len() >= MAX_NODES && !self.nodes.contains_key(node) {
            self.expire(now);
            if self.nodes.len() >= MAX_NODES {
                self.ignored_nodes += 1;
                return;
            }
        }
        self.nodes.insert(node.to_string(), now);
    }

    /// Forgets the leases: their watch restarts and delivers the current ones again.
    pub(crate) fn clear_leases(&mut self) {
        self.leases.clear();
    }

    /// Forgets the nodes: their watch restarts and delivers the current ones again.
    pub(crate) fn clear_nodes(&mut self) {
        self.nodes.clear();
    }

    /// Drops what is older than a lease.
    pub(crate) fn expire(&mut self, now: Instant) {
        let lease = self.lease;
        self.leases.retain(|_, s| now.duration_since(s.at) < lease);
        self.nodes.retain(|_, at| now.duration_since(*at) < lease);
    }

    /// The nodes heard of within a lease, and `me`.
    pub(crate) fn live_nodes(&mut self, me: &str, now: Instant) -> BTreeSet<String> {
        self.expire(now);
        let mut live: BTreeSet<String> = self.nodes.keys().cloned().collect();
        live.insert(me.to_string());
        live
    }

    /// The partitions whose leases were heard of within a lease, by holder.
    pub(crate) fn owners(&mut self, now: Instant) -> BTreeMap<Partition, String> {
        self.expire(now);
        self.leases
            .iter()
            .map(|(p, s)| (*p, s.owner.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_millis(1000);

    #[tokio::test(start_paused = true)]
    async fn entries_count_for_one_lease_after_they_were_heard() {
        let mut view = View::new(8, LEASE);
        view.lease(Some(3), Some("a"), Instant::now());
        view.node("a", true, Instant::now());
        tokio::time::advance(Duration::from_millis(600)).await;
        view.lease(Some(4), Some("b"), Instant::now());
        view.node("b", true, Instant::now());
        assert_eq!(view.owners(Instant::now()).len(), 2);
        assert_eq!(view.live_nodes("me", Instant::now()).len(), 3);
        tokio::time::advance(Duration::from_millis(500)).await;
        let owners = view.owners(Instant::now());
        assert_eq!(owners, BTreeMap::from([(4, "b".to_string())]));
        let live = view.live_nodes("me", Instant::now());
        assert_eq!(live, BTreeSet::from(["b".to_string(), "me".to_string()]));
    }

    #[tokio::test(start_paused = true)]
    async fn deletes_free_at_once_and_foreign_keys_are_ignored() {
        let mut view = View::new(8, LEASE);
        let now = Instant::now();
        view.lease(Some(1), Some("a"), now);
        view.lease(Some(8), Some("a"), now);
        view.lease(None, Some("a"), now);
        assert_eq!(view.owners(now).len(), 1);
        view.lease(Some(1), None, now);
        assert!(view.owners(now).is_empty());
        view.node("a", true, now);
        view.node("a", false, now);
        assert_eq!(view.live_nodes("me", now).len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_node_table_is_bounded() {
        let mut view = View::new(8, LEASE);
        for i in 0..MAX_NODES + 5 {
            view.node(&format!("n{i}"), true, Instant::now());
        }
        assert_eq!(view.live_nodes("n0", Instant::now()).len(), MAX_NODES);
        assert_eq!(view.ignored_nodes, 5);
        // Once the old heartbeats age out, new nodes are tracked again.
        tokio::time::advance(LEASE).await;
        view.node("late", true, Instant::now());
        assert_eq!(view.ignored_nodes, 5);
        assert!(view.live_nodes("n0", Instant::now()).contains("late"));
    }
}
