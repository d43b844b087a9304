//! A Server-Sent Events reader over a response body, for `/v1/events` and streamed
//! completions: the library's parser (`turnstile::sse`) over a byte stream.

use std::collections::VecDeque;
use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use serde_json::Value;
use turnstile::sse::{SseEvents, SseParser};

use super::wait::PATIENCE;

/// One event of an SSE stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `None` for the default (`message`).
    pub event: Option<String>,
    /// The `data:` lines, joined by `\n`.
    pub data: String,
}

impl SseEvent {
    /// The data as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data)
            .unwrap_or_else(|e| panic!("event data is not JSON ({e}): {:?}", self.data))
    }
}

impl From<turnstile::sse::SseEvent> for SseEvent {
    fn from(e: turnstile::sse::SseEvent) -> Self {
        Self {
            event: e.event,
            data: e.data,
        }
    }
}

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Vec<u8>>> + Send>>;

/// Reads events from a streaming response body (the `text/event-stream` format: `field: value`
/// lines, events separated by a blank line, `:` comments ignored).
pub struct SseStream {
    body: ByteStream,
    parser: SseParser,
    events: SseEvents,
    ready: VecDeque<SseEvent>,
}

impl SseStream {
    pub fn new(response: reqwest::Response) -> Self {
        Self::from_bytes(response.bytes_stream().map(|r| r.map(|b| b.to_vec())))
    }

    /// Reads events from any byte stream (the parser's own tests feed it pieces).
    pub fn from_bytes(body: impl Stream<Item = reqwest::Result<Vec<u8>>> + Send + 'static) -> Self {
        Self {
            body: Box::pin(body),
            parser: SseParser::default(),
            events: SseEvents::default(),
            ready: VecDeque::new(),
        }
    }

    /// The next event, or `None` once the server ended the stream.
    pub async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            let bytes = match self.body.next().await {
                Some(Ok(bytes)) => bytes,
                Some(Err(e)) => panic!("reading an event stream: {e}"),
                None => return None,
            };
            let mut lines = Vec::new();
            self.parser
                .push(&bytes, &mut lines)
                .expect("an event stream line within the library's bound");
            let events = &mut self.events;
            self.ready.extend(
                lines
                    .into_iter()
                    .filter_map(|l| events.line(l))
                    .map(SseEvent::from),
            );
        }
    }

    /// The next event; fails the test if none comes within [`PATIENCE`] or the stream ends.
    pub async fn expect_next(&mut self) -> SseEvent {
        tokio::time::timeout(PATIENCE, self.next())
            .await
            .expect("timed out waiting for an event")
            .expect("the event stream ended")
    }

    /// Every remaining event until the server ends the stream (within [`PATIENCE`]).
    pub async fn rest(&mut self) -> Vec<SseEvent> {
        let mut events = Vec::new();
        let all = async {
            while let Some(e) = self.next().await {
                events.push(e);
            }
        };
        tokio::time::timeout(PATIENCE, all)
            .await
            .expect("the event stream did not end");
        events
    }
}
