//! Messages held for their PluralKit proxy (`pluralkit.rs`). With `pluralkit = true`, a live
//! guild message from an account that has a PluralKit system waits up to
//! `pluralkit_wait_ms`: PluralKit usually reposts it through a webhook within a second and
//! deletes it. When the repost arrives and PluralKit names this message as its `original`, the
//! original is dropped and only the repost (the member's) is submitted — one turn, the
//! member's. When the wait ends first (no proxy tags, PluralKit slow or down), the message is
//! submitted as it is, and a late repost of it is skipped ([`Held::was_released`]) — one turn,
//! the account's.
//!
//! Plain state over `Instant`s the shard task passes in; the task sleeps until
//! [`Held::next_due`]. A held message is submitted after messages that came while it waited
//! (at most `pluralkit_wait_ms` later than it would have been). Each held message is also in
//! the shard's durable state (`ShardState::held`), so a restart settles it (read again over
//! REST: still there → submitted; gone → PluralKit deleted it, its repost is read on its own).
//!
//! Bounded: [`MAX_HELD`] held (past it the oldest is released at once) and
//! [`MAX_RELEASED`] released ids remembered.

use std::collections::VecDeque;
use std::num::NonZeroUsize;

use lru::LruCache;
use tokio::time::Instant;
use twilight_model::channel::message::Message;

use super::state::{HeldRef, ShardState};

/// Most messages held at once per shard.
pub(crate) const MAX_HELD: usize = 100;

/// Released originals remembered, so that a repost arriving after its original's wait ended
/// is not a second turn.
pub(crate) const MAX_RELEASED: usize = 1_000;

/// The held messages of one shard.
#[derive(Debug)]
pub(crate) struct Held {
    queue: VecDeque<(Instant, Message)>,
    released: LruCache<u64, ()>,
}

impl Default for Held {
    fn default() -> Self {
        Self {
            queue: VecDeque::new(),
            released: LruCache::new(NonZeroUsize::new(MAX_RELEASED).unwrap_or(NonZeroUsize::MIN)),
        }
    }
}

impl Held {
    /// Holds `m` until `until` (recorded in `state`); returns the oldest held message when
    /// that made more than [`MAX_HELD`]: it is released now.
    pub(crate) fn hold(
        &mut self,
        m: Message,
        until: Instant,
        state: &mut ShardState,
    ) -> Option<Message> {
        record(&m, state);
        self.queue.push_back((until, m));
        if self.queue.len() > MAX_HELD {
            return self.queue.pop_front().map(|(_, m)| self.release(m, state));
        }
        None
    }

    /// Removes the held message `original` (its proxy came); true if it was held.
    pub(crate) fn take(&mut self, original: u64, state: &mut ShardState) -> bool {
        let before = self.queue.len();
        self.queue.retain(|(_, m)| m.id.get() != original);
        state.held.retain(|h| h.id != original);
        self.queue.len() < before
    }

    /// When the next held message is due, if any.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.queue.front().map(|(at, _)| *at)
    }

    /// Releases the messages due at `now`, oldest first.
    pub(crate) fn due(&mut self, now: Instant, state: &mut ShardState) -> Vec<Message> {
        let mut out = Vec::new();
        while self.queue.front().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, m)) = self.queue.pop_front() {
                out.push(self.release(m, state));
            }
        }
        out
    }

    /// Whether `original` was submitted as it was (its repost is then skipped).
    pub(crate) fn was_released(&mut self, original: u64) -> bool {
        self.released.get(&original).is_some()
    }

    /// Notes that message `id` of a person was submitted as it was without being held (not
    /// held, or settled after a restart): a repost of it is then skipped.
    pub(crate) fn note_released(&mut self, id: u64) {
        self.released.put(id, ());
    }

    /// Records released message `m` in `state` again: the runtime stopped before it was
    /// submitted, so the next start settles it.
    pub(crate) fn unreleased(&mut self, m: &Message, state: &mut ShardState) {
        self.released.pop(&m.id.get());
        record(m, state);
    }

    fn release(&mut self, m: Message, state: &mut ShardState) -> Message {
        state.held.retain(|h| h.id != m.id.get());
        self.note_released(m.id.get());
        m
    }
}

/// Records held message `m` in the durable state.
fn record(m: &Message, state: &mut ShardState) {
    state.held.push(HeldRef {
        channel: m.channel_id.get(),
        id: m.id.get(),
        guild: m.guild_id.map(|g| g.get()),
    });
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn message(id: u64) -> Message {
        serde_json::from_value(serde_json::json!({
            "id": id.to_string(), "channel_id": "20", "guild_id": "10",
            "author": {"id": "1", "username": "u", "discriminator": "0", "avatar": null},
            "content": "x", "timestamp": "2026-12-06T23:00:00.000000+00:00",
            "edited_timestamp": null, "tts": false, "mention_everyone": false,
            "mentions": [], "mention_roles": [], "attachments": [], "embeds": [],
            "pinned": false, "type": 0
        }))
        .unwrap()
    }

    #[test]
    fn held_messages_are_taken_by_their_proxy_or_released_when_due() {
        let mut held = Held::default();
        let mut state = ShardState::default();
        let t0 = Instant::now();
        let wait = Duration::from_secs(3);
        assert!(held.hold(message(1), t0 + wait, &mut state).is_none());
        assert!(held
            .hold(message(2), t0 + wait + Duration::from_secs(1), &mut state)
            .is_none());
        assert_eq!(state.held.len(), 2);
        assert_eq!(held.next_due(), Some(t0 + wait));
        // The proxy of 1 came: 1 is never submitted.
        assert!(held.take(1, &mut state));
        assert!(!held.take(1, &mut state));
        assert!(!held.was_released(1));
        assert!(held.due(t0 + wait, &mut state).is_empty());
        let out = held.due(t0 + wait * 2, &mut state);
        assert_eq!(out.iter().map(|m| m.id.get()).collect::<Vec<_>>(), vec![2]);
        assert!(held.was_released(2), "a late repost of 2 is skipped");
        assert!(state.held.is_empty());
        assert_eq!(held.next_due(), None);
        // Stopping before 2 was submitted: it is recorded again for the next start.
        held.unreleased(&out[0], &mut state);
        assert_eq!(state.held.iter().map(|h| h.id).collect::<Vec<_>>(), vec![2]);
        assert!(!held.was_released(2));
    }

    #[test]
    fn past_the_bound_the_oldest_is_released_at_once() {
        let mut held = Held::default();
        let mut state = ShardState::default();
        let at = Instant::now() + Duration::from_secs(3);
        for id in 1..=MAX_HELD as u64 {
            assert!(held.hold(message(id), at, &mut state).is_none());
        }
        let out = held.hold(message(1_000), at, &mut state);
        assert_eq!(out.map(|m| m.id.get()), Some(1));
        assert_eq!(state.held.len(), MAX_HELD);
    }
}
