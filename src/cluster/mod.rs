//! Several Turnstile nodes over NATS JetStream: which node owns which session.
//!
//! Session keys hash into a fixed number of partitions ([`placement`]); a node owns a
//! partition while it holds that partition's lease in a replicated JetStream KV bucket
//! (`lease`), and a small task per node (`membership`) renews its leases, heartbeats its
//! liveness and balances partitions across the live nodes, publishing what it owns.
//! `names` holds the JetStream stream, subject and consumer names every node shares;
//! `status` reads the operator's view (`turnstile cluster status`) without joining.
//!
//! Only [`placement`] is compiled without the `cluster` feature: it is plain arithmetic, so the
//! single-node build carries no NATS client. Nothing here is wired into `turnstile serve` yet:
//! a single node behaves exactly as before.

pub mod placement;

#[cfg(feature = "cluster")]
mod error;
#[cfg(feature = "cluster")]
mod lease;
#[cfg(feature = "cluster")]
mod membership;
#[cfg(feature = "cluster")]
pub mod names;
#[cfg(feature = "cluster")]
pub mod status;
#[cfg(feature = "cluster")]
mod view;

#[cfg(feature = "cluster")]
pub use error::{ClusterError, NatsError};
#[cfg(feature = "cluster")]
pub use lease::{Lease, LeaseStore, LEASES_BUCKET, NODES_BUCKET, REPLICAS};
#[cfg(feature = "cluster")]
pub use membership::{Member, Owned, LEASE_CONCURRENCY};
pub use placement::{partition_of, Partition};
#[cfg(feature = "cluster")]
pub use status::{ClusterStatus, NodeStatus, PartitionStatus};
