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

/// `read`, given up after [`STARTER_READ_TIMEOUT`] as a failure.
async fn bounded(read: impl Future<Output = Fetched>) -> Fetched {
    tokio::time::timeout(STARTER_READ_TIMEOUT, read)
        .await
        .unwrap_or_else(|_| {
            Fetched::Failed(format!(
                "no answer within {} s",
                STARTER_READ_TIMEOUT.as_secs()
            ))
        })
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
        let known = match bounded(read).await {
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::config::Config;

    #[tokio::test(start_paused = true)]
    async fn a_read_that_does_not_answer_fails_after_the_bound() {
        let start = tokio::time::Instant::now();
        let fetched = bounded(std::future::pending()).await;
        assert!(matches!(fetched, Fetched::Failed(_)), "{fetched:?}");
        assert_eq!(start.elapsed(), STARTER_READ_TIMEOUT);
    }

    fn starter(id: &str) -> ThreadStarter {
        ThreadStarter {
            sender_name: "Ann".into(),
            text: "Shall we plan the offsite?".into(),
            message_id: id.into(),
            timestamp_ms: 1,
        }
    }

    #[tokio::test]
    async fn reads_until_kept_twice_when_failing_once_when_absent() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = Runtime::builder()
            .config(Config::with_data_dir(dir.path()))
            .build()
            .await
            .unwrap();
        let reads = AtomicUsize::new(0);
        let read = |answer: fn() -> Fetched| {
            let reads = &reads;
            async move {
                reads.fetch_add(1, Ordering::SeqCst);
                answer()
            }
        };
        let mut starters = Starters::new("test");
        let (kept, failing, absent) = ("k:thread:1", "k:thread:2", "k:thread:3");

        // Found: kept durably, never read again.
        starters
            .ensure(&runtime, kept, read(|| Fetched::Found(starter("1"))))
            .await;
        assert!(runtime.has_thread_starter(kept));
        starters
            .ensure(&runtime, kept, read(|| Fetched::Found(starter("1"))))
            .await;
        assert_eq!(reads.swap(0, Ordering::SeqCst), 1);

        // Failing: read at two messages, then left until the next start.
        for _ in 0..4 {
            starters
                .ensure(&runtime, failing, read(|| Fetched::Failed("500".into())))
                .await;
        }
        assert_eq!(reads.swap(0, Ordering::SeqCst), MAX_STARTER_READS as usize);
        assert!(!runtime.has_thread_starter(failing));

        // Absent: asked once.
        for _ in 0..3 {
            starters
                .ensure(&runtime, absent, read(|| Fetched::Absent))
                .await;
        }
        assert_eq!(reads.swap(0, Ordering::SeqCst), 1);

        // A failure then a success: kept at the second message.
        let mut again = Starters::new("test");
        let later = "k:thread:4";
        again
            .ensure(&runtime, later, read(|| Fetched::Failed("timeout".into())))
            .await;
        again
            .ensure(&runtime, later, read(|| Fetched::Found(starter("4"))))
            .await;
        assert!(runtime.has_thread_starter(later));
        runtime.shutdown().await.unwrap();
    }
}
