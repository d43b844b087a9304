//! The `channel_messages` tree: each chat's durable record — every accepted message, addressed
//! to the bot or not, stored once at admission.
//!
//! Four key families under one chat prefix (`channel NUL chat_id NUL`), so every lookup is a
//! point read or a short range scan:
//! - `m` + message id → [`ChannelMessage`] (by id),
//! - `s` + chat seq → message id (the chat's admission order: pending history, past chatter,
//!   recall),
//! - `t` + timestamp + message id → empty (by time: neighbours of a message),
//! - `r` + parent id + NUL + timestamp + child id → empty (direct replies of a message).
//!
//! A message stored twice leaves a stale index key; reads resolve every index key through the
//! `m` record (an order key whose seq is not the record's is skipped) and de-duplicate, so it
//! does no harm.

use super::records::ChannelMessageV2;
use super::{decode, encode, keys, ChannelMessage, Store, StoreError};
use crate::inbound::MAX_UNTRUSTED_CHARS;

/// Most order-index keys one backwards scan of a chat visits (pending history, chatter of a
/// past turn, recall candidates): a scan past other threads' messages stops here.
pub(crate) const MAX_CHAT_SCAN: usize = 4_096;

/// How a backwards scan of a chat goes on after a message.
pub enum Scan {
    /// Keep it and go on.
    Take,
    /// Pass over it and go on.
    Skip,
    /// Stop before it.
    Stop,
    /// Keep it and stop.
    TakeAndStop,
}

/// Runs a backwards scan over `newest_first` messages as `step` says; the kept ones, oldest
/// first.
pub(crate) fn walk_back(
    newest_first: impl Iterator<Item = Result<ChannelMessage, StoreError>>,
    mut step: impl FnMut(&ChannelMessage) -> Scan,
) -> Result<Vec<ChannelMessage>, StoreError> {
    let mut out = Vec::new();
    for m in newest_first {
        let m = m?;
        match step(&m) {
            Scan::Take => out.push(m),
            Scan::Skip => {}
            Scan::Stop => break,
            Scan::TakeAndStop => {
                out.push(m);
                break;
            }
        }
    }
    out.reverse();
    Ok(out)
}

/// Decodes a stored chat message, written by this version or before chat order was kept.
pub(super) fn decode_message(bytes: &[u8]) -> Result<ChannelMessage, StoreError> {
    decode::<ChannelMessage>("channel_messages", bytes).or_else(|e| {
        decode::<ChannelMessageV2>("channel_messages", bytes)
            .map(ChannelMessage::from)
            .map_err(|_| e)
    })
}

/// Key/value pairs to insert.
pub(super) type Writes = Vec<(Vec<u8>, Vec<u8>)>;

/// Leads the keys of the per-session index (chat keys start with a channel name, never 0xFF):
/// `0xFF` + session key + NUL + message key → the keys written for that message, so evicting
/// or deleting a session removes the chat messages its turns stored.
const SESSION_INDEX: u8 = 0xFF;

/// Index entries removed per batch when a session's chat messages are deleted.
const DELETE_BATCH: usize = 512;

fn session_prefix(session_key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(session_key.len() + 2);
    k.push(SESSION_INDEX);
    k.extend_from_slice(session_key.as_bytes());
    k.push(0);
    k
}

/// Encodes the key/value writes that store `messages` for `session_key` (texts cut to
/// [`MAX_UNTRUSTED_CHARS`] characters: the model never sees more of them).
pub(super) fn writes(session_key: &str, messages: &[ChannelMessage]) -> Result<Writes, StoreError> {
    let mut out = Vec::with_capacity(messages.len() * 4);
    for m in messages {
        let first = out.len();
        if m.message_id.contains('\0') {
            continue;
        }
        let mut m = m.clone();
        if let Some((cut, _)) = m.text.char_indices().nth(MAX_UNTRUSTED_CHARS) {
            m.text.truncate(cut);
        }
        let (channel, chat, id, ts) = (&m.channel, &m.chat_id, &m.message_id, m.timestamp_ms);
        out.push((keys::channel_time_key(channel, chat, ts, id), Vec::new()));
        if let Some(parent) = m.reply_to.as_deref().filter(|p| !p.contains('\0')) {
            out.push((
                keys::channel_reply_key(channel, chat, parent, ts, id),
                Vec::new(),
            ));
        }
        if m.seq > 0 {
            out.push((
                keys::channel_seq_key(channel, chat, m.seq),
                id.as_bytes().to_vec(),
            ));
        }
        let message_key = keys::channel_message_key(channel, chat, id);
        out.push((message_key.clone(), encode(&m)?));
        let written: Vec<Vec<u8>> = out[first..].iter().map(|(k, _)| k.clone()).collect();
        let mut index_key = session_prefix(session_key);
        index_key.extend_from_slice(&message_key);
        out.push((index_key, encode(&written)?));
    }
    Ok(out)
}

impl Store {
    /// Stores `message` in its chat's record for `session_key`, giving it the next chat seq.
    /// Plain inserts, not a batch (sled 0.34 writes its log out synchronously around every
    /// atomic batch, which would cost every admission a disk write), in an order a crash can
    /// cut anywhere: the per-session index first (so whatever follows is deleted with the
    /// session), then the order and time keys (skipped until their record exists), the record
    /// last. Durable with the next group-commit flush. Returns the message as stored.
    pub fn record_chat_message(
        &self,
        session_key: &str,
        mut message: ChannelMessage,
    ) -> Result<ChannelMessage, StoreError> {
        self.check_writable()?;
        let _write = self.write_gate();
        let inner = self.inner();
        message.seq = inner
            .next_id()
            .map_err(|e| self.write_failed(e))?
            .saturating_add(1);
        let mut writes = writes(session_key, std::slice::from_ref(&message))?;
        // `writes` puts the index entry last and the record just before it.
        writes.rotate_right(1);
        let mut written = 0u64;
        for (k, v) in writes {
            written += (k.len() + v.len()) as u64;
            inner
                .channel_messages
                .insert(k, v)
                .map_err(|e| self.write_failed(StoreError::sled("recording a chat message")(e)))?;
        }
        self.shared.meter.add(written);
        Ok(message)
    }

    /// Walks a chat's messages newest first, from just before chat seq `before` (`None`: the
    /// newest), asking `step` about each; at most [`MAX_CHAT_SCAN`] order keys are visited.
    /// Returns the kept messages, oldest first.
    pub fn scan_chat_back(
        &self,
        channel: &str,
        chat_id: &str,
        before: Option<u64>,
        step: impl FnMut(&ChannelMessage) -> Scan,
    ) -> Result<Vec<ChannelMessage>, StoreError> {
        let prefix = keys::channel_seq_prefix(channel, chat_id);
        let end = match before {
            Some(seq) => keys::channel_seq_key(channel, chat_id, seq),
            None => {
                let mut k = prefix.clone();
                k.extend_from_slice(&[0xFF; 9]);
                k
            }
        };
        let inner = self.inner();
        let prefix_len = keys::chat_prefix(channel, chat_id).len();
        let messages = inner
            .channel_messages
            .range(prefix.clone()..end)
            .rev()
            .take(MAX_CHAT_SCAN)
            .filter_map(|kv| {
                let (k, id) = match kv {
                    Ok(kv) => kv,
                    Err(e) => return Some(Err(StoreError::sled("reading a chat")(e))),
                };
                let seq = keys::channel_seq_of(&k, prefix_len)?;
                let id = std::str::from_utf8(&id).ok()?;
                // An order key whose seq is not the record's is stale (the message was
                // stored again).
                self.channel_message(channel, chat_id, id)
                    .transpose()
                    .filter(|m| m.as_ref().map_or(true, |m| m.seq == seq))
            });
        walk_back(messages, step)
    }

    /// The chat (channel, chat id) whose messages `session_key`'s record holds, if it stored
    /// any: what a dump or a compaction of a group session reads chatter from.
    pub fn session_chat(&self, session_key: &str) -> Result<Option<(String, String)>, StoreError> {
        let prefix = session_prefix(session_key);
        let Some(kv) = self
            .inner()
            .channel_messages
            .scan_prefix(&prefix)
            .keys()
            .next()
        else {
            return Ok(None);
        };
        let k = kv.map_err(StoreError::sled("reading a session's chat"))?;
        Ok(k.get(prefix.len()..)
            .and_then(keys::split_chat_prefix)
            .map(|(channel, chat)| (channel.to_string(), chat.to_string())))
    }

    /// Deletes the chat messages stored for `session_key` (and its queued system events), in
    /// bounded batches. Returns the bytes freed.
    pub(super) fn delete_channel_messages(&self, session_key: &str) -> Result<u64, StoreError> {
        let prefix = session_prefix(session_key);
        let mut freed = 0u64;
        loop {
            let _write = self.write_gate();
            let inner = self.inner();
            let mut batch = sled::Batch::default();
            let mut n = 0usize;
            for kv in inner
                .channel_messages
                .scan_prefix(&prefix)
                .take(DELETE_BATCH)
            {
                let (k, v) = kv.map_err(StoreError::sled("scanning chat messages"))?;
                let written: Vec<Vec<u8>> = decode("channel_messages", &v).unwrap_or_default();
                for key in written {
                    if let Some(old) = inner
                        .channel_messages
                        .get(&key)
                        .map_err(StoreError::sled("reading chat messages"))?
                    {
                        freed += (key.len() + old.len()) as u64;
                    }
                    batch.remove(key);
                }
                freed += (k.len() + v.len()) as u64;
                batch.remove(k);
                n += 1;
            }
            if n == 0 {
                return Ok(freed + self.delete_system_events(session_key)?);
            }
            inner
                .channel_messages
                .apply_batch(batch)
                .map_err(StoreError::sled("deleting chat messages"))?;
        }
    }

    /// The stored message `message_id` of a chat.
    pub fn channel_message(
        &self,
        channel: &str,
        chat_id: &str,
        message_id: &str,
    ) -> Result<Option<ChannelMessage>, StoreError> {
        self.inner()
            .channel_messages
            .get(keys::channel_message_key(channel, chat_id, message_id))
            .map_err(StoreError::sled("reading a channel message"))?
            .map(|v| decode_message(&v))
            .transpose()
    }

    /// Stored messages that reply to `parent`, oldest first, at most `limit`.
    pub fn channel_replies(
        &self,
        channel: &str,
        chat_id: &str,
        parent: &str,
        limit: usize,
    ) -> Result<Vec<ChannelMessage>, StoreError> {
        let prefix = keys::channel_replies_prefix(channel, chat_id, parent);
        let mut ids = Vec::new();
        for kv in self.inner().channel_messages.scan_prefix(&prefix).keys() {
            let k = kv.map_err(StoreError::sled("reading channel replies"))?;
            if let Some(id) = k
                .get(prefix.len() + 8..)
                .and_then(|b| std::str::from_utf8(b).ok())
            {
                if !ids.iter().any(|seen: &String| seen == id) {
                    ids.push(id.to_string());
                }
            }
            if ids.len() >= limit {
                break;
            }
        }
        self.resolve(channel, chat_id, ids)
    }

    /// Stored messages of a chat sent between `from_ms` and `to_ms` (inclusive), oldest first,
    /// at most `limit`.
    pub fn channel_messages_between(
        &self,
        channel: &str,
        chat_id: &str,
        from_ms: u64,
        to_ms: u64,
        limit: usize,
    ) -> Result<Vec<ChannelMessage>, StoreError> {
        let start = keys::channel_time_prefix(channel, chat_id, from_ms);
        let end = keys::channel_time_prefix(channel, chat_id, to_ms.saturating_add(1));
        let prefix_len = keys::chat_prefix(channel, chat_id).len();
        let mut ids = Vec::new();
        for kv in self.inner().channel_messages.range(start..end).keys() {
            let k = kv.map_err(StoreError::sled("reading channel messages by time"))?;
            if let Some(id) = keys::channel_time_key_id(&k, prefix_len) {
                if !ids.iter().any(|seen: &String| seen == id) {
                    ids.push(id.to_string());
                }
            }
            if ids.len() >= limit {
                break;
            }
        }
        self.resolve(channel, chat_id, ids)
    }

    fn resolve(
        &self,
        channel: &str,
        chat_id: &str,
        ids: Vec<String>,
    ) -> Result<Vec<ChannelMessage>, StoreError> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(m) = self.channel_message(channel, chat_id, &id)? {
                out.push(m);
            }
        }
        out.sort_by(|a, b| (a.timestamp_ms, &a.message_id).cmp(&(b.timestamp_ms, &b.message_id)));
        Ok(out)
    }
}
