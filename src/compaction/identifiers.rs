//! Finding the identifiers of a text: the exact strings a summary must not lose.
//!
//! Ids (`#1234`, `ABC-123`, UUIDs, hex hashes, `user_42`), numbers (decimals, versions such as
//! `1.2.3`, dates and times), URLs, file paths (`/x/y.rs`, `src/a.rs`, `C:\x`), @mentions,
//! `backticked` spans and e-mail addresses. Each pattern finds candidates; where they overlap
//! the one starting first wins, then the longest, then the most specific kind, so a URL keeps
//! the path and numbers inside it and `v1.2.3` is one version rather than `v1`.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::LazyLock;

use regex::Regex;

/// Most identifiers taken from one text (bounds memory on adversarial input; a real span of
/// chat history has far fewer).
pub const MAX_IDENTIFIERS: usize = 4_096;

/// Longest backticked span taken as an identifier, in characters (longer ones are code, not
/// names).
pub const MAX_CODE_SPAN_CHARS: usize = 200;

/// Longest identifier of any other kind, in bytes.
pub const MAX_IDENTIFIER_BYTES: usize = 2_048;

/// What kind of identifier a string is. The order is the order of importance when an
/// identifier list must be cut: the first kinds are kept longest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IdentifierKind {
    /// `https://…`, `www.…`.
    Url,
    /// A UUID.
    Uuid,
    /// A hex hash (git commit, digest).
    Hash,
    /// `#1234`, `ABC-123`, `user_42`: letters and digits together.
    Id,
    /// A file path.
    Path,
    /// A `backticked` span (its content).
    Code,
    /// An e-mail address.
    Email,
    /// An @mention.
    Mention,
    /// A version such as `1.2.3` or `v2.0`.
    Version,
    /// A date or time.
    DateTime,
    /// A number.
    Number,
}

/// One identifier, verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identifier {
    /// Its kind.
    pub kind: IdentifierKind,
    /// The exact text (for code spans: between the backticks).
    pub text: String,
}

impl Identifier {
    /// How it is written in an `Exact identifiers` list: code spans keep their backticks.
    pub fn display(&self) -> String {
        match self.kind {
            IdentifierKind::Code if self.text.contains('`') => format!("`` {} ``", self.text),
            IdentifierKind::Code => format!("`{}`", self.text),
            _ => self.text.clone(),
        }
    }

    /// Whether `text` contains it verbatim, not as part of a longer word or number (`12` is
    /// not found in `123`, `3` not in `2.3.1`, `30` not in `14:30`).
    pub fn appears_in(&self, text: &str) -> bool {
        let needle = self.text.as_str();
        if needle.is_empty() {
            return true;
        }
        let starts_word = needle.chars().next().is_some_and(is_word);
        let ends_word = needle.chars().next_back().is_some_and(is_word);
        text.match_indices(needle).any(|(at, _)| {
            let mut before = text[..at].chars().rev();
            let mut after = text[at + needle.len()..].chars();
            (!starts_word || !continues(before.next(), before.next()))
                && (!ends_word || !continues(after.next(), after.next()))
        })
    }
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Whether the characters next to a match (`first` adjacent, `second` beyond it) continue the
/// word or number it sits in: a word character, or a separator of a number (`.`, `,`, `:`)
/// followed by a digit.
fn continues(first: Option<char>, second: Option<char>) -> bool {
    match first {
        Some(c) if is_word(c) => true,
        Some('.' | ',' | ':') => second.is_some_and(|d| d.is_ascii_digit()),
        _ => false,
    }
}

/// The patterns, each with the kind it finds and the capture group holding the identifier.
static PATTERNS: LazyLock<Vec<(Regex, IdentifierKind, usize)>> = LazyLock::new(|| {
    use IdentifierKind::*;
    let patterns: [(&str, IdentifierKind, usize); 16] = [
        (r#"(?i)\b(?:https?|ftp|wss?|file)://[^\s<>"'`]+"#, Url, 0),
        (r#"(?i)\bwww\.[a-z0-9-]+\.[^\s<>"'`]+"#, Url, 0),
        (
            r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b",
            Email,
            0,
        ),
        (r"(?:^|[^\w@.])(@[A-Za-z0-9_][A-Za-z0-9_.-]*)", Mention, 1),
        (
            r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
            Uuid,
            0,
        ),
        (r"\b[0-9a-fA-F]{7,64}\b", Hash, 0),
        (r"(?:^|[^\w&#])(#\d+)\b", Id, 1),
        (r"\b[A-Za-z0-9][A-Za-z0-9_-]*[A-Za-z0-9]\b", Id, 0),
        (
            r#"(?:^|[\s(\[{<"'=,;:])((?:~|\.{1,2})?/[\w.+@~-]+(?:/[\w.+@~-]+)*/?)"#,
            Path,
            1,
        ),
        (r"\b[\w.-]+(?:/[\w.-]+)+/?", Path, 0),
        (r#"\b[A-Za-z]:\\[^\s"'<>|*?]*"#, Path, 0),
        (
            r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b",
            DateTime,
            0,
        ),
        (
            r"\b\d{1,2}/\d{1,2}/\d{2,4}\b|\b\d{1,2}:\d{2}(?::\d{2})?\b",
            DateTime,
            0,
        ),
        (r"\bv\d+(?:\.\d+)+\b", Version, 0),
        (r"\b\d{1,3}(?:,\d{3})+(?:\.\d+)?\b", Number, 0),
        (r"\b\d+(?:\.\d+)*\b", Number, 0),
    ];
    patterns
        .iter()
        .filter_map(|(p, kind, group)| Regex::new(p).ok().map(|re| (re, *kind, *group)))
        .collect()
});

/// A candidate span and its kind.
#[derive(Debug, Clone)]
struct Candidate {
    range: Range<usize>,
    kind: IdentifierKind,
}

/// Decides whether a raw match is an identifier of `kind`, and trims it. Returns the range
/// to keep and the final kind (a number with two or more dots is a version).
fn refine(text: &str, range: Range<usize>, kind: IdentifierKind) -> Option<Candidate> {
    use IdentifierKind::*;
    let mut range = range;
    let s = &text[range.clone()];
    let kind = match kind {
        Url | Path => {
            let trimmed = trim_trailing_punctuation(s);
            range.end = range.start + trimmed.len();
            let t = trimmed;
            if kind == Path && !t.contains(':') && !t.starts_with(['/', '~', '.']) {
                // Relative paths need an extension, two slashes or a trailing slash, so that
                // `and/or` and `1/2` are not paths.
                let last = t.trim_end_matches('/').rsplit('/').next().unwrap_or("");
                let has_ext = last.rsplit_once('.').is_some_and(|(stem, ext)| {
                    !stem.is_empty()
                        && (1..=8).contains(&ext.len())
                        && ext.chars().all(|c| c.is_ascii_alphanumeric())
                        && ext.chars().any(|c| c.is_ascii_alphabetic())
                });
                if !(has_ext || t.matches('/').count() >= 2 || t.ends_with('/')) {
                    return None;
                }
            }
            if t.len() < 2 {
                return None;
            }
            kind
        }
        Hash => {
            let digits = s.chars().any(|c| c.is_ascii_digit());
            let letters = s.chars().any(|c| c.is_ascii_alphabetic());
            if !(digits && letters) {
                return None;
            }
            Hash
        }
        Id if !s.starts_with('#') => {
            let digits = s.chars().any(|c| c.is_ascii_digit());
            let letters = s.chars().any(|c| c.is_alphabetic());
            if !(digits && letters) {
                return None;
            }
            Id
        }
        Mention => {
            let trimmed = s.trim_end_matches(['.', '-']);
            range.end = range.start + trimmed.len();
            if trimmed.len() < 2 {
                return None;
            }
            Mention
        }
        Number if s.matches('.').count() >= 2 => Version,
        other => other,
    };
    (range.len() <= MAX_IDENTIFIER_BYTES).then_some(Candidate { range, kind })
}

/// Which kind wins when two patterns match the same text (lower wins): the narrower pattern
/// says more (`12/05/2024` is a date before it is a path).
fn specificity(kind: IdentifierKind) -> u8 {
    use IdentifierKind::*;
    match kind {
        Url => 0,
        Email => 1,
        Uuid => 2,
        DateTime => 3,
        Version => 4,
        Hash => 5,
        Code => 6,
        Mention => 7,
        Path => 8,
        Id => 9,
        Number => 10,
    }
}

/// Drops sentence punctuation that follows a URL or path, and a closing bracket that has no
/// opening one inside it.
fn trim_trailing_punctuation(s: &str) -> &str {
    let mut t = s;
    loop {
        let before = t.len();
        t = t.trim_end_matches(['.', ',', ';', ':', '!', '?', '\'', '"']);
        for (open, close) in [('(', ')'), ('[', ']'), ('{', '}')] {
            if t.ends_with(close) && t.matches(close).count() > t.matches(open).count() {
                t = &t[..t.len() - 1];
            }
        }
        if t.len() == before {
            return t;
        }
    }
}

/// Inline code spans: a run of one or two backticks, content on one line, closed by the same
/// run. Fences (three or more) are skipped whole: a code block is not an identifier.
fn code_spans(text: &str, out: &mut Vec<Candidate>) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let run = bytes[i..].iter().take_while(|b| **b == b'`').count();
        let content_start = i + run;
        if run >= 3 {
            i = content_start;
            continue;
        }
        let line_end = text[content_start..]
            .find('\n')
            .map_or(text.len(), |n| content_start + n);
        let fence = &text[i..content_start];
        let close = text[content_start..line_end]
            .match_indices(fence)
            .find(|(at, _)| {
                let after = content_start + at + run;
                after >= bytes.len() || bytes[after] != b'`'
            })
            .map(|(at, _)| content_start + at);
        match close {
            Some(close_at) => {
                let inner = &text[content_start..close_at];
                let trimmed = inner.trim();
                if !trimmed.is_empty() && trimmed.chars().count() <= MAX_CODE_SPAN_CHARS {
                    let offset = inner.len() - inner.trim_start().len();
                    let start = content_start + offset;
                    out.push(Candidate {
                        range: start..start + trimmed.len(),
                        kind: IdentifierKind::Code,
                    });
                }
                i = close_at + run;
            }
            None => i = content_start,
        }
    }
}

/// Non-overlapping identifier spans of `text`, in order.
pub(crate) fn spans(text: &str) -> Vec<(Range<usize>, IdentifierKind)> {
    let mut candidates = Vec::new();
    code_spans(text, &mut candidates);
    // Code spans win over everything inside them: mark them first.
    let code: Vec<Range<usize>> = candidates.iter().map(|c| c.range.clone()).collect();
    for (re, kind, group) in PATTERNS.iter() {
        for caps in re.captures_iter(text) {
            let Some(m) = caps.get(*group) else { continue };
            if code
                .iter()
                .any(|r| m.start() < r.end + 1 && r.start <= m.end())
            {
                continue;
            }
            if let Some(c) = refine(text, m.range(), *kind) {
                candidates.push(c);
            }
        }
    }
    candidates.sort_by(|a, b| {
        a.range
            .start
            .cmp(&b.range.start)
            .then(b.range.len().cmp(&a.range.len()))
            .then(specificity(a.kind).cmp(&specificity(b.kind)))
    });
    let mut out = Vec::new();
    let mut end = 0;
    for c in candidates {
        if c.range.start >= end && !c.range.is_empty() {
            end = c.range.end;
            out.push((c.range, c.kind));
        }
    }
    out
}

/// Every identifier of `text`, once each, in order of first appearance; at most
/// [`MAX_IDENTIFIERS`].
pub fn extract(text: &str) -> Vec<Identifier> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (range, kind) in spans(text) {
        let s = &text[range];
        if seen.insert(s) {
            out.push(Identifier {
                kind,
                text: s.to_string(),
            });
            if out.len() >= MAX_IDENTIFIERS {
                break;
            }
        }
    }
    out
}

/// Every identifier of all `texts`, once each, in order; at most [`MAX_IDENTIFIERS`].
pub fn extract_all(texts: &[&str]) -> Vec<Identifier> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for text in texts {
        for id in extract(text) {
            if out.len() >= MAX_IDENTIFIERS {
                return out;
            }
            if seen.insert(id.text.clone()) {
                out.push(id);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::IdentifierKind::*;
    use super::*;

    fn check(text: &str, expected: &[(IdentifierKind, &str)]) {
        let got: Vec<(IdentifierKind, String)> = extract(text)
            .into_iter()
            .map(|i| (i.kind, i.text))
            .collect();
        let expected: Vec<(IdentifierKind, String)> =
            expected.iter().map(|(k, t)| (*k, t.to_string())).collect();
        assert_eq!(got, expected, "in {text:?}");
    }

    #[test]
    fn all_patterns_compile() {
        assert_eq!(PATTERNS.len(), 16);
    }

    #[test]
    fn ids() {
        check(
            "Fix #1234 and ABC-123 (see user_42).",
            &[(Id, "#1234"), (Id, "ABC-123"), (Id, "user_42")],
        );
        check(
            "uuid 123e4567-e89b-12d3-a456-426614174000 commit 9fceb02d0ae5",
            &[
                (Uuid, "123e4567-e89b-12d3-a456-426614174000"),
                (Hash, "9fceb02d0ae5"),
            ],
        );
        check("plain words and-dashes only", &[]);
    }

    #[test]
    fn numbers_versions_dates() {
        check(
            "Pay 1,250.50 by 2024-05-12, version 1.2.3 or v2.0, ratio 0.75, at 10:30, 42 left.",
            &[
                (Number, "1,250.50"),
                (DateTime, "2024-05-12"),
                (Version, "1.2.3"),
                (Version, "v2.0"),
                (Number, "0.75"),
                (DateTime, "10:30"),
                (Number, "42"),
            ],
        );
        check(
            "on 12/05/2024 at 2024-05-12T10:30:00Z",
            &[(DateTime, "12/05/2024"), (DateTime, "2024-05-12T10:30:00Z")],
        );
    }

    #[test]
    fn urls_paths_mentions_code_emails() {
        check(
            "See https://example.com/a/b?x=1#frag. Also (https://en.wikipedia.org/wiki/Rust_(language)).",
            &[
                (Url, "https://example.com/a/b?x=1#frag"),
                (Url, "https://en.wikipedia.org/wiki/Rust_(language)"),
            ],
        );
        check(
            "Edit /etc/app/conf.toml, src/a.rs, ~/notes/, C:\\Users\\bob\\x.txt and src/compaction/ but not and/or or 1/2.",
            &[
                (Path, "/etc/app/conf.toml"),
                (Path, "src/a.rs"),
                (Path, "~/notes/"),
                (Path, "C:\\Users\\bob\\x.txt"),
                (Path, "src/compaction/"),
                (Number, "1"),
                (Number, "2"),
            ],
        );
        check(
            "Ping @alice and @bob.smith. Mail bob@example.org.",
            &[
                (Mention, "@alice"),
                (Mention, "@bob.smith"),
                (Email, "bob@example.org"),
            ],
        );
        check(
            "Run `cargo test --lib` then ``a `b` c``; ```\nfenced 99\n``` and `unclosed",
            &[
                (Code, "cargo test --lib"),
                (Code, "a `b` c"),
                (Number, "99"),
            ],
        );
    }

    #[test]
    fn appears_in_respects_word_bounds() {
        let id = |kind, text: &str| Identifier {
            kind,
            text: text.into(),
        };
        assert!(id(Number, "12").appears_in("total: 12."));
        assert!(!id(Number, "12").appears_in("total: 123"));
        assert!(!id(Number, "12").appears_in("v312"));
        assert!(!id(Number, "3").appears_in("v2.3.1"));
        assert!(!id(Number, "30").appears_in("at 14:30"));
        assert!(id(Number, "3").appears_in("3 replicas, then 4."));
        assert!(id(Number, "2.3").appears_in("version 2.3."));
        assert!(id(Path, "/x/y.rs").appears_in("at/x/y.rs"));
        assert!(id(Code, "a b").appears_in("`a b`"));
        assert_eq!(id(Code, "x").display(), "`x`");
        assert_eq!(id(Code, "a `b`").display(), "`` a `b` ``");
    }

    #[test]
    fn bounded_and_deduplicated() {
        let text =
            "#1 #1 #1 ".repeat(10) + &(0..10_000).map(|i| format!("n{i} ")).collect::<String>();
        let ids = extract(&text);
        assert_eq!(ids.len(), MAX_IDENTIFIERS);
        assert_eq!(ids[0].text, "#1");
        assert_eq!(ids.iter().filter(|i| i.text == "#1").count(), 1);
        let all = extract_all(&["a 42", "42 and 43"]);
        let texts: Vec<&str> = all.iter().map(|i| i.text.as_str()).collect();
        assert_eq!(texts, vec!["42", "43"]);
    }

    #[test]
    fn never_panics_on_odd_input() {
        for text in [
            "",
            "`",
            "``",
            "```",
            "@",
            "#",
            "/",
            "é/ü.rs",
            "\u{0}`\u{0}`",
            "C:\\",
            "www.",
            "a@b",
        ] {
            let _ = extract(text);
        }
    }
}
