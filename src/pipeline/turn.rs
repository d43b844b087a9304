//! The turn stage, as plain Rust: count the new messages' tokens once, assemble the context
//! with the context engine, call the model (and run tools while it asks for them), then hand
//! the entries to the delivery stage ([`Delivery::deliver`]).

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use futures_util::future::join_all;
use tokio::sync::{mpsc, Semaphore};
use turnstile_actors::{CompactionReason, TurnBatch, TurnControl, TurnError, TurnReport};

use super::batch::queue_info;
use super::compaction::{Compaction, MAX_OVERFLOW_COMPACTIONS};
use super::delivery::{Delivery, ReplyMeta};
use super::failure::{failure_kind, strip_urls};
use crate::config::Config;
use crate::context::processors::CLEARED_TOOL_RESULT;
use crate::context::{
    Assembly, AssemblyRequest, ContextEngine, CurrentMessage, QueueInfo, StoredSession,
};
use crate::error::{Error, ModelError};
use crate::inbound::sanitize_text;
use crate::metrics;
use crate::model::{
    Model, ModelReply, ModelRequest, Role, TokenCounter, ToolCall, ToolSpec,
    MESSAGE_OVERHEAD_TOKENS,
};
use crate::replies::{DeltaFanout, ReplyErrorKind, ReplyHub, ReplyUsage};
use crate::store::{InboxItem, Store, ToolInfo, TranscriptEntry};
use crate::tools::{call_message, repair_tool_messages, result_message, ToolRegistry};

use super::requests::{place_tool_results, ClientToolResult, RequestExtras, Requests};

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
pub struct TurnEngine {
    store: Store,
    model: Arc<dyn Model>,
    tokens: TokenCounter,
    config: Arc<Config>,
    /// Caps model calls across all sessions (`lanes.max_concurrent_turns`).
    model_permits: Semaphore,
    /// The context pipeline, policies and assembly cache.
    context: Arc<ContextEngine>,
    /// Tools the embedding application registered.
    tools: ToolRegistry,
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
pub const MAX_REMEMBERED_FAILURES: usize = 10_000;

/// Most text deltas of one model call buffered between the model client and the fan-out; the
/// fan-out never waits, so this only smooths bursts.
pub const MODEL_DELTA_BUFFER: usize = 32;

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// What the tool loop adds to a turn: the entries to store, the final answer, and the
/// messages steered into the turn while it ran (consumed with it).
struct Answer {
    entries: Vec<TranscriptEntry>,
    text: String,
    steered: Vec<InboxItem>,
    /// Token counts of the final call (the server's when it reports usage, else ours).
    usage: ReplyUsage,
    /// Why the model stopped, as it said.
    finish_reason: Option<String>,
    /// The model that answered.
    model: Option<String>,
    /// Calls of client-side tools the turn stopped at (empty: a final answer).
    client_calls: Vec<ToolCall>,
}

/// Why the tool loop stopped without an answer.
enum Stop {
    Cancelled,
    /// The model rejected the prompt as too long: compact, then retry.
    Overflow(Error),
    Failed(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Failed(e)
    }
}

impl TurnEngine {
    /// An engine answering with `model` and publishing through `replies`.
    pub fn new(
        config: Arc<Config>,
        store: Store,
        model: Arc<dyn Model>,
        context: Arc<ContextEngine>,
        tools: ToolRegistry,
        replies: Arc<ReplyHub>,
        compaction: Compaction,
    ) -> Self {
        Self {
            delivery: Delivery::new(
                store.clone(),
                Arc::clone(&context),
                Arc::clone(&replies),
                compaction.clone(),
                super::ReplicationSlot::new(config.cluster.is_some()),
            ),
            replies,
            failures: DashMap::new(),
            tokens: context.tokens(),
            model_permits: Semaphore::new(config.lanes.max_concurrent_turns),
            store,
            model,
            config,
            context,
            tools,
            compaction,
            requests: Arc::new(Requests::default()),
        }
    }

    /// A cluster node's changelog seam (see [`super::ReplicationSlot`]).
    pub fn replication(&self) -> &super::ReplicationSlot {
        self.delivery.replication()
    }

    /// Consumes `batch` here without answering it (its session belongs to another node).
    pub async fn forget(
        &self,
        session_key: &str,
        batch: &TurnBatch<InboxItem>,
    ) -> Result<(), Error> {
        let all: Vec<InboxItem> = batch.all_items().cloned().collect();
        self.delivery.forget(session_key, &all).await
    }

    /// What OpenAI-compatible requests ask of their turns.
    pub fn requests(&self) -> &Arc<Requests> {
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

    /// The context engine (its cache figures, invalidation).
    pub fn context(&self) -> &ContextEngine {
        &self.context
    }

    /// The Compactor actor's side (manual compaction, shutdown).
    pub fn compaction(&self) -> &Compaction {
        &self.compaction
    }

    /// Assembles the context for `session_key` around `current` (empty: what the next turn
    /// would see without a new message), reading only as much history as the policy and the
    /// budget can use; cached for the next ask.
    pub fn assemble(
        &self,
        session_key: &str,
        current: &[CurrentMessage],
        queue: QueueInfo,
    ) -> Result<Arc<Assembly>, Error> {
        self.assemble_caching(session_key, current, queue, true)
    }

    /// The token counter of the answering model.
    pub(crate) fn tokens(&self) -> TokenCounter {
        self.tokens
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
        Ok(if cache {
            self.context.assemble(&self.store, request)?
        } else {
            self.context.assemble_for_turn(&self.store, request)?
        })
    }

    /// One user entry per message (answered, dropped by the queue cap, or steered in), in
    /// order: every acknowledged message is kept in the transcript.
    fn user_entries<'a>(&self, items: impl Iterator<Item = &'a InboxItem>) -> Vec<TranscriptEntry> {
        items
            .map(|item| {
                let m = &item.record.message;
                TranscriptEntry::user(m.text.clone(), self.tokens.count(&m.text), m.timestamp_ms)
                    .with_message_id(m.message_id.clone())
                    .with_sender(m.sender.id.clone(), m.sender.name.clone())
            })
            .collect()
    }

    /// Runs one turn for `batch`. Cancellation (interrupt mode) aborts the model call and
    /// commits nothing; messages steered in between tool rounds are answered and consumed with
    /// the turn.
    pub async fn run(
        &self,
        session_key: &str,
        batch: &TurnBatch<InboxItem>,
        mut control: TurnControl<InboxItem>,
    ) -> Result<TurnReport, TurnError> {
        let failed = |e: Error| TurnError::Failed(e.to_string());
        let all: Vec<InboxItem> = batch.all_items().cloned().collect();
        let oldest = all.iter().map(|i| i.record.accepted_at_ms).min();
        let mut timer = metrics::TurnTimer::start(oldest.unwrap_or_default(), now_ms());
        let extras = self.extras_of(&all);
        let (said, carried) = split_tool_results(&all, &extras);
        let results: Vec<ClientToolResult> = carried.iter().map(|(_, r)| r.clone()).collect();
        let turn_extras = extras.iter().rev().flatten().next().cloned();
        let users = self.user_entries(said.iter());
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
        let mut compactions = 0u32;
        let mut window_full;
        // Someone watches this turn's text as it streams: call the model streaming.
        let mut fanout = self.replies.delta_fanout(session_key, &all);
        let answer = loop {
            let assembly = self
                .assemble_caching(session_key, &current, queue_info(batch), false)
                .map_err(failed)?;
            window_full = assembly.history_left_out();
            timer.assembled(session_key, assembly.budget.used, assembly.budget.total);
            if let Some(span) = &assembly.summary_span {
                self.compaction.compact_ttl_span(session_key, span.to_seq);
            }
            match self
                .answer(
                    assembly,
                    &mut control,
                    turn_extras.as_deref(),
                    &results,
                    &mut fanout,
                )
                .await
            {
                Ok(answer) => break answer,
                Err(Stop::Cancelled) => return Err(TurnError::Cancelled),
                Err(Stop::Failed(e)) => {
                    self.remember_failure(session_key, &e);
                    return Err(failed(e));
                }
                Err(Stop::Overflow(e)) if compactions >= MAX_OVERFLOW_COMPACTIONS => {
                    tracing::warn!(session_key, error = %e, "context still too long after compacting; answering with an error");
                    let reason = format!(
                        "the conversation is too long for the model even after {compactions} compactions"
                    );
                    return self
                        .abandon_as(session_key, batch, &reason, ReplyErrorKind::Model)
                        .await
                        .map(|()| TurnReport::default())
                        .map_err(failed);
                }
                Err(Stop::Overflow(e)) => {
                    compactions += 1;
                    tracing::info!(session_key, error = %e, attempt = compactions, "context overflow; compacting before retrying");
                    // The lane waits: retrying before the swap would overflow again.
                    if let Err(e) = self
                        .compaction
                        .compact_now(session_key, CompactionReason::Overflow)
                        .await
                    {
                        tracing::warn!(session_key, error = %e, "overflow compaction failed");
                    }
                    self.context.invalidate(session_key);
                    if let Some(fanout) = &mut fanout {
                        fanout.next_round();
                    }
                }
            }
        };
        self.failures.remove(session_key);
        timer.model_done();
        let completion_tokens = answer.usage.completion_tokens;
        let meta = ReplyMeta {
            usage: Some(answer.usage),
            finish_reason: answer.finish_reason,
            model: answer.model.or_else(|| Some(self.model.name().to_string())),
            error: None,
        };
        let mut entries = self.result_entries(&carried);
        entries.extend(users);
        entries.extend(answer.entries);
        if !answer.client_calls.is_empty() {
            let report = TurnReport {
                steered: answer.steered.iter().map(|i| i.seq).collect(),
            };
            let mut consumed = all;
            consumed.extend(answer.steered);
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
                .map_err(failed)?;
            timer.finished(completion_tokens);
            return Ok(report);
        }
        // The answer's usage holds the model's own count, or ours when it gave none: counting
        // the text again would repeat a tokenisation per turn. A zero for a non-empty text is
        // a server's omission, not a count.
        let tokens = match completion_tokens {
            0 if !answer.text.is_empty() => self.tokens.count(&answer.text),
            n => n,
        };
        let reply = TranscriptEntry::assistant(answer.text, tokens, now_ms());
        let report = TurnReport {
            steered: answer.steered.iter().map(|i| i.seq).collect(),
        };
        let mut consumed = all;
        consumed.extend(answer.steered);
        self.delivery
            .deliver(session_key, &consumed, entries, reply, meta, window_full)
            .await
            .map_err(failed)?;
        timer.finished(completion_tokens);
        Ok(report)
    }

    /// One model call under the global concurrency cap; the lane's cancellation aborts the
    /// wait and the call (dropping the request future aborts the HTTP request).
    async fn complete(
        &self,
        request: &ModelRequest,
        control: &mut TurnControl<InboxItem>,
        fanout: &mut Option<DeltaFanout<'_>>,
    ) -> Result<ModelReply, Stop> {
        let _permit = tokio::select! {
            permit = self.model_permits.acquire() => {
                permit.map_err(|_| Stop::Failed(ModelError::Cancelled.into()))?
            }
            _ = control.cancelled() => return Err(Stop::Cancelled),
        };
        tokio::select! {
            reply = self.call_model(request, fanout) => reply.map_err(|e| {
                metrics::model_error(e.kind());
                if e.is_overflow() {
                    Stop::Overflow(e.into())
                } else {
                    Stop::Failed(e.into())
                }
            }),
            _ = control.cancelled() => Err(Stop::Cancelled),
        }
    }

    /// Calls the model, streaming its text to `fanout` when someone watches. Dropping the
    /// future (cancellation) ends the stream with the call.
    async fn call_model(
        &self,
        request: &ModelRequest,
        fanout: &mut Option<DeltaFanout<'_>>,
    ) -> Result<ModelReply, ModelError> {
        let Some(fanout) = fanout else {
            return self.model.complete(request).await;
        };
        let (tx, mut rx) = mpsc::channel(MODEL_DELTA_BUFFER);
        let call = self.model.complete_streaming(request, tx);
        tokio::pin!(call);
        let result = loop {
            tokio::select! {
                biased;
                Some(text) = rx.recv() => fanout.send(text),
                result = &mut call => break result,
            }
        };
        while let Ok(text) = rx.try_recv() {
            fanout.send(text);
        }
        fanout.next_round();
        result
    }

    /// Calls the model until it answers without tool calls (or the round limit is reached),
    /// running the tools it asks for in between.
    async fn answer(
        &self,
        assembly: Arc<Assembly>,
        control: &mut TurnControl<InboxItem>,
        extras: Option<&RequestExtras>,
        results: &[ClientToolResult],
        fanout: &mut Option<DeltaFanout<'_>>,
    ) -> Result<Answer, Stop> {
        let limits = &self.config.tools;
        let timeout = Duration::from_millis(limits.timeout_ms);
        let mut messages = assembly.messages();
        let budget = assembly.budget;
        // Dropped before the model call, while its blocks are still in the CPU's caches: a
        // block per history entry, each releasing its entry.
        drop(assembly);
        place_tool_results(&mut messages, results);
        let mut tools = self.tools.specs();
        let client_tools = self.client_tools(extras);
        tools.extend(client_tools.iter().cloned());
        let mut request = ModelRequest {
            prompt_tokens: budget.used,
            messages,
            tools,
            max_output_tokens: budget.reserved,
            params: extras.map(|e| e.params.clone()).unwrap_or_default(),
        };
        let mut prompt_tokens = budget.used.saturating_add(
            results
                .iter()
                .map(|r| self.tokens.count(&r.content) + MESSAGE_OVERHEAD_TOKENS)
                .sum(),
        );
        // (call id, tokens, round) of each tool result added in this turn.
        let mut results: Vec<(String, u32, u32)> = Vec::new();
        let mut entries = Vec::new();
        let mut steered = Vec::new();
        let mut round = 0u32;
        loop {
            if round > 0 {
                // Steer mode: messages that arrived during the tool round join the turn.
                for item in control.take_steered() {
                    let text = sanitize_text(&item.record.message.text);
                    let mut entry = self.user_entries(std::iter::once(&item));
                    prompt_tokens = prompt_tokens.saturating_add(
                        entry.first().map(|e| e.tokens).unwrap_or(0) + MESSAGE_OVERHEAD_TOKENS,
                    );
                    entries.append(&mut entry);
                    request
                        .messages
                        .push(crate::model::ChatMessage::text(Role::User, text));
                    steered.push(item);
                }
            }
            repair_tool_messages(&mut request.messages);
            request.prompt_tokens = prompt_tokens;
            let reply = self.complete(&request, control, fanout).await?;
            if reply.tool_calls.is_empty() {
                let usage = match reply.usage {
                    Some(u) => ReplyUsage::new(u.prompt_tokens, u.completion_tokens),
                    None => ReplyUsage::new(prompt_tokens, self.tokens.count(&reply.text)),
                };
                return Ok(Answer {
                    entries,
                    text: reply.text,
                    steered,
                    usage,
                    finish_reason: reply.finish_reason,
                    model: reply.model,
                    client_calls: Vec::new(),
                });
            }
            if round >= limits.max_rounds {
                let text = if reply.text.trim().is_empty() {
                    format!("(stopped after {round} rounds of tool calls without a final answer)")
                } else {
                    reply.text
                };
                let usage = ReplyUsage::new(
                    reply.usage.map_or(prompt_tokens, |u| u.prompt_tokens),
                    self.tokens.count(&text),
                );
                return Ok(Answer {
                    entries,
                    text,
                    steered,
                    usage,
                    finish_reason: reply.finish_reason,
                    model: reply.model,
                    client_calls: Vec::new(),
                });
            }
            round += 1;
            let calls: Vec<ToolCall> = reply.tool_calls;
            let is_client = |call: &ToolCall| client_tools.iter().any(|t| t.name == call.name);
            let outputs = join_all(calls.iter().enumerate().map(|(i, call)| async move {
                if is_client(call) {
                    // The client runs it; its result comes with the next request.
                    String::new()
                } else if i >= limits.max_calls_per_round {
                    format!(
                        "error: at most {} tool calls run per round",
                        limits.max_calls_per_round
                    )
                } else {
                    self.tools.run(call, timeout, limits.max_result_chars).await
                }
            }))
            .await;
            let now = now_ms();
            for (i, call) in calls.iter().enumerate() {
                let text = if i == 0 { reply.text.as_str() } else { "" };
                let tokens = self.tokens.count(text)
                    + self.tokens.count(&call.name)
                    + self.tokens.count(&call.arguments);
                prompt_tokens = prompt_tokens.saturating_add(tokens + MESSAGE_OVERHEAD_TOKENS);
                entries.push(TranscriptEntry::tool_call(
                    text,
                    tokens,
                    now,
                    ToolInfo {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        arguments: call.arguments.clone(),
                    },
                ));
            }
            request.messages.push(call_message(&reply.text, &calls));
            let client_calls: Vec<ToolCall> =
                calls.iter().filter(|c| is_client(c)).cloned().collect();
            for (call, output) in calls.iter().zip(outputs) {
                if is_client(call) {
                    continue;
                }
                let tokens = self.tokens.count(&output);
                prompt_tokens = prompt_tokens.saturating_add(tokens + MESSAGE_OVERHEAD_TOKENS);
                results.push((call.id.clone(), tokens, round));
                request.messages.push(result_message(&call.id, &output));
                entries.push(TranscriptEntry::tool_result(
                    output,
                    tokens,
                    now,
                    call.id.clone(),
                    call.name.clone(),
                ));
            }
            if !client_calls.is_empty() {
                let usage = ReplyUsage::new(
                    reply.usage.map_or(prompt_tokens, |u| u.prompt_tokens),
                    reply
                        .usage
                        .map_or_else(|| self.tokens.count(&reply.text), |u| u.completion_tokens),
                );
                return Ok(Answer {
                    entries,
                    text: reply.text,
                    steered,
                    usage,
                    finish_reason: Some("tool_calls".into()),
                    model: reply.model,
                    client_calls,
                });
            }
            // Over budget: clear this turn's older results, oldest first (the newest round's
            // results stay, the model has not seen them yet).
            let cleared = self.tokens.count_recurring(CLEARED_TOOL_RESULT);
            for (id, tokens, r) in results.iter_mut() {
                if prompt_tokens <= budget.total {
                    break;
                }
                if *r == round || *tokens <= cleared {
                    continue;
                }
                let found = request
                    .messages
                    .iter_mut()
                    .rev()
                    .find(|m| m.role == Role::Tool && m.tool_call_id.as_deref() == Some(id));
                if let Some(m) = found {
                    m.content = CLEARED_TOOL_RESULT.into();
                    prompt_tokens -= *tokens - cleared;
                    *tokens = cleared;
                }
            }
        }
    }

    /// The request's client-side tools, except those named like a registered tool (the
    /// registered one runs).
    fn client_tools(&self, extras: Option<&RequestExtras>) -> Vec<ToolSpec> {
        let registered = self.tools.specs();
        extras
            .map(|e| {
                e.client_tools
                    .iter()
                    .filter(|t| !registered.iter().any(|r| r.name == t.name))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The `tool_result` entries of the client's tool results, paired with their calls by id
    /// and naming the message that carried them (a retry of it finds its answer after them).
    fn result_entries(&self, results: &[(String, ClientToolResult)]) -> Vec<TranscriptEntry> {
        let now = now_ms();
        results
            .iter()
            .map(|(message_id, r)| {
                let tokens = self.tokens.count(&r.content);
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
    pub async fn abandon(
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
        let users = self.user_entries(all.iter());
        let text = format!(
            "Sorry, this message could not be answered ({}).",
            strip_urls(reason)
        );
        let tokens = self.tokens.count(&text);
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
