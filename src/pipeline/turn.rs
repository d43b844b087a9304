//! The turn stage, as plain Rust: count the new messages' tokens once, assemble the context
//! with the context engine, call the model (and run tools while it asks for them), then hand
//! the entries to the delivery stage ([`Delivery::deliver`]).
//!
//! [`TurnEngine::run`] reads as a turn's steps: [`TurnEngine::begin`], then
//! [`TurnEngine::assemble_turn`] and [`TurnEngine::answer`] (the model calls, `call.rs`, and
//! the tool rounds between them, `tools.rs`) until the prompt fits — after an overflow,
//! [`TurnEngine::compact_for_overflow`] and again, or [`TurnEngine::too_long`] past the limit
//! (`overflow.rs`) — and [`TurnEngine::commit`].

mod call;
mod overflow;
mod tools;

use std::sync::Arc;

use dashmap::DashMap;
use tokio::sync::Semaphore;
use turnstile_actors::{TurnBatch, TurnControl, TurnError, TurnReport};

use super::batch::queue_info;
use super::compaction::{Compaction, MAX_OVERFLOW_COMPACTIONS};
use super::delivery::{Delivery, ReplyMeta};
use super::failure::{failure_kind, strip_urls};
use super::requests::{ClientToolResult, RequestExtras, Requests};
use crate::agents::{Agent, AgentSet};
use crate::clock::now_ms;
use crate::config::Config;
use crate::context::{Assembly, AssemblyRequest, CurrentMessage, QueueInfo, StoredSession};
use crate::error::Error;
use crate::metrics;
use crate::model::TokenCounter;
use crate::replies::{DeltaFanout, ReplyErrorKind, ReplyHub};
use crate::store::{InboxItem, Store, TranscriptEntry};
use crate::tools::mcp::McpTools;
use call::Stop;
use tools::Answer;

/// Splits `items` into the messages someone said and the client tool results some of them
/// carry (those items become `tool_result` entries, not user entries).
/// Each result comes with the id of the message that carried it.
fn split_tool_results(
    items: &[InboxItem],
    extras: &[Option<Arc<RequestExtras>>],
) -> (Vec<InboxItem>, Vec<(String, ClientToolResult)>) {
    let mut said = Vec::with_capacity(items.len());
    let mut results = Vec::new();
    for (item, extras) in items.iter().zip(extras) {
        match extras {
            Some(e) if !e.tool_results.is_empty() => results.extend(
                e.tool_results
                    .iter()
                    .map(|r| (item.record.message.message_id.clone(), r.clone())),
            ),
            _ => said.push(item.clone()),
        }
    }
    (said, results)
}

/// Everything a turn needs; shared by all lanes.
pub(crate) struct TurnEngine {
    store: Store,
    config: Arc<Config>,
    /// Caps model calls across all sessions (`lanes.max_concurrent_turns`).
    model_permits: Semaphore,
    /// The agents: each one's model, context engine (pipeline, policies, assembly cache) and
    /// tools. A turn uses the agent its session key names.
    agents: Arc<AgentSet>,
    /// The MCP servers' tools (`[mcp_servers]`), offered to each agent as its
    /// `mcp_servers`, `tools_allow` and `tools_deny` say; a registered tool's name wins.
    mcp: McpTools,
    /// The Compactor actor, started before the engine.
    compaction: Compaction,
    /// Commits and publishes what a turn produced.
    delivery: Delivery,
    /// What OpenAI-compatible requests ask of their turns (parameters, client tools).
    requests: Arc<Requests>,
    /// Where a streaming turn's deltas go.
    replies: Arc<ReplyHub>,
    /// What made each session's last turn fail, until the turn succeeds or is abandoned (the
    /// notice says what failed). At most [`MAX_REMEMBERED_FAILURES`] entries.
    failures: DashMap<String, ReplyErrorKind>,
}

/// Most sessions whose failed turn's kind is remembered for its notice; past it, a notice says
/// `internal`. A failing session holds an entry only between its failure and its retry's end.
pub(crate) const MAX_REMEMBERED_FAILURES: usize = 10_000;

/// Most text deltas of one model call buffered between the model client and the fan-out; the
/// fan-out never waits, so this only smooths bursts.
pub(crate) const MODEL_DELTA_BUFFER: usize = 32;

/// A failed step of a turn, as the lane sees it.
fn failed(e: Error) -> TurnError {
    TurnError::Failed(e.to_string())
}

/// One turn's inputs, worked out once from its batch ([`TurnEngine::begin`]) and kept across
/// the retries after an overflow compaction.
struct Turn<'a> {
    session_key: &'a str,
    /// The agent the session belongs to.
    agent: Arc<Agent>,
    batch: &'a TurnBatch<InboxItem>,
    /// The batch's items: answered now, or dropped by the queue cap.
    all: Vec<InboxItem>,
    /// The client tool results some items carry, each with the id of its message.
    carried: Vec<(String, ClientToolResult)>,
    /// Those results alone, for the request.
    results: Vec<ClientToolResult>,
    /// What the newest request that asks anything asks of the turn.
    extras: Option<Arc<RequestExtras>>,
    /// One user entry per item that is not a tool result.
    users: Vec<TranscriptEntry>,
    /// The messages the assembly answers now.
    current: Vec<CurrentMessage>,
    timer: metrics::TurnTimer,
    /// Where the model's text goes as it streams, when someone watches.
    fanout: Option<DeltaFanout<'a>>,
    /// Whether the last assembly left history out.
    window_full: bool,
}

impl TurnEngine {
    /// An engine answering with `model` and publishing through `replies`.
    pub(crate) fn new(
        config: Arc<Config>,
        store: Store,
        agents: Arc<AgentSet>,
        replies: Arc<ReplyHub>,
        compaction: Compaction,
        quotas: Arc<crate::quotas::Quotas>,
    ) -> Self {
        Self {
            delivery: Delivery::new(
                store.clone(),
                Arc::clone(&agents),
                Arc::clone(&replies),
                compaction.clone(),
                super::ReplicationSlot::new(config.cluster.is_some()),
                quotas,
            ),
            replies,
            failures: DashMap::new(),
            model_permits: Semaphore::new(config.lanes.max_concurrent_turns),
            store,
            config,
            agents,
            mcp: McpTools::default(),
            compaction,
            requests: Arc::new(Requests::default()),
        }
    }

    /// A cluster node's changelog seam (see [`super::ReplicationSlot`]).
    pub(crate) fn replication(&self) -> &super::ReplicationSlot {
        self.delivery.replication()
    }

    /// Consumes `batch` here without answering it (its session belongs to another node).
    pub(crate) async fn forget(
        &self,
        session_key: &str,
        batch: &TurnBatch<InboxItem>,
    ) -> Result<(), Error> {
        let all: Vec<InboxItem> = batch.all_items().cloned().collect();
        self.delivery.forget(session_key, &all).await
    }

    /// What OpenAI-compatible requests ask of their turns.
    pub(crate) fn requests(&self) -> &Arc<Requests> {
        &self.requests
    }

    /// What the requests of `items` ask of the turn, one per item (`None`: nothing).
    fn extras_of(&self, items: &[InboxItem]) -> Vec<Option<Arc<RequestExtras>>> {
        let now = now_ms();
        items
            .iter()
            .map(|i| self.requests.extras(&i.record.message.message_id, now))
            .collect()
    }

    /// The agents (each one's context engine: cache figures, invalidation).
    pub(crate) fn agents(&self) -> &Arc<AgentSet> {
        &self.agents
    }

    /// Offers and runs the tools of `mcp`'s servers too.
    pub(crate) fn with_mcp(mut self, mcp: McpTools) -> Self {
        self.mcp = mcp;
        self
    }

    /// The MCP servers (their health lines; shutdown).
    pub(crate) fn mcp(&self) -> &McpTools {
        &self.mcp
    }

    /// The Compactor actor's side (manual compaction, shutdown).
    pub(crate) fn compaction(&self) -> &Compaction {
        &self.compaction
    }

    /// Assembles the context for `session_key` around `current` (empty: what the next turn
    /// would see without a new message), reading only as much history as the policy and the
    /// budget can use; cached for the next ask.
    pub(crate) fn assemble(
        &self,
        session_key: &str,
        current: &[CurrentMessage],
        queue: QueueInfo,
    ) -> Result<Arc<Assembly>, Error> {
        self.assemble_caching(session_key, current, queue, true)
    }

    /// The token counter of the model answering `session_key`.
    pub(crate) fn tokens(&self, session_key: &str) -> TokenCounter {
        self.agents.for_key(session_key).tokens
    }

    pub(crate) fn assemble_caching(
        &self,
        session_key: &str,
        current: &[CurrentMessage],
        queue: QueueInfo,
        cache: bool,
    ) -> Result<Arc<Assembly>, Error> {
        let stored = self.store.session(session_key)?.map(|r| StoredSession {
            id: r.id,
            entries: r.entries,
            next_seq: r.next_seq,
            compaction_count: r.compaction_count,
        });
        let request = AssemblyRequest {
            session_key,
            stored,
            current,
            queue,
            now_ms: now_ms(),
        };
        let context = &self.agents.for_key(session_key).context;
        Ok(if cache {
            context.assemble(&self.store, request)?
        } else {
            context.assemble_for_turn(&self.store, request)?
        })
    }
    /// The user entry of a message (answered, dropped by the queue cap, or steered in): every
    /// acknowledged message is kept in the transcript.
    fn user_entry(tokens: TokenCounter, item: &InboxItem) -> TranscriptEntry {
        let m = &item.record.message;
        TranscriptEntry::user(m.text.clone(), tokens.count(&m.text), m.timestamp_ms)
            .with_message_id(m.message_id.clone())
            .with_sender(m.sender.id.clone(), m.sender.name.clone())
    }

    /// Runs one turn for `batch`: assemble the context, answer (model calls with the tool
    /// rounds between them), compact and start over while the model finds the prompt too long,
    /// then commit. Cancellation (interrupt mode) aborts the model call and commits nothing;
    /// messages steered in between tool rounds are answered and consumed with the turn.
    pub(crate) async fn run(
        &self,
        session_key: &str,
        batch: &TurnBatch<InboxItem>,
        mut control: TurnControl<InboxItem>,
    ) -> Result<TurnReport, TurnError> {
        let mut turn = self.begin(session_key, batch);
        let mut compactions = 0u32;
        let answer = loop {
            let assembly = self.assemble_turn(&mut turn).map_err(failed)?;
            match self.answer(assembly, &mut control, &mut turn).await {
                Ok(answer) => break answer,
                Err(Stop::Overflow(e)) if compactions < MAX_OVERFLOW_COMPACTIONS => {
                    compactions += 1;
                    Box::pin(self.compact_for_overflow(&mut turn, &e, compactions)).await;
                }
                Err(Stop::Overflow(e)) => {
                    return Box::pin(self.too_long(&turn, &e, compactions)).await
                }
                Err(Stop::Cancelled) => return Err(TurnError::Cancelled),
                Err(Stop::Failed(e)) => {
                    self.remember_failure(session_key, &e);
                    return Err(failed(e));
                }
            }
        };
        // Boxed, like the rare overflow paths above: a turn parks on its model call, and its
        // task's allocation is as large as its largest await point (see `TURN_FUTURE_BOUND`).
        Box::pin(self.commit(turn, answer)).await
    }

    /// What the turn of `batch` starts from: its items, the client tool results they carry, the
    /// user entries of the rest and the messages the assembly answers now.
    fn begin<'a>(&'a self, session_key: &'a str, batch: &'a TurnBatch<InboxItem>) -> Turn<'a> {
        let agent = Arc::clone(self.agents.for_key(session_key));
        let all: Vec<InboxItem> = batch.all_items().cloned().collect();
        let oldest = all.iter().map(|i| i.record.accepted_at_ms).min();
        let timer = metrics::TurnTimer::start(oldest.unwrap_or_default(), now_ms());
        let extras = self.extras_of(&all);
        let (said, carried) = split_tool_results(&all, &extras);
        let results: Vec<ClientToolResult> = carried.iter().map(|(_, r)| r.clone()).collect();
        let extras = extras.iter().rev().flatten().next().cloned();
        let users: Vec<TranscriptEntry> = said
            .iter()
            .map(|i| Self::user_entry(agent.tokens, i))
            .collect();
        let current: Vec<CurrentMessage> = said
            .iter()
            .zip(&users)
            .filter(|(item, _)| batch.items.iter().any(|i| i.seq == item.seq))
            .map(|(item, entry)| CurrentMessage {
                inbox_seq: item.seq,
                record: Arc::clone(&item.record),
                tokens: entry.tokens,
            })
            .collect();
        // Someone watches this turn's text as it streams: call the model streaming.
        let fanout = self.replies.delta_fanout(session_key, &all);
        Turn {
            session_key,
            agent,
            batch,
            all,
            carried,
            results,
            extras,
            users,
            current,
            timer,
            fanout,
            window_full: false,
        }
    }

    /// Assembles the turn's context (uncached: the turn's assembly is its own), noting whether
    /// history was left out and asking for the compaction of a span the policy summarises.
    fn assemble_turn(&self, turn: &mut Turn<'_>) -> Result<Arc<Assembly>, Error> {
        let session_key = turn.session_key;
        let queue = queue_info(turn.batch);
        let assembly = self.assemble_caching(session_key, &turn.current, queue, false)?;
        turn.window_full = assembly.history_left_out();
        let budget = assembly.budget;
        turn.timer.assembled(session_key, budget.used, budget.total);
        if let Some(span) = &assembly.summary_span {
            self.compaction.compact_ttl_span(session_key, span.to_seq);
        }
        Ok(assembly)
    }

    /// Commits what the turn produced — the client's tool results, the user entries, the
    /// answer's entries — with the reply, or with the calls of client tools the turn stopped
    /// at, and consumes the turn's items and the messages steered into it.
    async fn commit(&self, turn: Turn<'_>, answer: Answer) -> Result<TurnReport, TurnError> {
        let Turn {
            session_key,
            agent,
            all,
            carried,
            users,
            mut timer,
            window_full,
            ..
        } = turn;
        self.failures.remove(session_key);
        timer.model_done();
        let completion_tokens = answer.usage.completion_tokens;
        let meta = ReplyMeta {
            usage: Some(answer.usage),
            finish_reason: answer.finish_reason,
            model: answer
                .model
                .or_else(|| Some(agent.model.name().to_string())),
            error: None,
        };
        let mut entries = Self::result_entries(agent.tokens, &carried);
        entries.extend(users);
        entries.extend(answer.entries);
        let report = TurnReport {
            steered: answer.steered.iter().map(|i| i.seq).collect(),
        };
        let mut consumed = all;
        consumed.extend(answer.steered);
        let delivered = if answer.client_calls.is_empty() {
            let reply = Self::reply_entry(agent.tokens, answer.text, completion_tokens);
            self.delivery
                .deliver(session_key, &consumed, entries, reply, meta, window_full)
                .await
        } else {
            self.delivery
                .deliver_tool_calls(
                    session_key,
                    &consumed,
                    entries,
                    answer.text,
                    answer.client_calls,
                    meta,
                )
                .await
        };
        delivered.map_err(failed)?;
        agent.turn_done();
        timer.finished(completion_tokens);
        Ok(report)
    }

    /// The assistant entry of the final answer. Its usage holds the model's own count, or ours
    /// when it gave none: counting the text again would repeat a tokenisation per turn. A zero
    /// for a non-empty text is a server's omission, not a count.
    fn reply_entry(tokens: TokenCounter, text: String, completion_tokens: u32) -> TranscriptEntry {
        let tokens = match completion_tokens {
            0 if !text.is_empty() => tokens.count(&text),
            n => n,
        };
        TranscriptEntry::assistant(text, tokens, now_ms())
    }

    /// The `tool_result` entries of the client's tool results, paired with their calls by id
    /// and naming the message that carried them (a retry of it finds its answer after them).
    fn result_entries(
        tokens: TokenCounter,
        results: &[(String, ClientToolResult)],
    ) -> Vec<TranscriptEntry> {
        let now = now_ms();
        results
            .iter()
            .map(|(message_id, r)| {
                let tokens = tokens.count(&r.content);
                TranscriptEntry::tool_result(r.content.clone(), tokens, now, r.call_id.clone(), "")
                    .with_message_id(message_id.clone())
            })
            .collect()
    }

    /// Remembers what made a turn of `session_key` fail, for the notice if it is abandoned.
    fn remember_failure(&self, session_key: &str, error: &Error) {
        if self.failures.len() < MAX_REMEMBERED_FAILURES || self.failures.contains_key(session_key)
        {
            self.failures
                .insert(session_key.to_string(), failure_kind(error));
        }
    }

    /// Answers a turn that failed past its retries with an error notice and consumes its items.
    pub(crate) async fn abandon(
        &self,
        session_key: &str,
        batch: &TurnBatch<InboxItem>,
        reason: &str,
    ) -> Result<(), Error> {
        let kind = self
            .failures
            .remove(session_key)
            .map_or(ReplyErrorKind::Internal, |(_, kind)| kind);
        self.abandon_as(session_key, batch, reason, kind).await
    }

    /// [`TurnEngine::abandon`] with a known kind of failure. The notice (stored and sent) names
    /// the reason without URLs.
    async fn abandon_as(
        &self,
        session_key: &str,
        batch: &TurnBatch<InboxItem>,
        reason: &str,
        kind: ReplyErrorKind,
    ) -> Result<(), Error> {
        let all: Vec<InboxItem> = batch.all_items().cloned().collect();
        let counter = self.tokens(session_key);
        let users = all.iter().map(|i| Self::user_entry(counter, i)).collect();
        let text = format!(
            "Sorry, this message could not be answered ({}).",
            strip_urls(reason)
        );
        let tokens = counter.count(&text);
        let notice = TranscriptEntry::assistant(text, tokens, now_ms());
        self.delivery
            .deliver(
                session_key,
                &all,
                users,
                notice,
                ReplyMeta {
                    error: Some(kind),
                    ..ReplyMeta::default()
                },
                false,
            )
            .await
    }
}
