//! The streaming reply of `/v1/chat/completions`: a `chat.completion.chunk` per text delta as
//! the model produces it, the rest of the text and the finish reason with the final reply, the
//! usage chunk when asked for, then `[DONE]`. A failed turn ends the stream with an error
//! payload (the status line went out with the first byte).

use std::time::Duration;

use axum::response::sse::Event;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::response::{failure_payload, failure_status, finish_reason_of, model_of, usage_json};
use crate::replies::{Delta, Heard, Reply, ReplyWaiter};
use crate::server::chat_request;

/// Comment lines sent this often while a stream is silent (before the first token, during
/// tool rounds), so proxies and clients keep the connection.
pub(crate) const STREAM_KEEPALIVE: Duration = Duration::from_secs(5);

/// Events buffered between the stream's task and the HTTP body; a client slower than this
/// makes the task wait, and the deltas it misses meanwhile come with the final reply.
pub(crate) const STREAM_EVENT_BUFFER: usize = 16;

/// What every chunk of one stream repeats.
pub(super) struct StreamHead {
    /// The completion id.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The model named until the reply says which answered.
    pub model: String,
    /// `stream_options.include_usage`: a last chunk with `usage` and no choices.
    pub include_usage: bool,
}

impl StreamHead {
    fn chunk(&self, model: &str, delta: Value, finish: Value) -> Event {
        let data = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        Event::default().data(data.to_string())
    }
}

/// What of the current model call's text the client has: the deltas since the call started,
/// as long as none was missed. The final reply's text continues it (see [`Sent::rest_of`]).
/// When the turn starts over (interrupt mode, a retry: `seq` goes back), the new attempt's
/// text is matched against what the client already has, and only what extends it is sent.
#[derive(Debug, Default)]
struct Sent {
    text: String,
    round: u32,
    last_seq: u64,
    /// A delta of this call was missed, or a new attempt said something else: stop sending
    /// deltas, the final text fills in what it can.
    gap: bool,
    /// The text of an attempt that started over, while it repeats what was sent.
    replay: Option<String>,
}

impl Sent {
    /// What of the delta's text to send, if anything.
    fn take(&mut self, delta: &Delta) -> Option<String> {
        let continues = delta.seq == self.last_seq + 1;
        if delta.seq <= self.last_seq {
            // The turn started over: the client keeps what it has.
            self.round = delta.round;
            self.gap = delta.seq != 1;
            self.replay = Some(String::new());
        } else if delta.round != self.round {
            // A new model call (a tool round): its text starts afresh; missing its first
            // delta is a gap too.
            self.text.clear();
            self.round = delta.round;
            self.gap = !continues;
            self.replay = None;
        } else if !continues {
            self.gap = true;
        }
        self.last_seq = delta.seq;
        if self.gap {
            return None;
        }
        if let Some(replay) = &mut self.replay {
            replay.push_str(&delta.text);
            if self.text.starts_with(replay.as_str()) {
                return None;
            }
            let Some(new) = replay.strip_prefix(self.text.as_str()).map(str::to_string) else {
                self.gap = true;
                return None;
            };
            self.text = std::mem::take(replay);
            self.replay = None;
            return Some(new);
        }
        self.text.push_str(&delta.text);
        Some(delta.text.clone())
    }

    /// What of `final_text` the client lacks: the part after what was sent of this call, or
    /// nothing when the final text does not continue it.
    fn rest_of<'a>(&self, final_text: &'a str) -> &'a str {
        final_text.strip_prefix(self.text.as_str()).unwrap_or("")
    }
}

/// Feeds `tx` until the reply (or the deadline): the stream task of one request. `joined`: the
/// stored answer of a retry whose message was answered already, sent at once.
pub(super) async fn forward(
    head: StreamHead,
    mut waiter: ReplyWaiter<'_>,
    joined: Option<Reply>,
    timeout: Duration,
    tx: mpsc::Sender<Event>,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    if tx
        .send(head.chunk(&head.model, json!({"role": "assistant"}), Value::Null))
        .await
        .is_err()
    {
        return;
    }
    let mut sent = Sent::default();
    if let Some(reply) = joined {
        // A retry of a message answered already: its stored answer, at once.
        drop(waiter);
        for event in closing_events(&head, &sent, Some(&reply)) {
            if tx.send(event).await.is_err() {
                return;
            }
        }
        return;
    }
    let reply = loop {
        match tokio::time::timeout_at(deadline, waiter.next()).await {
            Ok(Some(Heard::Delta(delta))) => {
                if let Some(text) = sent.take(&delta) {
                    let chunk = head.chunk(&head.model, json!({"content": text}), Value::Null);
                    if tx.send(chunk).await.is_err() {
                        return;
                    }
                }
            }
            Ok(Some(Heard::Reply(reply))) => break Some(reply),
            Ok(None) => break None,
            Err(_) => {
                let payload = failure_payload("timeout", "no reply in time");
                let _ = tx.send(Event::default().data(payload.to_string())).await;
                let _ = tx.send(Event::default().data("[DONE]")).await;
                return;
            }
        }
    };
    drop(waiter);
    for event in closing_events(&head, &sent, reply.as_deref()) {
        if tx.send(event).await.is_err() {
            return;
        }
    }
}

/// The events after the last delta: the rest of the text, the finish chunk, the usage chunk,
/// `[DONE]`; or the error payload and `[DONE]`.
fn closing_events(head: &StreamHead, sent: &Sent, reply: Option<&Reply>) -> Vec<Event> {
    let done = Event::default().data("[DONE]");
    let Some(reply) = reply else {
        let payload = failure_payload("shutting_down", "the server is shutting down");
        return vec![Event::default().data(payload.to_string()), done];
    };
    if reply.error {
        let (_, code) = failure_status(reply.error_kind);
        let payload = failure_payload(code, &reply.text);
        return vec![Event::default().data(payload.to_string()), done];
    }
    let model = model_of(reply, &head.model);
    let mut events = Vec::with_capacity(4);
    let rest = sent.rest_of(&reply.text);
    if !rest.is_empty() {
        events.push(head.chunk(model, json!({"content": rest}), Value::Null));
    }
    if !reply.tool_calls.is_empty() {
        let calls: Vec<Value> = reply
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut call = chat_request::tool_call_json(c);
                call["index"] = json!(i);
                call
            })
            .collect();
        events.push(head.chunk(model, json!({"tool_calls": calls}), Value::Null));
    }
    events.push(head.chunk(model, json!({}), json!(finish_reason_of(reply))));
    if head.include_usage {
        let data = json!({
            "id": head.id,
            "object": "chat.completion.chunk",
            "created": head.created,
            "model": model,
            "choices": [],
            "usage": usage_json(reply.usage),
        });
        events.push(Event::default().data(data.to_string()));
    }
    events.push(done);
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(seq: u64, round: u32, text: &str) -> Delta {
        Delta {
            session_key: "k".into(),
            in_reply_to: vec!["m".into()],
            seq,
            text: text.into(),
            round,
        }
    }

    #[test]
    fn contiguous_deltas_are_sent_and_the_reply_fills_the_rest() {
        let mut sent = Sent::default();
        assert_eq!(sent.take(&delta(1, 0, "Hel")).as_deref(), Some("Hel"));
        assert_eq!(sent.take(&delta(2, 0, "lo")).as_deref(), Some("lo"));
        assert_eq!(sent.rest_of("Hello world"), " world");
        assert_eq!(sent.rest_of("Hello"), "");
    }

    #[test]
    fn a_missed_delta_stops_deltas_and_the_reply_fills_in() {
        let mut sent = Sent::default();
        assert!(sent.take(&delta(1, 0, "a")).is_some());
        assert!(sent.take(&delta(3, 0, "c")).is_none());
        assert!(sent.take(&delta(4, 0, "d")).is_none());
        assert_eq!(sent.rest_of("abcd"), "bcd");
    }

    #[test]
    fn a_new_round_starts_afresh() {
        let mut sent = Sent::default();
        assert!(sent.take(&delta(1, 0, "let me look")).is_some());
        assert_eq!(sent.take(&delta(2, 1, "It is ")).as_deref(), Some("It is "));
        assert_eq!(sent.rest_of("It is 4."), "4.");
        // A round whose first delta was missed sends nothing until the reply, then all of it.
        assert!(sent.take(&delta(4, 2, "z")).is_none());
        assert_eq!(sent.rest_of("yz"), "yz");
    }

    #[test]
    fn a_turn_that_starts_over_sends_only_what_extends_the_text() {
        let mut sent = Sent::default();
        assert!(sent.take(&delta(1, 0, "Hello")).is_some());
        assert!(sent.take(&delta(2, 0, ", wo")).is_some());
        // Interrupted; the new attempt repeats, then goes further.
        assert!(sent.take(&delta(1, 0, "Hel")).is_none());
        assert!(sent.take(&delta(2, 0, "lo, ")).is_none());
        assert_eq!(sent.take(&delta(3, 0, "world")).as_deref(), Some("rld"));
        assert_eq!(sent.take(&delta(4, 0, "!")).as_deref(), Some("!"));
        assert_eq!(sent.rest_of("Hello, world!"), "");
        // An attempt that says something else: nothing more is sent, not even at the end.
        assert!(sent.take(&delta(1, 0, "Bye")).is_none());
        assert!(sent.take(&delta(2, 0, "!")).is_none());
        assert_eq!(sent.rest_of("Bye!"), "");
    }
}
