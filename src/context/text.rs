//! Small text helpers shared by sources, processors and the tool loop.

use std::borrow::Cow;
use std::time::{Duration, UNIX_EPOCH};

/// `text` with its middle cut out if it is longer than `head + tail` characters: the first
/// `head` and last `tail` characters are kept around a `[... N more characters truncated]`
/// line.
pub(crate) fn truncate_middle(text: &str, head: usize, tail: usize) -> Cow<'_, str> {
    let chars = text.chars().count();
    if chars <= head.saturating_add(tail) {
        return Cow::Borrowed(text);
    }
    let omitted = chars - head - tail;
    let head_end = text.char_indices().nth(head).map_or(text.len(), |(i, _)| i);
    let tail_start = text
        .char_indices()
        .nth(chars - tail)
        .map_or(text.len(), |(i, _)| i);
    Cow::Owned(format!(
        "{}\n[... {omitted} more characters truncated]\n{}",
        &text[..head_end],
        &text[tail_start..]
    ))
}

/// At most `max` characters of `text` (cut at a character boundary).
pub(crate) fn prefix_chars(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

/// A timestamp as RFC 3339 UTC to the second, e.g. `2025-11-30T02:33:20Z`.
pub(crate) fn format_ts(ms: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn middle_is_cut_and_counted() {
        assert_eq!(
            truncate_middle("short", 2, 2),
            "sh\n[... 1 more characters truncated]\nrt"
        );
        assert_eq!(truncate_middle("abcd", 2, 2), "abcd");
        let long = format!("{}{}{}", "h".repeat(10), "é".repeat(100), "t".repeat(10));
        let cut = truncate_middle(&long, 10, 10);
        assert!(cut.starts_with("hhhhhhhhhh\n[... 100 more characters truncated]\n"));
        assert!(cut.ends_with("tttttttttt"));
        assert_eq!(prefix_chars("héllo", 2), "hé");
        assert_eq!(prefix_chars("hi", 5), "hi");
        assert_eq!(format_ts(1_764_470_000_000), "2025-11-30T02:33:20Z");
    }
}
