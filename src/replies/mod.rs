//! Replies on their way out, below both the runtime and the channels (it imports neither): the
//! reply hub (`hub.rs`: the broadcast stream, per-message waiters) and the channel router
//! (`router.rs`: which started channel pushes a reply back to its platform).

mod hub;
mod router;

pub use hub::{Reply, ReplyHub, ReplyRoute, ReplyWaiter};
pub use router::{ChannelRouter, ReplySink, Serves};
