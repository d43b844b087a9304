//! [`ContextEngine`]: the pipeline, the per-chat-kind policies and the assembly cache, as the
//! turn engine uses them.

use std::sync::Arc;
use std::time::Duration;

use super::cache::{AssemblyCache, CacheKey, CacheStats};
use super::dump::Assembly;
use super::error::ContextError;
use super::pipeline::Pipeline;
use super::presets::{policy_for, ChatPolicy};
use super::registry::Registry;
use super::session::{
    chat_kind_of_key, ContextStore, CurrentMessage, QueueInfo, SessionView, StoredSession,
};
use super::TokenBudget;
use crate::config::Config;
use crate::error::ConfigError;
use crate::inbound::ChatKind;
use crate::model::{CalibrationStore, TokenCounter};

/// What to assemble.
#[derive(Debug, Clone)]
pub struct AssemblyRequest<'a> {
    /// The session key.
    pub session_key: &'a str,
    /// The stored session, if any.
    pub stored: Option<StoredSession>,
    /// The messages the turn answers, oldest first (empty: what the next turn would see).
    pub current: &'a [CurrentMessage],
    /// How they were queued (coalesced batch, dropped messages).
    pub queue: QueueInfo,
    /// Now, ms since the epoch.
    pub now_ms: u64,
}

/// The context engine of a runtime.
pub struct ContextEngine {
    pipeline: Pipeline,
    cache: AssemblyCache,
    /// Policies for direct, group and channel chats.
    policies: [ChatPolicy; 3],
    max_tokens: u32,
    context_window: u32,
    reserve_output_tokens: u32,
    tokens: TokenCounter,
    /// Learned token ratio and real window of the answering model (by name), which lower
    /// `context_window` to what the server really accepts.
    calibration: Option<(CalibrationStore, String)>,
    /// The agent whose chat records this engine reads (`None`: the default agent's); see
    /// [`crate::inbound::chat_record_channel`].
    chat_scope: Option<Arc<str>>,
}

fn slot(kind: ChatKind) -> usize {
    match kind {
        ChatKind::Direct => 0,
        ChatKind::Group => 1,
        ChatKind::Channel => 2,
    }
}

impl ContextEngine {
    /// Builds the engine `config` describes from the stages in `registry`.
    pub fn new(
        config: &Config,
        registry: &Registry,
        tokens: TokenCounter,
    ) -> Result<Self, ConfigError> {
        let c = &config.context;
        let policy = |kind| {
            policy_for(kind, &c.chat_kinds, &c.presets)
                .map_err(|why| ConfigError::Invalid(format!("context.chat_kinds: {why}")))
        };
        Ok(Self {
            pipeline: Pipeline::from_config(config, registry)?,
            cache: AssemblyCache::new(
                c.cache_max_sessions,
                Duration::from_millis(c.cache_max_age_ms),
            ),
            policies: [
                policy(ChatKind::Direct)?,
                policy(ChatKind::Group)?,
                policy(ChatKind::Channel)?,
            ],
            max_tokens: c.max_tokens,
            context_window: config.model.context_window,
            reserve_output_tokens: c.reserve_output_tokens,
            tokens,
            calibration: None,
            chat_scope: None,
        })
    }

    /// Sizes budgets with the window `store` has learned for `model` (after an overflow
    /// error, or from the server's token counts) instead of the configured one.
    pub fn with_calibration(mut self, store: CalibrationStore, model: &str) -> Self {
        self.calibration = Some((store, model.to_string()));
        self
    }

    /// Reads the chat records of agent `scope` (`None`: the default agent's).
    pub fn with_chat_scope(mut self, scope: Option<&str>) -> Self {
        self.chat_scope = scope.map(Arc::from);
        self
    }

    /// The token counter assembly counts with (turns count their messages with the same one).
    pub fn tokens(&self) -> TokenCounter {
        self.tokens
    }

    /// The model's context window in our tokens: the configured one, lowered by calibration.
    fn context_window(&self) -> u32 {
        match &self.calibration {
            Some((store, model)) => store.effective_window(model, self.context_window),
            None => self.context_window,
        }
    }

    /// The policy for chats of `kind`.
    pub fn policy(&self, kind: ChatKind) -> &ChatPolicy {
        &self.policies[slot(kind)]
    }

    /// The budget under `policy`: min(preset max_tokens, `context.max_tokens`, window −
    /// reserve), the reserve shrunk to fit a small window and the total kept above a floor
    /// ([`TokenBudget::for_window`]).
    pub fn budget(&self, policy: &ChatPolicy) -> TokenBudget {
        TokenBudget::for_window(
            policy.max_tokens.min(self.max_tokens),
            self.context_window(),
            self.reserve_output_tokens,
        )
    }

    /// Assembles (or takes from the cache) the context for `request`, and caches it.
    pub fn assemble(
        &self,
        store: &dyn ContextStore,
        request: AssemblyRequest<'_>,
    ) -> Result<Arc<Assembly>, ContextError> {
        self.assemble_caching(store, request, true)
    }

    /// Assembles (or takes from the cache) the context of a turn, without caching it: the
    /// turn's commit changes the transcript and so makes it stale. Cached, it lived until the
    /// commit dropped it, by when its blocks had gone cold; the turn drops it as it answers.
    pub fn assemble_for_turn(
        &self,
        store: &dyn ContextStore,
        request: AssemblyRequest<'_>,
    ) -> Result<Arc<Assembly>, ContextError> {
        self.assemble_caching(store, request, false)
    }

    fn assemble_caching(
        &self,
        store: &dyn ContextStore,
        request: AssemblyRequest<'_>,
        cache: bool,
    ) -> Result<Arc<Assembly>, ContextError> {
        let chat_kind = request
            .current
            .first()
            .map(|c| c.record.message.chat_kind)
            .unwrap_or_else(|| chat_kind_of_key(request.session_key));
        let policy = self.policy(chat_kind);
        let budget = self.budget(policy);
        let view = SessionView::new(
            request.session_key,
            chat_kind,
            policy,
            request.now_ms,
            request.current,
            request.stored,
            self.tokens,
            budget.total,
            store,
        )
        .with_queue(request.queue.clone())
        .with_chat_scope(self.chat_scope.as_deref());
        let key = CacheKey {
            chat_kind,
            queue: request.queue,
            next_seq: request.stored.map_or(0, |s| s.next_seq),
            batch: request.current.iter().map(|c| c.inbox_seq).collect(),
            fingerprints: self.pipeline.fingerprints(&view),
        };
        if let Some(hit) = self.cache.get(request.session_key, &key) {
            return Ok(hit);
        }
        let assembly = Arc::new(self.pipeline.assemble(&view, budget)?);
        if cache {
            self.cache
                .insert(request.session_key, key, Arc::clone(&assembly));
        }
        Ok(assembly)
    }

    /// Forgets the cached assembly of `session_key` (its transcript changed).
    pub fn invalidate(&self, session_key: &str) {
        self.cache.invalidate(session_key);
    }

    /// Assembly-cache hits and misses.
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }
}
