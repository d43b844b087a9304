//! Turnstile's concurrency skeleton: typed messages, the supervisor, session lanes and the
//! channel-actor seam.
//!
//! This crate knows nothing about storage, HTTP or models. It drives the [`Backend`] trait,
//! which the `turnstile` crate implements with sled, the context engine and a model client, and
//! which the tests here implement with in-memory fakes. That is what lets ordering, passivation
//! and supervision be tested without a disk or a network.
//!
//! # Layout
//! - `backend`: the [`Backend`] trait — admission, recovery and turn execution, as the actors
//!   see them.
//! - `messages`: every message an actor here accepts ([`SupervisorMsg`], [`LaneMsg`]).
//! - `supervisor`: the [`Supervisor`] actor — admits events, owns the lane registry, spawns,
//!   restarts and passivates lanes, drains on shutdown.
//! - `lane`: the session-lane actor — one per session key, one turn at a time, FIFO; its
//!   policy is `LaneQueue` (`lane/queue.rs`), a plain state machine.
//!
//! `docs/runtime-semantics.md` states the ordering, priorities, failure and back-pressure rules
//! of these actors.
//! - `channel`: the [`Channel`] trait and the actor that connects a transport to the
//!   supervisor.
//! - `janitor`: the [`Janitor`] actor — keeps the data dir inside its disk budget through the
//!   [`DiskBudget`] trait.
//! - `compactor`: the [`Compactor`] actor — session compactions off the lanes, bounded and
//!   deduplicated per key.
//! - `handle`: [`SupervisorHandle`], the cheap-clone handle callers use; no `ActorRef` leaks.
//! - `clock`: [`clock::now_ms`], the one wall clock of both crates (tokio's virtual time in
//!   tests).
//!
//! # Back-pressure
//! ractor mailboxes are unbounded. Bounds live in two places: the [`Backend::admit`] call
//! (global caps, e.g. the durable inbox depth) refuses work before anything is queued, and each
//! lane's pending queue is capped by [`LaneSettings::queue_cap`].
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

mod backend;
mod channel;
pub mod clock;
mod compactor;
mod error;
mod handle;
mod janitor;
mod lane;
mod messages;
mod supervisor;

pub use backend::{
    Backend, DropPolicy, LaneSettings, QueueItem, QueueMode, QueuePolicy, SessionKey, TurnBatch,
    TurnControl, TurnError, TurnFailure, TurnReport,
};
pub use channel::{Channel, ChannelActor, ChannelHandle, ChannelMsg, MAX_INFLIGHT_DELIVERIES};
pub use compactor::{
    CompactionOutcome, CompactionReason, CompactionResult, CompactionWork, Compactor,
    CompactorHandle, CompactorMsg, CompactorSettings, CompactorState,
};
pub use error::{BackendError, ErrorKind};
pub use handle::{ActorsError, SupervisorHandle};
pub use janitor::{
    BudgetError, DiskBudget, DiskUsage, Janitor, JanitorHandle, JanitorMsg, JanitorSettings,
    JanitorStatus, ReclaimReport,
};
pub use messages::{DiscardOutcome, LaneMsg, SubmitReply, SupervisorMsg, TurnOutcome};

pub use supervisor::{LaneRegistry, Supervisor};

#[cfg(test)]
mod tests;
