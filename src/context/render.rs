//! Rendering kept blocks into the chat messages sent to the model.
//!
//! Layout, whatever the priorities: one system message — the stable prefix (system prompt,
//! bootstrap, skills) first, then other system context (summary, memory), then what changes
//! every turn (the current time) — then the conversation in transcript order (consecutive tool
//! calls merged into one assistant message, each result a `tool` message), then one user
//! message with the pending events, the reply thread, the group history and the current
//! message, in that order.

use super::block::{BlockKind, ContextBlock, Placement};
use super::order::sort_by_computed_key;
use crate::model::{ChatMessage, Role, ToolCall};

/// Separates blocks merged into one message.
const SEPARATOR: &str = "\n\n";

/// Kept blocks in the order they are sent.
pub(crate) struct Layout {
    /// The blocks in the order they are sent.
    pub(crate) blocks: Vec<ContextBlock>,
    /// Tokens of the stable prefix.
    pub(crate) stable_prefix_tokens: u32,
}

/// Lays out `blocks` (in precedence order) in the order they are sent; moves, no copies.
pub(crate) fn layout(mut blocks: Vec<ContextBlock>) -> Layout {
    // One in-place sort: by placement, then precedence (system message), transcript order
    // (conversation) or kind (final user message). Every key ends in the unique collection
    // index.
    sort_by_computed_key(&mut blocks, |b| {
        let p = b.placement();
        match p {
            Placement::Prefix | Placement::System | Placement::SystemEnd => (
                p,
                u64::from(u8::MAX - b.priority),
                i64::from(b.weight).wrapping_neg(),
                b.index,
            ),
            Placement::Conversation => {
                let (seq, rank, index) = b.conversation_order();
                (p, seq, i64::from(rank), index)
            }
            Placement::Current => (p, b.kind as u64, 0, b.index),
        }
    });
    let stable_prefix_tokens = blocks
        .iter()
        .take_while(|b| b.placement() == Placement::Prefix)
        .fold(0u32, |a, b| a.saturating_add(b.token_count));
    Layout {
        blocks,
        stable_prefix_tokens,
    }
}

/// Renders laid-out `blocks` as chat messages.
pub(crate) fn messages(blocks: &[ContextBlock]) -> Vec<ChatMessage> {
    // Sized once: one pass over the blocks instead of vectors grown push by push.
    let mut system = Vec::with_capacity(blocks.len());
    let mut conversation = Vec::with_capacity(blocks.len());
    let mut current = Vec::new();
    for b in blocks {
        match b.placement() {
            Placement::Prefix | Placement::System | Placement::SystemEnd => system.push(b),
            Placement::Conversation => conversation.push(b),
            Placement::Current => current.push(b),
        }
    }
    let mut messages = Vec::with_capacity(conversation.len() + 2);
    let joined = |bs: &[&ContextBlock]| {
        bs.iter()
            .map(|b| b.content.as_str())
            .collect::<Vec<_>>()
            .join(SEPARATOR)
    };
    if !system.is_empty() {
        messages.push(ChatMessage::text(Role::System, joined(&system)));
    }
    let mut previous = None;
    for b in &conversation {
        match (b.kind, &b.metadata.tool) {
            (BlockKind::ToolCall, Some(tool)) => {
                let call = ToolCall {
                    id: tool.call_id.clone(),
                    name: tool.name.clone(),
                    arguments: tool.arguments.clone(),
                };
                match messages.last_mut() {
                    Some(m) if previous == Some(BlockKind::ToolCall) => {
                        if !b.content.is_empty() {
                            if !m.content.is_empty() {
                                m.content.push_str(SEPARATOR);
                            }
                            m.content.push_str(&b.content);
                        }
                        m.tool_calls.push(call);
                    }
                    _ => {
                        let mut m = ChatMessage::text(Role::Assistant, b.content.to_message_text());
                        m.tool_calls.push(call);
                        messages.push(m);
                    }
                }
            }
            (BlockKind::ToolResult, Some(tool)) => {
                let mut m = ChatMessage::text(Role::Tool, b.content.to_message_text());
                m.tool_call_id = Some(tool.call_id.clone());
                messages.push(m);
            }
            (kind, _) => messages.push(ChatMessage::text(kind.role(), b.content.to_message_text())),
        }
        previous = Some(b.kind);
    }
    if !current.is_empty() {
        let mut m = ChatMessage::text(Role::User, joined(&current));
        m.image_urls = current
            .iter()
            .flat_map(|b| b.metadata.image_urls.iter().cloned())
            .collect();
        messages.push(m);
    }

    messages
}
