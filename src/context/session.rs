//! What sources and processors see of a session: [`SessionView`] — the turn's messages, the
//! pruning policy, the clock, and bounded, lazy access to stored history through
//! [`ContextStore`].

use std::cell::OnceCell;
use std::sync::Arc;

use super::error::ContextError;
use super::presets::ChatPolicy;
use crate::error::StoreError;
use crate::inbound::ChatKind;
use crate::model::{TokenCounter, MESSAGE_OVERHEAD_TOKENS};
use crate::store::{ChannelMessage, EntryKind, InboxRecord, Store, TranscriptEntry};

/// Read access to what assembly needs from storage. [`Store`] implements it; tests and benches
/// use [`super::MemoryStore`].
pub trait ContextStore: Send + Sync {
    /// The newest entries of session `session_id`, newest first, while `keep(entry)` says to
    /// continue.
    fn newest_entries(
        &self,
        session_id: u64,
        keep: &mut dyn FnMut(&TranscriptEntry) -> bool,
    ) -> Result<Vec<(u64, TranscriptEntry)>, StoreError>;

    /// The stored chat message `message_id`.
    fn channel_message(
        &self,
        channel: &str,
        chat_id: &str,
        message_id: &str,
    ) -> Result<Option<ChannelMessage>, StoreError>;

    /// Stored messages replying to `parent`, oldest first, at most `limit`.
    fn channel_replies(
        &self,
        channel: &str,
        chat_id: &str,
        parent: &str,
        limit: usize,
    ) -> Result<Vec<ChannelMessage>, StoreError>;

    /// Stored messages of a chat sent in `[from_ms, to_ms]`, oldest first, at most `limit`.
    fn channel_messages_between(
        &self,
        channel: &str,
        chat_id: &str,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> Result<Vec<ChannelMessage>, StoreError>;
}

impl ContextStore for Store {
    fn newest_entries(
        &self,
        session_id: u64,
        keep: &mut dyn FnMut(&TranscriptEntry) -> bool,
    ) -> Result<Vec<(u64, TranscriptEntry)>, StoreError> {
        Store::newest_entries(self, session_id, keep)
    }

    fn channel_message(
        &self,
        channel: &str,
        chat_id: &str,
        message_id: &str,
    ) -> Result<Option<ChannelMessage>, StoreError> {
        Store::channel_message(self, channel, chat_id, message_id)
    }

    fn channel_replies(
        &self,
        channel: &str,
        chat_id: &str,
        parent: &str,
        limit: usize,
    ) -> Result<Vec<ChannelMessage>, StoreError> {
        Store::channel_replies(self, channel, chat_id, parent, limit)
    }

    fn channel_messages_between(
        &self,
        channel: &str,
        chat_id: &str,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> Result<Vec<ChannelMessage>, StoreError> {
        Store::channel_messages_between(self, channel, chat_id, from_ms, to_ms, limit)
    }
}

/// One message this turn answers, with its token count (counted once, when its transcript
/// entry was made).
#[derive(Debug, Clone)]
pub struct CurrentMessage {
    /// The inbox sequence it was queued under.
    pub inbox_seq: u64,
    /// The inbox record: the message, its system events and pending group history.
    pub record: Arc<InboxRecord>,
    /// Tokens of the message text.
    pub tokens: u32,
}

/// How the turn's messages were queued: OpenClaw's `collect` mode answers messages that
/// arrived while the agent was busy together, under one header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueInfo {
    /// The current messages queued during an earlier turn and are answered together.
    pub coalesced: bool,
    /// One line per earlier queued message the queue cap dropped (`drop = "summarize"`).
    pub dropped: Vec<String>,
}

/// The stored session, as far as assembly needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredSession {
    /// The session's numeric id (prefix of its transcript keys).
    pub id: u64,
    /// Transcript entries stored.
    pub entries: u64,
    /// The sequence the next entry gets; changes whenever the transcript does.
    pub next_seq: u64,
}

/// The newest part of the transcript, read once per assembly and only as far as the policy
/// and the budget can use.
#[derive(Debug, Clone, Default)]
pub struct TranscriptWindow {
    /// Conversation entries, newest first.
    pub entries: Vec<(u64, TranscriptEntry)>,
    /// The newest compaction summary, if reading reached it (reading stops there: everything
    /// older is summarised in it).
    pub summary: Option<(u64, TranscriptEntry)>,
}

impl TranscriptWindow {
    /// Entries read, the summary included.
    pub fn read(&self) -> u64 {
        self.entries.len() as u64 + u64::from(self.summary.is_some())
    }
}

/// What sources and processors see of the session being assembled.
pub struct SessionView<'a> {
    /// The session key.
    pub key: &'a str,
    /// The kind of chat (from the current message, else from the session key).
    pub chat_kind: ChatKind,
    /// The pruning policy of that chat kind.
    pub policy: &'a ChatPolicy,
    /// Assembly time, ms since the epoch.
    pub now_ms: u64,
    /// The messages this turn answers, oldest first (empty for a dump).
    pub current: &'a [CurrentMessage],
    /// The stored session, if it exists yet.
    pub stored: Option<StoredSession>,
    /// How the current messages were queued.
    pub queue: QueueInfo,
    /// Counts tokens of text a source makes up (stored entries carry their counts).
    pub tokens: TokenCounter,
    /// The whole budget of the turn (the window is read at most this far).
    pub budget_total: u32,
    store: &'a dyn ContextStore,
    window: OnceCell<Arc<TranscriptWindow>>,
}

impl<'a> SessionView<'a> {
    /// A view of session `key`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        key: &'a str,
        chat_kind: ChatKind,
        policy: &'a ChatPolicy,
        now_ms: u64,
        current: &'a [CurrentMessage],
        stored: Option<StoredSession>,
        tokens: TokenCounter,
        budget_total: u32,
        store: &'a dyn ContextStore,
    ) -> Self {
        Self {
            key,
            chat_kind,
            policy,
            now_ms,
            current,
            stored,
            queue: QueueInfo::default(),
            tokens,
            budget_total,
            store,
            window: OnceCell::new(),
        }
    }

    /// The view with `queue` describing how the current messages were queued.
    pub fn with_queue(mut self, queue: QueueInfo) -> Self {
        self.queue = queue;
        self
    }

    /// The storage behind the session (for reply threads and embedders' sources).
    pub fn store(&self) -> &'a dyn ContextStore {
        self.store
    }

    /// The newest transcript entries, read on first use and shared by every source. Reading
    /// stops at the newest summary, after `max_messages + 1` entries, after the first entry
    /// past the TTL horizon, or once the entries exceed the whole budget — each limit lets
    /// one entry past it be read so the dump can say why it was dropped. A tool result counts
    /// at most as much as its cleared placeholder (history shrinks results that do not fit).
    pub fn transcript(&self) -> Result<Arc<TranscriptWindow>, ContextError> {
        if let Some(w) = self.window.get() {
            return Ok(Arc::clone(w));
        }
        let window = Arc::new(self.read_window()?);
        Ok(Arc::clone(self.window.get_or_init(|| window)))
    }

    fn read_window(&self) -> Result<TranscriptWindow, ContextError> {
        let Some(stored) = self.stored else {
            return Ok(TranscriptWindow::default());
        };
        let max_messages = self.policy.max_messages;
        let horizon = self.policy.ttl_horizon_ms();
        let now = self.now_ms;
        let total = u64::from(self.budget_total);
        let mut count = 0usize;
        let mut tokens = 0u64;
        let cleared = u64::from(
            self.tokens
                .count_recurring(crate::context::processors::CLEARED_TOOL_RESULT)
                + MESSAGE_OVERHEAD_TOKENS,
        );
        let mut stop = false;
        let mut read = self.store.newest_entries(stored.id, &mut |e| {
            if stop {
                return false;
            }
            if e.kind == EntryKind::Summary {
                stop = true;
                return true;
            }
            count += 1;
            let cost = u64::from(e.tokens) + u64::from(MESSAGE_OVERHEAD_TOKENS);
            tokens += if e.kind == EntryKind::ToolResult {
                cost.min(cleared)
            } else {
                cost
            };
            let too_old = horizon.is_some_and(|h| now.saturating_sub(e.timestamp_ms) > h);
            if count > max_messages || tokens > total || too_old {
                stop = true;
            }
            true
        })?;
        let summary = match read.last() {
            Some((_, e)) if e.kind == EntryKind::Summary => read.pop(),
            _ => None,
        };
        Ok(TranscriptWindow {
            entries: read,
            summary,
        })
    }
}

/// The chat kind a session key names (`agent:<a>:<channel>:group:<id>`…); direct otherwise.
pub fn chat_kind_of_key(key: &str) -> ChatKind {
    for segment in key.split(':').skip(2).take(3) {
        match segment {
            "direct" => return ChatKind::Direct,
            "group" => return ChatKind::Group,
            "channel" => return ChatKind::Channel,
            _ => {}
        }
    }
    ChatKind::Direct
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_kind_from_keys() {
        assert_eq!(chat_kind_of_key("agent:main:main"), ChatKind::Direct);
        assert_eq!(
            chat_kind_of_key("agent:main:telegram:group:-100123"),
            ChatKind::Group
        );
        assert_eq!(
            chat_kind_of_key("agent:main:slack:channel:c1:thread:9"),
            ChatKind::Channel
        );
        assert_eq!(
            chat_kind_of_key("agent:main:telegram:acct:direct:group"),
            ChatKind::Direct
        );
        assert_eq!(
            chat_kind_of_key("agent:main:direct:group"),
            ChatKind::Direct
        );
        assert_eq!(chat_kind_of_key("global"), ChatKind::Direct);
    }
}
