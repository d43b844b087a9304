//! The message pipeline: the life of one message, in three stages.
//!
//! ```text
//! Runtime::submit(message)                 validate; refuse while closing (runtime/mod.rs)
//!   ChannelHandle::submit → Supervisor     one mailbox, admissions in arrival order
//!     Backend::admit → admission::Admitter::admit
//!                                          session key → disk budget
//!                                          → preflight (drop or accept) → queue cap → chat record
//!                                          → durable inbox entry → route to the key's lane
//!   wait for the group commit of the entry → Ack (or the refusal: Dropped is a 200)
//! Lane (one per session)                   queue mode, debounce, cap, retries
//!   Backend::run_turn                      a cold session is thawed first (blocking pool)
//!     → turn::TurnEngine::run
//!                                          assemble context → model → tools, until an
//!                                          answer (overflow: compact and retry)
//!     delivery::Delivery::deliver          commit entries + consume inbox items in one
//!                                          transaction → wait until durable → ask for
//!                                          compaction → ReplyHub::publish
//!       crate::replies                     stream (/v1/events), the waiter of each message,
//!                                          the channel that serves its platform
//! ```
//!
//! While someone watches a turn's text (`ReplyHub::delta_fanout`: a streaming request, a
//! `/v1/events?deltas=true` subscriber, a channel taking deltas), the turn calls the model
//! streaming and its text deltas go through the hub as they arrive; otherwise it calls the
//! model whole. A turn that fails past its retries ends in `Backend::abandon_turn`: an error
//! notice (its kind from `failure.rs`, its text without URLs), delivered the same way. Stages: [`admission`] ([`Admitter::admit`]), [`turn`]
//! ([`TurnEngine::run`]), [`delivery`] ([`Delivery::deliver`]). The actors reach them only
//! through [`TurnBackend`], the domain's implementation of their [`Backend`] trait.

pub(crate) mod admission;
mod batch;
mod compaction;
pub(crate) mod delivery;
pub(crate) mod failure;
pub(crate) mod replication;
pub(crate) mod requests;
mod running;
pub(crate) mod turn;

use std::sync::Arc;

use tracing::Instrument;
use turnstile_actors::{
    Backend, BackendError, ErrorKind, LaneSettings, QueuePolicy, SessionKey, TurnBatch,
    TurnControl, TurnError, TurnFailure, TurnReport,
};

pub(crate) use admission::{Accepted, Admitter};
pub(crate) use compaction::Compaction;
pub(crate) use replication::{ReplicatedTurn, Replication, ReplicationError, ReplicationSlot};
pub(crate) use requests::{ClientToolResult, RequestExtras, Requests};
pub(crate) use running::RunningTurns;
pub(crate) use turn::TurnEngine;

use crate::inbound::{InboundEvent, Preflight, Refusal};
use crate::metrics;
use crate::store::{InboxItem, Store};

/// The production backend: the actors' seam into the three stages.
pub(crate) struct TurnBackend {
    admitter: Admitter,
    engine: Arc<TurnEngine>,
    store: Store,
    settings: LaneSettings,
    /// Records replies, so later messages in their threads address the bot.
    preflight: Arc<Preflight>,
    /// Sessions with a turn in progress (shared with the runtime, which refuses deletes then).
    running: Arc<RunningTurns>,
}

impl TurnBackend {
    /// A backend admitting with `admitter` and running turns on `engine`.
    pub(crate) fn new(
        admitter: Admitter,
        engine: Arc<TurnEngine>,
        store: Store,
        settings: LaneSettings,
        preflight: Arc<Preflight>,
        running: Arc<RunningTurns>,
    ) -> Self {
        Self {
            admitter,
            engine,
            store,
            settings,
            preflight,
            running,
        }
    }
}

impl TurnBackend {
    /// Brings session `key` back from the cold tier before a turn reads or writes it, on the
    /// blocking pool (the lane's turn task awaits it; admission never does). Messages that
    /// arrive meanwhile wait in the inbox behind this turn, so they follow the thawed
    /// transcript. Costs an index lookup when the session is not cold. A thaw that fails is
    /// an error: the turn must not start a fresh session beside the cold one.
    async fn thaw_first(&self, key: &SessionKey) -> Result<(), crate::error::StoreError> {
        // Owed but no longer cold (deleted for the budget meanwhile): the thaw finds nothing
        // and settles what admission counted.
        if !self.store.may_be_cold(key) && !self.store.owes_thaw(key) {
            return Ok(());
        }
        let store = self.store.clone();
        let key = key.clone();
        tokio::task::spawn_blocking(move || store.thaw_session(&key).map(|_| ()))
            .await
            .map_err(|_| crate::error::StoreError::Invariant("a thaw did not finish"))?
    }
}

impl Backend for TurnBackend {
    type Event = InboundEvent;
    type Item = InboxItem;
    type Accepted = Accepted;
    type Refused = Refusal;

    fn lane_settings(&self) -> &LaneSettings {
        &self.settings
    }

    fn admit(&self, event: InboundEvent) -> Result<(SessionKey, InboxItem, Accepted), Refusal> {
        self.admitter.admit(event)
    }

    fn refuse_shutting_down(&self) -> Refusal {
        Refusal::ShuttingDown
    }

    async fn pending(
        &self,
        key: &SessionKey,
        after: u64,
        limit: usize,
    ) -> Result<Vec<InboxItem>, BackendError> {
        // A sled read: on the blocking pool, so a lane refilling never holds a tokio worker.
        let store = self.store.clone();
        let key = key.clone();
        tokio::task::spawn_blocking(move || store.pending(&key, after, limit))
            .await
            .map_err(|e| {
                BackendError::new(
                    ErrorKind::Interrupted,
                    format!("the inbox read did not finish: {e}"),
                )
            })?
            .map_err(|e| BackendError::new(ErrorKind::Storage, e.to_string()))
    }

    fn queue_policy(&self, item: &InboxItem) -> QueuePolicy {
        self.admitter.queue_policy(item)
    }

    async fn run_turn(
        &self,
        key: SessionKey,
        batch: TurnBatch<InboxItem>,
        control: TurnControl<InboxItem>,
    ) -> Result<TurnReport, TurnError> {
        let _running = self.running.enter(&key);
        if !self.engine.replication().owns(&key) {
            // A cluster node that lost (or never had) the session's partition: the owner
            // answers from its copy of the partition's inbox.
            self.engine
                .forget(&key, &batch)
                .await
                .map_err(|e| TurnError::Failed(e.to_string()))?;
            return Ok(TurnReport::default());
        }
        self.thaw_first(&key)
            .await
            .map_err(|e| TurnError::Failed(e.to_string()))?;
        let span = metrics::turn_span(&key, batch.items.len() + batch.dropped.len());
        let result = self
            .engine
            .run(&key, &batch, control)
            .instrument(span)
            .await;
        let report = result.inspect_err(|e| {
            if matches!(e, TurnError::Failed(_)) {
                metrics::turn_failed();
            }
        })?;
        // The reply is published: later messages in these threads address the bot.
        for item in batch.all_items() {
            self.preflight.record_reply(&item.record.message);
        }
        Ok(report)
    }

    async fn abandon_turn(
        &self,
        key: SessionKey,
        batch: TurnBatch<InboxItem>,
        failure: TurnFailure,
    ) {
        let _running = self.running.enter(&key);
        if !self.engine.replication().owns(&key) {
            if let Err(e) = self.engine.forget(&key, &batch).await {
                tracing::error!(session_key = %key, error = %e, "could not let go of another node's messages");
            }
            return;
        }
        metrics::turn_abandoned();
        tracing::error!(session_key = %key, %failure, "turn abandoned after retries");
        // The notice is committed to the session: never beside a cold copy that failed to
        // thaw (a fresh session would hide its history). The items stay in the inbox then.
        if let Err(e) = self.thaw_first(&key).await {
            tracing::error!(session_key = %key, error = %e, "the cold session could not be thawed; its messages stay in the inbox");
            return;
        }
        if let Err(e) = self
            .engine
            .abandon(&key, &batch, &failure.to_string())
            .await
        {
            tracing::error!(session_key = %key, error = %e, "could not record the abandoned turn; it stays in the inbox");
        }
    }
}
