//! What is stored: session entries, transcript entries and durable-inbox entries.

use std::sync::Arc;

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

/// The tool side of a `tool_call` or `tool_result` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolInfo {
    /// The call id that pairs a call with its result.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// For a call: the arguments as JSON text; for a result: empty.
    pub arguments: String,
}

/// One transcript entry. Its token count is computed once, when it is written.
///
/// The sender and the tool side are boxed: every turn reads each history entry of its session
/// (kind, tokens, time, text, id) out of the transcript tail cache, and inline they made an
/// entry span four cache lines where two hold what a turn reads. Boxing does not change the
/// stored bytes (serde sees through a `Box`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TranscriptEntry {
    /// What kind of entry.
    pub kind: EntryKind,
    /// The text; shared, not copied, with the requests that show the entry (a turn's request
    /// carries its whole history window). Stored as a string.
    #[serde(with = "shared_str")]
    pub text: Arc<str>,
    /// The platform message id, for entries that came from one.
    pub message_id: Option<String>,
    /// The sender, for user entries.
    pub sender: Option<Box<EntrySender>>,
    /// When it was written (or sent, for user entries), ms since the epoch.
    pub timestamp_ms: u64,
    /// Tokens of `text` as counted when the entry was written.
    pub tokens: u32,
    /// Tool call or result details, for those kinds.
    pub tool: Option<Box<ToolInfo>>,
}

/// Entries are made by these constructors, one per kind, rather than by struct literals: a
/// kind's required parts are its arguments, and the optional ones (message id, sender) are
/// added with the `with_` methods.
impl TranscriptEntry {
    /// An entry of `kind` with `text` (counted as `tokens`), written at `timestamp_ms`, with
    /// no message id, sender or tool side.
    pub fn new(kind: EntryKind, text: impl Into<Arc<str>>, tokens: u32, timestamp_ms: u64) -> Self {
        Self {
            kind,
            text: text.into(),
            message_id: None,
            sender: None,
            timestamp_ms,
            tokens,
            tool: None,
        }
    }

    /// A user entry; its message id and sender are added with [`Self::with_message_id`] and
    /// [`Self::with_sender`].
    pub fn user(text: impl Into<Arc<str>>, tokens: u32, timestamp_ms: u64) -> Self {
        Self::new(EntryKind::User, text, tokens, timestamp_ms)
    }

    /// An answer of the model (or a notice standing for one).
    pub fn assistant(text: impl Into<Arc<str>>, tokens: u32, timestamp_ms: u64) -> Self {
        Self::new(EntryKind::Assistant, text, tokens, timestamp_ms)
    }

    /// A compaction summary of older entries.
    pub fn summary(text: impl Into<Arc<str>>, tokens: u32, timestamp_ms: u64) -> Self {
        Self::new(EntryKind::Summary, text, tokens, timestamp_ms)
    }

    /// A tool call the model made (`text`: what it said with the call; `tokens` counts the
    /// text, the name and the arguments).
    pub fn tool_call(
        text: impl Into<Arc<str>>,
        tokens: u32,
        timestamp_ms: u64,
        call: ToolInfo,
    ) -> Self {
        Self::new(EntryKind::ToolCall, text, tokens, timestamp_ms).with_tool(call)
    }

    /// The result of call `call_id` of tool `name` (empty when the result does not say).
    pub fn tool_result(
        text: impl Into<Arc<str>>,
        tokens: u32,
        timestamp_ms: u64,
        call_id: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Self::new(EntryKind::ToolResult, text, tokens, timestamp_ms).with_tool(ToolInfo {
            call_id: call_id.into(),
            name: name.into(),
            arguments: String::new(),
        })
    }

    /// With the platform message id it came from.
    pub fn with_message_id(mut self, message_id: impl Into<String>) -> Self {
        self.message_id = Some(message_id.into());
        self
    }

    /// With its sender.
    pub fn with_sender(mut self, id: impl Into<String>, name: impl Into<String>) -> Self {
        self.sender = Some(Box::new(EntrySender {
            id: id.into(),
            name: name.into(),
        }));
        self
    }

    /// With a tool side.
    pub fn with_tool(mut self, tool: ToolInfo) -> Self {
        self.tool = Some(Box::new(tool));
        self
    }
}

/// An `Arc<str>` field (de)serialised as the string it holds, as a `String` was: serde's own
/// impls need its `rc` feature, which would rebuild every crate that uses serde.
mod shared_str {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(text: &Arc<str>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(text)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<str>, D::Error> {
        String::deserialize(d).map(Arc::from)
    }
}

/// A platform event (join, rename, pin…) queued for the next turn of its session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemEvent {
    /// When it happened, ms since the epoch.
    pub timestamp_ms: u64,
    /// What happened (untrusted text).
    pub text: String,
}

/// A group message the bot was not addressed in, kept to show as context when it next is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryLine {
    /// The platform message id.
    pub message_id: String,
    /// Sender id.
    pub sender_id: String,
    /// Sender display name (untrusted).
    pub sender_name: String,
    /// The text (untrusted).
    pub text: String,
    /// When it was sent, ms since the epoch.
    pub timestamp_ms: u64,
}

/// One accepted message waiting in the durable inbox for its turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxRecord {
    /// The message as accepted.
    pub message: InboundMessage,
    /// When it was accepted, ms since the epoch.
    pub accepted_at_ms: u64,
    /// System events queued for this session since its last turn, oldest first.
    pub system_events: Vec<SystemEvent>,
    /// Pending group history of the chat (messages since the bot was last addressed), oldest
    /// first; shown to the model as untrusted context.
    pub group_history: Vec<HistoryLine>,
}

#[cfg(test)]
impl InboxRecord {
    /// A test fixture: a direct-chat message `id` with `text` from user `u` in chat `c` on
    /// channel `test`, accepted at 1 ms, with nothing attached.
    pub(crate) fn direct_for_test(id: &str, text: &str) -> Self {
        use crate::inbound::{ChatKind, MessageKind, Sender};
        InboxRecord {
            message: InboundMessage {
                channel: "test".into(),
                account_id: "default".into(),
                chat_kind: ChatKind::Direct,
                chat_id: "c".into(),
                thread_id: None,
                message_id: id.into(),
                sender: Sender {
                    id: "u".into(),
                    name: String::new(),
                    is_bot: false,
                },
                text: text.into(),
                mentions: vec![],
                mentioned_bot: false,
                reply_to: None,
                timestamp_ms: 1,
                attachments: vec![],
                kind: MessageKind::Message,
            },
            accepted_at_ms: 1,
            system_events: vec![],
            group_history: vec![],
        }
    }
}

/// A chat message as the `channel_messages` tree keeps it — the chat's durable record: every
/// accepted message (addressed to the bot or not), written at admission, once. Pending group
/// history, past chatter, reply threads and recall are all read from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelMessage {
    /// The platform (`telegram`…).
    pub channel: String,
    /// The chat's platform id.
    pub chat_id: String,
    /// The message's platform id.
    pub message_id: String,
    /// Sender id.
    pub sender_id: String,
    /// Sender display name (untrusted).
    pub sender_name: String,
    /// The text (untrusted), cut to [`crate::inbound::MAX_UNTRUSTED_CHARS`] characters.
    pub text: String,
    /// When it was sent, ms since the epoch.
    pub timestamp_ms: u64,
    /// The message it replies to.
    pub reply_to: Option<String>,
    /// The thread (topic) inside the chat.
    pub thread_id: Option<String>,
    /// The chat's admission order (0: stored before the order was kept).
    pub seq: u64,
    /// Whether it addressed the bot (became a turn); unaddressed messages are chatter.
    pub addressed: bool,
}

impl ChannelMessage {
    /// The chat record of an inbound message.
    pub fn of(m: &InboundMessage, addressed: bool) -> Self {
        Self {
            channel: m.channel.clone(),
            chat_id: m.chat_id.clone(),
            message_id: m.message_id.clone(),
            sender_id: m.sender.id.clone(),
            sender_name: m.sender.name.clone(),
            text: m.text.clone(),
            timestamp_ms: m.timestamp_ms,
            reply_to: m.reply_to.clone(),
            thread_id: m.thread_id.clone(),
            seq: 0,
            addressed,
        }
    }

    /// As a pending-history line.
    pub fn history_line(&self) -> HistoryLine {
        HistoryLine {
            message_id: self.message_id.clone(),
            sender_id: self.sender_id.clone(),
            sender_name: self.sender_name.clone(),
            text: self.text.clone(),
            timestamp_ms: self.timestamp_ms,
        }
    }
}

/// [`ChannelMessage`] as stored before the chat kept every message (schema v2): read back as
/// an addressed message with no thread and no chat order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ChannelMessageV2 {
    pub channel: String,
    pub chat_id: String,
    pub message_id: String,
    pub sender_id: String,
    pub sender_name: String,
    pub text: String,
    pub timestamp_ms: u64,
    pub reply_to: Option<String>,
}

impl From<ChannelMessageV2> for ChannelMessage {
    fn from(m: ChannelMessageV2) -> Self {
        Self {
            channel: m.channel,
            chat_id: m.chat_id,
            message_id: m.message_id,
            sender_id: m.sender_id,
            sender_name: m.sender_name,
            text: m.text,
            timestamp_ms: m.timestamp_ms,
            reply_to: m.reply_to,
            thread_id: None,
            seq: 0,
            addressed: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_and_its_arc_counts_fit_two_cache_lines() {
        // Turns read every history entry of their session; see `TranscriptEntry`.
        assert!(2 * std::mem::size_of::<usize>() + std::mem::size_of::<TranscriptEntry>() <= 128);
    }

    #[test]
    fn boxed_parts_are_stored_as_before() {
        #[derive(Serialize)]
        struct Inline {
            kind: EntryKind,
            text: String,
            message_id: Option<String>,
            sender: Option<EntrySender>,
            timestamp_ms: u64,
            tokens: u32,
            tool: Option<ToolInfo>,
        }
        let sender = EntrySender {
            id: "u1".into(),
            name: "Ann".into(),
        };
        let tool = ToolInfo {
            call_id: "c1".into(),
            name: "weather".into(),
            arguments: "{}".into(),
        };
        let boxed = TranscriptEntry::tool_call("t", 3, 7, tool.clone())
            .with_message_id("m1")
            .with_sender(sender.id.clone(), sender.name.clone());
        let inline = Inline {
            kind: EntryKind::ToolCall,
            text: "t".into(),
            message_id: Some("m1".into()),
            sender: Some(sender),
            timestamp_ms: 7,
            tokens: 3,
            tool: Some(tool),
        };
        let config = bincode::config::standard();
        let a = bincode::serde::encode_to_vec(&boxed, config).expect("encodes");
        let b = bincode::serde::encode_to_vec(&inline, config).expect("encodes");
        assert_eq!(a, b);
        let (back, _): (TranscriptEntry, usize) =
            bincode::serde::decode_from_slice(&b, config).expect("decodes");
        assert_eq!(back, boxed);
    }
}
