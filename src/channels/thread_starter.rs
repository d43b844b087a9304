//! A thread session's starter message (the seed's `ThreadStarterBody`), the part every
//! channel with threads shares (Discord, Slack): whether it still has to be read, one
//! bounded read, keeping it with the session (`Runtime::set_thread_starter`), and what is
//! remembered of reads that failed or found nothing. Where the starter is read from is the
//! platform's (`discord/starter.rs`, `slack/starter.rs`); the `thread_starter` context source
//! shows what is kept.
//!
//! Reading it never holds up the turn for long or stops it: the read is bounded by
//! [`STARTER_READ_TIMEOUT`]; a failed read is logged and tried once more at the thread's next
//! message ([`MAX_STARTER_READS`]), then left until the next start (no retry storm). Whether
//! the starter is kept is asked of the store at each of the thread's messages (a point read,
//! right also after the session was deleted); failures and threads without a starter are
//! remembered in memory ([`MAX_KNOWN_STARTERS`], least recently used forgotten first).

use std::future::Future;
use std::num::NonZeroUsize;
use std::time::Duration;

use lru::LruCache;

use crate::runtime::Runtime;
use crate::store::ThreadStarter;

/// Longest wait for one read of a starter (a rate-limited or unreachable platform answers
/// later than the turn should wait).
pub(crate) const STARTER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads of one thread's starter that fail (transport, timeout, 5xx, 429) before it is left
/// until the next start: the first and one retry at a later message.
pub(crate) const MAX_STARTER_READS: u32 = 2;

/// Thread sessions whose starter question is remembered in memory, per channel task.
pub(crate) const MAX_KNOWN_STARTERS: usize = 10_000;

/// What one read of a starter gave.
#[derive(Debug)]
pub(crate) enum Fetched {
    /// The starter, as it is to be kept.
    Found(ThreadStarter),
    /// The platform has none to give (none, deleted, not readable with the bot's rights).
    Absent,
    /// The read failed (transport, 5xx, 429): worth one more try later.
    Failed(String),
}

/// What is known in memory of one thread's starter (that it is kept is asked of the store).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    /// The thread has no starter the platform can give.
    Absent,
    /// Reads failed this many times.
    Failed(u32),
}

/// The starters of the thread sessions one channel task has seen, keyed by session key and
/// bounded by [`MAX_KNOWN_STARTERS`].
#[derive(Debug)]
pub(crate) struct Starters {
    /// The channel's name, for the logs.
    channel: &'static str,
    known: LruCache<String, Known>,
}

impl Starters {
    /// Nothing known yet, for channel `channel`.
    pub(crate) fn new(channel: &'static str) -> Self {
        Self {
            channel,
            known: LruCache::new(
                NonZeroUsize::new(MAX_KNOWN_STARTERS).unwrap_or(NonZeroUsize::MIN),
            ),
        }
    }

    /// Whether the thread session `session_key` still needs its starter read: not kept, not
    /// known to be absent, and not past [`MAX_STARTER_READS`] failures.
    fn wanted(&mut self, runtime: &Runtime, session_key: &str) -> bool {
        match self.known.get(session_key) {
            Some(Known::Absent) => false,
            Some(Known::Failed(n)) if *n >= MAX_STARTER_READS => false,
            _ => !runtime.has_thread_starter(session_key),
        }
    }

    /// Makes sure the thread session `session_key` has its starter kept: when it still needs
    /// it, `read` (lazy: not polled otherwise) is awaited, at most [`STARTER_READ_TIMEOUT`],
    /// and what it found kept durably beside the session.
    pub(crate) async fn ensure(
        &mut self,
        runtime: &Runtime,
        session_key: &str,
        read: impl Future<Output = Fetched>,
    ) {
        if !self.wanted(runtime, session_key) {
            return;
        }
        let channel = self.channel;
        let fetched = tokio::time::timeout(STARTER_READ_TIMEOUT, read)
            .await
            .unwrap_or_else(|_| {
                Fetched::Failed(format!(
                    "no answer within {} s",
                    STARTER_READ_TIMEOUT.as_secs()
                ))
            });
        let known = match fetched {
            Fetched::Found(starter) => {
                match runtime.set_thread_starter(session_key, &starter).await {
                    Ok(()) => {
                        self.known.pop(session_key);
                        return;
                    }
                    Err(error) => {
                        tracing::warn!(%error, channel, session = session_key, "cannot keep a thread's starter; the turn goes on without it");
                        self.failed(session_key)
                    }
                }
            }
            Fetched::Absent => {
                tracing::debug!(
                    channel,
                    session = session_key,
                    "thread has no starter message"
                );
                Known::Absent
            }
            Fetched::Failed(error) => {
                tracing::warn!(%error, channel, session = session_key, "cannot read a thread's starter message; the turn goes on without it");
                self.failed(session_key)
            }
        };
        if let Known::Failed(n) = known {
            let next = if n >= MAX_STARTER_READS {
                "not read again until the next start"
            } else {
                "read again at the thread's next message"
            };
            tracing::info!(
                channel,
                session = session_key,
                failures = n,
                "thread starter {next}"
            );
        }
        self.known.put(session_key.to_string(), known);
    }

    fn failed(&mut self, session_key: &str) -> Known {
        match self.known.peek(session_key) {
            Some(Known::Failed(n)) => Known::Failed(n + 1),
            _ => Known::Failed(1),
        }
    }
}
