//! Pending group history (preflight step 6): group messages dropped for lack of a mention are
//! kept per chat and handed to the next message that addresses the bot there
//! (`InboxRecord::group_history`), so the model sees what was said since it last spoke.

use std::collections::VecDeque;
use std::sync::Arc;

use super::lru::LruMap;
use crate::inbound::InboundMessage;
use crate::store::HistoryLine;

/// Longest kept text of one history line, in characters (the model sees untrusted text capped
/// at `MAX_UNTRUSTED_CHARS` anyway). With the defaults (50 lines, 1,000 chats) the buffers
/// hold at most 50 M characters.
pub const MAX_HISTORY_LINE_CHARS: usize = 1_000;

/// The pending history key of `msg`: its chat (and thread), per bot account.
pub(super) fn history_key(msg: &InboundMessage) -> String {
    let thread = msg.thread_id.as_deref().map(str::trim).unwrap_or("");
    format!("{}|{thread}", super::mentions::chat_ref(msg))
}

/// Per-chat buffers of unaddressed messages: at most `limit` lines per chat (the oldest
/// dropped first) in at most `max_chats` chats (the least recently used forgotten first).
#[derive(Debug)]
pub(super) struct GroupHistory {
    chats: LruMap<Arc<str>, VecDeque<HistoryLine>>,
    limit: usize,
}

impl GroupHistory {
    pub(super) fn new(limit: usize, max_chats: usize) -> Self {
        Self {
            chats: LruMap::new(max_chats),
            limit,
        }
    }

    /// Keeps `msg` in its chat's buffer.
    pub(super) fn push(&mut self, key: &str, msg: &InboundMessage) {
        if self.limit == 0 {
            return;
        }
        let lines = self.chats.get_or_insert_with(Arc::from(key), VecDeque::new);
        if lines.len() >= self.limit {
            lines.pop_front();
        }
        lines.push_back(HistoryLine {
            message_id: msg.message_id.clone(),
            sender_id: msg.sender.id.clone(),
            sender_name: msg.sender.name.clone(),
            text: super::cap_chars(&msg.text, MAX_HISTORY_LINE_CHARS),
            timestamp_ms: msg.timestamp_ms,
        });
    }

    /// The buffer of chat `key`, oldest first (left in place).
    pub(super) fn peek(&self, key: &str) -> Vec<HistoryLine> {
        self.chats
            .peek(key)
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Clears the buffer of chat `key` (it went to a turn).
    pub(super) fn clear(&mut self, key: &str) {
        self.chats.remove(key);
    }

    /// Chats with a buffer.
    pub(super) fn chats(&self) -> usize {
        self.chats.len()
    }
}
