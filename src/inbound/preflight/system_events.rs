//! System events (preflight step 5): a platform event (join, rename, pin…) is not a turn. The
//! admission queues it durably for its session (`Store::queue_system_event`), and the
//! session's next accepted message carries the queued events (`InboxRecord::system_events`)
//! and removes them. Preflight only turns the message into the event.

use crate::inbound::InboundMessage;
use crate::store::SystemEvent;

/// Longest kept event text, in characters (platform events are one-liners).
pub const MAX_SYSTEM_EVENT_CHARS: usize = 500;

/// The event `msg` (a system event) queues, unless it is empty or repeats `last`, the event
/// queued just before it.
pub fn event_of(msg: &InboundMessage, last: Option<&SystemEvent>) -> Option<SystemEvent> {
    let text = msg.text.trim();
    if text.is_empty() {
        return None;
    }
    let text = super::cap_chars(text, MAX_SYSTEM_EVENT_CHARS);
    if last.is_some_and(|l| l.text == text) {
        return None;
    }
    Some(SystemEvent {
        timestamp_ms: msg.timestamp_ms,
        text,
    })
}
