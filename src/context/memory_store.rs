//! [`MemoryStore`]: an in-memory [`ContextStore`] for tests, benches and embedders that keep
//! history elsewhere.

use std::collections::HashMap;
use std::sync::Arc;

use super::session::{ContextStore, StoredSession};
use crate::error::StoreError;
use crate::store::{walk_back, ChannelMessage, Scan, SharedEntry, ThreadStarter, TranscriptEntry};

/// Transcripts and chat messages held in memory.
#[derive(Debug, Default, Clone)]
pub struct MemoryStore {
    transcripts: HashMap<u64, Vec<(u64, TranscriptEntry)>>,
    channel: Vec<ChannelMessage>,
    starters: HashMap<String, ThreadStarter>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `entry` to session `session_id`; returns its sequence (from 1).
    pub fn push_entry(&mut self, session_id: u64, entry: TranscriptEntry) -> u64 {
        let t = self.transcripts.entry(session_id).or_default();
        let seq = t.last().map_or(1, |(s, _)| s + 1);
        t.push((seq, entry));
        seq
    }

    /// Remembers a chat message; one without a chat seq gets the next (so messages keep the
    /// order they were pushed in).
    pub fn push_channel_message(&mut self, mut message: ChannelMessage) {
        if message.seq == 0 {
            message.seq = self.channel.iter().map(|m| m.seq).max().unwrap_or(0) + 1;
        }
        self.channel.push(message);
    }

    /// Keeps `starter` as the thread starter of `session_key`.
    pub fn set_thread_starter(&mut self, session_key: &str, starter: ThreadStarter) {
        self.starters.insert(session_key.to_string(), starter);
    }

    /// The session `session_id` as assembly sees it, if it has entries.
    pub fn stored(&self, session_id: u64) -> Option<StoredSession> {
        let t = self.transcripts.get(&session_id)?;
        Some(StoredSession {
            id: session_id,
            entries: t.len() as u64,
            next_seq: t.last().map_or(1, |(s, _)| s + 1),
            compaction_count: 0,
        })
    }

    fn chat<'a>(
        &'a self,
        channel: &'a str,
        chat_id: &'a str,
    ) -> impl DoubleEndedIterator<Item = &'a ChannelMessage> {
        self.channel
            .iter()
            .filter(move |m| m.channel == channel && m.chat_id == chat_id)
    }

    fn sorted(mut v: Vec<ChannelMessage>, limit: usize) -> Vec<ChannelMessage> {
        v.sort_by(|a, b| (a.timestamp_ms, &a.message_id).cmp(&(b.timestamp_ms, &b.message_id)));
        v.truncate(limit);
        v
    }
}

impl ContextStore for MemoryStore {
    fn newest_entries(
        &self,
        session_id: u64,
        keep: &mut dyn FnMut(&TranscriptEntry) -> bool,
    ) -> Result<Vec<(u64, TranscriptEntry)>, StoreError> {
        let mut out = Vec::new();
        if let Some(t) = self.transcripts.get(&session_id) {
            for (seq, e) in t.iter().rev() {
                if !keep(e) {
                    break;
                }
                out.push((*seq, e.clone()));
            }
        }
        Ok(out)
    }

    fn channel_message(
        &self,
        channel: &str,
        chat_id: &str,
        message_id: &str,
    ) -> Result<Option<ChannelMessage>, StoreError> {
        Ok(self
            .chat(channel, chat_id)
            .rev()
            .find(|m| m.message_id == message_id)
            .cloned())
    }

    fn channel_replies(
        &self,
        channel: &str,
        chat_id: &str,
        parent: &str,
        limit: usize,
    ) -> Result<Vec<ChannelMessage>, StoreError> {
        let v = self
            .chat(channel, chat_id)
            .filter(|m| m.reply_to.as_deref() == Some(parent))
            .cloned()
            .collect();
        Ok(Self::sorted(v, limit))
    }

    fn channel_messages_between(
        &self,
        channel: &str,
        chat_id: &str,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> Result<Vec<ChannelMessage>, StoreError> {
        let v = self
            .chat(channel, chat_id)
            .filter(|m| (from_ms..=to_ms).contains(&m.timestamp_ms))
            .cloned()
            .collect();
        Ok(Self::sorted(v, limit))
    }

    fn oldest_entry(
        &self,
        stored: &StoredSession,
    ) -> Result<Option<(u64, Arc<SharedEntry>)>, StoreError> {
        Ok(self
            .transcripts
            .get(&stored.id)
            .and_then(|t| t.first())
            .map(|(seq, e)| (*seq, Arc::new(e.clone().into()))))
    }

    fn chat_back(
        &self,
        channel: &str,
        chat_id: &str,
        before: Option<u64>,
        step: &mut dyn FnMut(&ChannelMessage) -> Scan,
    ) -> Result<Vec<ChannelMessage>, StoreError> {
        let mut chat: Vec<&ChannelMessage> = self
            .chat(channel, chat_id)
            .filter(|m| before.is_none_or(|b| m.seq < b))
            .collect();
        chat.sort_by_key(|m| std::cmp::Reverse(m.seq));
        walk_back(
            chat.into_iter()
                .take(crate::store::MAX_CHAT_SCAN)
                .map(|m| Ok(m.clone())),
            step,
        )
    }

    fn session_chat(&self, _session_key: &str) -> Result<Option<(String, String)>, StoreError> {
        Ok(self
            .channel
            .first()
            .map(|m| (m.channel.clone(), m.chat_id.clone())))
    }

    fn thread_starter(&self, session_key: &str) -> Result<Option<ThreadStarter>, StoreError> {
        Ok(self.starters.get(session_key).cloned())
    }
}
