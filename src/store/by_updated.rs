//! The `by_updated` index: the start of the minute a session was last updated in
//! (big-endian ms) + session key → (). Iterating it from the start yields sessions oldest
//! first (within a minute, by key), which is how the janitor picks what to evict without
//! scanning every session. It is written in the same transaction as the session record
//! (`Store::commit_turns`), and the doctor checks it against the `sessions` tree.
//!
//! The index holds the minute, not the millisecond, so that a session's entry moves only
//! when a turn lands in a later minute than the last: a session that talks more than once a
//! minute costs a turn's commit no index writes (two of its six tree writes). The janitor
//! reads the exact time from the record ([`Store::oldest_sessions`]).
//!
//! [`Store::oldest_sessions`]: super::Store

/// The tree's name.
pub(super) const TREE: &str = "by_updated";

/// The index's time resolution, ms: a minute. Eviction order finer than that buys nothing
/// (the janitor evicts sessions idle for far longer), while a coarser one would let a
/// just-used session sort among the idle ones.
pub(super) const BUCKET_MS: u64 = 60_000;

/// The bucket `updated_at_ms` falls in: the start of its minute.
pub(super) fn bucket(updated_at_ms: u64) -> u64 {
    updated_at_ms - updated_at_ms % BUCKET_MS
}

/// The index key of a session last updated at `updated_at_ms` (in its bucket).
pub(super) fn key(updated_at_ms: u64, session_key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + session_key.len());
    k.extend_from_slice(&bucket(updated_at_ms).to_be_bytes());
    k.extend_from_slice(session_key.as_bytes());
    k
}

/// Whether a session updated at `before_ms` and now at `after_ms` needs its entry moved.
pub(super) fn moves(before_ms: u64, after_ms: u64) -> bool {
    bucket(before_ms) != bucket(after_ms)
}

/// Splits an index key into its bucket and session key.
pub(super) fn split(key: &[u8]) -> Option<(u64, &str)> {
    let (time, session) = key.split_at_checked(8)?;
    let time: [u8; 8] = time.try_into().ok()?;
    Some((u64::from_be_bytes(time), std::str::from_utf8(session).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_minute_then_key_and_round_trip() {
        let a = key(5 * BUCKET_MS, "zzz");
        let b = key(6 * BUCKET_MS, "aaa");
        let c = key(6 * BUCKET_MS + 59_999, "aab");
        assert!(a < b && b < c);
        assert_eq!(split(&c), Some((6 * BUCKET_MS, "aab")));
        assert_eq!(split(b"short"), None);
        assert_eq!(split(&key(1, "")), Some((0, "")));
        // Within a minute the key decides, whatever the milliseconds say.
        assert!(key(BUCKET_MS + 900, "a") < key(BUCKET_MS + 100, "b"));
    }

    #[test]
    fn an_entry_moves_only_into_a_new_minute() {
        assert!(!moves(BUCKET_MS, 2 * BUCKET_MS - 1));
        assert!(moves(2 * BUCKET_MS - 1, 2 * BUCKET_MS));
        // A clock that stepped back moves it too (to where the record now says).
        assert!(moves(3 * BUCKET_MS, 2 * BUCKET_MS));
    }
}
