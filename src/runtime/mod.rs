//! The embedding API: [`Runtime`] and its builder. A `Runtime` is a cheap-clone handle; the
//! actors behind it stay private.

mod backend;
mod replies;
mod turn;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{broadcast, Semaphore};
use turnstile_actors::{
    ChannelHandle, JanitorHandle, JanitorSettings, JanitorStatus, LaneSettings, SupervisorHandle,
};

pub use backend::{Accepted, TurnBackend};
pub use replies::{Reply, ReplyHub, ReplyWaiter};
pub use turn::TurnEngine;

use crate::channels::ApiChannel;
use crate::config::Config;
use crate::config::JanitorMode;
use crate::context::Assembly;
use crate::error::Error;
use crate::inbound::{normalize_session_key, InboundEvent, InboundMessage};
use crate::model::{EchoModel, Encoding, Model, TokenCounter};
use crate::store::{EntryKind, SessionRecord, Store, StoreBudget};

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
    /// When, ms since the epoch.
    pub timestamp_ms: u64,
    /// Tokens.
    pub tokens: u32,
}

/// Builds a [`Runtime`].
pub struct RuntimeBuilder {
    config: Config,
    model: Option<Arc<dyn Model>>,
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

    /// Opens the store, starts the actors and replays what was acknowledged but not answered.
    pub async fn build(self) -> Result<Runtime, Error> {
        let config = Arc::new(self.config);
        config.validate()?;
        let model: Arc<dyn Model> = match self.model {
            Some(m) => m,
            None => model_from_config(&config)?,
        };
        let store = Store::open(&config.storage)?;
        let tokens = TokenCounter::new(Encoding::for_model(&config.model.model));
        // Loading a vocabulary takes a fraction of a second: do it off the start-up path.
        tokio::task::spawn_blocking(move || tokens.warm_up());
        let replies = Arc::new(ReplyHub::new(config.server.events_buffer));
        let engine = Arc::new(TurnEngine {
            store: store.clone(),
            model,
            tokens,
            replies: Arc::clone(&replies),
            config: Arc::clone(&config),
            model_permits: Semaphore::new(config.lanes.max_concurrent_turns),
        });
        let backend = Arc::new(TurnBackend {
            engine: Arc::clone(&engine),
            settings: LaneSettings {
                idle_timeout: config.idle_timeout(),
                queue_cap: config.lanes.queue_cap,
                turn_retries: config.lanes.turn_retries,
                rpc_timeout: Duration::from_secs(10),
            },
        });
        let (supervisor, _) = SupervisorHandle::start(backend).await?;
        let api = ChannelHandle::start(Arc::new(ApiChannel), &supervisor).await?;
        let janitor = start_janitor(&store, &config, &supervisor).await?;
        let pending = store.sessions_with_pending()?;
        if !pending.is_empty() {
            tracing::info!(sessions = pending.len(), "replaying unanswered messages");
            supervisor.recover(pending.into_iter().map(Into::into).collect())?;
        }
        Ok(Runtime {
            inner: Arc::new(Inner {
                config,
                engine,
                supervisor,
                api,
                janitor,
                closing: AtomicBool::new(false),
            }),
        })
    }
}

/// Starts the janitor over the store; lanes that are live are never evicted, and the store
/// wakes the janitor when writes cross its live-byte trigger.
async fn start_janitor(
    store: &Store,
    config: &Config,
    supervisor: &SupervisorHandle<TurnBackend>,
) -> Result<JanitorHandle, Error> {
    let registry = supervisor.registry().clone();
    let budget = StoreBudget::new(
        store.clone(),
        &config.storage,
        Arc::new(move |key: &str| registry.is_live(key)),
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

fn model_from_config(config: &Config) -> Result<Arc<dyn Model>, Error> {
    match config.model.provider.as_str() {
        "echo" => Ok(Arc::new(EchoModel)),
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
    supervisor: SupervisorHandle<TurnBackend>,
    api: ChannelHandle<TurnBackend, ApiChannel>,
    janitor: JanitorHandle,
    closing: AtomicBool,
}

impl Runtime {
    /// A builder with the default configuration.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder {
            config: Config::default(),
            model: None,
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
        if self.inner.closing.load(Ordering::Acquire) {
            return Ok(Err(Refusal::ShuttingDown));
        }
        let message = message.validated(&self.inner.config.limits, turn::now_ms())?;
        let message_id = message.message_id.clone();
        let event = InboundEvent {
            message,
            session_key,
        };
        let accepted = match self.inner.api.submit(event).await? {
            Ok(a) => a,
            Err(refusal) => return Ok(Err(refusal)),
        };
        self.inner
            .engine
            .store
            .commit()
            .wait(accepted.ticket)
            .await?;
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
                sender: e.sender.map(|s| s.id),
                timestamp_ms: e.timestamp_ms,
                tokens: e.tokens,
            })
            .collect();
        Ok(Some(items))
    }

    /// The context the next turn of `key` would send (without a new message), or `None` if the
    /// session does not exist.
    pub fn context_dump(&self, key: &str) -> Result<Option<Assembly>, Error> {
        let key = &normalize_session_key(key);
        if self.inner.engine.store.session(key)?.is_none() {
            return Ok(None);
        }
        Ok(Some(self.inner.engine.assemble(key, &[])?))
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

    /// Stops accepting, lets running turns finish (at most `server.shutdown_grace_ms`; queued
    /// messages stay in the durable inbox for the next start), and flushes the store.
    pub async fn shutdown(&self) -> Result<(), Error> {
        self.begin_shutdown();
        let grace = Duration::from_millis(self.inner.config.server.shutdown_grace_ms);
        if !self.inner.supervisor.shutdown(grace).await {
            tracing::warn!(
                "running turns did not finish in time; they will be replayed on next start"
            );
        }
        self.inner.engine.replies.close();
        self.inner.janitor.stop(grace).await;
        self.inner.engine.store.close().await?;
        Ok(())
    }
}
