//! The one Server-Sent Events parser, for every stream this crate reads: the model client's
//! streamed completions (`model/openai/sse.rs` maps its lines to payloads and errors), the load
//! test's `/v1/events` reader, and the tests' readers.
//!
//! [`SseParser`] turns bytes, as they arrive, into [`SseLine`]s: `field: value` lines (the one
//! space after the colon dropped, `\r\n` or `\n` line ends, `:` comments skipped) and the blank
//! lines that end events. [`SseEvents`] assembles lines into [`SseEvent`]s as the
//! `text/event-stream` format says (`event:` names, `data:` lines joined by `\n`). Written by
//! hand rather than with an SSE crate because it must stay bounded: a line longer than
//! [`MAX_SSE_LINE_BYTES`] is an error. Invalid UTF-8 is replaced, never a failure.

use memchr::memchr;

/// Longest line accepted from a stream. A streamed chunk is a few hundred bytes; a line this
/// long means a broken or hostile server.
pub const MAX_SSE_LINE_BYTES: usize = 1 << 20;

/// One line of a stream (comments are skipped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseLine {
    /// `name: value`; a line without a colon is a field with an empty value.
    Field {
        /// The field name (`data`, `event`, `id`, …).
        name: String,
        /// The value, without the one space after the colon.
        value: String,
    },
    /// A blank line: the end of an event.
    Blank,
}

/// A line longer than [`MAX_SSE_LINE_BYTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stream line longer than {MAX_SSE_LINE_BYTES} bytes")]
pub struct SseLineTooLong;

/// Turns bytes, as they arrive, into [`SseLine`]s.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    /// How much of `buf` is known to hold no newline.
    scanned: usize,
}

impl SseParser {
    /// Feeds `bytes`, appending every completed line to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<SseLine>) -> Result<(), SseLineTooLong> {
        self.buf.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(offset) = memchr(b'\n', &self.buf[start + self.scanned..]) {
            let end = start + self.scanned + offset;
            out.extend(parse_line(&self.buf[start..end]));
            start = end + 1;
            self.scanned = 0;
        }
        self.buf.drain(..start);
        self.scanned = self.buf.len();
        if self.buf.len() > MAX_SSE_LINE_BYTES {
            return Err(SseLineTooLong);
        }
        Ok(())
    }

    /// Ends the stream: a last line without a newline still counts.
    pub fn finish(&mut self, out: &mut Vec<SseLine>) {
        if !self.buf.is_empty() {
            out.extend(parse_line(&self.buf));
            self.buf.clear();
            self.scanned = 0;
        }
    }
}

/// One line, without its `\n`; `None` for a comment.
fn parse_line(raw: &[u8]) -> Option<SseLine> {
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    if raw.is_empty() {
        return Some(SseLine::Blank);
    }
    if raw.starts_with(b":") {
        return None;
    }
    let line = String::from_utf8_lossy(raw);
    let (name, value) = match line.split_once(':') {
        Some((name, value)) => (name, value.strip_prefix(' ').unwrap_or(value)),
        None => (&*line, ""),
    };
    Some(SseLine::Field {
        name: name.to_string(),
        value: value.to_string(),
    })
}

/// One event of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `None` for the default (`message`).
    pub event: Option<String>,
    /// The `data:` lines, joined by `\n`.
    pub data: String,
}

/// Assembles [`SseLine`]s into [`SseEvent`]s: an event ends at a blank line, if it has a name
/// or data. Other fields (`id`, `retry`) are ignored.
#[derive(Debug, Default)]
pub struct SseEvents {
    event: Option<String>,
    data: Vec<String>,
}

impl SseEvents {
    /// Takes `line`; returns the event it ends, if any.
    pub fn line(&mut self, line: SseLine) -> Option<SseEvent> {
        match line {
            SseLine::Blank => {
                if self.event.is_none() && self.data.is_empty() {
                    return None;
                }
                Some(SseEvent {
                    event: self.event.take(),
                    data: std::mem::take(&mut self.data).join("\n"),
                })
            }
            SseLine::Field { name, value } => {
                match name.as_str() {
                    "event" => self.event = Some(value),
                    "data" => self.data.push(value),
                    _ => {}
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(chunks: &[&[u8]]) -> Vec<SseLine> {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        for c in chunks {
            p.push(c, &mut out).unwrap();
        }
        p.finish(&mut out);
        out
    }

    fn field(name: &str, value: &str) -> SseLine {
        SseLine::Field {
            name: name.into(),
            value: value.into(),
        }
    }

    #[test]
    fn splits_fields_blank_lines_and_comments() {
        assert_eq!(
            lines(&[b": c\nevent: x\r\ndata:tight\n\nid\nda", b"ta: a: b"]),
            vec![
                field("event", "x"),
                field("data", "tight"),
                SseLine::Blank,
                field("id", ""),
                field("data", "a: b"),
            ]
        );
    }

    #[test]
    fn assembles_events_as_the_format_says() {
        let wire = "event: reply\ndata: {\"a\":1}\n\n: keep-alive\n\ndata: one\r\ndata: two\r\n\r\ndata:[DONE]\n\n";
        let mut events = SseEvents::default();
        let got: Vec<SseEvent> = lines(&[wire.as_bytes()])
            .into_iter()
            .filter_map(|l| events.line(l))
            .collect();
        let event = |name: Option<&str>, data: &str| SseEvent {
            event: name.map(Into::into),
            data: data.into(),
        };
        assert_eq!(
            got,
            vec![
                event(Some("reply"), "{\"a\":1}"),
                event(None, "one\ntwo"),
                event(None, "[DONE]"),
            ]
        );
    }

    #[test]
    fn bounds_line_length() {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        let big = vec![b'x'; MAX_SSE_LINE_BYTES / 2];
        p.push(&big, &mut out).unwrap();
        p.push(&big, &mut out).unwrap();
        assert_eq!(p.push(b"xx", &mut out), Err(SseLineTooLong));
    }
}
