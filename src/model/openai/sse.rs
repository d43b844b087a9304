//! A model's event stream as payloads, over the crate's one SSE parser (`crate::sse`).
//!
//! OpenAI-compatible servers put one JSON object on each `data:` line, so payloads are taken
//! line by line (a `data:` line is never continued on the next one in practice, and taking
//! each alone tolerates servers that omit the blank line between events). Errors arrive as a
//! `data:` payload holding `{"error":…}`, as an `event: error` followed by `data:`, or — from
//! llama.cpp — as a non-standard `error:` line; the last two are reported as
//! [`SseEvent::Error`]. A line longer than [`crate::sse::MAX_SSE_LINE_BYTES`] is an error.

use crate::error::ModelError;
use crate::sse::{SseLine, SseParser};

/// One payload of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SseEvent {
    /// A `data:` payload (JSON, or `[DONE]`).
    Data(String),
    /// An error reported by the server, as it sent it.
    Error(String),
}

/// Turns bytes, as they arrive, into [`SseEvent`]s.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    parser: SseParser,
    /// Lines parsed and not yet taken (kept to reuse its allocation).
    lines: Vec<SseLine>,
    /// The `event:` name of the event being read.
    event: Option<String>,
}

impl SseDecoder {
    /// Feeds `bytes`, appending every completed payload to `out`.
    pub(crate) fn push(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), ModelError> {
        let parsed = self.parser.push(bytes, &mut self.lines);
        self.take_lines(out);
        parsed.map_err(|e| ModelError::Protocol(e.to_string()))
    }

    /// Ends the stream: a last line without a newline still counts.
    pub(crate) fn finish(&mut self, out: &mut Vec<SseEvent>) {
        self.parser.finish(&mut self.lines);
        self.take_lines(out);
    }

    fn take_lines(&mut self, out: &mut Vec<SseEvent>) {
        for line in self.lines.drain(..) {
            let (name, value) = match line {
                SseLine::Blank => {
                    self.event = None;
                    continue;
                }
                SseLine::Field { name, value } => (name, value),
            };
            match name.as_str() {
                "data" if self.event.as_deref() == Some("error") => {
                    out.push(SseEvent::Error(value))
                }
                "data" => out.push(SseEvent::Data(value)),
                "event" => self.event = Some(value.trim().to_string()),
                "error" => out.push(SseEvent::Error(value)),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::MAX_SSE_LINE_BYTES;

    fn decode(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut d = SseDecoder::default();
        let mut out = Vec::new();
        for c in chunks {
            d.push(c, &mut out).unwrap();
        }
        d.finish(&mut out);
        out
    }

    #[test]
    fn splits_lines_across_chunks() {
        let events = decode(&[b"data: {\"a\"", b":1}\r\n\r\nda", b"ta: [DONE]\n\n"]);
        assert_eq!(
            events,
            vec![
                SseEvent::Data("{\"a\":1}".into()),
                SseEvent::Data("[DONE]".into())
            ]
        );
    }

    #[test]
    fn recognises_comments_events_and_error_lines() {
        let events = decode(&[
            b": keep-alive\n\nevent: error\ndata: {\"message\":\"x\"}\n\n",
            b"data: after\nerror: {\"code\":500}\nid: 7\nretry: 10\ndata:tight",
        ]);
        assert_eq!(
            events,
            vec![
                SseEvent::Error("{\"message\":\"x\"}".into()),
                SseEvent::Data("after".into()),
                SseEvent::Error("{\"code\":500}".into()),
                SseEvent::Data("tight".into()),
            ]
        );
    }

    #[test]
    fn bounds_line_length_and_survives_garbage() {
        let mut d = SseDecoder::default();
        let mut out = Vec::new();
        let big = vec![b'x'; MAX_SSE_LINE_BYTES / 2];
        d.push(&big, &mut out).unwrap();
        d.push(&big, &mut out).unwrap();
        assert!(d.push(b"xx", &mut out).is_err());
        let events = decode(&[&[0xff, 0xfe, b'\n', b'd', b'a', b't', b'a', b':', 0xc3, b'\n']]);
        assert_eq!(events, vec![SseEvent::Data("\u{fffd}".into())]);
    }

    fn decode_in_pieces(bytes: &[u8], cuts: &[usize]) -> Vec<SseEvent> {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let mut pieces = Vec::new();
        let mut start = 0;
        for cut in cuts {
            pieces.push(&bytes[start..cut]);
            start = cut;
        }
        pieces.push(&bytes[start..]);
        decode(&pieces)
    }

    proptest::proptest! {
        #[test]
        fn chunking_never_changes_the_events(
            text in "(data: [a-z{}\":0-9 ]{0,20}\r?\n|event: error\n|: c\n|\n|error: x\n){0,20}",
            cuts in proptest::collection::vec(0usize..1_000, 0..6),
        ) {
            let whole = decode(&[text.as_bytes()]);
            proptest::prop_assert_eq!(decode_in_pieces(text.as_bytes(), &cuts), whole);
        }

        #[test]
        fn arbitrary_bytes_never_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2_000),
            cuts in proptest::collection::vec(0usize..2_000, 0..6),
        ) {
            let whole = decode(&[&bytes]);
            proptest::prop_assert_eq!(decode_in_pieces(&bytes, &cuts), whole.clone());
            let mut state = crate::model::openai::wire::StreamState::default();
            for event in whole {
                if let SseEvent::Data(payload) = event {
                    let _ = state.apply(&payload);
                }
            }
            let _ = state.into_reply();
        }
    }
}
