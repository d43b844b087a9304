//! `tool_result_guard`: keeps old tool results from crowding out the conversation. Results
//! older than the last `protect_last_assistant_turns` assistant messages and longer than
//! `trim_above_chars` keep only their first `keep_head_chars` and last `keep_tail_chars`; then,
//! while the context still uses more than `clear_above_percent` of the budget, the oldest of
//! them are replaced by `[Old tool result content cleared]`.

use std::collections::{HashMap, HashSet};

use serde::Deserialize;

use crate::context::text::truncate_middle;
use crate::context::{
    BlockKind, Blocks, ContextError, ContextProcessor, Placement, SessionView, StageContext,
    StageError,
};
use crate::model::MESSAGE_OVERHEAD_TOKENS;

/// What a cleared tool result says.
pub(crate) const CLEARED_TOOL_RESULT: &str = "[Old tool result content cleared]";
/// Default: results longer than this many characters are trimmed.
pub(crate) const TRIM_ABOVE_CHARS: usize = 4_000;
/// Default: characters kept from the start of a trimmed result.
pub(crate) const KEEP_HEAD_CHARS: usize = 1_500;
/// Default: characters kept from the end of a trimmed result.
pub(crate) const KEEP_TAIL_CHARS: usize = 1_500;

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    protect_last_assistant_turns: usize,
    trim_above_chars: usize,
    keep_head_chars: usize,
    keep_tail_chars: usize,
    clear_above_percent: u8,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            protect_last_assistant_turns: 3,
            trim_above_chars: TRIM_ABOVE_CHARS,
            keep_head_chars: KEEP_HEAD_CHARS,
            keep_tail_chars: KEEP_TAIL_CHARS,
            clear_above_percent: 50,
        }
    }
}

/// The `tool_result_guard` processor.
#[derive(Debug, Default)]
pub(crate) struct ToolResultGuard {
    p: Params,
}

impl ToolResultGuard {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, StageError> {
        let p: Params = c.params()?;
        if p.clear_above_percent > 100 {
            return Err("tool_result_guard: clear_above_percent must be at most 100".into());
        }
        Ok(Self { p })
    }
}

type Order = (u64, u8, u32);

impl ContextProcessor for ToolResultGuard {
    fn name(&self) -> &str {
        "tool_result_guard"
    }

    fn process(&self, blocks: &mut Blocks, session: &SessionView<'_>) -> Result<(), ContextError> {
        let conv = |b: &&crate::context::ContextBlock| b.placement() == Placement::Conversation;
        let mut assistants: Vec<Order> = blocks
            .blocks()
            .iter()
            .filter(conv)
            .filter(|b| b.kind == BlockKind::Assistant)
            .map(|b| b.conversation_order())
            .collect();
        let n = self.p.protect_last_assistant_turns;
        if assistants.len() < n.max(1) {
            return Ok(());
        }
        assistants.sort_unstable();
        // Results older than the n-th newest assistant message are fair game.
        let cut = assistants[assistants.len() - n.max(1)];
        let mut old: Vec<(Order, u32)> = blocks
            .blocks()
            .iter()
            .filter(conv)
            .filter(|b| b.kind == BlockKind::ToolResult && b.conversation_order() < cut)
            .map(|b| (b.conversation_order(), b.token_count))
            .collect();
        if old.is_empty() {
            return Ok(());
        }
        old.sort_unstable_by_key(|o| o.0);

        // Soft trim, then estimate what clearing the oldest frees until under the threshold.
        let (head, tail) = (self.p.keep_head_chars, self.p.keep_tail_chars);
        let mut trimmed: HashMap<Order, u32> = HashMap::new();
        blocks.edit(|b| {
            let o = b.conversation_order();
            if b.kind == BlockKind::ToolResult
                && b.placement() == Placement::Conversation
                && o < cut
                && b.content != CLEARED_TOOL_RESULT
                && b.content.chars().count() > self.p.trim_above_chars
            {
                let short = truncate_middle(&b.content, head, tail).into_owned();
                b.token_count = session.tokens.count(&short) + MESSAGE_OVERHEAD_TOKENS;
                b.content = short.into();
                trimmed.insert(o, b.token_count);
            }
        });
        let threshold = u64::from(blocks.total()) * u64::from(self.p.clear_above_percent) / 100;
        let cleared_tokens =
            session.tokens.count_recurring(CLEARED_TOOL_RESULT) + MESSAGE_OVERHEAD_TOKENS;
        let mut used = u64::from(blocks.used());
        let mut clear: HashSet<Order> = HashSet::new();
        for (order, tokens) in &old {
            if used <= threshold {
                break;
            }
            let tokens = trimmed.get(order).copied().unwrap_or(*tokens);
            if tokens <= cleared_tokens {
                continue;
            }
            used -= u64::from(tokens - cleared_tokens);
            clear.insert(*order);
        }
        if clear.is_empty() {
            return Ok(());
        }
        blocks.edit(|b| {
            if clear.contains(&b.conversation_order()) && b.kind == BlockKind::ToolResult {
                b.content = CLEARED_TOOL_RESULT.into();
                b.token_count = cleared_tokens;
            }
        });
        Ok(())
    }
}
