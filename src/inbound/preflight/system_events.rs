//! System events (preflight step 5): a platform event (join, rename, pin…) is not a turn. It is
//! queued for its session and handed to the session's next accepted message
//! (`InboxRecord::system_events`), which makes it durable with that message.

use std::collections::VecDeque;
use std::sync::Arc;

use super::lru::LruMap;
use crate::inbound::InboundMessage;
use crate::store::SystemEvent;

/// Sessions with queued system events kept at once (least recently used forgotten first).
pub const MAX_SYSTEM_EVENT_SESSIONS: usize = 4_096;
/// Longest kept event text, in characters (platform events are one-liners).
pub const MAX_SYSTEM_EVENT_CHARS: usize = 500;

/// Per-session queues of events waiting for the next turn. At most `max_per_session` events
/// per session (the oldest dropped first) in at most [`MAX_SYSTEM_EVENT_SESSIONS`] sessions.
#[derive(Debug)]
pub(super) struct SystemEventQueues {
    queues: LruMap<Arc<str>, VecDeque<SystemEvent>>,
    max_per_session: usize,
}

impl SystemEventQueues {
    pub(super) fn new(max_per_session: usize) -> Self {
        Self {
            queues: LruMap::new(MAX_SYSTEM_EVENT_SESSIONS),
            max_per_session,
        }
    }

    /// Queues `msg` (a system event) for `session_key`, unless it is empty or repeats the
    /// event queued just before it.
    pub(super) fn push(&mut self, session_key: &str, msg: &InboundMessage) {
        let text = msg.text.trim();
        if self.max_per_session == 0 || text.is_empty() {
            return;
        }
        let text = super::cap_chars(text, MAX_SYSTEM_EVENT_CHARS);
        let queue = self
            .queues
            .get_or_insert_with(Arc::from(session_key), VecDeque::new);
        if queue.back().is_some_and(|last| last.text == text) {
            return;
        }
        if queue.len() >= self.max_per_session {
            queue.pop_front();
        }
        queue.push_back(SystemEvent {
            timestamp_ms: msg.timestamp_ms,
            text,
        });
    }

    /// The events queued for `session_key`, oldest first (left queued).
    pub(super) fn peek(&self, session_key: &str) -> Vec<SystemEvent> {
        self.queues
            .peek(session_key)
            .map(|q| q.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Forgets the events queued for `session_key` (they went to a turn).
    pub(super) fn clear(&mut self, session_key: &str) {
        self.queues.remove(session_key);
    }

    /// Sessions with queued events.
    pub(super) fn sessions(&self) -> usize {
        self.queues.len()
    }
}
