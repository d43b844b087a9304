//! Replies on their way out, below both the runtime and the channels (it imports neither): the
//! reply hub (`hub.rs`: the broadcast stream, per-message waiters) and the channel router
//! (`router.rs`: which started channel pushes a reply back to its platform).

mod hub;
mod router;

pub use hub::{
    Delta, DeltaFanout, DeltaWatch, Heard, Reply, ReplyErrorKind, ReplyHub, ReplyRoute, ReplyUsage,
    ReplyWaiter, DELTA_STREAM_BUFFER, DELTA_WAITER_BUFFER,
};
pub use router::{ChannelRouter, ReplySink, Serves};
