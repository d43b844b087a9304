//! The seam between the actors and the domain: what a supervisor and a lane need done, without
//! knowing how it is done.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// A session key such as `agent:main:telegram:group:-100123`. Cheap to clone.
pub type SessionKey = Arc<str>;

/// One unit of work queued in a lane: an accepted inbound message, already durable.
pub trait QueueItem: Clone + Send + Sync + 'static {
    /// The item's position in the durable inbox. Strictly increasing per session key in the
    /// order the supervisor admitted the items; lanes use it to ignore an item they already
    /// hold (recovered from the inbox and then also routed to them).
    fn seq(&self) -> u64;
}

/// Why a turn did not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnFailure {
    /// The backend returned an error (storage, bug); the turn may be retried.
    Error(String),
    /// The turn's task panicked; the turn may be retried.
    Panicked(String),
}

impl std::fmt::Display for TurnFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TurnFailure::Error(e) => write!(f, "turn failed: {e}"),
            TurnFailure::Panicked(e) => write!(f, "turn panicked: {e}"),
        }
    }
}

/// Lane behaviour that the backend configures.
#[derive(Debug, Clone)]
pub struct LaneSettings {
    /// A lane with nothing to do for this long stops and frees its memory (passivation); the
    /// next message for its key spawns it again from durable state.
    pub idle_timeout: Duration,
    /// How many items a lane holds in memory beyond the running turn. Items past the cap stay
    /// in the durable inbox and are picked up when the queue has room, so the cap bounds
    /// memory without losing anything.
    pub queue_cap: usize,
    /// How many times a failed or panicked turn is run again before it is abandoned.
    pub turn_retries: u32,
    /// How long a caller waits for the supervisor to answer an RPC.
    pub rpc_timeout: Duration,
}

impl Default for LaneSettings {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(600),
            queue_cap: 1_000,
            turn_retries: 1,
            rpc_timeout: Duration::from_secs(10),
        }
    }
}

/// What the actors need from the domain. Implemented by `turnstile` over sled and the model,
/// and by in-memory fakes in tests.
///
/// All methods are called from inside actors or tasks they spawn; `admit` is called on the
/// supervisor's own task, so it must be quick and must not wait on I/O completion (it may
/// start a durable write and hand back something the caller awaits).
pub trait Backend: Send + Sync + 'static {
    /// What a channel submits.
    type Event: Send + 'static;
    /// What a lane queues.
    type Item: QueueItem;
    /// What an accepted submission answers (e.g. a future that resolves once the item is
    /// durable, plus the session key).
    type Accepted: Send + 'static;
    /// What a refused submission answers (dropped by preflight, invalid, over capacity, or
    /// refused because the runtime is shutting down).
    type Refused: Send + 'static;

    /// Lane settings.
    fn lane_settings(&self) -> &LaneSettings;

    /// Decides what to do with an event: route an item to a session key (the item must already
    /// be written to the durable inbox, in admission order) or refuse it.
    fn admit(
        &self,
        event: Self::Event,
    ) -> Result<(SessionKey, Self::Item, Self::Accepted), Self::Refused>;

    /// The refusal answered while the supervisor is draining for shutdown.
    fn refuse_shutting_down(&self) -> Self::Refused;

    /// The unconsumed items of a session, oldest first, at most `limit` with `seq > after`.
    /// Called when a lane starts and whenever its in-memory queue has room again.
    fn pending(
        &self,
        key: &SessionKey,
        after: u64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Self::Item>, String>> + Send;

    /// Runs one turn for `batch` (oldest first). On `Ok`, the items must be consumed from the
    /// durable inbox and the reply delivered.
    fn run_turn(
        &self,
        key: SessionKey,
        batch: Vec<Self::Item>,
    ) -> impl Future<Output = Result<(), String>> + Send;

    /// Gives up on a turn that failed past its retries: answers the sender with an error and
    /// consumes the items so they are not replayed forever.
    fn abandon_turn(
        &self,
        key: SessionKey,
        batch: Vec<Self::Item>,
        failure: TurnFailure,
    ) -> impl Future<Output = ()> + Send;
}
