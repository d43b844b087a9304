//! The seam between the actors and the domain: what a supervisor and a lane need done, without
//! knowing how it is done.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::BackendError;

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

/// How a lane treats messages that arrive while one of its turns is running (SPEC §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueMode {
    /// Everything queued during a turn becomes one next turn.
    Collect,
    /// One turn per message, in order.
    Followup,
    /// Hand new messages to the running turn before its next model call (tool loops);
    /// whatever it did not take runs as followups.
    Steer,
    /// Cancel the running turn and answer again with the newest message in view.
    Interrupt,
}

/// What the queue cap drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropPolicy {
    /// Drop the oldest, keeping a one-line summary of each for the next turn.
    Summarize,
    /// Drop the oldest.
    Oldest,
    /// Drop the newest (the one arriving at a full queue).
    Newest,
}

/// The queue policy for the items of one channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuePolicy {
    /// How queued messages are turned into turns.
    pub mode: QueueMode,
    /// After a turn, wait until no message arrived for this long before starting the next
    /// (a burst settles into one turn). Zero starts at once.
    pub debounce: Duration,
    /// Most messages waiting for a turn; beyond it `drop` applies.
    pub cap: usize,
    /// What the cap drops.
    pub drop: DropPolicy,
}

impl Default for QueuePolicy {
    fn default() -> Self {
        Self {
            mode: QueueMode::Collect,
            debounce: Duration::from_millis(500),
            cap: 20,
            drop: DropPolicy::Summarize,
        }
    }
}

/// What one turn answers.
#[derive(Debug, Clone)]
pub struct TurnBatch<I> {
    /// The items the turn answers, oldest first (the last is the current message).
    pub items: Vec<I>,
    /// Items the queue cap dropped before this turn. The turn consumes them; with
    /// [`DropPolicy::Summarize`] it shows each as a one-line summary.
    pub dropped: Vec<I>,
    /// What dropped them.
    pub drop_policy: DropPolicy,
    /// True when the items arrived while an earlier turn was running.
    pub queued: bool,
}

impl<I: QueueItem> TurnBatch<I> {
    /// A batch of one item that did not wait.
    pub fn single(item: I) -> Self {
        Self {
            items: vec![item],
            dropped: Vec::new(),
            drop_policy: DropPolicy::Summarize,
            queued: false,
        }
    }

    /// Every item the turn consumes (answered and dropped), in sequence order.
    pub fn all_items(&self) -> impl Iterator<Item = &I> {
        let mut all: Vec<&I> = self.dropped.iter().chain(self.items.iter()).collect();
        all.sort_by_key(|i| i.seq());
        all.into_iter()
    }
}

/// The running turn's side of the lane: cancellation (interrupt mode) and steering.
pub struct TurnControl<I> {
    cancel: tokio::sync::watch::Receiver<bool>,
    steer: Option<tokio::sync::mpsc::Receiver<I>>,
}

impl<I> TurnControl<I> {
    pub(crate) fn new(
        cancel: tokio::sync::watch::Receiver<bool>,
        steer: Option<tokio::sync::mpsc::Receiver<I>>,
    ) -> Self {
        Self { cancel, steer }
    }

    /// A control that is never cancelled and never steered (for callers outside a lane).
    pub fn detached() -> Self {
        let (_, cancel) = tokio::sync::watch::channel(false);
        Self {
            cancel,
            steer: None,
        }
    }

    /// True once the lane asked the turn to stop.
    pub fn is_cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    /// Resolves when the lane asks the turn to stop; pending forever otherwise. Race the model
    /// call against it so an interrupt aborts the request.
    pub async fn cancelled(&mut self) {
        if self.cancel.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Messages that arrived for this session since the last call, for a turn about to call
    /// the model again. A turn that takes them must consume them in its commit and list their
    /// sequences in [`TurnReport::steered`].
    pub fn take_steered(&mut self) -> Vec<I> {
        let mut out = Vec::new();
        if let Some(rx) = self.steer.as_mut() {
            while let Ok(item) = rx.try_recv() {
                out.push(item);
            }
        }
        out
    }
}

/// What a successful turn tells its lane.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnReport {
    /// Sequences of steered items the turn took in and consumed.
    pub steered: Vec<u64>,
}

/// Why a turn did not complete (as the backend reports it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnError {
    /// The lane cancelled it (interrupt); nothing was committed.
    Cancelled,
    /// It failed; the lane may retry.
    Failed(String),
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
    /// Most live lanes; past it the least recently used idle lanes are passivated.
    pub max_live_lanes: usize,
}

impl Default for LaneSettings {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(600),
            queue_cap: 1_000,
            turn_retries: 1,
            rpc_timeout: Duration::from_secs(10),
            max_live_lanes: 10_000,
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
    ) -> impl Future<Output = Result<Vec<Self::Item>, BackendError>> + Send;

    /// The queue policy for an item (it may depend on the item's channel).
    fn queue_policy(&self, item: &Self::Item) -> QueuePolicy;

    /// Runs one turn for `batch`. On `Ok`, every item of the batch (and every steered item
    /// reported) must be consumed from the durable inbox and the reply delivered. A turn that
    /// sees `control` cancelled stops before committing and returns
    /// [`TurnError::Cancelled`].
    fn run_turn(
        &self,
        key: SessionKey,
        batch: TurnBatch<Self::Item>,
        control: TurnControl<Self::Item>,
    ) -> impl Future<Output = Result<TurnReport, TurnError>> + Send;

    /// Gives up on a turn that failed past its retries: answers the sender with an error and
    /// consumes the items so they are not replayed forever.
    fn abandon_turn(
        &self,
        key: SessionKey,
        batch: TurnBatch<Self::Item>,
        failure: TurnFailure,
    ) -> impl Future<Output = ()> + Send;
}
