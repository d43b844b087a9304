//! [`Assembly`]: the result of one assembly — the messages to send — and its report (the
//! dump): every kept block with its source, kind, priority and tokens, every dropped block
//! with the stage that dropped it and why, the totals and the stable-prefix size.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Value};

use super::block::{ContextBlock, DroppedBlock};
use super::budget::TokenBudget;
use super::presets::ChatPolicy;
use super::processor::SummarySpan;
use crate::inbound::ChatKind;
use crate::model::ChatMessage;

/// The stages that ran, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StageNames {
    /// Sources, in collection order.
    pub sources: Vec<String>,
    /// Processors, in order (the pipeline's own tail included).
    pub processors: Vec<String>,
}

/// The result of one assembly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assembly {
    /// The session.
    pub session_key: String,
    /// The kind of chat the policy was chosen for.
    pub chat_kind: ChatKind,
    /// The pruning policy applied.
    pub policy: ChatPolicy,
    /// Kept blocks, in the order they are sent.
    pub blocks: Vec<ContextBlock>,
    /// Dropped blocks, in the order they were dropped.
    pub dropped: Vec<DroppedBlock>,
    /// Stored transcript entries that appear neither among the kept nor among the dropped
    /// blocks: older than where history stopped (the budget, the message limit, the TTL
    /// horizon or a summary made them useless), most of them never even read.
    pub older_entries_not_loaded: u64,
    /// The budget with `used` filled in.
    pub budget: TokenBudget,
    /// Tokens of the stable prefix (system prompt, bootstrap, skills), which is byte-identical
    /// between turns unless its inputs change.
    pub stable_prefix_tokens: u32,
    /// The span a TTL `keep: summary` rule left out, for the compactor.
    pub summary_span: Option<SummarySpan>,
    /// The stages that ran.
    pub stages: Arc<StageNames>,
}

impl Assembly {
    /// Whether stored history was left out of this context by the message limit or the
    /// budget (what a TTL rule drops is meant to go: `keep: summary` marks what to summarise).
    pub fn history_left_out(&self) -> bool {
        let history = || self.dropped.iter().filter(|d| d.source == "history");
        let aged = history().any(|d| d.dropped_by == "ttl_decay");
        history().any(|d| d.dropped_by != "ttl_decay")
            || (self.older_entries_not_loaded > 0 && !aged)
    }

    /// The chat messages to send, in order (rendered from the blocks on each call).
    pub fn messages(&self) -> Vec<ChatMessage> {
        super::render::messages(&self.blocks)
    }

    /// True when the immutable blocks alone exceed the budget (nothing else could be dropped).
    pub fn over_budget(&self) -> bool {
        self.budget.used > self.budget.total
    }

    /// The dump as JSON (`GET /v1/sessions/{key}/context`).
    pub fn dump(&self) -> Value {
        let blocks: Vec<Value> = self
            .blocks
            .iter()
            .map(|b| {
                json!({
                    "source": b.source,
                    "kind": b.kind,
                    "role": b.kind.role(),
                    "placement": b.placement(),
                    "priority": b.priority,
                    "weight": b.weight,
                    "index": b.index,
                    "token_count": b.token_count,
                    "immutable": b.immutable,
                    "seq": b.metadata.seq,
                    "metadata": b.metadata,
                    "content": b.content,
                })
            })
            .collect();
        json!({
            "session_key": self.session_key,
            "chat_kind": self.chat_kind,
            "policy": self.policy,
            "blocks": blocks,
            "dropped": self.dropped,
            "older_entries_not_loaded": self.older_entries_not_loaded,
            "messages": self.messages(),
            "budget": self.budget,
            "total_tokens": self.budget.used,
            "stable_prefix_tokens": self.stable_prefix_tokens,
            "over_budget": self.over_budget(),
            "summary_span": self.summary_span,
            "stages": &*self.stages,
        })
    }
}
