//! A Server-Sent Events reader over a response body, for `/v1/events` and streamed
//! completions.

use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use serde_json::Value;

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

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Vec<u8>>> + Send>>;

/// Reads events from a streaming response body (the `text/event-stream` format: `field: value`
/// lines, events separated by a blank line, `:` comments ignored).
pub struct SseStream {
    body: ByteStream,
    buf: Vec<u8>,
    event: Option<String>,
    data: Vec<String>,
}

impl SseStream {
    pub fn new(response: reqwest::Response) -> Self {
        Self::from_bytes(response.bytes_stream().map(|r| r.map(|b| b.to_vec())))
    }

    /// Reads events from any byte stream (the parser's own tests feed it pieces).
    pub fn from_bytes(body: impl Stream<Item = reqwest::Result<Vec<u8>>> + Send + 'static) -> Self {
        Self {
            body: Box::pin(body),
            buf: Vec::new(),
            event: None,
            data: Vec::new(),
        }
    }

    /// The next event, or `None` once the server ended the stream.
    pub async fn next(&mut self) -> Option<SseEvent> {
        loop {
            while let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
                let raw: Vec<u8> = self.buf.drain(..=end).collect();
                let line = String::from_utf8(raw).expect("SSE is UTF-8");
                let line = line.trim_end_matches(['\n', '\r']);
                if line.is_empty() {
                    if self.event.is_some() || !self.data.is_empty() {
                        return Some(SseEvent {
                            event: self.event.take(),
                            data: std::mem::take(&mut self.data).join("\n"),
                        });
                    }
                    continue;
                }
                if line.starts_with(':') {
                    continue;
                }
                let (field, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                match field {
                    "event" => self.event = Some(value.to_string()),
                    "data" => self.data.push(value.to_string()),
                    _ => {}
                }
            }
            match self.body.next().await {
                Some(Ok(bytes)) => self.buf.extend_from_slice(&bytes),
                Some(Err(e)) => panic!("reading an event stream: {e}"),
                None => return None,
            }
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
