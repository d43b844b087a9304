//! What sources and processors see of a session: [`SessionView`] — the turn's messages, the
//! pruning policy, the clock, and bounded, lazy access to stored history through
//! [`ContextStore`].

use std::cell::{OnceCell, RefCell};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::error::ContextError;
use super::presets::ChatPolicy;
use crate::error::StoreError;
use crate::inbound::ChatKind;
use crate::model::{TokenCounter, MESSAGE_OVERHEAD_TOKENS};
use crate::store::{
    ChannelMessage, EntryKind, InboxRecord, Scan, SharedEntry, Store, ThreadStarter,
    TranscriptEntry,
};

/// Most chatter lines shown with one past user turn (the pending history it carried), like the
/// `group_history` source's default for the current turn.
pub(crate) const MAX_CHATTER_LINES: usize = 50;

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

    /// [`ContextStore::newest_entries`] of the session `session_key` as `stored` describes it.
    /// [`Store`] serves it from its transcript tail cache when it can.
    fn window_entries(
        &self,
        _session_key: &str,
        stored: &StoredSession,
        keep: &mut dyn FnMut(&TranscriptEntry) -> bool,
    ) -> Result<Vec<(u64, Arc<SharedEntry>)>, StoreError> {
        Ok(self
            .newest_entries(stored.id, keep)?
            .into_iter()
            .map(|(seq, e)| (seq, Arc::new(e.into())))
            .collect())
    }

    /// The oldest entry of the session: where a compaction summary sits.
    fn oldest_entry(
        &self,
        stored: &StoredSession,
    ) -> Result<Option<(u64, Arc<SharedEntry>)>, StoreError>;

    /// A chat's messages newest first from just before chat seq `before` (`None`: the newest),
    /// as `step` says (see [`Store::scan_chat_back`]); the kept ones oldest first.
    fn chat_back(
        &self,
        channel: &str,
        chat_id: &str,
        before: Option<u64>,
        step: &mut dyn FnMut(&ChannelMessage) -> Scan,
    ) -> Result<Vec<ChannelMessage>, StoreError>;

    /// The chat (channel, chat id) `session_key`'s messages were stored under, if any.
    fn session_chat(&self, session_key: &str) -> Result<Option<(String, String)>, StoreError>;

    /// The request-level system instructions of `session_key` (the system messages of its
    /// newest OpenAI-compatible request), if any. Stores without them have none.
    fn session_instructions(&self, _session_key: &str) -> Result<Option<String>, StoreError> {
        Ok(None)
    }

    /// The message the thread session `session_key` started from, if its channel kept one.
    /// Stores without them have none.
    fn thread_starter(&self, _session_key: &str) -> Result<Option<ThreadStarter>, StoreError> {
        Ok(None)
    }
}

/// The recorded chat message of user entry `entry` and the chatter that turn carried (the
/// unaddressed messages of its thread just before it), if the entry came from the chat's
/// record. Messages stored before chat order was kept carry no chatter.
pub(crate) fn chatter_of(
    store: &dyn ContextStore,
    channel: &str,
    chat_id: &str,
    entry: &TranscriptEntry,
) -> Result<Option<(ChannelMessage, Vec<ChannelMessage>)>, StoreError> {
    let (EntryKind::User, Some(id)) = (entry.kind, entry.message_id.as_deref()) else {
        return Ok(None);
    };
    let Some(m) = store.channel_message(channel, chat_id, id)? else {
        return Ok(None);
    };
    if m.seq == 0 {
        return Ok(Some((m, Vec::new())));
    }
    let lines = chatter_before(
        store,
        channel,
        chat_id,
        m.thread_id.as_deref(),
        Some(m.seq),
        MAX_CHATTER_LINES,
    )?;
    Ok(Some((m, lines)))
}

/// The unaddressed messages of `thread` just before chat seq `before`, back to the previous
/// message that addressed the bot, at most `limit`, oldest first.
pub(crate) fn chatter_before(
    store: &dyn ContextStore,
    channel: &str,
    chat_id: &str,
    thread: Option<&str>,
    before: Option<u64>,
    limit: usize,
) -> Result<Vec<ChannelMessage>, StoreError> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let mut taken = 0usize;
    store.chat_back(channel, chat_id, before, &mut |m| {
        if m.thread_id.as_deref() != thread {
            Scan::Skip
        } else if m.addressed {
            Scan::Stop
        } else {
            taken += 1;
            if taken >= limit {
                Scan::TakeAndStop
            } else {
                Scan::Take
            }
        }
    })
}

impl ContextStore for Store {
    fn newest_entries(
        &self,
        session_id: u64,
        keep: &mut dyn FnMut(&TranscriptEntry) -> bool,
    ) -> Result<Vec<(u64, TranscriptEntry)>, StoreError> {
        Store::newest_entries(self, session_id, keep)
    }

    fn window_entries(
        &self,
        session_key: &str,
        stored: &StoredSession,
        keep: &mut dyn FnMut(&TranscriptEntry) -> bool,
    ) -> Result<Vec<(u64, Arc<SharedEntry>)>, StoreError> {
        Store::window_entries(self, session_key, stored.stamp(), keep)
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

    fn oldest_entry(
        &self,
        stored: &StoredSession,
    ) -> Result<Option<(u64, Arc<SharedEntry>)>, StoreError> {
        Store::oldest_entry_at(self, stored.stamp())
    }

    fn chat_back(
        &self,
        channel: &str,
        chat_id: &str,
        before: Option<u64>,
        step: &mut dyn FnMut(&ChannelMessage) -> Scan,
    ) -> Result<Vec<ChannelMessage>, StoreError> {
        Store::scan_chat_back(self, channel, chat_id, before, step)
    }

    fn session_chat(&self, session_key: &str) -> Result<Option<(String, String)>, StoreError> {
        Store::session_chat(self, session_key)
    }

    fn session_instructions(&self, session_key: &str) -> Result<Option<String>, StoreError> {
        Store::session_instructions(self, session_key)
    }

    fn thread_starter(&self, session_key: &str) -> Result<Option<ThreadStarter>, StoreError> {
        Store::thread_starter(self, session_key)
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
    /// The sequence the next entry gets; changes whenever the transcript grows.
    pub next_seq: u64,
    /// Compactions so far; changes whenever a compaction rewrites the transcript.
    pub compaction_count: u32,
}

impl StoredSession {
    /// The store's tail-cache stamp of this state of the session.
    fn stamp(&self) -> crate::store::TailStamp {
        crate::store::TailStamp {
            id: self.id,
            next_seq: self.next_seq,
            entries: self.entries,
            compaction_count: self.compaction_count,
        }
    }
}

/// The newest part of the transcript, read once per assembly and only as far as the policy
/// and the budget can use.
#[derive(Debug, Clone, Default)]
pub struct TranscriptWindow {
    /// Conversation entries, newest first (shared with the store's tail cache).
    pub entries: Vec<(u64, Arc<SharedEntry>)>,
    /// The compaction summary, if the session has one: reading stops there (everything older
    /// is summarised in it), and when the window ends before reaching it, it is read on its
    /// own (it is always the oldest entry), so it is in every context.
    pub summary: Option<(u64, Arc<SharedEntry>)>,
}

/// A group or channel chat: where its messages are recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRef {
    /// The platform.
    pub channel: String,
    /// The chat's platform id.
    pub chat_id: String,
    /// The thread (topic) the session follows.
    pub thread_id: Option<String>,
}

/// What the context shows of a group session's chat record, worked out once per assembly:
/// the chatter each past user turn carried, and every message shown (so recall adds only
/// others: a chat message appears at most once in any context).
#[derive(Debug, Clone, Default)]
pub struct ChatWindow {
    /// The chat, for group and channel sessions whose messages are recorded.
    pub chat: Option<ChatRef>,
    /// The chatter before each user entry of the transcript window (by transcript seq), oldest
    /// first.
    pub chatter: HashMap<u64, Vec<ChannelMessage>>,
    /// Message ids the context shows: the window's user entries and their chatter, the
    /// current messages and their pending history.
    pub shown: HashSet<String>,
    /// The oldest chat seq among the shown messages: recall looks only before it.
    pub oldest_shown_seq: Option<u64>,
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
    chat: OnceCell<Arc<ChatWindow>>,
    /// Chat message ids a source has shown beyond the [`ChatWindow`] (the reply thread), so a
    /// later source does not show them again.
    claimed: RefCell<HashSet<String>>,
    /// The agent whose chat records are read (`None`: the default agent's).
    chat_scope: Option<&'a str>,
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
            chat: OnceCell::new(),
            claimed: RefCell::new(HashSet::new()),
            chat_scope: None,
        }
    }

    /// The view reading the chat records of agent `scope` (`None`: the default agent's).
    pub fn with_chat_scope(mut self, scope: Option<&'a str>) -> Self {
        self.chat_scope = scope;
        self
    }

    /// The channel under which the chat record of a message of `channel` is kept for this
    /// session's agent (see [`crate::inbound::chat_record_channel`]).
    pub fn chat_channel<'c>(&self, channel: &'c str) -> std::borrow::Cow<'c, str> {
        crate::inbound::chat_record_channel(channel, self.chat_scope)
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
        let mut read = self.store.window_entries(self.key, &stored, &mut |e| {
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
        let mut summary = match read.last() {
            Some((_, e)) if e.kind == EntryKind::Summary => read.pop(),
            _ => None,
        };
        if summary.is_none() && stop {
            // The window ended before the summary: it is the oldest entry, one read away.
            let oldest_read = read.last().map_or(u64::MAX, |(seq, _)| *seq);
            summary = self
                .store
                .oldest_entry(&stored)?
                .filter(|(seq, e)| e.kind == EntryKind::Summary && *seq < oldest_read);
        }
        Ok(TranscriptWindow {
            entries: read,
            summary,
        })
    }

    /// Records that a source showed chat message `message_id`.
    pub fn claim(&self, message_id: &str) {
        self.claimed.borrow_mut().insert(message_id.to_string());
    }

    /// Whether chat message `message_id` is shown already: in the [`ChatWindow`] or claimed by
    /// a source.
    pub fn is_shown(&self, message_id: &str) -> Result<bool, ContextError> {
        Ok(self.chat()?.shown.contains(message_id) || self.claimed.borrow().contains(message_id))
    }

    /// The chat record's part in this context (see [`ChatWindow`]), worked out on first use.
    pub fn chat(&self) -> Result<Arc<ChatWindow>, ContextError> {
        if let Some(c) = self.chat.get() {
            return Ok(Arc::clone(c));
        }
        let chat = Arc::new(self.read_chat()?);
        Ok(Arc::clone(self.chat.get_or_init(|| chat)))
    }

    fn read_chat(&self) -> Result<ChatWindow, ContextError> {
        let mut out = ChatWindow::default();
        for c in self.current {
            out.shown.insert(c.record.message.message_id.clone());
            for line in &c.record.group_history {
                out.shown.insert(line.message_id.clone());
            }
        }
        if self.chat_kind == ChatKind::Direct {
            return Ok(out);
        }
        let window = self.transcript()?;
        let anchor = window.entries.iter().find_map(|(_, e)| {
            e.message_id
                .as_deref()
                .filter(|_| e.kind == EntryKind::User)
        });
        let chat = match self.current.first() {
            Some(c) => {
                let m = &c.record.message;
                Some(ChatRef {
                    channel: self.chat_channel(&m.channel).into_owned(),
                    chat_id: m.chat_id.clone(),
                    thread_id: m.thread_id.clone(),
                })
            }
            None => match self.store.session_chat(self.key)? {
                Some((channel, chat_id)) => {
                    let thread_id = match anchor {
                        Some(id) => self
                            .store
                            .channel_message(&channel, &chat_id, id)?
                            .and_then(|m| m.thread_id),
                        None => None,
                    };
                    Some(ChatRef {
                        channel,
                        chat_id,
                        thread_id,
                    })
                }
                None => None,
            },
        };
        let Some(chat) = chat else {
            return Ok(out);
        };
        let mut oldest: Option<u64> = None;
        for (seq, e) in &window.entries {
            let Some((m, lines)) = chatter_of(self.store, &chat.channel, &chat.chat_id, e)? else {
                continue;
            };
            // The oldest shown: its first chatter line, else the entry's own message.
            let first = lines.first().map_or(m.seq, |l| l.seq);
            if first > 0 {
                oldest = Some(oldest.map_or(first, |o| o.min(first)));
            }
            out.shown.insert(m.message_id);
            for l in &lines {
                out.shown.insert(l.message_id.clone());
            }
            if !lines.is_empty() {
                out.chatter.insert(*seq, lines);
            }
        }
        // The current messages and their pending history bound it too: on a session's first
        // turn the window is empty, and a message admitted while this turn waited (newer than
        // the one answered) is not "earlier in this chat".
        for c in self.current {
            let first = c
                .record
                .group_history
                .first()
                .map_or(&c.record.message.message_id, |l| &l.message_id);
            if let Some(m) = self
                .store
                .channel_message(&chat.channel, &chat.chat_id, first)?
                .filter(|m| m.seq > 0)
            {
                oldest = Some(oldest.map_or(m.seq, |o| o.min(m.seq)));
            }
        }
        out.oldest_shown_seq = oldest;
        out.chat = Some(chat);
        Ok(out)
    }
}

/// The chat kind a session key names (`agent:<a>:<channel>:group:<id>`…); direct otherwise.
pub(crate) fn chat_kind_of_key(key: &str) -> ChatKind {
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
