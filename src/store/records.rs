//! What is stored: session entries, transcript entries and durable-inbox entries.

use serde::{Deserialize, Serialize};

use crate::inbound::InboundMessage;

/// One session (a conversation), keyed by its session key in the `sessions` tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// Stable numeric id; prefixes the session's transcript keys.
    pub id: u64,
    /// When the session was created, ms since the epoch.
    pub created_at_ms: u64,
    /// When the session last changed.
    pub updated_at_ms: u64,
    /// Sequence number the next transcript entry gets.
    pub next_seq: u64,
    /// Transcript entries stored.
    pub entries: u64,
    /// Sum of the entries' token counts.
    pub tokens: u64,
    /// Sum of the entries' encoded sizes.
    pub bytes: u64,
    /// How many times the session was compacted.
    pub compaction_count: u32,
}

/// The kind of a transcript entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// From a user.
    User,
    /// From the model.
    Assistant,
    /// A tool call the model made.
    ToolCall,
    /// A tool's result.
    ToolResult,
    /// A compaction summary of older entries.
    Summary,
    /// A platform event (join, rename, pin…).
    SystemEvent,
    /// Application-defined.
    Custom,
}

/// Who wrote a user entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntrySender {
    /// Platform id.
    pub id: String,
    /// Display name (untrusted).
    pub name: String,
}

/// One transcript entry. Its token count is computed once, when it is written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TranscriptEntry {
    /// What kind of entry.
    pub kind: EntryKind,
    /// The text.
    pub text: String,
    /// The platform message id, for entries that came from one.
    pub message_id: Option<String>,
    /// The sender, for user entries.
    pub sender: Option<EntrySender>,
    /// When it was written (or sent, for user entries), ms since the epoch.
    pub timestamp_ms: u64,
    /// Tokens of `text` as counted when the entry was written.
    pub tokens: u32,
}

/// One accepted message waiting in the durable inbox for its turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxRecord {
    /// The message as accepted.
    pub message: InboundMessage,
    /// When it was accepted, ms since the epoch.
    pub accepted_at_ms: u64,
}
