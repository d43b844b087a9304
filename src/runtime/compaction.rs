//! Compaction wiring: the [`CompactionWork`] the Compactor actor runs (a
//! [`SessionCompactor`] over the runtime's store), and the budget figures the triggers use.

use std::sync::{Arc, Weak};
use std::time::Duration;

use turnstile_actors::{
    CompactionOutcome, CompactionReason, CompactionResult, CompactionWork, CompactorHandle,
    CompactorSettings, SessionKey,
};

use super::TurnEngine;
use crate::compaction::{Cut, SessionCompactor, Summarizer};
use crate::config::Config;
use crate::context::chat_kind_of_key;
use crate::error::Error;
use crate::inbound::ChatKind;
use crate::metrics;

/// Longest a turn (hard overflow) or an operator (manual) waits for a compaction.
pub const COMPACTION_WAIT: Duration = Duration::from_secs(300);
/// Compactions a turn asks for after overflow errors before it answers with an error.
pub const MAX_OVERFLOW_COMPACTIONS: u32 = 3;

/// Runs compactions for the Compactor actor.
pub(crate) struct CompactionWorker {
    /// Weak: the engine holds the compactor's handle.
    engine: Weak<TurnEngine>,
    compactor: SessionCompactor,
}

impl CompactionWork for CompactionWorker {
    async fn compact(&self, key: &SessionKey, reason: CompactionReason) -> CompactionResult {
        let engine = self
            .engine
            .upgrade()
            .ok_or_else(|| "the runtime has stopped".to_string())?;
        let cut = match reason {
            CompactionReason::Ttl { up_to_seq } => Cut::UpTo(up_to_seq),
            _ => engine.keep_recent(key),
        };
        let outcome = self
            .compactor
            .compact(key, cut)
            .await
            .map_err(|e| e.to_string())?
            .unwrap_or_default();
        if outcome.entries_compacted > 0 {
            engine.context.invalidate(key);
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

/// Starts the Compactor actor for `engine` and hands the engine its handle.
pub(crate) async fn start(
    config: &Config,
    engine: &Arc<TurnEngine>,
) -> Result<CompactorHandle, Error> {
    let summarizer = Summarizer::from_config(config)?;
    let worker = CompactionWorker {
        engine: Arc::downgrade(engine),
        compactor: SessionCompactor::new(engine.store.clone(), summarizer),
    };
    let settings = CompactorSettings {
        max_concurrent: config.compaction.max_concurrent,
        max_pending: config.compaction.max_pending,
        wait_timeout: COMPACTION_WAIT,
    };
    let (handle, _join) = CompactorHandle::start(Arc::new(worker), settings).await?;
    // Set once, right after the engine is built; a second start would keep the first.
    let _ = engine.compactor.set(handle.clone());
    Ok(handle)
}

impl TurnEngine {
    /// The history budget of `session_key`'s chat kind, in tokens.
    pub(crate) fn history_budget(&self, session_key: &str) -> u64 {
        let policy = self.context.policy(chat_kind_of_key(session_key));
        u64::from(self.context.budget(policy).total)
    }

    /// What a compaction of `session_key` keeps verbatim: `keep_recent_ratio × budget`
    /// tokens; in group and channel chats also at most half the history window's messages, so
    /// what the window no longer shows goes into the rolling summary.
    fn keep_recent(&self, session_key: &str) -> Cut {
        let tokens = (self.history_budget(session_key) as f64
            * self.config.compaction.keep_recent_ratio) as u64;
        match chat_kind_of_key(session_key) {
            ChatKind::Direct => Cut::KeepRecent(tokens),
            kind => Cut::KeepNewest {
                tokens,
                entries: (self.context.policy(kind).max_messages / 2).max(1),
            },
        }
    }

    /// Asks for a background compaction when `history_tokens` passed the soft threshold, or
    /// (group and channel chats, whose window is short and full of chatter) when the turn's
    /// window left stored history out; the caller (the lane) does not wait.
    pub(crate) fn maybe_compact(&self, session_key: &str, history_tokens: u64, window_full: bool) {
        let threshold =
            self.history_budget(session_key) as f64 * self.config.compaction.soft_threshold;
        let group = chat_kind_of_key(session_key) != ChatKind::Direct;
        let window = group && window_full && self.config.compaction.window_trigger;
        if (history_tokens as f64) > threshold || window {
            if let Some(c) = self.compactor.get() {
                c.request(Arc::from(session_key), CompactionReason::Soft);
            }
        }
    }

    /// Asks for a background compaction of the span a TTL `keep: summary` rule left out.
    pub(crate) fn compact_ttl_span(&self, session_key: &str, up_to_seq: u64) {
        if let Some(c) = self.compactor.get() {
            c.request(Arc::from(session_key), CompactionReason::Ttl { up_to_seq });
        }
    }

    /// Compacts `session_key` and waits for it (hard overflow, manual).
    pub(crate) async fn compact_now(
        &self,
        session_key: &str,
        reason: CompactionReason,
    ) -> Result<CompactionOutcome, Error> {
        let compactor = self.compactor.get().ok_or(Error::NotAvailable(
            "compaction: the compactor is not running",
        ))?;
        compactor
            .compact(Arc::from(session_key), reason)
            .await?
            .map_err(|e| Error::Conflict(format!("compaction of {session_key:?} failed: {e}")))
    }
}
