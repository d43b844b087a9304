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
//! What is shared with Slack (whether to read, the bound, keeping it, failures remembered)
//! is in `channels/thread_starter.rs`; this module says where Discord has the starter.

use twilight_model::channel::message::Message;

use super::convert::display_name;
use super::rest::{Rest, RestError};
use crate::channels::thread_starter::Fetched;
use crate::store::ThreadStarter;

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

/// Reads the starter of thread `thread` of `parent`, whose message `current` is being
/// handled: `current` itself when it is the starter (a forum post's first message), else the
/// parent's message with the thread's id, else the thread's own (the caller bounds the time).
pub(crate) async fn read_starter(
    rest: &Rest,
    thread: u64,
    parent: u64,
    current: &Message,
) -> Fetched {
    if current.id.get() == thread {
        return Fetched::Found(starter_of(current));
    }
    match read(rest, parent, thread).await {
        Fetched::Absent => read(rest, thread, thread).await,
        other => other,
    }
}

/// One read of message `id` in `channel`.
async fn read(rest: &Rest, channel: u64, id: u64) -> Fetched {
    match rest.message(channel, id).await {
        Ok(m) => Fetched::Found(starter_of(&m)),
        // 404 (no such message there), 403 (no access): Discord will not give it.
        Err(RestError::Final(_)) => Fetched::Absent,
        Err(error) => Fetched::Failed(error.to_string()),
    }
}
