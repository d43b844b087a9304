//! The embedding API: [`Runtime`] and its builder. A `Runtime` is a cheap-clone handle; the
//! actors behind it stay private.

mod backend;
mod batch;
mod compaction;
#[cfg(test)]
mod compaction_tests;
mod ops;
mod ports;
mod replies;
mod running;
mod turn;
#[cfg(test)]
mod turn_tests;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{broadcast, Semaphore};
use turnstile_actors::{
    Channel, ChannelHandle, JanitorHandle, JanitorSettings, JanitorStatus, LaneSettings,
    SupervisorHandle,
};

use ports::ChannelTasks;
use running::RunningTurns;

pub use backend::{queue_policy, Accepted, TurnBackend};
pub use batch::{queue_info, DROPPED_LINE_CHARS};
pub use compaction::{COMPACTION_WAIT, MAX_OVERFLOW_COMPACTIONS};
pub use ops::{Compacted, Deleted, Stats};
pub use ports::ChannelPort;
pub use replies::{Reply, ReplyHub, ReplyRoute, ReplyWaiter};
pub use turn::TurnEngine;

use crate::channels::ApiChannel;
use crate::config::Config;
use crate::config::JanitorMode;
use crate::context::{
    Assembly, CacheStats, ContextEngine, ContextProcessor, ContextSource, Registry, StageContext,
};
use crate::error::Error;
use crate::inbound::{
    normalize_session_key, InboundEvent, InboundMessage, Preflight, PreflightStats, SessionKeys,
};
use crate::metrics;
use crate::model::{
    CalibrationStore, EchoModel, Encoding, Model, OpenAiModel, OpenAiSettings, TokenCounter,
};
use crate::store::{EntryKind, SessionRecord, Store, StoreBudget, TurnCommitter};
use crate::tools::{ToolHandler, ToolRegistry};

/// Why preflight decided a message is not a turn. Each decision is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// Seen before (redelivery).
    Duplicate,
    /// Sent by a bot (or by this bot).
    Bot,
    /// Not allowed by `dm_policy` / `group_policy`.
    Policy,
    /// A group message that does not address the bot.
    NoMention,
    /// Addresses someone else (`ignore_other_mentions`).
    OtherMention,
    /// A platform event, queued for the next turn instead.
    SystemEvent,
}

impl DropReason {
    /// Whether a message dropped for this reason may leave a record: group chatter stays in
    /// its chat's record, a system event in its session's queue.
    pub fn keeps_record(self) -> bool {
        matches!(
            self,
            DropReason::NoMention | DropReason::OtherMention | DropReason::SystemEvent
        )
    }
}

impl Refusal {
    /// The reason label counted in `turnstile_inbound_dropped_total`.
    pub fn metric_reason(&self) -> &'static str {
        match self {
            Refusal::Dropped(reason) => reason.as_str(),
            Refusal::Overloaded(_) => "overloaded",
            Refusal::ShuttingDown => "shutting_down",
            Refusal::Storage(_) => "storage",
            Refusal::InsufficientStorage(_) => "insufficient_storage",
        }
    }
}

impl DropReason {
    /// The name used in API answers and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Duplicate => "duplicate",
            DropReason::Bot => "bot",
            DropReason::Policy => "policy",
            DropReason::NoMention => "no_mention",
            DropReason::OtherMention => "other_mention",
            DropReason::SystemEvent => "system_event",
        }
    }
}

/// Why the runtime did not accept a message. Nothing was stored for it as a turn.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Preflight decided it is not a turn (not an error: answered with 200).
    #[error("dropped: {}", .0.as_str())]
    Dropped(DropReason),
    /// Too much is queued; retry later.
    #[error("over capacity: {0}")]
    Overloaded(String),
    /// The runtime is shutting down.
    #[error("shutting down")]
    ShuttingDown,
    /// The inbox write failed.
    #[error("storage: {0}")]
    Storage(String),
    /// The data dir is at its disk budget and nothing can be evicted yet; retry later.
    #[error("insufficient storage: {0}")]
    InsufficientStorage(String),
}

/// The acknowledgement of an accepted message: it is durable and will be answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ack {
    /// The session it was routed to.
    pub session_key: String,
    /// The message's id.
    pub message_id: String,
}

/// A session as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionInfo {
    /// The session key.
    pub session_key: String,
    /// The stable numeric id.
    pub session_id: u64,
    /// Last change, ms since the epoch.
    pub updated_at_ms: u64,
    /// Transcript entries.
    pub entries: u64,
    /// Tokens in the transcript.
    pub tokens: u64,
    /// Bytes in the transcript.
    pub bytes: u64,
    /// Compactions so far.
    pub compaction_count: u32,
}

impl SessionInfo {
    fn new(session_key: String, r: SessionRecord) -> Self {
        Self {
            session_key,
            session_id: r.id,
            updated_at_ms: r.updated_at_ms,
            entries: r.entries,
            tokens: r.tokens,
            bytes: r.bytes,
            compaction_count: r.compaction_count,
        }
    }
}

/// A transcript entry as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TranscriptItem {
    /// Position in the session.
    pub seq: u64,
    /// `user`, `assistant`, `summary`, …
    pub kind: EntryKind,
    /// The text.
    pub text: String,
    /// Platform message id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// Sender id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    /// Sender display name (untrusted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_name: Option<String>,
    /// When, ms since the epoch.
    pub timestamp_ms: u64,
    /// Tokens.
    pub tokens: u32,
}

/// Builds a [`Runtime`].
pub struct RuntimeBuilder {
    config: Config,
    model: Option<Arc<dyn Model>>,
    context: Registry,
    tools: ToolRegistry,
    tool_errors: Vec<crate::error::ConfigError>,
    inspect_only: bool,
}

impl RuntimeBuilder {
    /// Uses `config` (replacing any set before).
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// Stores data under `dir`.
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.config.storage.data_dir = dir.into();
        self
    }

    /// Answers turns with `model` instead of the one the config names.
    pub fn model(mut self, model: Arc<dyn Model>) -> Self {
        self.model = Some(model);
        self
    }

    /// Registers a context source under `name`, for `[[context.sources]]` to use (the
    /// built-in sources are always registered; a name may replace one).
    pub fn context_source(
        mut self,
        name: &str,
        factory: impl Fn(&StageContext<'_>) -> Result<Box<dyn ContextSource>, String>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.context.register_source(name, factory);
        self
    }

    /// Registers a context processor under `name`, for `[[context.processors]]` to use.
    pub fn context_processor(
        mut self,
        name: &str,
        factory: impl Fn(&StageContext<'_>) -> Result<Box<dyn ContextProcessor>, String>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.context.register_processor(name, factory);
        self
    }

    /// Registers a tool the model may call: its name, what it does, the JSON schema of its
    /// arguments, and the handler that runs it. An invalid or repeated name fails `build`.
    pub fn tool(
        mut self,
        name: &str,
        description: &str,
        parameters: serde_json::Value,
        handler: impl ToolHandler,
    ) -> Self {
        if let Err(e) = self.tools.register(name, description, parameters, handler) {
            self.tool_errors.push(e);
        }
        self
    }

    /// Opens the runtime for inspection and maintenance (the operator CLI on a data dir): the
    /// inbox is not replayed and configured channels are not started.
    pub fn inspect_only(mut self) -> Self {
        self.inspect_only = true;
        self
    }

    /// Opens the store, starts the actors and replays what was acknowledged but not answered.
    pub async fn build(mut self) -> Result<Runtime, Error> {
        if let Some(e) = std::mem::take(&mut self.tool_errors).into_iter().next() {
            return Err(e.into());
        }
        let config = Arc::new(self.config);
        config.validate()?;
        // One calibration store: the client learns from usage and overflow errors, the
        // context engine sizes budgets with what it learned.
        let calibration = CalibrationStore::new();
        let model: Arc<dyn Model> = match self.model {
            Some(m) => m,
            None => model_from_config(&config, &calibration)?,
        };
        let store = if self.inspect_only {
            Store::open(&config.storage)?
        } else {
            Store::open_for_serving(&config.storage)?
        };
        let tokens = TokenCounter::new(Encoding::for_model(&config.model.model));
        let context = ContextEngine::new(&config, &self.context, tokens)?
            .with_calibration(calibration, model.name());
        // Loading a vocabulary takes a fraction of a second: do it off the start-up path.
        tokio::task::spawn_blocking(move || tokens.warm_up());
        let replies = Arc::new(ReplyHub::new(config.server.events_buffer));
        let engine = Arc::new(TurnEngine {
            store: store.clone(),
            committer: TurnCommitter::start(),
            model,
            tokens,
            replies: Arc::clone(&replies),
            config: Arc::clone(&config),
            model_permits: Semaphore::new(config.lanes.max_concurrent_turns),
            context,
            tools: self.tools,
            compactor: std::sync::OnceLock::new(),
        });
        compaction::start(&config, &engine).await?;
        let preflight = Arc::new(Preflight::new(&config)?);
        let running = Arc::new(RunningTurns::default());
        let backend = Arc::new(TurnBackend {
            keys: SessionKeys::new(&config.session)?,
            preflight: Arc::clone(&preflight),
            running: Arc::clone(&running),
            engine: Arc::clone(&engine),
            settings: LaneSettings {
                idle_timeout: config.idle_timeout(),
                queue_cap: config.lanes.queue_cap,
                turn_retries: config.lanes.turn_retries,
                rpc_timeout: Duration::from_secs(10),
                max_live_lanes: config.lanes.max_live_lanes,
            },
        });
        let (supervisor, _) = SupervisorHandle::start(backend).await?;
        let api = ChannelHandle::start(Arc::new(ApiChannel), &supervisor).await?;
        let janitor = start_janitor(&store, &config, &running).await?;
        let runtime = Runtime {
            inner: Arc::new(Inner {
                config,
                engine,
                preflight,
                supervisor,
                api,
                janitor,
                closing: AtomicBool::new(false),
                running,
                channel_tasks: ChannelTasks::new(),
            }),
        };
        if self.inspect_only {
            return Ok(runtime);
        }
        // Before any channel can deliver a redelivery of a queued message.
        let restored = runtime.inner.preflight.restore_durable_marks(&store);
        match restored {
            Ok(0) => {}
            Ok(restored) => tracing::info!(restored, "dedupe keys of queued messages restored"),
            Err(e) => {
                let _ = runtime.shutdown().await;
                return Err(e.into());
            }
        }
        // Channels first, so replies to replayed messages find their channel.
        if let Err(e) = crate::channels::start_configured(&runtime).await {
            let _ = runtime.shutdown().await;
            return Err(e);
        }
        let checked = store.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = checked.run_deferred_checks() {
                tracing::error!(error = %e, "the store checks after start-up failed");
            }
        });
        let pending = store.sessions_with_pending()?;
        if !pending.is_empty() {
            tracing::info!(sessions = pending.len(), "replaying unanswered messages");
            runtime
                .inner
                .supervisor
                .recover(pending.into_iter().map(Into::into).collect())?;
        }
        Ok(runtime)
    }
}

/// Starts the janitor over the store; sessions with a running turn (or unconsumed inbox
/// entries) are never evicted, and the store wakes the janitor when writes cross its live-byte
/// trigger.
async fn start_janitor(
    store: &Store,
    config: &Config,
    running: &Arc<RunningTurns>,
) -> Result<JanitorHandle, Error> {
    // A session is protected while a turn runs for it (the budget also protects sessions with
    // unconsumed inbox entries). An idle lane holds no session data, so its session may go:
    // the lane's next turn starts the session afresh.
    let running = Arc::clone(running);
    let budget = StoreBudget::new(
        store.clone(),
        &config.storage,
        Arc::new(move |key: &str| running.is_running(key)),
    );
    let janitor = JanitorHandle::start(
        Arc::new(budget),
        JanitorSettings {
            interval: Duration::from_millis(config.storage.janitor_interval_ms),
            enforce: config.storage.janitor_mode == JanitorMode::Enforce,
        },
        Duration::from_secs(10),
    )
    .await?;
    let signal = janitor.clone();
    store.set_janitor_hook(move || signal.high_water());
    Ok(janitor)
}

fn model_from_config(
    config: &Config,
    calibration: &CalibrationStore,
) -> Result<Arc<dyn Model>, Error> {
    match config.model.provider.as_str() {
        "echo" => Ok(Arc::new(EchoModel)),
        "openai" => {
            let settings = OpenAiSettings::from_config(&config.model);
            if settings.api_key.is_none() {
                tracing::info!(
                    api_key_env = %config.model.api_key_env,
                    "no API key in the environment; requests go without Authorization"
                );
            }
            Ok(Arc::new(
                OpenAiModel::new(settings)?.with_calibration(calibration.clone()),
            ))
        }
        other => Err(crate::error::ConfigError::Invalid(format!(
            "model.provider: {other:?} is not available in this build"
        ))
        .into()),
    }
}

/// A running Turnstile. Cheap to clone; every clone drives the same runtime.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    config: Arc<Config>,
    engine: Arc<TurnEngine>,
    preflight: Arc<Preflight>,
    supervisor: SupervisorHandle<TurnBackend>,
    api: ChannelHandle<TurnBackend, ApiChannel>,
    janitor: JanitorHandle,
    closing: AtomicBool,
    /// Sessions with a turn in progress.
    running: Arc<RunningTurns>,
    /// Background tasks of channels (pollers), stopped first at shutdown.
    channel_tasks: ChannelTasks,
}

impl Runtime {
    /// A builder with the default configuration.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder {
            config: Config::default(),
            model: None,
            context: Registry::builtin(),
            tools: ToolRegistry::default(),
            tool_errors: Vec::new(),
            inspect_only: false,
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Validates and submits a message. Returns once it is durably queued (per the configured
    /// durability) or refused; the reply arrives on [`Runtime::subscribe`].
    pub async fn submit(&self, message: InboundMessage) -> Result<Result<Ack, Refusal>, Error> {
        self.submit_to(message, None).await
    }

    /// Like [`Runtime::submit`], but into the session `session_key` instead of the one derived
    /// from the message.
    pub async fn submit_to(
        &self,
        message: InboundMessage,
        session_key: Option<String>,
    ) -> Result<Result<Ack, Refusal>, Error> {
        self.submit_through(&self.inner.api, "api", message, session_key)
            .await
    }

    /// Submits through the channel actor `handle` (named `channel` in metrics).
    pub(crate) async fn submit_through<C: Channel>(
        &self,
        handle: &ChannelHandle<TurnBackend, C>,
        channel: &str,
        message: InboundMessage,
        session_key: Option<String>,
    ) -> Result<Result<Ack, Refusal>, Error> {
        if self.inner.closing.load(Ordering::Acquire) {
            metrics::inbound_dropped(channel, "shutting_down");
            return Ok(Err(Refusal::ShuttingDown));
        }
        let message = message
            .validated(&self.inner.config.limits, turn::now_ms())
            .inspect_err(|_| metrics::inbound_dropped(channel, "invalid"))?;
        let message_id = message.message_id.clone();
        let event = InboundEvent {
            message,
            session_key,
        };
        let accepted = match handle.submit(event).await? {
            Ok(a) => a,
            Err(refusal) => {
                if let Refusal::Dropped(reason) = &refusal {
                    if reason.keeps_record() {
                        // What the drop left (chatter, a queued event) is durable before the
                        // answer, like an accepted message.
                        let commit = self.inner.engine.store.commit();
                        commit.wait(commit.ticket()).await?;
                    }
                }
                metrics::inbound_dropped(channel, refusal.metric_reason());
                return Ok(Err(refusal));
            }
        };
        self.inner
            .engine
            .store
            .commit()
            .wait(accepted.ticket)
            .await?;
        metrics::inbound_accepted(channel);
        Ok(Ok(Ack {
            session_key: accepted.session_key.to_string(),
            message_id,
        }))
    }

    /// Every reply from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Reply>> {
        self.inner.engine.replies.subscribe()
    }

    /// Registers interest in the reply to one message id; do it before submitting.
    pub fn reply_to(&self, message_id: &str) -> ReplyWaiter<'_> {
        self.inner.engine.replies.wait_for(message_id)
    }

    /// One session, if it exists.
    pub fn session(&self, key: &str) -> Result<Option<SessionInfo>, Error> {
        let key = &normalize_session_key(key);
        self.inner.engine.store.thaw_session(key)?;
        Ok(self
            .inner
            .engine
            .store
            .session(key)?
            .map(|r| SessionInfo::new(key.to_string(), r)))
    }

    /// Sessions in key order after `after`, at most `limit`.
    pub fn sessions(&self, after: Option<&str>, limit: usize) -> Result<Vec<SessionInfo>, Error> {
        Ok(self
            .inner
            .engine
            .store
            .list_sessions(after, limit)?
            .into_iter()
            .map(|(k, r)| SessionInfo::new(k, r))
            .collect())
    }

    /// A page of a session's transcript (entries with `seq > after`), or `None` if the session
    /// does not exist.
    pub fn transcript(
        &self,
        key: &str,
        after: u64,
        limit: usize,
    ) -> Result<Option<Vec<TranscriptItem>>, Error> {
        let key = &normalize_session_key(key);
        let store = &self.inner.engine.store;
        store.thaw_session(key)?;
        let Some(record) = store.session(key)? else {
            return Ok(None);
        };
        let items = store
            .transcript(record.id, after, limit)?
            .into_iter()
            .map(|(seq, e)| TranscriptItem {
                seq,
                kind: e.kind,
                text: e.text,
                message_id: e.message_id,
                sender_name: e.sender.as_ref().map(|s| s.name.clone()),
                sender: e.sender.map(|s| s.id),
                timestamp_ms: e.timestamp_ms,
                tokens: e.tokens,
            })
            .collect();
        Ok(Some(items))
    }

    /// The context the next turn of `key` would send (without a new message), or `None` if the
    /// session does not exist.
    pub fn context_dump(&self, key: &str) -> Result<Option<Arc<Assembly>>, Error> {
        let key = &normalize_session_key(key);
        self.inner.engine.store.thaw_session(key)?;
        if self.inner.engine.store.session(key)?.is_none() {
            return Ok(None);
        }
        Ok(Some(self.inner.engine.assemble(
            key,
            &[],
            crate::context::QueueInfo::default(),
        )?))
    }

    /// Preflight decisions so far, by outcome.
    pub fn preflight_stats(&self) -> PreflightStats {
        self.inner.preflight.stats()
    }

    /// Tells preflight that the bot posted `message_id` in a chat (a channel reports the
    /// platform id of a reply it delivered), so a reply to that message addresses the bot.
    pub fn record_bot_message(
        &self,
        channel: &str,
        account_id: &str,
        chat_id: &str,
        message_id: &str,
    ) {
        self.inner
            .preflight
            .record_bot_message(channel, account_id, chat_id, message_id);
    }

    /// Hits and misses of the assembly cache since start.
    pub fn context_cache_stats(&self) -> CacheStats {
        self.inner.engine.context.cache_stats()
    }

    /// Number of live session lanes.
    pub fn live_lanes(&self) -> usize {
        self.inner.supervisor.registry().len()
    }

    /// Messages accepted but not yet answered.
    pub fn queued(&self) -> usize {
        self.inner.engine.store.queued()
    }

    /// What the janitor has done: passes, the newest disk measurement, evictions.
    pub async fn janitor_status(&self) -> Result<JanitorStatus, Error> {
        Ok(self.inner.janitor.status().await?)
    }

    /// Marks the runtime as closing: new submissions are refused. [`Runtime::shutdown`] does
    /// this too; servers call it first so readiness flips before connections drain.
    pub fn begin_shutdown(&self) {
        self.inner.closing.store(true, Ordering::Release);
    }

    /// False once shutdown has begun.
    pub fn is_ready(&self) -> bool {
        !self.inner.closing.load(Ordering::Acquire)
    }

    /// Why the store cannot serve writes now (disk full, damaged), or `None`.
    pub fn store_not_ready(&self) -> Option<String> {
        self.inner.engine.store.not_ready_reason()
    }

    /// Stops accepting, lets running turns finish (at most `server.shutdown_grace_ms`; queued
    /// messages stay in the durable inbox for the next start), and flushes the store.
    pub async fn shutdown(&self) -> Result<(), Error> {
        self.begin_shutdown();
        let grace = Duration::from_millis(self.inner.config.server.shutdown_grace_ms);
        self.inner.channel_tasks.stop(grace).await;
        if !self.inner.supervisor.shutdown(grace).await {
            tracing::warn!(
                "running turns did not finish in time; they will be replayed on next start"
            );
        }
        if let Some(compactor) = self.inner.engine.compactor.get() {
            compactor.stop();
        }
        self.inner.engine.replies.close();
        self.inner.janitor.stop(grace).await;
        self.inner.engine.store.close().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
