//! The delivery stage: commit a turn's entries and the consumption of its inbox items in one
//! transaction, wait until it is durable, then publish the reply (the reply hub fans it out to
//! the stream, the waiter of each message, and the channel that serves its platform).

use std::sync::Arc;

use super::compaction::Compaction;
use super::replication::{ReplicatedTurn, ReplicationError, ReplicationSlot};
use crate::agents::AgentSet;
use crate::clock::now_ms;
use crate::error::Error;
use crate::model::ToolCall;
use crate::quotas::Quotas;
use crate::replies::{Reply, ReplyErrorKind, ReplyHub, ReplyRoute, ReplyUsage};
use crate::store::{Committed, InboxItem, Store, TranscriptEntry, TurnCommit, TurnCommitter};

/// What the reply says about how it was made, beside its text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ReplyMeta {
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
pub(crate) struct Delivery {
    store: Store,
    /// Groups concurrent turn commits into one transaction.
    committer: TurnCommitter,
    /// Whose context engines cache the assemblies a commit makes stale.
    agents: Arc<AgentSet>,
    replies: Arc<ReplyHub>,
    compaction: Compaction,
    /// A cluster node's changelog (see [`ReplicationSlot`]).
    replication: ReplicationSlot,
    /// Each answer's model tokens count against `[[quotas]]`.
    quotas: Arc<Quotas>,
}

impl Delivery {
    /// Delivers through `replies`, committing to `store`; `compaction` hears how long the
    /// history grew.
    pub(crate) fn new(
        store: Store,
        agents: Arc<AgentSet>,
        replies: Arc<ReplyHub>,
        compaction: Compaction,
        replication: ReplicationSlot,
        quotas: Arc<Quotas>,
    ) -> Self {
        Self {
            store,
            committer: TurnCommitter::start(),
            agents,
            replies,
            compaction,
            replication,
            quotas,
        }
    }

    /// A cluster node's replication slot.
    pub(crate) fn replication(&self) -> &ReplicationSlot {
        &self.replication
    }

    /// Consumes `batch`'s inbox items here without answering them: the turn belongs to another
    /// node, whose copy of the partition's inbox still holds the messages.
    pub(crate) async fn forget(&self, session_key: &str, batch: &[InboxItem]) -> Result<(), Error> {
        tracing::debug!(
            session_key,
            items = batch.len(),
            "not this node's session: left to its owner"
        );
        self.committer
            .commit(
                &self.store,
                TurnCommit {
                    session_key: session_key.to_string(),
                    entries: Vec::new(),
                    consumed: batch.iter().map(|i| i.seq).collect(),
                    now_ms: now_ms(),
                    channel_messages: Vec::new(),
                    replica: None,
                },
            )
            .await?;
        Ok(())
    }

    /// Commits the turn (entries, consumption of `batch`'s inbox items) in one transaction,
    /// waits until it is durable, then publishes the reply. The chat messages were recorded at
    /// admission. `window_full`: the turn's history window left stored entries out.
    pub(crate) async fn deliver(
        &self,
        session_key: &str,
        batch: &[InboxItem],
        mut entries: Vec<TranscriptEntry>,
        answer: TranscriptEntry,
        meta: ReplyMeta,
        window_full: bool,
    ) -> Result<(), Error> {
        let text = answer.text.to_string();
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
    pub(crate) async fn deliver_tool_calls(
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
        let mut reply = Reply {
            session_key: session_key.to_string(),
            text,
            in_reply_to: batch
                .iter()
                .map(|i| i.record.message.message_id.clone())
                .collect(),
            seq: 0,
            error: meta.error.is_some(),
            route: ReplyRoute::of(batch),
            tool_calls,
            usage: meta.usage,
            finish_reason: meta.finish_reason,
            model: meta.model,
            error_kind: meta.error,
        };
        let (entries, replica) = match self.replication.get() {
            None => (entries, None),
            Some(replication) => {
                let turn = ReplicatedTurn {
                    session_key: session_key.to_string(),
                    entries,
                    reply,
                };
                let appended = match replication {
                    Ok(r) => r.append(&turn).await,
                    Err(e) => Err(e),
                };
                match appended {
                    Ok(marks) => {
                        reply = turn.reply;
                        (turn.entries, Some(marks))
                    }
                    Err(ReplicationError::Fenced { partition }) => {
                        tracing::warn!(
                            session_key,
                            partition,
                            "turn fenced off: the partition moved; its messages are left to \
                             the new owner"
                        );
                        return self.forget(session_key, batch).await;
                    }
                    Err(e @ ReplicationError::Failed(_)) => {
                        return Err(Error::Replication(e.to_string()))
                    }
                }
            }
        };
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
                    replica,
                },
            )
            .await?;
        let Committed {
            record,
            seqs,
            ticket,
        } = committed;
        self.agents
            .for_key(session_key)
            .context
            .invalidate(session_key);
        self.store.commit().wait(ticket).await?;
        self.compaction
            .maybe_compact(session_key, record.tokens, window_full);
        reply.seq = seqs.last().copied().unwrap_or_default();
        self.charge_quota(session_key, batch, reply.usage);
        self.replies.publish(reply);
        Ok(())
    }

    /// Counts an answer's model tokens against the quota of the newest message it answers.
    /// A failed count is logged: the answer is committed and goes out all the same.
    fn charge_quota(&self, session_key: &str, batch: &[InboxItem], usage: Option<ReplyUsage>) {
        let (Some(item), Some(usage)) = (batch.last(), usage) else {
            return;
        };
        if self.quotas.is_empty() {
            return;
        }
        let tokens = u64::from(usage.total_tokens);
        if let Err(e) =
            self.quotas
                .charge_tokens(&item.record.message, session_key, tokens, now_ms())
        {
            tracing::warn!(session_key, error = %e, "could not count a turn's tokens");
        }
    }
}
