//! Splitting a reply into Discord messages: at most 2,000 characters each (Discord's limit on
//! `content`), cut at a line break when one lies in the second half of the window, else at a
//! space, else anywhere. A cut inside a code fence closes the fence at the end of the piece and
//! reopens it (with its language) at the start of the next, so each message renders as code.

/// Discord's longest message content, in characters (Unicode scalar values).
pub(crate) const MAX_MESSAGE_CHARS: usize = 2_000;

/// Longest language tag carried over to a reopened fence.
const MAX_FENCE_TAG_CHARS: usize = 20;

/// Characters kept free in each piece for a fence closed at its end (`\n```\n`).
const FENCE_CLOSE: &str = "\n```";

/// The open fence line (e.g. "```rust") in force at the end of `text`, given the one in force
/// at its start.
fn fence_after(text: &str, mut open: Option<String>) -> Option<String> {
    for line in text.split('\n') {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("```") {
            open = match open {
                Some(_) => None,
                // The language tag, bounded so a reopened fence never fills a piece.
                None => Some(format!(
                    "```{}",
                    rest.trim()
                        .chars()
                        .take(MAX_FENCE_TAG_CHARS)
                        .collect::<String>()
                )),
            };
        }
    }
    open
}

/// `text` in pieces of at most `max` characters (`max` ≥ 40), in order, none empty. With no
/// code fence cut, the pieces concatenate back to `text`.
pub(crate) fn split_message(text: &str, max: usize) -> Vec<String> {
    let max = max.max(40);
    let mut out = Vec::new();
    let mut rest = text;
    // The fence open at the start of `rest` (reopened at the head of the next piece).
    let mut open: Option<String> = None;
    while !rest.is_empty() {
        let head = open.as_ref().map(|f| format!("{f}\n")).unwrap_or_default();
        let room = max.saturating_sub(head.chars().count());
        if rest.chars().count() <= room {
            out.push(format!("{head}{rest}"));
            break;
        }
        // Leave room to close a fence, should the piece end inside one.
        let room = room.saturating_sub(FENCE_CLOSE.chars().count()).max(1);
        let hard = rest.char_indices().nth(room).map_or(rest.len(), |(i, _)| i);
        let window = &rest[..hard];
        let cut = window
            .rfind('\n')
            .filter(|&i| i >= hard / 2)
            .or_else(|| window.rfind(' ').filter(|&i| i >= hard / 2))
            .map_or(hard, |i| i + 1);
        let piece = &rest[..cut];
        let after = fence_after(piece, open.clone());
        let mut chunk = format!("{head}{piece}");
        if after.is_some() {
            chunk.push_str(FENCE_CLOSE);
        }
        out.push(chunk);
        open = after;
        rest = &rest[cut..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, max: usize) -> Vec<String> {
        let parts = split_message(text, max);
        for p in &parts {
            assert!(!p.is_empty());
            assert!(
                p.chars().count() <= max,
                "{} > {max}: {p:?}",
                p.chars().count()
            );
        }
        parts
    }

    #[test]
    fn plain_text_is_cut_at_lines_then_spaces() {
        assert!(check("", 100).is_empty());
        assert_eq!(check("short", 100), vec!["short"]);
        let lines: String = (0..30).map(|i| format!("line number {i:02}\n")).collect();
        let parts = check(&lines, 100);
        assert_eq!(parts.concat(), lines, "nothing lost or reordered");
        assert!(parts.iter().all(|p| p.ends_with('\n')), "{parts:?}");
        let words = "word ".repeat(100);
        let parts = check(&words, 100);
        assert_eq!(parts.concat(), words);
        assert!(parts[0].ends_with(' '));
        let blob = "x".repeat(250);
        assert_eq!(check(&blob, 100).concat(), blob);
        // Multi-byte characters count once and are never split.
        let emoji = "😀".repeat(4_100);
        let parts = check(&emoji, MAX_MESSAGE_CHARS);
        assert_eq!(parts.len(), 3);
        assert_eq!(parts.concat(), emoji);
    }

    #[test]
    fn a_cut_code_fence_is_closed_and_reopened() {
        let code: String = (0..40).map(|i| format!("let x{i} = {i};\n")).collect();
        let text = format!("Here:\n```rust\n{code}```\nDone.");
        let parts = check(&text, 200);
        assert!(parts.len() > 2);
        for (i, p) in parts.iter().enumerate() {
            let fences = p.matches("```").count();
            assert_eq!(fences % 2, 0, "piece {i} leaves a fence open: {p:?}");
            if i > 0 && i + 1 < parts.len() {
                assert!(
                    p.starts_with("```rust\n"),
                    "reopened with its language: {p:?}"
                );
            }
        }
        assert!(parts.last().unwrap().ends_with("Done."));
        // Every code line arrives once, in order.
        let joined = parts.concat();
        let seen: Vec<&str> = joined.lines().filter(|l| l.starts_with("let ")).collect();
        assert_eq!(seen, code.lines().collect::<Vec<_>>());
    }
}
