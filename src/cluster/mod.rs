//! Several Turnstile nodes over NATS JetStream: one owner per session, failover without loss.
//!
//! Session keys hash into a fixed number of partitions ([`placement`]); a node owns a
//! partition while it holds that partition's lease in a replicated JetStream KV bucket
//! (`lease`), and a small task per node (`membership`) renews its leases, heartbeats its
//! liveness and balances partitions across the live nodes, publishing what it owns.
//! [`ClusterNode`] (`node`) joins a runtime to the cluster: accepted messages go to their
//! partition's replicated inbox (`ingress`, `streams`); the owner of a partition takes them
//! from there (`owner`); turns append to the partition's changelog before they commit, fenced
//! by the owner's tenure (`changelog`); every node applies the changelog to its own sled and
//! answers its own waiters from it (`follower`); a session delete asked of any node is done
//! by the partition's owner and travels the changelog too (`deletes`); the owner's streaming
//! deltas reach waiters on other nodes over core NATS (`deltas`); owners snapshot their
//! partitions so the changelog can be purged, and a node behind a purge loads a snapshot
//! (`snapshot`, `snapshots`). What travels is in `record`; the names every
//! node and tool shares in `names`; `status` reads the operator's view (`turnstile cluster
//! status`) without joining.
//!
//! Only [`placement`] is compiled without the `cluster` feature: it is plain arithmetic, so the
//! single-node build carries no NATS client.

pub mod placement;

#[cfg(feature = "cluster")]
mod changelog;
#[cfg(feature = "cluster")]
mod deletes;
#[cfg(feature = "cluster")]
mod deltas;
#[cfg(feature = "cluster")]
mod error;
#[cfg(feature = "cluster")]
mod follower;
#[cfg(feature = "cluster")]
mod ingress;
#[cfg(feature = "cluster")]
mod lease;
#[cfg(feature = "cluster")]
mod membership;
#[cfg(feature = "cluster")]
pub mod names;
#[cfg(feature = "cluster")]
mod node;
#[cfg(feature = "cluster")]
mod owner;
#[cfg(feature = "cluster")]
mod publish;
#[cfg(feature = "cluster")]
mod reads;
#[cfg(feature = "cluster")]
mod record;
#[cfg(feature = "cluster")]
mod replies;
#[cfg(feature = "cluster")]
mod snapshot;
#[cfg(feature = "cluster")]
pub mod snapshots;
#[cfg(feature = "cluster")]
pub mod status;
#[cfg(feature = "cluster")]
mod streams;
#[cfg(feature = "cluster")]
mod view;

#[cfg(feature = "cluster")]
pub use error::ClusterError;
#[cfg(feature = "cluster")]
pub(crate) use error::NatsError;
#[cfg(feature = "cluster")]
pub use lease::{LeaseStore, LEASES_BUCKET};
#[cfg(feature = "cluster")]
pub use membership::Member;
#[cfg(feature = "cluster")]
pub use node::ClusterNode;
pub use placement::partition_of;
#[cfg(feature = "cluster")]
pub(crate) use placement::Partition;
#[cfg(feature = "cluster")]
pub use snapshots::SnapshotReport;
#[cfg(feature = "cluster")]
pub use status::{ClusterStatus, PartitionStatus};
