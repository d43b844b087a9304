//! The actors' [`Backend`], implemented with the store and the turn engine. This is where the
//! supervisor's admission decisions and the lanes' turns meet the domain.

use std::sync::Arc;

use tracing::Instrument;
use turnstile_actors::{Backend, LaneSettings, QueueItem, SessionKey, TurnFailure};

use super::running::RunningTurns;
use crate::metrics;

use super::turn::{now_ms, TurnEngine};
use super::Refusal;
use crate::inbound::{normalize_session_key, session_key, InboundEvent};
use crate::store::{InboxItem, InboxRecord};

impl QueueItem for InboxItem {
    fn seq(&self) -> u64 {
        self.seq
    }
}

/// What the supervisor answers for an accepted message.
#[derive(Debug)]
pub struct Accepted {
    /// The session the message was routed to.
    pub session_key: SessionKey,
    /// The inbox sequence.
    pub seq: u64,
    /// The group-commit ticket to wait on before acknowledging.
    pub ticket: u64,
}

/// The production backend.
pub struct TurnBackend {
    pub(crate) engine: Arc<TurnEngine>,
    pub(crate) settings: LaneSettings,
    /// Sessions with a turn in progress (shared with the runtime, which refuses deletes then).
    pub(crate) running: Arc<RunningTurns>,
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
        let store = &self.engine.store;
        let cap = self.engine.config.storage.max_queued_messages;
        if store.queued() >= cap {
            return Err(Refusal::Overloaded(format!(
                "{cap} messages are already queued"
            )));
        }
        let key: SessionKey = match &event.session_key {
            Some(explicit) => normalize_session_key(explicit),
            None => session_key(&self.engine.config.session.agent_id, &event.message),
        }
        .into();
        let record = InboxRecord {
            message: event.message,
            accepted_at_ms: now_ms(),
            system_events: Vec::new(),
            group_history: Vec::new(),
        };
        let (item, ticket) = store
            .enqueue(&key, record)
            .map_err(|e| Refusal::Storage(e.to_string()))?;
        let accepted = Accepted {
            session_key: key.clone(),
            seq: item.seq,
            ticket,
        };
        Ok((key, item, accepted))
    }

    fn refuse_shutting_down(&self) -> Refusal {
        Refusal::ShuttingDown
    }

    async fn pending(
        &self,
        key: &SessionKey,
        after: u64,
        limit: usize,
    ) -> Result<Vec<InboxItem>, String> {
        self.engine
            .store
            .pending(key, after, limit)
            .map_err(|e| e.to_string())
    }

    async fn run_turn(&self, key: SessionKey, batch: Vec<InboxItem>) -> Result<(), String> {
        let _running = self.running.enter(&key);
        let span = metrics::turn_span(&key, batch.len());
        let result = self.engine.run(&key, &batch).instrument(span).await;
        result.map_err(|e| {
            metrics::turn_failed();
            e.to_string()
        })
    }

    async fn abandon_turn(&self, key: SessionKey, batch: Vec<InboxItem>, failure: TurnFailure) {
        let _running = self.running.enter(&key);
        metrics::turn_abandoned();
        tracing::error!(session_key = %key, %failure, "turn abandoned after retries");
        if let Err(e) = self
            .engine
            .abandon(&key, &batch, &failure.to_string())
            .await
        {
            tracing::error!(session_key = %key, error = %e, "could not record the abandoned turn; it stays in the inbox");
        }
    }
}
