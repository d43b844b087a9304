//! One turn, as plain Rust: read history, assemble the context, call the model, commit
//! everything in one transaction, wait until it is durable, publish the reply.

use std::sync::Arc;

use tokio::sync::Semaphore;

use super::replies::{Reply, ReplyHub, ReplyRoute};
use crate::config::Config;
use crate::context::{assemble, Assembly, AssemblyInput, TokenBudget};
use crate::error::{Error, ModelError, StoreError};
use crate::metrics;
use crate::model::{Model, ModelRequest, TokenCounter, MESSAGE_OVERHEAD_TOKENS};
use crate::store::{EntryKind, EntrySender, InboxItem, Store, TranscriptEntry, TurnCommit};

/// Everything a turn needs; shared by all lanes.
pub struct TurnEngine {
    pub(crate) store: Store,
    pub(crate) model: Arc<dyn Model>,
    pub(crate) tokens: TokenCounter,
    pub(crate) replies: Arc<ReplyHub>,
    pub(crate) config: Arc<Config>,
    /// Caps model calls across all sessions (`lanes.max_concurrent_turns`).
    pub(crate) model_permits: Semaphore,
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl TurnEngine {
    fn budget(&self) -> TokenBudget {
        TokenBudget::new(
            self.config.context.max_tokens,
            self.config.model.context_window,
            self.config.context.reserve_output_tokens,
        )
    }

    /// Assembles the context for `session_key` around `current` (the new messages with their
    /// token counts), reading only as much history as the budget can hold.
    pub fn assemble(
        &self,
        session_key: &str,
        current: &[(String, u32)],
    ) -> Result<Assembly, StoreError> {
        let system_prompt = self.config.context.system_prompt.as_str();
        let system_tokens = self.tokens.count(system_prompt);
        let budget = self.budget();
        let fixed = system_tokens
            + MESSAGE_OVERHEAD_TOKENS
            + current
                .iter()
                .map(|(_, t)| t + MESSAGE_OVERHEAD_TOKENS)
                .sum::<u32>();
        let mut room = budget.total.saturating_sub(fixed);
        let (history, total_entries) = match self.store.session(session_key)? {
            Some(record) => {
                let mut stop_after_next = false;
                let history = self.store.newest_entries(record.id, |e| {
                    if stop_after_next {
                        return false;
                    }
                    let cost = e.tokens + MESSAGE_OVERHEAD_TOKENS;
                    if cost > room {
                        // Load the first one that does not fit so the dump can say why.
                        stop_after_next = true;
                    } else {
                        room -= cost;
                    }
                    true
                })?;
                (history, record.entries)
            }
            None => (Vec::new(), 0),
        };
        Ok(assemble(AssemblyInput {
            system_prompt: (system_prompt, system_tokens),
            history_newest_first: &history,
            older_entries_not_loaded: total_entries.saturating_sub(history.len() as u64),
            current,
            budget,
        }))
    }

    fn user_entries(&self, batch: &[InboxItem]) -> Vec<TranscriptEntry> {
        batch
            .iter()
            .map(|item| {
                let m = &item.record.message;
                TranscriptEntry {
                    kind: EntryKind::User,
                    text: m.text.clone(),
                    message_id: Some(m.message_id.clone()),
                    sender: Some(EntrySender {
                        id: m.sender.id.clone(),
                        name: m.sender.name.clone(),
                    }),
                    timestamp_ms: m.timestamp_ms,
                    tokens: self.tokens.count(&m.text),
                    tool: None,
                }
            })
            .collect()
    }

    /// Runs one turn for `batch` (oldest first).
    pub async fn run(&self, session_key: &str, batch: &[InboxItem]) -> Result<(), Error> {
        let oldest = batch.iter().map(|i| i.record.accepted_at_ms).min();
        let mut timer = metrics::TurnTimer::start(oldest.unwrap_or_default(), now_ms());
        let users = self.user_entries(batch);
        let current: Vec<(String, u32)> =
            users.iter().map(|e| (e.text.clone(), e.tokens)).collect();
        let assembly = self.assemble(session_key, &current)?;
        timer.assembled(session_key, assembly.budget.used, assembly.budget.total);
        let request = ModelRequest {
            prompt_tokens: assembly.budget.used,
            messages: assembly.messages(),
            tools: Vec::new(),
            max_output_tokens: self.config.context.reserve_output_tokens,
        };
        let reply = {
            let _permit = self
                .model_permits
                .acquire()
                .await
                .map_err(|_| ModelError::Cancelled)?;
            let reply = self.model.complete(&request).await;
            reply.inspect_err(|e| metrics::model_error(e.kind()))?
        };
        timer.model_done();
        let tokens = self.tokens.count(&reply.text);
        let completion_tokens = reply.usage.map_or(tokens, |u| u.completion_tokens);
        let assistant = TranscriptEntry {
            kind: EntryKind::Assistant,
            tokens,
            text: reply.text,
            message_id: None,
            sender: None,
            timestamp_ms: now_ms(),
            tool: None,
        };
        self.commit_and_publish(session_key, batch, users, assistant, false)
            .await?;
        timer.finished(completion_tokens);
        Ok(())
    }

    /// Answers a turn that failed past its retries with an error notice and consumes its items.
    pub async fn abandon(
        &self,
        session_key: &str,
        batch: &[InboxItem],
        reason: &str,
    ) -> Result<(), Error> {
        let users = self.user_entries(batch);
        let text = format!("Sorry, this message could not be answered ({reason}).");
        let notice = TranscriptEntry {
            kind: EntryKind::Assistant,
            tokens: self.tokens.count(&text),
            text,
            message_id: None,
            sender: None,
            timestamp_ms: now_ms(),
            tool: None,
        };
        self.commit_and_publish(session_key, batch, users, notice, true)
            .await
    }

    async fn commit_and_publish(
        &self,
        session_key: &str,
        batch: &[InboxItem],
        mut entries: Vec<TranscriptEntry>,
        answer: TranscriptEntry,
        error: bool,
    ) -> Result<(), Error> {
        let text = answer.text.clone();
        entries.push(answer);
        let (_, seqs, ticket) = self.store.commit_turn(TurnCommit {
            session_key,
            entries,
            consumed: batch.iter().map(|i| i.seq).collect(),
            now_ms: now_ms(),
        })?;
        self.store.commit().wait(ticket).await?;
        self.replies.publish(Reply {
            session_key: session_key.to_string(),
            text,
            in_reply_to: batch
                .iter()
                .map(|i| i.record.message.message_id.clone())
                .collect(),
            seq: seqs.last().copied().unwrap_or_default(),
            error,
            route: ReplyRoute::of(batch),
        });
        Ok(())
    }
}
