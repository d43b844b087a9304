//! The delivery stage: commit a turn's entries and the consumption of its inbox items in one
//! transaction, wait until it is durable, then publish the reply (the reply hub fans it out to
//! the stream, the waiter of each message, and the channel that serves its platform).

use std::sync::Arc;

use super::compaction::Compaction;
use super::turn::now_ms;
use crate::context::ContextEngine;
use crate::error::Error;
use crate::model::ToolCall;
use crate::replies::{Reply, ReplyErrorKind, ReplyHub, ReplyRoute, ReplyUsage};
use crate::store::{Committed, InboxItem, Store, TranscriptEntry, TurnCommit, TurnCommitter};

/// What the reply says about how it was made, beside its text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplyMeta {
    /// Token counts of the answer.
    pub usage: Option<ReplyUsage>,
    /// Why the model stopped.
    pub finish_reason: Option<String>,
    /// The model that answered.
    pub model: Option<String>,
    /// Set for an error notice: what failed.
    pub error: Option<ReplyErrorKind>,
}

/// What delivering a turn needs; owned by the turn engine.
pub struct Delivery {
    store: Store,
    /// Groups concurrent turn commits into one transaction.
    committer: TurnCommitter,
    context: Arc<ContextEngine>,
    replies: Arc<ReplyHub>,
    compaction: Compaction,
}

impl Delivery {
    /// Delivers through `replies`, committing to `store`; `compaction` hears how long the
    /// history grew.
    pub fn new(
        store: Store,
        context: Arc<ContextEngine>,
        replies: Arc<ReplyHub>,
        compaction: Compaction,
    ) -> Self {
        Self {
            store,
            committer: TurnCommitter::start(),
            context,
            replies,
            compaction,
        }
    }

    /// Commits the turn (entries, consumption of `batch`'s inbox items) in one transaction,
    /// waits until it is durable, then publishes the reply. The chat messages were recorded at
    /// admission. `window_full`: the turn's history window left stored entries out.
    pub async fn deliver(
        &self,
        session_key: &str,
        batch: &[InboxItem],
        mut entries: Vec<TranscriptEntry>,
        answer: TranscriptEntry,
        meta: ReplyMeta,
        window_full: bool,
    ) -> Result<(), Error> {
        let text = answer.text.clone();
        entries.push(answer);
        self.commit_and_publish(
            session_key,
            batch,
            entries,
            text,
            meta,
            window_full,
            Vec::new(),
        )
        .await
    }

    /// Like [`Delivery::deliver`] for a turn that stopped at calls of client-side tools: the
    /// entries end with the `tool_call` entries, and the published reply carries `calls` (its
    /// text is the model's text beside them). The client's tool results continue the turn.
    pub async fn deliver_tool_calls(
        &self,
        session_key: &str,
        batch: &[InboxItem],
        entries: Vec<TranscriptEntry>,
        text: String,
        calls: Vec<ToolCall>,
        meta: ReplyMeta,
    ) -> Result<(), Error> {
        self.commit_and_publish(session_key, batch, entries, text, meta, false, calls)
            .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn commit_and_publish(
        &self,
        session_key: &str,
        batch: &[InboxItem],
        entries: Vec<TranscriptEntry>,
        text: String,
        meta: ReplyMeta,
        window_full: bool,
        tool_calls: Vec<ToolCall>,
    ) -> Result<(), Error> {
        let committed = self
            .committer
            .commit(
                &self.store,
                TurnCommit {
                    session_key: session_key.to_string(),
                    entries,
                    consumed: batch.iter().map(|i| i.seq).collect(),
                    now_ms: now_ms(),
                    channel_messages: Vec::new(),
                },
            )
            .await?;
        let Committed {
            record,
            seqs,
            ticket,
        } = committed;
        self.context.invalidate(session_key);
        self.store.commit().wait(ticket).await?;
        self.compaction
            .maybe_compact(session_key, record.tokens, window_full);
        self.replies.publish(Reply {
            session_key: session_key.to_string(),
            text,
            in_reply_to: batch
                .iter()
                .map(|i| i.record.message.message_id.clone())
                .collect(),
            seq: seqs.last().copied().unwrap_or_default(),
            error: meta.error.is_some(),
            route: ReplyRoute::of(batch),
            tool_calls,
            usage: meta.usage,
            finish_reason: meta.finish_reason,
            model: meta.model,
            error_kind: meta.error,
        });
        Ok(())
    }
}
