//! The embedding API: [`Runtime`] and its builder. A `Runtime` is a cheap-clone handle; the
//! actors behind it stay private.

#[cfg(test)]
mod agent_tests;
mod api_channel;
mod builder;
#[cfg(test)]
mod cold_tests;
#[cfg(test)]
mod compaction_tests;
mod ops;
mod ports;
mod reads;
mod reload;
mod replica;
mod requests;
mod schedules;
mod thread_starters;
#[cfg(test)]
mod turn_tests;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::broadcast;
use turnstile_actors::{Channel, ChannelHandle, JanitorHandle, JanitorStatus, SupervisorHandle};

use ports::ChannelTasks;

pub(crate) use api_channel::ApiChannel;
pub use builder::RuntimeBuilder;
pub use ops::{Compacted, Deleted, Stats};
pub use ports::{ChannelPort, DeltaTaker};
pub(crate) use reads::ClusterReads;
pub(crate) use reads::SessionRead;
pub use reload::{ReloadError, ReloadOutcome};
pub(crate) use replica::{ClusterDeletes, Ingress};
pub(crate) use requests::StoredAnswer;

use crate::clock::now_ms;
use crate::config::Config;
use crate::context::{Assembly, CacheStats};
use crate::error::Error;
use crate::inbound::{
    normalize_session_key, ChatRules, DropReason, IdOrigin, InboundEvent, InboundMessage,
    Preflight, PreflightStats, Refusal, RouteHints,
};
use crate::metrics;
use crate::pipeline::{RunningTurns, TurnBackend, TurnEngine};
use crate::replies::{Reply, ReplyHub, ReplyWaiter};
use crate::store::{EntryKind, FoundSession, Store};

/// The acknowledgement of an accepted message: it is durable and will be answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ack {
    /// The session it was routed to.
    pub session_key: String,
    /// The message's id.
    pub message_id: String,
}

/// A message accepted into the inbox whose write may not be flushed yet
/// ([`Runtime::submit_for_reply`]): durable once [`Runtime::admitted_durable`] says so, at the
/// latest with the flush of the turn that answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// What [`Runtime::submit`] would have acknowledged.
    pub ack: Ack,
    /// The group-commit ticket of the inbox write; `None` when the message is durable
    /// already (a cluster node's, acknowledged by the replicated inbox).
    ticket: Option<u64>,
}

/// Why [`Runtime::submit`] did not acknowledge a message. A preflight drop is a refusal too,
/// though HTTP answers it with 200: nothing was queued, and nothing will be answered.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The runtime decided not to take it (dropped, over capacity, shutting down, storage).
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The message was invalid, or something failed on the way.
    #[error(transparent)]
    Failed(#[from] Error),
}

impl SubmitError {
    /// Why preflight dropped the message, if that is what happened.
    pub fn dropped(&self) -> Option<DropReason> {
        match self {
            SubmitError::Refused(Refusal::Dropped(reason)) => Some(*reason),
            _ => None,
        }
    }
}

/// A session as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionInfo {
    /// The session key.
    pub session_key: String,
    /// The agent the session belongs to.
    pub agent: String,
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
    /// In the cold tier: its fields are as it was frozen; its next message thaws it (with a
    /// new `session_id`).
    pub cold: bool,
}

impl SessionInfo {
    fn new(found: FoundSession, agent: &str) -> Self {
        let r = found.record;
        Self {
            agent: agent.to_string(),
            session_key: found.session_key,
            session_id: r.id,
            updated_at_ms: r.updated_at_ms,
            entries: r.entries,
            tokens: r.tokens,
            bytes: r.bytes,
            compaction_count: r.compaction_count,
            cold: found.cold,
        }
    }
}

/// A transcript entry as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TranscriptItem {
    /// Position in the session.
    pub seq: u64,
    /// The agent the session belongs to.
    pub agent: String,
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

/// A running Turnstile. Cheap to clone; every clone drives the same runtime.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    config: Arc<Config>,
    engine: Arc<TurnEngine>,
    store: Store,
    replies: Arc<ReplyHub>,
    preflight: Arc<Preflight>,
    /// `[[quotas]]` and their usage.
    quotas: Arc<crate::quotas::Quotas>,
    supervisor: SupervisorHandle<TurnBackend>,
    api: ChannelHandle<TurnBackend, ApiChannel>,
    janitor: JanitorHandle,
    closing: AtomicBool,
    /// Set by `POST /v1/admin/drain`: the server drains as on SIGTERM.
    drain_requested: tokio::sync::Notify,
    /// Sessions with a turn in progress.
    running: Arc<RunningTurns>,
    /// Background tasks of channels (pollers), stopped first at shutdown.
    channel_tasks: ChannelTasks,
    /// The agents, the bindings and the session keys they lead to (a cluster node places a
    /// message by its key).
    directory: Arc<crate::agents::AgentDirectory>,
    /// Scheduled jobs (`[[schedules]]`, `/v1/schedules`); the scheduler task is in
    /// `channel_tasks`.
    schedules: Arc<crate::schedules::Schedules>,
    /// A cluster node's way into the replicated inbox, installed by the cluster layer.
    ingress: std::sync::OnceLock<Arc<dyn Ingress>>,
    /// A cluster node's way to delete a session (through its partition's owner), installed
    /// by the cluster layer.
    deletes: std::sync::OnceLock<Arc<dyn ClusterDeletes>>,
    /// A cluster node's way to read sessions it does not keep (from a node that does),
    /// installed by the cluster layer.
    reads: std::sync::OnceLock<Arc<dyn ClusterReads>>,
    /// The Slack channel's HTTP Events API hand-over (`[channels.slack] mode = "http"`),
    /// for the server's `/v1/channels/slack/events` route.
    slack_events: std::sync::OnceLock<Arc<crate::channels::SlackEvents>>,
    /// The settings in force and the file they came from (`reload.rs`); the lock makes
    /// reloads run one at a time.
    reload: tokio::sync::Mutex<reload::ReloadState>,
}

/// What a drain finished and what it left (logged by `serve`, which exits non-zero when a
/// running turn was cut off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DrainReport {
    /// Turns running when the drain began.
    pub running_at_start: usize,
    /// Of those, turns that finished (their replies published).
    pub finished: usize,
    /// Turns still running when the grace ran out: cut off, replayed at the next start.
    pub left_running: usize,
    /// Messages queued (acknowledged, not yet answered) when the drain began.
    pub queued_at_start: usize,
    /// Messages queued at the end: they stay in the durable inbox and run after the restart.
    pub queued_left: usize,
    /// How long the drain took, in ms.
    pub elapsed_ms: u64,
}

impl Runtime {
    /// A builder with the default configuration.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// The configuration the runtime was started with. A reload changes the settings of
    /// `config::reload::RELOADABLE` where they are read ([`Runtime::config_in_force`] shows
    /// them), not this copy.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The agents, the bindings and the session keys they lead to.
    pub fn agents(&self) -> &crate::agents::AgentDirectory {
        &self.inner.directory
    }

    /// The agent session `key` belongs to (the one its key names, else the default agent).
    pub fn agent_of_session<'a>(&'a self, key: &'a str) -> &'a str {
        self.inner.directory.agent_of_key(key)
    }

    /// The model session `key`'s agent answers with, as configured.
    pub fn agent_model(&self, key: &str) -> String {
        let agents = &self.inner.directory;
        agents.profile(agents.agent_of_key(key)).map_or_else(
            || self.inner.config.model.model.clone(),
            |p| p.config.model.model.clone(),
        )
    }

    /// Turns each agent answered in this process, the default agent first.
    pub fn agent_turns(&self) -> Vec<(String, u64)> {
        self.inner
            .engine
            .agents()
            .iter()
            .map(|a| (a.id().to_string(), a.turns()))
            .collect()
    }

    /// Validates and submits a message. Returns once it is durably queued (per the configured
    /// durability) or refused; the reply arrives on [`Runtime::subscribe`].
    pub async fn submit(&self, message: InboundMessage) -> Result<Ack, SubmitError> {
        self.submit_to(message, None).await
    }

    /// Like [`Runtime::submit`], with what routes the message to an agent beyond its own
    /// fields (the guild and the sender's roles, which `[[bindings]]` may match).
    pub async fn submit_routed(
        &self,
        message: InboundMessage,
        route: RouteHints,
    ) -> Result<Ack, SubmitError> {
        self.submit_routed_through(
            &self.inner.api,
            "api",
            message,
            None,
            route,
            ChatRules::default(),
        )
        .await
    }

    /// Like [`Runtime::submit`], but into the session `session_key` instead of the one derived
    /// from the message.
    pub(crate) async fn submit_to(
        &self,
        message: InboundMessage,
        session_key: Option<String>,
    ) -> Result<Ack, SubmitError> {
        self.submit_through(
            &self.inner.api,
            "api",
            message,
            session_key,
            ChatRules::default(),
        )
        .await
    }

    /// Like [`Runtime::submit_to`], but returns as soon as the message is in the inbox,
    /// without waiting for (or asking for) the flush that covers it. For a caller that answers
    /// its client only with the reply: the reply is published after the flush of its turn's
    /// commit, which covers the earlier inbox write too, so one flush serves both. A crash
    /// before that flush leaves the client without an answer, and the message either lost
    /// (never acknowledged) or in the inbox (answered after the restart). Check
    /// [`Runtime::admitted_durable`] before telling the client anything.
    /// `id_origin`: see [`IdOrigin`].
    pub async fn submit_for_reply(
        &self,
        message: InboundMessage,
        session_key: Option<String>,
        id_origin: IdOrigin,
    ) -> Result<Admitted, SubmitError> {
        let event = InboundEvent {
            message,
            session_key,
            id_origin,
            route: RouteHints::default(),
            rules: ChatRules::default(),
        };
        self.admit_through(&self.inner.api, "api", event).await
    }

    /// Waits until the inbox write of `admitted` is durable. `demand`: ask the flusher for a
    /// flush now; otherwise wait for one somebody else asked for (e.g. the answering turn's
    /// commit), ending early only if a flush covering it failed.
    pub async fn admitted_durable(
        &self,
        admitted: &Admitted,
        demand: bool,
    ) -> Result<(), SubmitError> {
        let Some(ticket) = admitted.ticket else {
            return Ok(());
        };
        let commit = self.inner.store.commit();
        let waited = if demand {
            commit.wait(ticket).await
        } else {
            commit.wait_passive(ticket).await
        };
        waited.map_err(|e| SubmitError::Failed(Error::from(e)))
    }

    /// Submits through the channel actor `handle` (named `channel` in metrics).
    pub(crate) async fn submit_through<C: Channel>(
        &self,
        handle: &ChannelHandle<TurnBackend, C>,
        channel: &str,
        message: InboundMessage,
        session_key: Option<String>,
        rules: ChatRules,
    ) -> Result<Ack, SubmitError> {
        self.submit_routed_through(
            handle,
            channel,
            message,
            session_key,
            RouteHints::default(),
            rules,
        )
        .await
    }

    /// [`Runtime::submit_through`] with route hints for `[[bindings]]`.
    pub(crate) async fn submit_routed_through<C: Channel>(
        &self,
        handle: &ChannelHandle<TurnBackend, C>,
        channel: &str,
        message: InboundMessage,
        session_key: Option<String>,
        route: RouteHints,
        rules: ChatRules,
    ) -> Result<Ack, SubmitError> {
        let event = InboundEvent {
            message,
            session_key,
            id_origin: IdOrigin::Given,
            route,
            rules,
        };
        let admitted = self.admit_through(handle, channel, event).await?;
        self.admitted_durable(&admitted, true).await?;
        Ok(admitted.ack)
    }

    /// Admission through `handle`, up to the inbox write (not yet waited on); on a cluster
    /// node, into the partition's replicated inbox.
    async fn admit_through<C: Channel>(
        &self,
        handle: &ChannelHandle<TurnBackend, C>,
        channel: &str,
        event: InboundEvent,
    ) -> Result<Admitted, SubmitError> {
        if !self.is_clustered() {
            return self.admit_local(handle, channel, event).await;
        }
        let message = self.accepting(channel, event.message)?;
        let ack = self
            .publish_replicated(
                channel,
                InboundEvent {
                    message,
                    session_key: event.session_key,
                    id_origin: IdOrigin::Given,
                    route: event.route,
                    rules: event.rules,
                },
            )
            .await?;
        Ok(Admitted { ack, ticket: None })
    }

    /// `message` validated, if the runtime is still accepting (refusals counted for `channel`).
    fn accepting(
        &self,
        channel: &str,
        message: InboundMessage,
    ) -> Result<InboundMessage, SubmitError> {
        if self.inner.closing.load(Ordering::Acquire) {
            metrics::inbound_dropped(channel, "shutting_down");
            return Err(Refusal::ShuttingDown.into());
        }
        Ok(message
            .validated(&self.inner.config.limits, now_ms())
            .inspect_err(|_| metrics::inbound_dropped(channel, "invalid"))
            .map_err(Error::from)?)
    }

    /// Admission into this node's inbox through `handle`, up to the inbox write (not yet
    /// waited on).
    async fn admit_local<C: Channel>(
        &self,
        handle: &ChannelHandle<TurnBackend, C>,
        channel: &str,
        event: InboundEvent,
    ) -> Result<Admitted, SubmitError> {
        let message = self.accepting(channel, event.message)?;
        let message_id = message.message_id.clone();
        // Where a quota notice would go (only built when quotas are configured).
        let notice_route = (!self.inner.quotas.is_empty())
            .then(|| crate::replies::ReplyRoute::of_message(&message));
        let event = InboundEvent { message, ..event };
        let accepted = match handle.submit(event).await.map_err(Error::from)? {
            Ok(a) => a,
            Err(refusal) => {
                if let (Refusal::OverQuota(q), Some(route)) = (&refusal, notice_route) {
                    self.send_quota_notice(q, route, &message_id);
                }
                if let Refusal::Dropped(reason) = &refusal {
                    if reason.keeps_record() {
                        // What the drop left (chatter, a queued event) is durable before the
                        // answer, like an accepted message.
                        let commit = self.inner.store.commit();
                        commit.wait(commit.ticket()).await.map_err(Error::from)?;
                    }
                }
                metrics::inbound_dropped(channel, refusal.metric_reason());
                return Err(refusal.into());
            }
        };
        metrics::inbound_accepted(channel);
        Ok(Admitted {
            ack: Ack {
                session_key: accepted.session_key.to_string(),
                message_id,
            },
            ticket: Some(accepted.ticket),
        })
    }

    /// Answers a message refused over its quota with the rule's notice (when this refusal is
    /// the first of its window): a reply like any other, so every channel delivers it. It is
    /// not stored in the transcript (the message was not taken).
    fn send_quota_notice(
        &self,
        refused: &crate::inbound::QuotaRefusal,
        route: crate::replies::ReplyRoute,
        message_id: &str,
    ) {
        let Some(text) = &refused.notice else {
            return;
        };
        self.inner.replies.publish(Reply {
            session_key: refused.session_key.clone(),
            text: text.to_string(),
            in_reply_to: vec![message_id.to_string()],
            seq: 0,
            error: false,
            route: Some(route),
            tool_calls: Vec::new(),
            usage: None,
            finish_reason: Some("quota".into()),
            model: None,
            error_kind: None,
        });
    }

    /// What `[[quotas]]` refused since start, and the top offenders.
    pub(crate) fn quota_stats(&self) -> crate::quotas::QuotaStats {
        self.inner.quotas.stats()
    }

    /// The stored quota usage of `subject` (`sender:<channel>:<id>`, …).
    pub(crate) fn quota_usage(
        &self,
        subject: &str,
    ) -> Result<Option<crate::quotas::QuotaUsage>, Error> {
        Ok(self.inner.quotas.usage(subject)?)
    }

    /// Resets `subject`'s quota usage; true when it had any.
    pub(crate) fn reset_quota(&self, subject: &str) -> Result<bool, Error> {
        Ok(self.inner.quotas.reset(subject)?)
    }

    /// Every reply from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Reply>> {
        self.inner.replies.subscribe()
    }

    /// Registers interest in the reply to one message id; do it before submitting.
    pub fn reply_to(&self, message_id: &str) -> ReplyWaiter<'_> {
        self.inner.replies.wait_for(message_id)
    }

    /// Like [`Runtime::reply_to`], also hearing the reply's text deltas while it streams.
    pub fn reply_stream_to(&self, message_id: &str) -> ReplyWaiter<'_> {
        self.inner.replies.wait_streaming(message_id)
    }

    /// Subscribes to the text deltas of every streaming reply from now on.
    pub fn subscribe_deltas(&self) -> broadcast::Receiver<Arc<crate::replies::Delta>> {
        self.inner.replies.subscribe_deltas()
    }

    /// Makes every turn stream its text while the guard lives (for a subscriber of
    /// [`Runtime::subscribe_deltas`] that wants all of them).
    pub fn watch_deltas(&self) -> crate::replies::DeltaWatch {
        self.inner.replies.watch_deltas()
    }

    /// One session, if it exists (a cold one is read from its segment, not thawed).
    pub fn session(&self, key: &str) -> Result<Option<SessionInfo>, Error> {
        let key = &normalize_session_key(key);
        Ok(self
            .inner
            .store
            .find_session(key)?
            .map(|f| SessionInfo::new(f, self.agent_of_session(key))))
    }

    /// Sessions in key order after `after`, at most `limit`, hot and cold (a cold one from
    /// the cold tier's index, read no further than the page).
    pub fn sessions(&self, after: Option<&str>, limit: usize) -> Result<Vec<SessionInfo>, Error> {
        Ok(self
            .inner
            .store
            .list_all_sessions(after, limit)?
            .into_iter()
            .map(|f| {
                let agent = self.agent_of_session(&f.session_key).to_string();
                SessionInfo::new(f, &agent)
            })
            .collect())
    }

    /// A page of a session's transcript (entries with `seq > after`), or `None` if the session
    /// does not exist (a cold one is read from its segment, not thawed).
    pub fn transcript(
        &self,
        key: &str,
        after: u64,
        limit: usize,
    ) -> Result<Option<Vec<TranscriptItem>>, Error> {
        let key = &normalize_session_key(key);
        let Some((_, page)) = self.inner.store.find_transcript(key, after, limit)? else {
            return Ok(None);
        };
        let agent = self.agent_of_session(key);
        let items = page
            .into_iter()
            .map(|(seq, e)| TranscriptItem {
                seq,
                agent: agent.to_string(),
                kind: e.kind,
                text: e.text.to_string(),
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
    /// session does not exist. Assembly reads sled: a cold session is thawed, unless the disk
    /// is full (then `InsufficientStorage`).
    pub fn context_dump(&self, key: &str) -> Result<Option<Arc<Assembly>>, Error> {
        let key = &normalize_session_key(key);
        self.inner.store.thaw_within_budget(key)?;
        if self.inner.store.session(key)?.is_none() {
            return Ok(None);
        }
        Ok(Some(self.inner.engine.assemble(
            key,
            &[],
            crate::context::QueueInfo::default(),
        )?))
    }

    /// How long one uncached assembly of `key` takes around `message` as its next turn's
    /// message (nothing is stored or sent): what a turn pays for its context, for the memory
    /// benchmark (`loadtest --scenario locomo`).
    pub(crate) fn time_assembly(
        &self,
        key: &str,
        message: crate::inbound::InboundMessage,
    ) -> Result<std::time::Duration, Error> {
        let tokens = self.inner.engine.tokens(key).count(&message.text);
        let current = crate::context::CurrentMessage {
            inbox_seq: u64::MAX,
            record: Arc::new(crate::store::InboxRecord {
                accepted_at_ms: message.timestamp_ms,
                message,
                system_events: Vec::new(),
                group_history: Vec::new(),
            }),
            tokens,
        };
        let started = std::time::Instant::now();
        self.inner.engine.assemble_caching(
            key,
            std::slice::from_ref(&current),
            crate::context::QueueInfo::default(),
            false,
        )?;
        Ok(started.elapsed())
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
        let mut all = CacheStats::default();
        for agent in self.inner.engine.agents().iter() {
            let s = agent.context.cache_stats();
            all.hits += s.hits;
            all.misses += s.misses;
        }
        all
    }

    /// Number of live session lanes.
    pub fn live_lanes(&self) -> usize {
        self.inner.supervisor.registry().len()
    }

    /// Writes a consistent snapshot of the store to `out` (`Store::backup`): blocking, run it
    /// off the async workers. `Conflict` while another backup runs.
    pub fn backup(
        &self,
        out: &mut dyn std::io::Write,
    ) -> Result<crate::store::BackupReport, Error> {
        self.inner.store.backup(out).map_err(|e| match e {
            crate::error::StoreError::Backup { reason, .. }
                if reason == crate::store::BACKUP_BUSY =>
            {
                Error::Conflict(reason)
            }
            e => e.into(),
        })
    }

    /// Appends `record` to the audit log (see `store::AuditRecord`); returns its id.
    pub(crate) fn append_audit(&self, record: &crate::store::AuditRecord) -> Result<u64, Error> {
        Ok(self.inner.store.append_audit(record)?)
    }

    /// The newest `n` audit records, oldest first.
    pub(crate) fn audit_tail(&self, n: usize) -> Result<Vec<crate::store::AuditRecord>, Error> {
        Ok(self.inner.store.audit_tail(n)?)
    }

    /// Audit records with ids above `after` (all when `None`), oldest first, at most `limit`.
    pub(crate) fn audit_page(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<crate::store::AuditRecord>, Error> {
        Ok(self.inner.store.audit_page(after, limit)?)
    }

    /// Messages accepted but not yet answered.
    pub fn queued(&self) -> usize {
        self.inner.store.queued()
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
    /// The MCP servers' health lines (empty without `[mcp_servers]`).
    pub fn mcp_health(&self) -> Vec<crate::McpServerHealth> {
        self.inner.engine.mcp().health()
    }

    pub(crate) fn store_not_ready(&self) -> Option<String> {
        self.inner.store.not_ready_reason()
    }

    /// Asks the server to drain and exit, as SIGTERM does (`POST /v1/admin/drain`).
    pub fn request_drain(&self) {
        self.inner.drain_requested.notify_one();
    }

    /// Resolves once [`Runtime::request_drain`] was called (before or after this call).
    pub async fn drain_requested(&self) {
        self.inner.drain_requested.notified().await;
    }

    /// Whether shutdown or a drain has begun.
    pub fn is_draining(&self) -> bool {
        self.inner.closing.load(Ordering::Acquire)
    }

    /// Stops accepting messages (`503` with `Retry-After`) and waits, at most `grace`, for
    /// the running turns to finish and publish their replies; starts no other turn (queued
    /// messages stay in the durable inbox for the next start). The lanes and the HTTP server
    /// stay up, so the replies reach their waiting clients; [`Runtime::shutdown`] follows.
    pub async fn drain(&self, grace: Duration) -> DrainReport {
        let started = std::time::Instant::now();
        self.begin_shutdown();
        let running_at_start = self.inner.running.count();
        let queued_at_start = self.queued();
        let finished_all = self.inner.supervisor.drain(grace).await;
        let left_running = self.inner.running.count();
        DrainReport {
            running_at_start,
            finished: running_at_start.saturating_sub(left_running),
            left_running: if finished_all { 0 } else { left_running },
            queued_at_start,
            queued_left: self.queued(),
            elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        }
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
        self.inner.engine.compaction().stop();
        self.inner.engine.mcp().stop();
        self.inner.replies.close();
        self.inner.janitor.stop(grace).await;
        self.inner.store.close().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
