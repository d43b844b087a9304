//! One turn, as plain Rust: read history, assemble the context, call the model, commit
//! everything in one transaction, wait until it is durable, publish the reply.

use std::sync::Arc;

use tokio::sync::Semaphore;
use turnstile_actors::{TurnBatch, TurnControl, TurnError, TurnReport};

use super::batch::render_current;
use super::replies::{Reply, ReplyHub};
use crate::config::Config;
use crate::context::{assemble, Assembly, AssemblyInput, TokenBudget};
use crate::error::{Error, ModelError, StoreError};
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

    /// One user entry per message the batch consumes (answered or dropped), in order: every
    /// acknowledged message is kept in the transcript.
    fn user_entries(&self, batch: &TurnBatch<InboxItem>) -> Vec<TranscriptEntry> {
        batch
            .all_items()
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

    /// Runs one turn for `batch`. Cancellation (interrupt mode) aborts the model call; nothing
    /// is committed then.
    pub async fn run(
        &self,
        session_key: &str,
        batch: &TurnBatch<InboxItem>,
        mut control: TurnControl<InboxItem>,
    ) -> Result<TurnReport, TurnError> {
        let failed = |e: Error| TurnError::Failed(e.to_string());
        let users = self.user_entries(batch);
        let text = render_current(batch);
        let tokens = match batch.items.as_slice() {
            [_] if batch.dropped.is_empty() => users.last().map(|e| e.tokens).unwrap_or(0),
            _ => self.tokens.count(&text),
        };
        let assembly = self
            .assemble(session_key, &[(text, tokens)])
            .map_err(|e| failed(e.into()))?;
        let request = ModelRequest {
            prompt_tokens: assembly.budget.used,
            messages: assembly.messages(),
            tools: Vec::new(),
            max_output_tokens: self.config.context.reserve_output_tokens,
        };
        let reply = {
            let _permit = tokio::select! {
                permit = self.model_permits.acquire() => permit.map_err(|_| failed(ModelError::Cancelled.into()))?,
                _ = control.cancelled() => return Err(TurnError::Cancelled),
            };
            tokio::select! {
                reply = self.model.complete(&request) => reply.map_err(|e| failed(e.into()))?,
                _ = control.cancelled() => return Err(TurnError::Cancelled),
            }
        };
        let assistant = TranscriptEntry {
            kind: EntryKind::Assistant,
            tokens: self.tokens.count(&reply.text),
            text: reply.text,
            message_id: None,
            sender: None,
            timestamp_ms: now_ms(),
            tool: None,
        };
        self.commit_and_publish(session_key, batch, users, assistant, false)
            .await
            .map_err(failed)?;
        Ok(TurnReport::default())
    }

    /// Answers a turn that failed past its retries with an error notice and consumes its items.
    pub async fn abandon(
        &self,
        session_key: &str,
        batch: &TurnBatch<InboxItem>,
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
        batch: &TurnBatch<InboxItem>,
        mut entries: Vec<TranscriptEntry>,
        answer: TranscriptEntry,
        error: bool,
    ) -> Result<(), Error> {
        let text = answer.text.clone();
        entries.push(answer);
        let (_, seqs, ticket) = self.store.commit_turn(TurnCommit {
            session_key,
            entries,
            consumed: batch.all_items().map(|i| i.seq).collect(),
            now_ms: now_ms(),
        })?;
        self.store.commit().wait(ticket).await?;
        self.replies.publish(Reply {
            session_key: session_key.to_string(),
            text,
            in_reply_to: batch
                .all_items()
                .map(|i| i.record.message.message_id.clone())
                .collect(),
            seq: seqs.last().copied().unwrap_or_default(),
            error,
        });
        Ok(())
    }
}
