//! The context engine: what a turn sends to the model, assembled inside a token budget, and a
//! report (the dump) of what was kept, what was dropped and why.
//!
//! Assembly works on blocks whose token counts were computed when their entries were written;
//! it never re-tokenises history.

mod assemble;

use serde::Serialize;

pub use assemble::{assemble, AssemblyInput};

use crate::model::{ChatMessage, Role};

/// A piece of context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContextBlock {
    /// Which source produced it (`system_prompt`, `history`, `current_message`…).
    pub source: &'static str,
    /// The role it is sent with.
    pub role: Role,
    /// The text sent.
    pub content: String,
    /// 0–100; higher survives trimming longer.
    pub priority: u8,
    /// Tokens it costs, including per-message overhead.
    pub token_count: u32,
    /// Never trimmed or dropped (the system prompt).
    pub immutable: bool,
    /// The transcript sequence it came from, if any.
    pub seq: Option<u64>,
}

/// The token budget of one turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TokenBudget {
    /// Tokens the context may use: min(max_tokens, context window − reserved).
    pub total: u32,
    /// Tokens reserved for the answer.
    pub reserved: u32,
    /// Tokens used by kept blocks.
    pub used: u32,
}

impl TokenBudget {
    /// The budget for a model with `context_window` tokens.
    pub fn new(max_tokens: u32, context_window: u32, reserved: u32) -> Self {
        Self {
            total: max_tokens.min(context_window.saturating_sub(reserved)),
            reserved,
            used: 0,
        }
    }

    /// Tokens still free.
    pub fn remaining(&self) -> u32 {
        self.total.saturating_sub(self.used)
    }
}

/// A block that did not make it into the context, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DroppedBlock {
    /// Which source produced it.
    pub source: &'static str,
    /// The transcript sequence it came from, if any.
    pub seq: Option<u64>,
    /// Its tokens.
    pub token_count: u32,
    /// The step that dropped it.
    pub dropped_by: &'static str,
    /// Why.
    pub reason: String,
}

/// The result of one assembly: the messages to send and the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Assembly {
    /// Kept blocks, in the order they are sent.
    pub blocks: Vec<ContextBlock>,
    /// Dropped blocks.
    pub dropped: Vec<DroppedBlock>,
    /// Older transcript entries that were not even read because the budget was full.
    pub older_entries_not_loaded: u64,
    /// The budget with `used` filled in.
    pub budget: TokenBudget,
    /// Tokens of the stable prefix (system prompt), which is byte-identical between turns.
    pub stable_prefix_tokens: u32,
}

impl Assembly {
    /// The chat messages to send, in order.
    pub fn messages(&self) -> Vec<ChatMessage> {
        self.blocks
            .iter()
            .map(|b| ChatMessage::text(b.role, b.content.clone()))
            .collect()
    }
}
