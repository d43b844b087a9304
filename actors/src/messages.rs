//! Every message the actors of this crate accept. Actors talk only through these.

use ractor::{ActorId, RpcReplyPort};
use tokio::time::Instant;

use crate::backend::{Backend, SessionKey, TurnFailure, TurnReport};
use crate::error::BackendError;

/// How a turn ended, as its lane learns it.
#[derive(Debug)]
pub enum TurnOutcome {
    /// Committed and answered.
    Done(TurnReport),
    /// Cancelled by the lane before committing.
    Cancelled,
    /// Failed or panicked.
    Failed(TurnFailure),
}

/// What a submitter gets back from the supervisor.
pub type SubmitReply<B> = Result<<B as Backend>::Accepted, <B as Backend>::Refused>;

/// Messages to the [`crate::Supervisor`].
pub enum SupervisorMsg<B: Backend> {
    /// An inbound event from a channel: admit it and route it to its lane.
    Submit(B::Event, RpcReplyPort<SubmitReply<B>>),
    /// Start lanes for sessions that have unconsumed inbox items (used on start-up, so that
    /// what was acknowledged before a crash is answered without waiting for a new message).
    Recover(Vec<SessionKey>),
    /// A lane has been idle for its timeout and asks to stop. `seen_seq` is the highest item
    /// sequence the lane has received; the supervisor stops the lane only if it has routed
    /// nothing newer, so no routed item is ever left behind in a stopping lane.
    LaneIdle {
        /// The lane's session key.
        key: SessionKey,
        /// The lane's actor id (a newer lane for the same key must not be stopped).
        lane: ActorId,
        /// Highest item sequence the lane has received.
        seen_seq: u64,
    },
    /// Number of live lanes.
    LiveLanes(RpcReplyPort<usize>),
    /// The session is being deleted: its lane (if live) drops what it holds in memory, unless
    /// a turn is running. Answered by the lane, or at once when no lane is live. Ordered with
    /// admissions: items admitted before it are dropped, items admitted after it are kept.
    Discard {
        /// The session key.
        key: SessionKey,
        /// Where the outcome goes.
        reply: RpcReplyPort<DiscardOutcome>,
    },
    /// Stop admitting, let every lane finish its running turn, then answer. Queued items stay
    /// in the durable inbox for the next start.
    Drain(RpcReplyPort<()>),
}

/// What discarding a session's lane did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscardOutcome {
    /// Nothing of the session is held in memory any more (or no lane was live).
    Dropped,
    /// A turn of the session is running; nothing was dropped. Retry when it has finished.
    Busy,
}

/// Messages to a session lane.
pub enum LaneMsg<I> {
    /// A new durable item for this lane's session.
    Enqueue(I),
    /// The turn the lane started has ended.
    TurnEnded {
        /// How it ended.
        outcome: TurnOutcome,
        /// When, stamped on the turn's task as it returned (after its reply was published).
        ended_at: Instant,
    },
    /// A read of the durable inbox came back (items oldest first), or failed.
    Refilled(Result<Vec<I>, BackendError>),
    /// Drop what is held in memory for a session being deleted (see
    /// [`SupervisorMsg::Discard`]).
    Discard(RpcReplyPort<DiscardOutcome>),
    /// The debounce timer fired: start the next turn if the queue has been quiet long enough.
    DebounceCheck,
    /// Sent by the supervisor when there are too many live lanes: ask to passivate now if idle.
    PassivateIfIdle,
    /// The idle timer fired: passivate if nothing happened for the idle timeout.
    IdleCheck,
    /// Finish the running turn, start no other, then stop.
    Drain,
    /// Stop now (sent by the supervisor after it accepted a passivation request).
    Stop,
}
