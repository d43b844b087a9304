//! The `by_updated` index: `updated_at_ms` (big-endian) + session key → (). Iterating it from
//! the start yields sessions oldest first, which is how the janitor picks what to evict
//! without scanning every session. It is written in the same transaction as the session
//! record (`Store::commit_turn`), and the doctor checks it against the `sessions` tree.

/// The tree's name.
pub(super) const TREE: &str = "by_updated";

/// The index key of a session last updated at `updated_at_ms`.
pub(super) fn key(updated_at_ms: u64, session_key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + session_key.len());
    k.extend_from_slice(&updated_at_ms.to_be_bytes());
    k.extend_from_slice(session_key.as_bytes());
    k
}

/// Splits an index key into its time and session key.
pub(super) fn split(key: &[u8]) -> Option<(u64, &str)> {
    let (time, session) = key.split_at_checked(8)?;
    let time: [u8; 8] = time.try_into().ok()?;
    Some((u64::from_be_bytes(time), std::str::from_utf8(session).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_time_then_key_and_round_trip() {
        let a = key(5, "zzz");
        let b = key(6, "aaa");
        let c = key(6, "aab");
        assert!(a < b && b < c);
        assert_eq!(split(&c), Some((6, "aab")));
        assert_eq!(split(b"short"), None);
        assert_eq!(split(&key(1, "")), Some((1, "")));
    }
}
