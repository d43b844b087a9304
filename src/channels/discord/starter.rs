//! A thread's starter message (the seed's `ThreadStarterBody`), read once per thread session
//! and kept with it (`Runtime::set_thread_starter`), so its context shows what the thread is
//! about.
//!
//! Where the starter is: a thread started from a message has that message's id as its own
//! id, and the message lives in the parent channel (`GET /channels/{parent}/messages/{thread}`);
//! a forum or media post's starter is the thread's first message, again with the thread's id,
//! inside the thread (asked next when the parent does not have it). A thread started without a
//! message has neither: nothing is kept.
//!
//! Reading it never holds up the turn for long or stops it: the read is bounded by
//! [`STARTER_READ_TIMEOUT`]; a failed read is logged and tried once more at the thread's next
//! message ([`MAX_STARTER_READS`]), then left until the next start. Whether the starter is
//! kept is asked of the store at each of the thread's messages (a point read); failures and
//! threads without a starter are remembered in memory ([`MAX_KNOWN_STARTERS`], least recently
//! used forgotten first).

use std::num::NonZeroUsize;
use std::time::Duration;

use lru::LruCache;
use twilight_model::channel::message::Message;

use super::convert::display_name;
use super::rest::{Rest, RestError};
use crate::runtime::Runtime;
use crate::store::ThreadStarter;

/// Longest wait for one read of a starter message (a rate-limited or unreachable REST
/// answers later than the turn should wait).
pub(crate) const STARTER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads of one thread's starter that fail (transport, timeout, 5xx, 429) before it is left
/// until the next start: the first and one retry at a later message.
pub(crate) const MAX_STARTER_READS: u32 = 2;

/// Threads whose starter question is remembered in memory.
pub(crate) const MAX_KNOWN_STARTERS: usize = 10_000;

/// What is known in memory of one thread's starter (that it is kept is asked of the store
/// each time: a point read, right also after the session was deleted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    /// The thread has no starter Discord can give (none, deleted, or not readable).
    Absent,
    /// Reads failed this many times.
    Failed(u32),
}

/// The starters of the threads one shard has seen, bounded by [`MAX_KNOWN_STARTERS`].
#[derive(Debug)]
pub(crate) struct Starters {
    known: LruCache<u64, Known>,
}

impl Default for Starters {
    fn default() -> Self {
        Self {
            known: LruCache::new(
                NonZeroUsize::new(MAX_KNOWN_STARTERS).unwrap_or(NonZeroUsize::MIN),
            ),
        }
    }
}

/// The starter `m` as kept: its author's name and its text (or its attachments' names).
pub(crate) fn starter_of(m: &Message) -> ThreadStarter {
    let text = if m.content.trim().is_empty() {
        let names: Vec<&str> = m.attachments.iter().map(|a| a.filename.as_str()).collect();
        if names.is_empty() {
            "(no text)".to_string()
        } else {
            format!("(attachments: {})", names.join(", "))
        }
    } else {
        m.content.clone()
    };
    ThreadStarter {
        sender_name: display_name(m),
        text,
        message_id: m.id.get().to_string(),
        timestamp_ms: u64::try_from(m.timestamp.as_micros() / 1_000).unwrap_or(0),
    }
}

/// What one attempt at reading the starter gave.
enum Read {
    Found(Box<Message>),
    Absent,
    Failed(String),
}

impl Starters {
    /// Makes sure the thread session `session_key` (thread `thread` of `parent`, whose
    /// message `current` is being handled) has its starter kept: from memory, from the store,
    /// from `current` itself when it is the starter, else read from Discord.
    pub(crate) async fn ensure(
        &mut self,
        rest: &Rest,
        runtime: &Runtime,
        session_key: &str,
        thread: u64,
        parent: u64,
        current: &Message,
    ) {
        match self.known.get(&thread) {
            Some(Known::Absent) => return,
            Some(Known::Failed(n)) if *n >= MAX_STARTER_READS => return,
            _ => {}
        }
        if runtime.has_thread_starter(session_key) {
            return;
        }
        let starter = if current.id.get() == thread {
            // A forum post's first message: the starter is the message at hand.
            Read::Found(Box::new(current.clone()))
        } else {
            match read(rest, parent, thread).await {
                Read::Absent => read(rest, thread, thread).await,
                other => other,
            }
        };
        let known = match starter {
            Read::Found(m) => {
                match runtime
                    .set_thread_starter(session_key, &starter_of(&m))
                    .await
                {
                    Ok(()) => {
                        self.known.pop(&thread);
                        return;
                    }
                    Err(error) => {
                        tracing::warn!(%error, thread, "cannot keep a discord thread's starter; tried again later");
                        self.failed(thread)
                    }
                }
            }
            Read::Absent => {
                tracing::debug!(thread, "discord thread has no starter message");
                Known::Absent
            }
            Read::Failed(error) => {
                tracing::warn!(%error, thread, "cannot read a discord thread's starter message; tried again at its next message");
                self.failed(thread)
            }
        };
        self.known.put(thread, known);
    }

    fn failed(&mut self, thread: u64) -> Known {
        match self.known.peek(&thread) {
            Some(Known::Failed(n)) => Known::Failed(n + 1),
            _ => Known::Failed(1),
        }
    }
}

/// One read of message `id` in `channel`, bounded by [`STARTER_READ_TIMEOUT`].
async fn read(rest: &Rest, channel: u64, id: u64) -> Read {
    match tokio::time::timeout(STARTER_READ_TIMEOUT, rest.message(channel, id)).await {
        Ok(Ok(m)) => Read::Found(Box::new(m)),
        // 404 (no such message there), 403 (no access): Discord will not give it.
        Ok(Err(RestError::Final(_))) => Read::Absent,
        Ok(Err(error)) => Read::Failed(error.to_string()),
        Err(_) => Read::Failed(format!(
            "no answer within {} s",
            STARTER_READ_TIMEOUT.as_secs()
        )),
    }
}
