//! The delivery stage's seam to a cluster: before a turn commits here it is appended to its
//! partition's changelog, and only the partition's owner may append. The cluster layer
//! (`crate::cluster`, feature `cluster`) implements [`Replication`]; a single node has none,
//! and its delivery is exactly as before.

use std::sync::{Arc, OnceLock};

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::replies::Reply;
use crate::store::{ReplicaMarks, TranscriptEntry};

/// A turn as its partition's changelog carries it: what every node applies to its copy of the
/// session, and the reply it hands to whoever waits for it there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ReplicatedTurn {
    /// The session.
    pub session_key: String,
    /// The entries the turn appends, in order.
    pub entries: Vec<TranscriptEntry>,
    /// The reply (its `seq` is each node's own: the position of its last entry there).
    pub reply: Reply,
}

/// Why a turn could not be appended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplicationError {
    /// This node does not own the session's partition (any more): the turn must not commit,
    /// and its messages are left to the owner.
    #[error("partition {partition} is not owned by this node")]
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    Fenced {
        /// The session's partition.
        partition: u32,
    },
    /// The changelog did not take the append (no quorum, no connection): retry the turn.
    #[error("the changelog append failed: {0}")]
    Failed(String),
}

/// Where a clustered node's turns go before they commit locally.
pub(crate) trait Replication: Send + Sync + 'static {
    /// Whether this node owns `session_key`'s partition now (checked before a turn calls the
    /// model; the append itself is the fence).
    fn owns(&self, session_key: &str) -> bool;

    /// Appends `turn` to its partition's changelog, fenced by this node's tenure, and answers
    /// the marks its local commit writes with it.
    fn append<'a>(
        &'a self,
        turn: &'a ReplicatedTurn,
    ) -> BoxFuture<'a, Result<ReplicaMarks, ReplicationError>>;

    /// Appends a scheduled run's start or end (`src/schedules/`) of a job whose turns run in
    /// `session_key` to its partition's changelog, fenced like a turn.
    fn append_run<'a>(
        &'a self,
        session_key: &'a str,
        change: &'a crate::schedules::RunChange,
    ) -> BoxFuture<'a, Result<(), ReplicationError>>;
}

/// The replication a delivery uses: none for a single node; for a cluster node, installed by
/// the cluster layer once it runs. Until then a cluster node owns nothing.
#[derive(Default)]
pub(crate) struct ReplicationSlot {
    clustered: bool,
    installed: OnceLock<Arc<dyn Replication>>,
}

impl ReplicationSlot {
    /// The slot of a node that is (`clustered`) or is not part of a cluster.
    pub(crate) fn new(clustered: bool) -> Self {
        Self {
            clustered,
            installed: OnceLock::new(),
        }
    }

    /// Installs the cluster's replication; `false` if one was installed before.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn install(&self, replication: Arc<dyn Replication>) -> bool {
        self.installed.set(replication).is_ok()
    }

    /// `None` for a single node; for a cluster node, its replication (`Err` until installed).
    pub(crate) fn get(&self) -> Option<Result<&Arc<dyn Replication>, ReplicationError>> {
        if !self.clustered {
            return None;
        }
        Some(self.installed.get().ok_or(ReplicationError::Failed(
            "the cluster is not running yet".into(),
        )))
    }

    /// Whether this node may run turns of `session_key`: always for a single node.
    pub(crate) fn owns(&self, session_key: &str) -> bool {
        match self.get() {
            None => true,
            Some(Ok(r)) => r.owns(session_key),
            Some(Err(_)) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Owns(&'static str);

    impl Replication for Owns {
        fn owns(&self, session_key: &str) -> bool {
            session_key == self.0
        }

        fn append<'a>(
            &'a self,
            _turn: &'a ReplicatedTurn,
        ) -> BoxFuture<'a, Result<ReplicaMarks, ReplicationError>> {
            Box::pin(async { Err(ReplicationError::Fenced { partition: 0 }) })
        }

        fn append_run<'a>(
            &'a self,
            _session_key: &'a str,
            _change: &'a crate::schedules::RunChange,
        ) -> BoxFuture<'a, Result<(), ReplicationError>> {
            Box::pin(async { Err(ReplicationError::Fenced { partition: 0 }) })
        }
    }

    #[test]
    fn a_single_node_owns_everything_a_cluster_node_only_what_its_replication_says() {
        let single = ReplicationSlot::new(false);
        assert!(single.owns("any"));
        assert!(single.get().is_none());
        single.install(Arc::new(Owns("a")));
        assert!(single.owns("b"), "a single node ignores a replication");

        let clustered = ReplicationSlot::new(true);
        assert!(
            !clustered.owns("a"),
            "nothing before the cluster layer is installed"
        );
        assert!(matches!(clustered.get(), Some(Err(_))));
        assert!(clustered.install(Arc::new(Owns("a"))));
        assert!(clustered.owns("a"));
        assert!(!clustered.owns("b"));
        assert!(!clustered.install(Arc::new(Owns("b"))), "installed once");
    }
}
