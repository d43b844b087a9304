//! Replies on their way out, below both the runtime and the channels (it imports neither): the
//! reply hub (`hub.rs`: the broadcast stream, per-message waiters) and the channel router
//! (`router.rs`: which started channel pushes a reply back to its platform).

mod hub;
mod router;

pub use hub::{
    Delta, DeltaWatch, Heard, Reply, ReplyErrorKind, ReplyRoute, ReplyUsage, ReplyWaiter,
};
pub(crate) use hub::{DeltaFanout, ReplyHub};
pub(crate) use router::{ReplySink, Serves};
