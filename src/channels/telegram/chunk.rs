//! Splitting a reply into Telegram messages: at most 4,096 UTF-16 code units each (the Bot
//! API's limit), cut at a line break or space when one lies in the second half of the window.

/// The Bot API's longest message text, in UTF-16 code units.
pub(crate) const MAX_MESSAGE_UTF16: usize = 4_096;

/// `text` in pieces of at most `max` UTF-16 code units (`max` ≥ 2), in order, none empty.
pub(crate) fn split_message(text: &str, max: usize) -> Vec<String> {
    let max = max.max(2);
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        if rest.encode_utf16().count() <= max {
            out.push(rest.to_string());
            break;
        }
        // The byte index where `max` code units end (never inside a character).
        let mut units = 0;
        let mut hard = 0;
        for (i, c) in rest.char_indices() {
            if units + c.len_utf16() > max {
                break;
            }
            units += c.len_utf16();
            hard = i + c.len_utf8();
        }
        let window = &rest[..hard];
        let soft = window
            .rfind('\n')
            .or_else(|| window.rfind(' '))
            .filter(|&i| i >= hard / 2)
            .map(|i| i + 1);
        let cut = soft.unwrap_or(hard);
        out.push(rest[..cut].to_string());
        rest = &rest[cut..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, max: usize) -> Vec<String> {
        let parts = split_message(text, max);
        assert_eq!(parts.concat(), text, "nothing lost or reordered");
        for p in &parts {
            assert!(!p.is_empty());
            assert!(p.encode_utf16().count() <= max, "{p:?}");
        }
        parts
    }

    #[test]
    fn chunking_vectors() {
        assert!(check("", 10).is_empty());
        assert_eq!(check("short", 10), vec!["short"]);
        assert_eq!(check("aaaa bbbb cccc", 10), vec!["aaaa bbbb ", "cccc"]);
        assert_eq!(
            check("line one\nline two", 12),
            vec!["line one\n", "line two"]
        );
        assert_eq!(check(&"x".repeat(25), 10).len(), 3);
        // Astral characters take two UTF-16 units and are never split.
        assert_eq!(check(&"😀".repeat(6), 5).len(), 3);
        assert_eq!(check(&"y".repeat(5_000), MAX_MESSAGE_UTF16).len(), 2);
    }
}
