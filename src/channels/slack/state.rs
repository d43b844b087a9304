//! What the Slack channel keeps durably (one value in the channel's state): per conversation
//! that spoke, the newest message `ts` handled, and per active thread the same — the cursors a
//! catch-up reads from after a reconnect or a restart (Slack keeps no session to resume).
//!
//! Saved after each message is handled (so a kill loses at most the message in flight, which
//! the catch-up reads again and dedupe drops if it was accepted).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ts;

/// The state key.
pub(crate) const STATE_KEY: &str = "cursors";

/// Conversations whose cursor is kept; past it, the one quiet the longest is forgotten and
/// not caught up.
pub(crate) const MAX_TRACKED_CONVERSATIONS: usize = 1_000;

/// Threads whose cursor is kept, over all conversations; past it, the quietest is forgotten.
pub(crate) const MAX_TRACKED_THREADS: usize = 1_000;

/// Messages asked for per `conversations.history`/`replies` page of a catch-up (Slack advises
/// at most 200; it may answer fewer, and the catch-up follows `next_cursor`). The messages
/// read back per conversation are bounded by `[channels.slack] catch_up_max_per_conversation`.
pub(crate) const CATCH_UP_PAGE_SIZE: usize = 200;

/// Threads read back in one catch-up: the most recently active.
pub(crate) const MAX_CATCH_UP_THREADS: usize = 100;

/// Messages read back in total in one catch-up, over all conversations and threads (the
/// conversations read last get what room is left).
pub(crate) const MAX_CATCH_UP_TOTAL: usize = 10_000;

/// Where a conversation was left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Conversation {
    /// The newest top-level message `ts` handled.
    pub last: String,
    /// Its `channel_type` (history reads do not carry it).
    pub channel_type: String,
}

/// Where a thread was left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Thread {
    /// The newest reply `ts` handled (the thread's own `ts` when none was yet).
    pub last: String,
    /// The bot started the thread or answered in it: replies there address it.
    pub bot: bool,
}

/// One read of a catch-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// The conversation.
    pub channel: String,
    /// The thread, for a `conversations.replies` read.
    pub thread_ts: Option<String>,
    /// Read after this `ts`.
    pub oldest: String,
}

/// The channel's durable state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SlackState {
    /// Conversation id → cursor.
    pub conversations: BTreeMap<String, Conversation>,
    /// `<conversation> <thread_ts>` → cursor.
    pub threads: BTreeMap<String, Thread>,
}

fn thread_key(channel: &str, thread_ts: &str) -> String {
    format!("{channel} {thread_ts}")
}

impl SlackState {
    /// Reads stored bytes; anything unreadable is a fresh start (logged by the caller).
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// The bytes to store.
    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The `channel_type` remembered for `channel`.
    pub(crate) fn channel_type(&self, channel: &str) -> Option<&str> {
        self.conversations
            .get(channel)
            .map(|c| c.channel_type.as_str())
    }

    /// Moves `channel`'s cursor to `ts` if it is newer; true if it moved.
    pub(crate) fn advance(&mut self, channel: &str, ts: &str, channel_type: &str) -> bool {
        match self.conversations.get_mut(channel) {
            Some(c) if ts::key(&c.last) >= ts::key(ts) => false,
            Some(c) => {
                c.last = ts.to_string();
                c.channel_type = channel_type.to_string();
                true
            }
            None => {
                self.conversations.insert(
                    channel.to_string(),
                    Conversation {
                        last: ts.to_string(),
                        channel_type: channel_type.to_string(),
                    },
                );
                evict(&mut self.conversations, MAX_TRACKED_CONVERSATIONS, |c| {
                    ts::key(&c.last)
                });
                true
            }
        }
    }

    /// Moves the cursor of thread `thread_ts` in `channel` to `ts` if it is newer (creating
    /// it), and marks it the bot's when `bot`; true if anything changed.
    pub(crate) fn advance_thread(
        &mut self,
        channel: &str,
        thread_ts: &str,
        ts: &str,
        bot: bool,
    ) -> bool {
        let key = thread_key(channel, thread_ts);
        match self.threads.get_mut(&key) {
            Some(t) => {
                let mut changed = false;
                if ts::key(ts) > ts::key(&t.last) {
                    t.last = ts.to_string();
                    changed = true;
                }
                if bot && !t.bot {
                    t.bot = true;
                    changed = true;
                }
                changed
            }
            None => {
                self.threads.insert(
                    key,
                    Thread {
                        last: ts.to_string(),
                        bot,
                    },
                );
                evict(&mut self.threads, MAX_TRACKED_THREADS, |t| ts::key(&t.last));
                true
            }
        }
    }

    /// Whether the bot started or answered in thread `thread_ts` of `channel`.
    pub(crate) fn bot_thread(&self, channel: &str, thread_ts: &str) -> bool {
        self.threads
            .get(&thread_key(channel, thread_ts))
            .is_some_and(|t| t.bot)
    }

    /// What to read back: every conversation, the quietest first (a bounded catch-up that
    /// runs out of room leaves out the most recently active, whose newest messages are the
    /// likeliest handled already), then the [`MAX_CATCH_UP_THREADS`] most recently active
    /// threads, the quietest of them first.
    pub(crate) fn catch_up_plan(&self) -> Vec<Target> {
        let mut conversations: Vec<(&String, &Conversation)> = self.conversations.iter().collect();
        conversations.sort_by_key(|(_, c)| ts::key(&c.last));
        let mut threads: Vec<(&String, &Thread)> = self.threads.iter().collect();
        threads.sort_by_key(|(_, t)| std::cmp::Reverse(ts::key(&t.last)));
        threads.truncate(MAX_CATCH_UP_THREADS);
        threads.reverse();
        let mut plan: Vec<Target> = conversations
            .into_iter()
            .map(|(channel, c)| Target {
                channel: channel.clone(),
                thread_ts: None,
                oldest: c.last.clone(),
            })
            .collect();
        plan.extend(threads.into_iter().filter_map(|(key, t)| {
            let (channel, thread_ts) = key.split_once(' ')?;
            Some(Target {
                channel: channel.to_string(),
                thread_ts: Some(thread_ts.to_string()),
                oldest: t.last.clone(),
            })
        }));
        plan
    }
}

/// Forgets the entries with the smallest `order` until `map` holds at most `cap`.
fn evict<V>(map: &mut BTreeMap<String, V>, cap: usize, order: impl Fn(&V) -> u64) {
    while map.len() > cap {
        let quietest = map
            .iter()
            .min_by_key(|(_, v)| order(v))
            .map(|(k, _)| k.clone());
        match quietest {
            Some(k) => map.remove(&k),
            None => break,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_only_advance_and_stay_bounded() {
        let mut s = SlackState::default();
        assert!(s.advance("C1", "10.000001", "channel"));
        assert!(!s.advance("C1", "9.999999", "channel"), "never back");
        assert!(s.advance("C1", "10.000002", "channel"));
        assert_eq!(s.conversations["C1"].last, "10.000002");
        assert_eq!(s.channel_type("C1"), Some("channel"));
        for n in 0..MAX_TRACKED_CONVERSATIONS {
            s.advance(&format!("C{n}x"), &format!("{}.000000", 100 + n), "channel");
        }
        assert_eq!(s.conversations.len(), MAX_TRACKED_CONVERSATIONS);
        assert!(
            !s.conversations.contains_key("C1"),
            "the quietest is forgotten"
        );
        let back = SlackState::decode(&s.encode()).unwrap();
        assert_eq!(back, s);
        assert!(SlackState::decode(b"garbage").is_err());
    }

    #[test]
    fn threads_remember_the_bot_and_the_plan_orders_reads() {
        let mut s = SlackState::default();
        s.advance("C7", "300.0", "channel");
        s.advance("C8", "100.0", "group");
        assert!(s.advance_thread("C7", "250.0", "250.0", true));
        assert!(s.bot_thread("C7", "250.0"));
        assert!(!s.bot_thread("C7", "251.0"));
        assert!(s.advance_thread("C7", "260.0", "270.0", false));
        assert!(!s.advance_thread("C7", "260.0", "265.0", false));
        assert!(
            s.advance_thread("C7", "260.0", "265.0", true),
            "marked the bot's"
        );
        let plan = s.catch_up_plan();
        let order: Vec<(&str, Option<&str>, &str)> = plan
            .iter()
            .map(|t| {
                (
                    t.channel.as_str(),
                    t.thread_ts.as_deref(),
                    t.oldest.as_str(),
                )
            })
            .collect();
        assert_eq!(
            order,
            vec![
                ("C8", None, "100.0"),
                ("C7", None, "300.0"),
                ("C7", Some("250.0"), "250.0"),
                ("C7", Some("260.0"), "270.0"),
            ]
        );
    }
}
