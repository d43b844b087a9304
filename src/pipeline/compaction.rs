//! Compaction wiring: the [`CompactionWork`] the Compactor actor runs (a
//! [`SessionCompactor`] over the store), the [`Compaction`] side the turn and the operator
//! talk to, and the budget figures the triggers use.
//!
//! Both sides hold the agents (their context engines) and the config, never the turn engine:
//! the handle is built first and handed to the engine, so no reference points back.

use std::sync::Arc;
use std::time::Duration;

use turnstile_actors::{
    BackendError, CompactionOutcome, CompactionReason, CompactionResult, CompactionWork,
    CompactorHandle, CompactorSettings, ErrorKind, SessionKey,
};

use crate::agents::AgentSet;
use crate::compaction::{Cut, SessionCompactor, Summarizer};
use crate::config::Config;
use crate::context::{chat_kind_of_key, ContextEngine};
use crate::error::Error;
use crate::inbound::ChatKind;
use crate::metrics;
use crate::store::Store;

/// Longest a turn (hard overflow) or an operator (manual) waits for a compaction.
pub(crate) const COMPACTION_WAIT: Duration = Duration::from_secs(300);
/// Compactions a turn asks for after overflow errors before it answers with an error.
pub(crate) const MAX_OVERFLOW_COMPACTIONS: u32 = 3;

/// Runs compactions for the Compactor actor.
struct CompactionWorker {
    agents: Arc<AgentSet>,
    config: Arc<Config>,
    compactor: SessionCompactor,
}

impl CompactionWork for CompactionWorker {
    async fn compact(&self, key: &SessionKey, reason: CompactionReason) -> CompactionResult {
        let cut = match reason {
            CompactionReason::Ttl { up_to_seq } => Cut::UpTo(up_to_seq),
            _ => keep_recent(&self.agents.for_key(key).context, &self.config, key),
        };
        let outcome = self
            .compactor
            .compact(key, cut)
            .await
            .map_err(|e| BackendError::new(ErrorKind::Failed, e.to_string()))?
            .unwrap_or_default();
        if outcome.entries_compacted > 0 {
            self.agents.for_key(key).context.invalidate(key);
            let trigger = match reason {
                CompactionReason::Soft => "threshold",
                CompactionReason::Overflow => "overflow",
                CompactionReason::Manual => "manual",
                CompactionReason::Ttl { .. } => "ttl",
            };
            metrics::compaction(trigger, outcome.tokens_before, outcome.tokens_after);
        }
        Ok(outcome)
    }
}

/// The turn's and the operator's side of compaction: asks the Compactor actor by message.
#[derive(Clone)]
pub(crate) struct Compaction {
    handle: CompactorHandle,
    agents: Arc<AgentSet>,
    config: Arc<Config>,
}

impl Compaction {
    /// Starts the Compactor actor over `store`.
    pub(crate) async fn start(
        config: &Arc<Config>,
        store: &Store,
        agents: &Arc<AgentSet>,
    ) -> Result<Self, Error> {
        let summarizer = Summarizer::from_config(config)?;
        let worker = CompactionWorker {
            agents: Arc::clone(agents),
            config: Arc::clone(config),
            compactor: SessionCompactor::new(store.clone(), summarizer).with_time_zone(
                // The config is validated: its zone resolves.
                crate::context::sources::time_zone(&config.context.time_zone)
                    .unwrap_or(jiff::tz::TimeZone::UTC),
            ),
        };
        let settings = CompactorSettings {
            max_concurrent: config.compaction.max_concurrent,
            max_pending: config.compaction.max_pending,
            wait_timeout: COMPACTION_WAIT,
        };
        let (handle, _join) = CompactorHandle::start(Arc::new(worker), settings).await?;
        Ok(Self {
            handle,
            agents: Arc::clone(agents),
            config: Arc::clone(config),
        })
    }

    /// Asks for a background compaction when `history_tokens` passed the soft threshold, or
    /// (group and channel chats, whose window is short and full of chatter) when the turn's
    /// window left stored history out; the caller (the lane) does not wait.
    pub(crate) fn maybe_compact(&self, session_key: &str, history_tokens: u64, window_full: bool) {
        let context = &self.agents.for_key(session_key).context;
        let threshold =
            history_budget(context, session_key) as f64 * self.config.compaction.soft_threshold;
        let group = chat_kind_of_key(session_key) != ChatKind::Direct;
        let window = group && window_full && self.config.compaction.window_trigger;
        if (history_tokens as f64) > threshold || window {
            self.handle
                .request(Arc::from(session_key), CompactionReason::Soft);
        }
    }

    /// Asks for a background compaction of the span a TTL `keep: summary` rule left out.
    pub(crate) fn compact_ttl_span(&self, session_key: &str, up_to_seq: u64) {
        self.handle
            .request(Arc::from(session_key), CompactionReason::Ttl { up_to_seq });
    }

    /// Compacts `session_key` and waits for it (hard overflow, manual).
    pub(crate) async fn compact_now(
        &self,
        session_key: &str,
        reason: CompactionReason,
    ) -> Result<CompactionOutcome, Error> {
        self.handle
            .compact(Arc::from(session_key), reason)
            .await?
            .map_err(|e| Error::Conflict(format!("compaction of {session_key:?} failed: {e}")))
    }

    /// Stops the Compactor actor (at shutdown).
    pub(crate) fn stop(&self) {
        self.handle.stop();
    }
}

/// The history budget of `session_key`'s chat kind, in tokens.
fn history_budget(context: &ContextEngine, session_key: &str) -> u64 {
    let policy = context.policy(chat_kind_of_key(session_key));
    u64::from(context.budget(policy).total)
}

/// What a compaction of `session_key` keeps verbatim: `keep_recent_ratio × budget` tokens; in
/// group and channel chats also at most half the history window's messages, so what the
/// window no longer shows goes into the rolling summary.
fn keep_recent(context: &ContextEngine, config: &Config, session_key: &str) -> Cut {
    let tokens =
        (history_budget(context, session_key) as f64 * config.compaction.keep_recent_ratio) as u64;
    match chat_kind_of_key(session_key) {
        ChatKind::Direct => Cut::KeepRecent(tokens),
        kind => Cut::KeepNewest {
            tokens,
            entries: (context.policy(kind).max_messages / 2).max(1),
        },
    }
}
