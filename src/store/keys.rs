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
}
