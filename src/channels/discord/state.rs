//! What a shard keeps durably (in the channel's state, one value per shard): the gateway
//! session to RESUME (id, last sequence handled, `resume_gateway_url`) and, per channel that
//! spoke, the newest message id handled — the cursor a catch-up reads from after a failed
//! resume, a re-identify or a restart.
//!
//! Saved after each message is accepted (so a kill loses at most the message in flight, which
//! the gateway replays or the catch-up reads again, and dedupe drops if it was accepted), and
//! on a graceful stop.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Channels whose cursor is kept per shard; past it, the one quiet the longest (the smallest
/// newest id) is forgotten and not caught up.
pub(crate) const MAX_TRACKED_CHANNELS: usize = 1_000;

/// Messages read back per channel in one catch-up (one REST page).
pub(crate) const MAX_CATCH_UP_PER_CHANNEL: u16 = 100;

/// Messages read back in total in one catch-up, over all channels.
pub(crate) const MAX_CATCH_UP_TOTAL: usize = 1_000;

/// The gateway session to resume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SavedSession {
    /// The session id from READY.
    pub id: String,
    /// The last sequence handled.
    pub sequence: u64,
    /// Where to resume (`resume_gateway_url` from READY).
    pub resume_url: Option<String>,
}

/// Where a channel was left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Cursor {
    /// The newest message id handled.
    pub last: u64,
    /// The guild, for messages read back over REST (which do not carry it); `None` in DMs.
    pub guild: Option<u64>,
    /// The parent channel when the channel is a thread.
    pub parent: Option<u64>,
}

/// A message held for its PluralKit proxy (`held.rs`), kept so a restart settles it: read
/// again over REST, taken as it is when it still exists, dropped when PluralKit deleted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HeldRef {
    /// Its channel.
    pub channel: u64,
    /// Its id.
    pub id: u64,
    /// Its guild (REST reads do not carry it).
    pub guild: Option<u64>,
}

/// A shard's durable state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ShardState {
    /// The session, when there is one to resume.
    pub session: Option<SavedSession>,
    /// Channel id → cursor, at most [`MAX_TRACKED_CHANNELS`].
    pub cursors: BTreeMap<u64, Cursor>,
    /// Messages held for their PluralKit proxy, at most `held::MAX_HELD` (absent in states
    /// stored before PluralKit support: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<HeldRef>,
}

impl ShardState {
    /// The state key of shard `n`.
    pub(crate) fn key(shard: u32) -> String {
        format!("shard:{shard}")
    }

    /// Reads stored bytes; anything unreadable is a fresh start (logged by the caller).
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// The bytes to store.
    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Moves `channel`'s cursor to `id` if it is newer; true if it moved.
    pub(crate) fn advance(
        &mut self,
        channel: u64,
        id: u64,
        guild: Option<u64>,
        parent: Option<u64>,
    ) -> bool {
        match self.cursors.get_mut(&channel) {
            Some(c) if c.last >= id => false,
            Some(c) => {
                c.last = id;
                true
            }
            None => {
                self.cursors.insert(
                    channel,
                    Cursor {
                        last: id,
                        guild,
                        parent,
                    },
                );
                while self.cursors.len() > MAX_TRACKED_CHANNELS {
                    let quietest = self
                        .cursors
                        .iter()
                        .min_by_key(|(_, c)| c.last)
                        .map(|(k, _)| *k);
                    match quietest {
                        Some(k) => self.cursors.remove(&k),
                        None => break,
                    };
                }
                true
            }
        }
    }

    /// The channels to catch up, with their cursors, the quietest first (a bounded catch-up
    /// that runs out of room leaves out the channels most recently active, whose newest
    /// messages are the likeliest to have been handled already).
    pub(crate) fn catch_up_plan(&self) -> Vec<(u64, Cursor)> {
        let mut plan: Vec<(u64, Cursor)> = self.cursors.iter().map(|(k, c)| (*k, *c)).collect();
        plan.sort_by_key(|(_, c)| c.last);
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_only_advance_and_stay_bounded() {
        let mut s = ShardState::default();
        assert!(s.advance(1, 10, Some(5), None));
        assert!(
            !s.advance(1, 9, Some(5), None),
            "an older id never moves a cursor back"
        );
        assert!(s.advance(1, 11, Some(5), None));
        assert_eq!(s.cursors[&1].last, 11);
        for ch in 2..=(MAX_TRACKED_CHANNELS as u64 + 1) {
            s.advance(ch, 100 + ch, None, None);
        }
        assert_eq!(s.cursors.len(), MAX_TRACKED_CHANNELS);
        assert!(
            !s.cursors.contains_key(&1),
            "the quietest channel is forgotten"
        );
        let back = ShardState::decode(&s.encode()).unwrap();
        assert_eq!(back, s);
        assert!(ShardState::decode(b"garbage").is_err());
        // A state stored before held messages were kept still reads.
        let old = ShardState::decode(
            br#"{"session":null,"cursors":{"5":{"last":9,"guild":1,"parent":null}}}"#,
        )
        .unwrap();
        assert!(old.held.is_empty());
        assert_eq!(old.cursors[&5].last, 9);
    }

    #[test]
    fn the_plan_starts_with_the_quietest_channel() {
        let mut s = ShardState::default();
        s.advance(7, 300, None, None);
        s.advance(8, 100, None, None);
        s.advance(9, 200, None, None);
        let order: Vec<u64> = s.catch_up_plan().into_iter().map(|(c, _)| c).collect();
        assert_eq!(order, vec![8, 9, 7]);
    }
}
