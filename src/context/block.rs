//! Blocks: the unit the context engine collects, processes, trims and renders.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Serialize;

use super::{BlockText, MessageId};
use crate::model::Role;
use crate::store::{EntryKind, ToolInfo};

/// What a block is. The kind decides where the block is placed in the prompt
/// ([`BlockKind::placement`]) and the role it is sent with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockKind {
    /// The trusted system prompt.
    SystemPrompt,
    /// A bootstrap file of the agent workspace (`AGENTS.md`, `SOUL.md`…).
    Bootstrap,
    /// The compact skills list.
    Skills,
    /// A recalled memory snippet.
    Memory,
    /// The compaction summary of older conversation.
    Summary,
    /// Other trusted context an embedding application adds to the system message.
    Note,
    /// The current date and time, the channel and the chat kind (`time_and_place`).
    TimeAndPlace,
    /// A user entry of the transcript.
    User,
    /// An assistant entry of the transcript.
    Assistant,
    /// A tool call the model made.
    ToolCall,
    /// A tool's result.
    ToolResult,
    /// A platform event stored in the transcript.
    SystemEvent,
    /// An application-defined transcript entry.
    Custom,
    /// Older messages of the chat recalled for the current message (BM25 over its record).
    ChatRecall,
    /// System events queued since the last turn (`System: [ts] text` lines).
    PendingEvents,
    /// The message a thread session started from (`thread_starter`).
    ThreadStarter,
    /// The thread of the message being replied to.
    ReplyThread,
    /// Pending group history (messages since the bot's last reply).
    GroupHistory,
    /// The message this turn answers.
    CurrentMessage,
}

/// Where a block goes in the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// The start of the system message; byte-identical between turns unless its inputs change
    /// (prompt-cache friendly).
    Prefix,
    /// The rest of the system message.
    System,
    /// The end of the system message: context that changes on every turn (the clock). Last,
    /// so that prompt caches can reuse as much of the system message as possible.
    SystemEnd,
    /// The conversation, in transcript order.
    Conversation,
    /// The final user message.
    Current,
}

impl BlockKind {
    /// Where blocks of this kind are placed.
    pub fn placement(self) -> Placement {
        match self {
            BlockKind::SystemPrompt | BlockKind::Bootstrap | BlockKind::Skills => Placement::Prefix,
            BlockKind::Memory | BlockKind::Summary | BlockKind::Note => Placement::System,
            BlockKind::TimeAndPlace => Placement::SystemEnd,
            BlockKind::User
            | BlockKind::Assistant
            | BlockKind::ToolCall
            | BlockKind::ToolResult
            | BlockKind::SystemEvent
            | BlockKind::Custom => Placement::Conversation,
            BlockKind::ChatRecall
            | BlockKind::PendingEvents
            | BlockKind::ThreadStarter
            | BlockKind::ReplyThread
            | BlockKind::GroupHistory
            | BlockKind::CurrentMessage => Placement::Current,
        }
    }

    /// The role a conversation block is sent with (other placements are merged into the system
    /// or the final user message).
    pub fn role(self) -> Role {
        match self {
            BlockKind::Assistant | BlockKind::ToolCall => Role::Assistant,
            BlockKind::ToolResult => Role::Tool,
            BlockKind::SystemPrompt
            | BlockKind::Bootstrap
            | BlockKind::Skills
            | BlockKind::Memory
            | BlockKind::Summary
            | BlockKind::Note
            | BlockKind::TimeAndPlace => Role::System,
            _ => Role::User,
        }
    }

    /// The block kind of a transcript entry.
    pub fn of_entry(kind: EntryKind) -> Self {
        match kind {
            EntryKind::User => BlockKind::User,
            EntryKind::Assistant => BlockKind::Assistant,
            EntryKind::ToolCall => BlockKind::ToolCall,
            EntryKind::ToolResult => BlockKind::ToolResult,
            EntryKind::Summary => BlockKind::Summary,
            EntryKind::SystemEvent => BlockKind::SystemEvent,
            EntryKind::Custom => BlockKind::Custom,
        }
    }
}

/// Structured facts about a block. Processors read them (ages, identities, tool pairing); the
/// dump shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BlockMeta {
    /// The transcript sequence it came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// The platform message id it came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<MessageId>,
    /// When the underlying message was written, ms since the epoch (TTL decay uses it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp_ms: Option<u64>,
    /// The tool call or result it carries (boxed: most blocks have none, and blocks are
    /// moved around a lot).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<Box<ToolInfo>>,
    /// A file it was read from (shown with the home dir as `~`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// True when the content is raw user-controlled text that the sanitise processor cleans.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub user_text: bool,
    /// True for blocks a processor made up (a synthetic tool result).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub synthetic: bool,
    /// Image URLs sent with the block as `image_url` parts (current messages, with
    /// `[model] vision`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub image_urls: Vec<String>,
    /// Anything else a source wants to record (embedders' own keys).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, String>,
}

/// A piece of context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContextBlock {
    /// The source stage that produced it (stamped by the pipeline).
    pub source: Cow<'static, str>,
    /// What it is.
    pub kind: BlockKind,
    /// The text sent.
    pub content: BlockText,
    /// 0–100: blocks are admitted to the budget in order of priority (higher first), so a
    /// higher priority survives trimming longer. Stamped by the pipeline from the source's
    /// configured priority.
    pub priority: u8,
    /// The source's weight for this session; orders blocks of equal priority (higher first).
    pub weight: i32,
    /// Position in collection order (stamped by the pipeline); the last tie-breaker.
    pub index: u32,
    /// Tokens it costs, including the per-message overhead.
    pub token_count: u32,
    /// Structured facts about it.
    pub metadata: BlockMeta,
    /// Never trimmed, dropped or rewritten (the system prompt).
    pub immutable: bool,
}

/// The marker left where an oversized current message was cut to fit the budget.
pub(crate) const CUT_TO_FIT_MARKER: &str = "[... {n} characters cut to fit the context budget ...]";

/// Attempts at shrinking one block to fit (each recounts its tokens).
const SHRINK_ATTEMPTS: usize = 8;

impl ContextBlock {
    /// Whether the block must reach the model even when the budget is short: the message being
    /// answered is cut to fit rather than dropped (a turn without it answers nothing).
    pub fn must_keep(&self) -> bool {
        self.kind == BlockKind::CurrentMessage
    }

    /// Cuts the middle of the content (head two thirds, tail one third kept, a marker between)
    /// so the block costs at most `max_tokens`, as close to it as a few recounts with `tokens`
    /// get. Bounded: [`SHRINK_ATTEMPTS`] recounts, then the best fit found (or the marker
    /// alone).
    pub fn shrink_to(&mut self, max_tokens: u32, tokens: &crate::model::TokenCounter) {
        let overhead = crate::model::MESSAGE_OVERHEAD_TOKENS;
        let original: Vec<char> = self.content.chars().collect();
        let render = |keep: usize| -> (String, u32) {
            let keep = keep.min(original.len());
            let head = keep * 2 / 3;
            let tail = keep - head;
            let marker = CUT_TO_FIT_MARKER.replace("{n}", &(original.len() - keep).to_string());
            let mut content: String = original[..head].iter().collect();
            content.push('\n');
            content.push_str(&marker);
            content.push('\n');
            content.extend(original[original.len() - tail..].iter());
            let cost = tokens.count(&content) + overhead;
            (content, cost)
        };
        let per_token = original.len() as f64 / f64::from(self.token_count.max(1));
        let mut keep = (f64::from(max_tokens.saturating_sub(overhead)) * per_token) as usize;
        let mut best: Option<(String, u32)> = None;
        for _ in 0..SHRINK_ATTEMPTS {
            let (content, cost) = render(keep);
            if cost <= max_tokens && best.as_ref().is_none_or(|(_, c)| cost > *c) {
                best = Some((content, cost));
            }
            let room = f64::from(max_tokens.saturating_sub(overhead).max(1));
            let spent = f64::from(cost.saturating_sub(overhead).max(1));
            let next = ((keep as f64) * room / spent * 0.98) as usize;
            if next == keep || keep == 0 {
                break;
            }
            keep = next;
        }
        let (content, cost) = best.unwrap_or_else(|| render(0));
        self.content = content.into();
        self.token_count = cost;
    }

    /// A block of `kind` with `content` costing `token_count` tokens (overhead included).
    /// Source, priority, weight and index are stamped by the pipeline.
    pub fn new(kind: BlockKind, content: impl Into<BlockText>, token_count: u32) -> Self {
        Self {
            source: Cow::Borrowed(""),
            kind,
            content: content.into(),
            priority: 50,
            weight: 0,
            index: 0,
            token_count,
            metadata: BlockMeta::default(),
            immutable: false,
        }
    }

    /// The same block with `metadata`.
    pub fn with_meta(mut self, metadata: BlockMeta) -> Self {
        self.metadata = metadata;
        self
    }

    /// Where it goes in the prompt.
    pub fn placement(&self) -> Placement {
        self.kind.placement()
    }

    /// The precedence key: priority desc, weight desc, collection index asc.
    pub fn precedence(&self) -> (std::cmp::Reverse<u8>, std::cmp::Reverse<i32>, u32) {
        (
            std::cmp::Reverse(self.priority),
            std::cmp::Reverse(self.weight),
            self.index,
        )
    }

    /// The order of conversation blocks: transcript sequence, calls before results, then
    /// collection order.
    pub(crate) fn conversation_order(&self) -> (u64, u8, u32) {
        let rank = match self.kind {
            BlockKind::ToolResult => 1,
            _ => 0,
        };
        (self.metadata.seq.unwrap_or(u64::MAX), rank, self.index)
    }
}

/// Longest excerpt of a dropped block's content kept in the dump.
pub(crate) const DROPPED_PREVIEW_CHARS: usize = 160;

/// A block that did not make it into the context, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DroppedBlock {
    /// Which source produced it.
    pub source: Cow<'static, str>,
    /// What it was.
    pub kind: BlockKind,
    /// Its priority.
    pub priority: u8,
    /// The transcript sequence it came from, if any.
    pub seq: Option<u64>,
    /// Its tokens.
    pub token_count: u32,
    /// The source or processor that dropped it.
    pub dropped_by: Cow<'static, str>,
    /// Why.
    pub reason: String,
    /// The start of its content.
    pub preview: String,
}

impl DroppedBlock {
    /// Records that `by` dropped `block` because of `reason`.
    pub fn new(block: &ContextBlock, by: Cow<'static, str>, reason: String) -> Self {
        let mut preview: String = block.content.chars().take(DROPPED_PREVIEW_CHARS).collect();
        if preview.len() < block.content.len() {
            preview.push('…');
        }
        Self {
            source: block.source.clone(),
            kind: block.kind,
            priority: block.priority,
            seq: block.metadata.seq,
            token_count: block.token_count,
            dropped_by: by,
            reason,
            preview,
        }
    }
}
