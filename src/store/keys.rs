//! Key layouts. Big-endian integers keep sled's byte order equal to numeric order.

/// Separates the session key from the sequence in inbox keys; session keys never contain NUL
/// (inbound validation rejects control characters).
const SEP: u8 = 0;

/// `transcript` key: session id, then entry sequence.
pub(super) fn transcript_key(session_id: u64, seq: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&session_id.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

/// The prefix of all transcript keys of a session.
pub(super) fn transcript_prefix(session_id: u64) -> [u8; 8] {
    session_id.to_be_bytes()
}

/// The sequence part of a transcript key.
pub(super) fn transcript_seq(key: &[u8]) -> Option<u64> {
    let tail: [u8; 8] = key.get(8..16)?.try_into().ok()?;
    Some(u64::from_be_bytes(tail))
}

/// `inbox` key: session key, NUL, inbox sequence.
pub(super) fn inbox_key(session_key: &str, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(session_key.len() + 9);
    k.extend_from_slice(session_key.as_bytes());
    k.push(SEP);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// Splits an inbox key into session key and sequence.
pub(super) fn split_inbox_key(key: &[u8]) -> Option<(&str, u64)> {
    if key.len() < 9 || key[key.len() - 9] != SEP {
        return None;
    }
    let (session, rest) = key.split_at(key.len() - 9);
    let seq: [u8; 8] = rest[1..].try_into().ok()?;
    Some((std::str::from_utf8(session).ok()?, u64::from_be_bytes(seq)))
}

/// The prefix of every `channel_messages` key of one chat: channel, NUL, chat id, NUL. Ids
/// never contain NUL (inbound validation rejects control characters).
pub(super) fn chat_prefix(channel: &str, chat_id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(channel.len() + chat_id.len() + 2);
    k.extend_from_slice(channel.as_bytes());
    k.push(SEP);
    k.extend_from_slice(chat_id.as_bytes());
    k.push(SEP);
    k
}

/// `channel_messages` record key: chat prefix, `m`, message id.
pub(super) fn channel_message_key(channel: &str, chat_id: &str, message_id: &str) -> Vec<u8> {
    let mut k = chat_prefix(channel, chat_id);
    k.push(b'm');
    k.extend_from_slice(message_id.as_bytes());
    k
}

/// `channel_messages` time-index key: chat prefix, `t`, timestamp, message id.
pub(super) fn channel_time_key(
    channel: &str,
    chat_id: &str,
    ts_ms: u64,
    message_id: &str,
) -> Vec<u8> {
    let mut k = channel_time_prefix(channel, chat_id, ts_ms);
    k.extend_from_slice(message_id.as_bytes());
    k
}

/// The start of the time-index keys at `ts_ms`.
pub(super) fn channel_time_prefix(channel: &str, chat_id: &str, ts_ms: u64) -> Vec<u8> {
    let mut k = chat_prefix(channel, chat_id);
    k.push(b't');
    k.extend_from_slice(&ts_ms.to_be_bytes());
    k
}

/// The message id at the end of a time-index key.
pub(super) fn channel_time_key_id(key: &[u8], prefix_len: usize) -> Option<&str> {
    std::str::from_utf8(key.get(prefix_len + 1 + 8..)?).ok()
}

/// The start of a chat's order-index keys: chat prefix, `s`.
pub(super) fn channel_seq_prefix(channel: &str, chat_id: &str) -> Vec<u8> {
    let mut k = chat_prefix(channel, chat_id);
    k.push(b's');
    k
}

/// `channel_messages` order-index key: chat prefix, `s`, the chat seq (big-endian) → the
/// message id.
pub(super) fn channel_seq_key(channel: &str, chat_id: &str, seq: u64) -> Vec<u8> {
    let mut k = channel_seq_prefix(channel, chat_id);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// The chat seq at the end of an order-index key.
pub(super) fn channel_seq_of(key: &[u8], prefix_len: usize) -> Option<u64> {
    let bytes: [u8; 8] = key.get(prefix_len + 1..)?.try_into().ok()?;
    Some(u64::from_be_bytes(bytes))
}

/// The (channel, chat id) a `channel_messages` record key names.
pub(super) fn split_chat_prefix(key: &[u8]) -> Option<(&str, &str)> {
    let mut parts = key.splitn(3, |b| *b == SEP);
    let channel = std::str::from_utf8(parts.next()?).ok()?;
    let chat = std::str::from_utf8(parts.next()?).ok()?;
    parts.next()?;
    Some((channel, chat))
}

/// The prefix of the reply-index keys of `parent`: chat prefix, `r`, parent id, NUL.
pub(super) fn channel_replies_prefix(channel: &str, chat_id: &str, parent: &str) -> Vec<u8> {
    let mut k = chat_prefix(channel, chat_id);
    k.push(b'r');
    k.extend_from_slice(parent.as_bytes());
    k.push(SEP);
    k
}

/// `channel_messages` reply-index key: replies prefix of the parent, timestamp, child id.
pub(super) fn channel_reply_key(
    channel: &str,
    chat_id: &str,
    parent: &str,
    ts_ms: u64,
    child: &str,
) -> Vec<u8> {
    let mut k = channel_replies_prefix(channel, chat_id, parent);
    k.extend_from_slice(&ts_ms.to_be_bytes());
    k.extend_from_slice(child.as_bytes());
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inbox_keys_round_trip_and_sort() {
        let a = inbox_key("agent:main:main", 2);
        let b = inbox_key("agent:main:main", 10);
        assert!(a < b);
        assert_eq!(split_inbox_key(&b), Some(("agent:main:main", 10)));
        assert!(
            inbox_key("agent:main:mai", u64::MAX) < a,
            "a shorter key sorts apart"
        );
        assert_eq!(split_inbox_key(b"short"), None);
        assert_eq!(transcript_seq(&transcript_key(3, 9)), Some(9));
    }

    #[test]
    fn channel_keys_sort_by_time_and_split() {
        let a = channel_time_key("tg", "c", 5, "zz");
        let b = channel_time_key("tg", "c", 300, "aa");
        assert!(a < b);
        let prefix = chat_prefix("tg", "c").len();
        assert_eq!(channel_time_key_id(&b, prefix), Some("aa"));
        assert!(channel_message_key("tg", "c", "1") < channel_time_prefix("tg", "c", 0));
        let s = channel_seq_key("tg", "c", 7);
        assert_eq!(channel_seq_of(&s, prefix), Some(7));
        assert!(channel_seq_key("tg", "c", 7) < channel_seq_key("tg", "c", 300));
        assert_eq!(
            split_chat_prefix(&channel_message_key("tg", "c", "1")),
            Some(("tg", "c"))
        );
        let r = channel_reply_key("tg", "c", "p", 7, "child");
        assert!(r.starts_with(&channel_replies_prefix("tg", "c", "p")));
        assert!(!r.starts_with(&channel_replies_prefix("tg", "c", "")));
    }
}
