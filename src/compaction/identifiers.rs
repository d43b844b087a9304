//! Finding the identifiers of a text: the exact strings a summary must not lose.
//!
//! Ids (`#1234`, `ABC-123`, UUIDs, hex hashes, `user_42`), numbers (decimals, versions such as
//! `1.2.3`, numbers with a unit such as `5 GB`, `30 ms`, `10%`), dates and times (`2026-12-03`,
//! `Dec 3`, `3 December 2026`, `14:30`), URLs, file paths (`/x/y.rs`, `src/a.rs`, `C:\x`),
//! @mentions, `backticked` spans and e-mail addresses. Each pattern finds candidates; where they
//! overlap the one starting first wins, then the longest, then the most specific kind, so a URL
//! keeps the path and numbers inside it and `v1.2.3` is one version rather than `v1`.
//!
//! A bare number of one or two digits (`2 cats and 4 dogs`) is not an identifier: it is rarely
//! a fact on its own and it padded every list. Numbers with a unit, longer numbers and ids are.
//!
//! Two kinds are facts about people rather than tokens, found by context and allowed to overlap
//! the others: **names** (a speaker's `Name:` line prefix, a capitalised word after "owned by",
//! "assigned to", "ask", "from", "with" …, or before "owns", "will handle", "agreed" …), and
//! **decisions** (the clause of "X is owned by Y", "Y owns X", "decided …", "we agreed …",
//! "due 2026-12-03", cut at the end of its clause and at [`MAX_DECISION_CHARS`]). Capitalised
//! words at the start of a sentence are not taken for names: only the cues above make a name,
//! and a small stop list ([`NOT_NAMES`]) rejects common words even there.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::LazyLock;

use regex::Regex;

/// Most identifiers taken from one text (bounds memory on adversarial input; a real span of
/// chat history has far fewer).
pub(super) const MAX_IDENTIFIERS: usize = 4_096;

/// Longest backticked span taken as an identifier, in characters (longer ones are code, not
/// names).
pub(super) const MAX_CODE_SPAN_CHARS: usize = 200;

/// Longest identifier of any other kind, in bytes.
pub(super) const MAX_IDENTIFIER_BYTES: usize = 2_048;

/// Longest decision clause kept as one fact, in characters: a short fact, not a paragraph (a
/// longer clause is cut at a word boundary).
pub(super) const MAX_DECISION_CHARS: usize = 120;

/// Most capitalised words in one personal name ("Priya", "Priya Sharma").
pub(super) const MAX_NAME_WORDS: usize = 2;

/// Capitalised words that are not people even after a name cue ("with The", "Today said"):
/// sentence openers, pronouns, greetings, chat labels, weekdays and months. Lower-case and
/// sorted: a word is looked up lower-cased, by binary search.
#[rustfmt::skip]
pub(super) const NOT_NAMES: &[&str] = &[
    "a", "about", "action", "after", "afternoon", "agenda", "agreed", "all", "also", "an", "and",
    "answer", "any", "anybody", "anyone", "anything", "anyway", "apr", "april", "are", "as",
    "assignee", "assistant", "at", "aug", "august", "because", "before", "bot", "both", "btw",
    "bug", "but", "by", "can", "cause", "cheers", "conclusion", "context", "cool", "could", "date",
    "deadline", "dec", "december", "decision", "decisions", "description", "details", "did", "do",
    "does", "done", "each", "edit", "error", "evening", "every", "everybody", "everyone",
    "everything", "example", "feature", "feb", "february", "first", "fix", "fri", "friday", "from",
    "fyi", "goal", "good", "great", "guys", "haha", "he", "hello", "her", "here", "hey", "hi",
    "his", "how", "however", "i", "if", "important", "in", "info", "input", "is", "issue", "it",
    "its", "jan", "january", "jul", "july", "jun", "june", "just", "last", "let", "let's", "lets",
    "location", "lol", "mar", "march", "may", "maybe", "me", "mon", "monday", "morning", "my",
    "next", "nice", "no", "nobody", "none", "not", "note", "nothing", "nov", "november", "now",
    "oct", "october", "of", "oh", "ok", "okay", "on", "or", "our", "output", "owner", "please",
    "priority", "problem", "ps", "question", "re", "reason", "reminder", "request", "response",
    "result", "sat", "saturday", "sep", "sept", "september", "she", "should", "so", "solution",
    "some", "someone", "something", "sorry", "status", "step", "still", "subject", "summary",
    "sun", "sunday", "sure", "system", "team", "thanks", "that", "the", "their", "them", "then",
    "there", "these", "they", "this", "those", "thu", "thursday", "ticket", "time", "tip", "title",
    "to", "today", "todo", "tomorrow", "tonight", "tool", "topic", "tue", "tuesday", "update",
    "usage", "user", "warning", "was", "we", "wed", "wednesday", "well", "what", "when", "where",
    "which", "who", "why", "will", "with", "would", "yeah", "yes", "yesterday", "yet", "you",
    "your",
];

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
    /// A person's (or owner's) name: a speaker, or a capitalised word a name cue points at.
    Name,
    /// A decision or commitment clause: "X is owned by Y", "decided to …", "due 2026-12-03".
    Decision,
    /// A date or time.
    DateTime,
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
    /// A number: three digits or more, a decimal, or any number with a unit or currency.
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

impl IdentifierKind {
    /// Whether it says who or when but not what: a name, a date or time, an @mention. A line
    /// holding only such identifiers ("Woohoo Melanie!", "see you at 9") carries no fact.
    pub fn is_weak(self) -> bool {
        matches!(
            self,
            IdentifierKind::Name | IdentifierKind::DateTime | IdentifierKind::Mention
        )
    }
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

/// A month's name or abbreviation, in any case (for `Dec 3`, `3 December 2026`).
const MONTH: &str = r"(?i:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)";

/// Units that make a small number a fact (`5 GB`, `30 ms`, `10%`, `3x`): time, data, rates,
/// money, common measures. A bounded list on purpose: `2 cats` is not an identifier.
const UNITS: &str = r"(?i:ms|µs|us|ns|s|secs?|seconds?|mins?|minutes?|h|hrs?|hours?|days?|weeks?|months?|years?|yrs?|[kmgtp]i?b|bytes?|[kmg]bps|[kmg]?hz|rps|qps|x|k|m|bn|km|kg|cm|mm|px|usd|eur|gbp|chf|jpy|inr|tokens?|cores?|vcpus?|replicas?|nodes?|pods?)";

/// The patterns, each with the kind it finds and the capture group holding the identifier.
static PATTERNS: LazyLock<Vec<(Regex, IdentifierKind, usize)>> = LazyLock::new(|| {
    use IdentifierKind::*;
    let month_day = format!(
        r"\b{MONTH}\.?[ \t]\d{{1,2}}(?:st|nd|rd|th)?\b(?:,?[ \t]\d{{4}}\b)?|\b{MONTH}[ \t]\d{{4}}\b"
    );
    let day_month =
        format!(r"\b\d{{1,2}}(?:st|nd|rd|th)?[ \t](?:of[ \t])?{MONTH}\b(?:,?[ \t]\d{{4}}\b)?");
    let with_unit = format!(r"\b\d+(?:[.,]\d+)*(?:[ \t]?%|[ \t]?{UNITS}\b)");
    let patterns: [(&str, IdentifierKind, usize); 20] = [
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
        (month_day.as_str(), DateTime, 0),
        (day_month.as_str(), DateTime, 0),
        (r"\bv\d+(?:\.\d+)+\b", Version, 0),
        (with_unit.as_str(), Number, 0),
        (r"[$€£¥]\d+(?:[.,]\d+)*(?:[ \t]?(?i:k|m|bn)\b)?", Number, 0),
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
        // One or two bare digits ("2 cats", "step 4") say nothing on their own.
        Number if s.len() <= 2 && s.bytes().all(|b| b.is_ascii_digit()) => return None,
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
        // Found apart from the patterns (they may overlap the others); never compared here.
        Name => 11,
        Decision => 12,
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

/// One capitalised word of a personal name: an upper-case letter, then a lower-case one (so
/// `TODO`, `ZX` and `I` are not names).
const NAME_WORD: &str = r"\p{Lu}\p{Ll}[\p{L}'’-]*";

/// A name: up to [`MAX_NAME_WORDS`] capitalised words.
fn name_pattern() -> String {
    let more = MAX_NAME_WORDS.saturating_sub(1);
    format!(r"{NAME_WORD}(?:[ \t]{NAME_WORD}){{0,{more}}}")
}

/// Where names are found; every capture group may hold the name (the first that took part
/// counts). The first pattern is the speaker prefix.
static NAME_PATTERNS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    let name = name_pattern();
    let patterns = [
        // A speaker: `Priya: …`, `- Priya: …`, `[user Priya]: …`, `user (Priya): …`.
        format!(
            r"(?m)^[ \t]*(?:[-*•>][ \t]+)?(?:\[(?:user|assistant)[ \t]+({name})\]|(?:user|assistant)[ \t]*\(({name})\)|({name}))[ \t]*:(?:[ \t]|$)"
        ),
        // A list item that is only a name: an `Exact identifiers` line of an earlier summary,
        // so names roll forward from summary to summary.
        format!(r"(?m)^[ \t]*[-*•][ \t]+({name})[ \t]*$"),
        // After a cue: "owned by Priya", "assigned to Bob", "ask Chen", "with Dana".
        format!(
            r"(?i:\b(?:(?:owned|assigned|handled|led|reviewed|approved|fixed|reported|raised|filed|requested|run|written|taken)[ \t]+by|assigned[ \t]+to|hand(?:ed)?[ \t]+(?:it[ \t]+)?(?:over[ \t]+)?to|ask(?:ed)?|tell|told|ping(?:ed)?|thanks,?|thank[ \t]+you,?|cc:?|from|with|owner(?:[ \t]+is|:)?|assignee(?:[ \t]+is|:)?))[ \t]+({name})"
        ),
        // Before a cue: "Priya owns", "Bob will handle", "Dana agreed".
        format!(
            r"\b({name})[ \t]+(?i:owns|will[ \t]+own|is[ \t]+the[ \t]+owner|is[ \t]+responsible|is[ \t]+on[ \t]+it|takes|took|will[ \t]+take|will[ \t]+handle|will[ \t]+do|agreed|decided|volunteered|said|asked|wants|leads)\b"
        ),
    ];
    patterns.iter().filter_map(|p| Regex::new(p).ok()).collect()
});

/// How far a decision reaches from where its pattern starts.
#[derive(Debug, Clone, Copy)]
enum Reach {
    /// The match itself ("ZX-4411 is owned by Priya", "due 2026-12-03").
    Match,
    /// The match and the rest of its clause ("decided to ship on Friday").
    Clause,
}

/// Decision patterns: the regex, how far it reaches, and the capture group of the name it
/// starts or ends with (0: none).
static DECISION_PATTERNS: LazyLock<Vec<(Regex, Reach, usize)>> = LazyLock::new(|| {
    let name = name_pattern();
    let date = format!(
        r"(?:\d{{4}}-\d{{2}}-\d{{2}}|\b{MONTH}\.?[ \t]\d{{1,2}}(?:st|nd|rd|th)?\b(?:,?[ \t]\d{{4}}\b)?|\b\d{{1,2}}(?:st|nd|rd|th)?[ \t](?:of[ \t])?{MONTH}\b(?:,?[ \t]\d{{4}}\b)?|(?i:(?:mon|tues|wednes|thurs|fri|satur|sun)day|today|tomorrow|tonight|next[ \t]+week|end[ \t]+of[ \t]+(?:the[ \t]+)?(?:day|week|month)|eod|eow)\b)"
    );
    let patterns = [
        (
            format!(
                r"\b(?:[\w#@./-]+[ \t]+)?[\w#@./-]+[ \t]+(?i:is|are|was|were|has[ \t]+been|will[ \t]+be)[ \t]+(?i:owned|assigned|handled|led|taken)[ \t]+(?i:by|to)[ \t]+({name})"
            ),
            Reach::Match,
            1,
        ),
        (
            format!(
                r"\b({name})[ \t]+(?i:owns|will[ \t]+own|is[ \t]+responsible[ \t]+for|takes[ \t]+over|will[ \t]+take[ \t]+over|will[ \t]+handle|is[ \t]+handling)[ \t]+\S"
            ),
            Reach::Clause,
            1,
        ),
        (
            r"(?i)\b(?:decided|agreed|decision|resolved|settled[ \t]+on|going[ \t]+with|we'll[ \t]+go[ \t]+with)\b"
                .to_string(),
            Reach::Clause,
            0,
        ),
        (
            format!(r"(?i:\b(?:due|deadline)(?:[ \t]+(?:is|on|by))?:?)[ \t]+{date}"),
            Reach::Match,
            0,
        ),
    ];
    patterns
        .into_iter()
        .filter_map(|(p, reach, group)| Regex::new(&p).ok().map(|re| (re, reach, group)))
        .collect()
});

/// Fewest words in a decision clause that runs to its clause end: "agreed." or "ok, decided"
/// alone is no fact. (A whole match such as "due Dec 3" is one by its shape.)
const MIN_DECISION_WORDS: usize = 3;

/// Whether `word` (a capitalised word, possibly with a possessive) is on the stop list.
fn not_a_name(word: &str) -> bool {
    let lower = word.to_lowercase();
    NOT_NAMES.binary_search(&lower.as_str()).is_ok()
}

/// The name inside `range` of `text`, without stop-listed words at its ends ("Then Priya" is
/// Priya) and without a possessive ("Priya's"); `None` when nothing is left.
fn clean_name(text: &str, range: Range<usize>) -> Option<Range<usize>> {
    let s = text.get(range.clone())?;
    let mut words: Vec<Range<usize>> = Vec::with_capacity(MAX_NAME_WORDS);
    let mut start = None;
    for (i, c) in s.char_indices().chain(std::iter::once((s.len(), ' '))) {
        match (c == ' ' || c == '\t', start) {
            (true, Some(from)) => {
                words.push(range.start + from..range.start + i);
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    for word in &mut words {
        let w = &text[word.clone()];
        let bare = w
            .strip_suffix("'s")
            .or_else(|| w.strip_suffix("’s"))
            .unwrap_or(w)
            .trim_end_matches(['\'', '’', '-']);
        word.end = word.start + bare.len();
    }
    let keep = |r: &Range<usize>| r.len() >= 2 && !not_a_name(&text[r.clone()]);
    let first = words.iter().position(keep)?;
    let last = words.iter().rposition(keep)?;
    if words[first..=last].iter().any(|r| !keep(r)) {
        return None;
    }
    Some(words[first].start..words[last].end)
}

/// The first capture group of `caps` that took part in the match.
fn first_group(caps: &regex::Captures<'_>) -> Option<Range<usize>> {
    (1..caps.len()).find_map(|g| caps.get(g)).map(|m| m.range())
}

/// Names of people in `text` (ranges, possibly repeated), at most [`MAX_IDENTIFIERS`].
fn names(text: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    for re in NAME_PATTERNS.iter() {
        for caps in re.captures_iter(text) {
            if let Some(name) = first_group(&caps).and_then(|r| clean_name(text, r)) {
                out.push(name);
                if out.len() >= MAX_IDENTIFIERS {
                    return out;
                }
            }
        }
    }
    out
}

/// The speaker prefix of a chat line (`Priya: …`, `- Priya: …`, `[user Priya]: …`): the
/// name's range and where the text after the prefix starts.
pub(crate) fn speaker(line: &str) -> Option<(Range<usize>, usize)> {
    let caps = NAME_PATTERNS.first()?.captures(line)?;
    let whole = caps.get(0)?;
    if !line[..whole.start()].trim().is_empty() {
        return None;
    }
    let name = clean_name(line, first_group(&caps)?)?;
    Some((name, whole.end()))
}

/// Where the clause that starts at `from` ends: at a line break; at `.`, `!`, `?`, `…`, `;`
/// or `,` followed by whitespace, outside an identifier (`Dec 3, 2026` is one date); at a dash
/// between spaces; or after [`MAX_DECISION_CHARS`] characters, at the last space before.
fn clause_end(text: &str, from: usize, protected: &[Range<usize>]) -> usize {
    let inside = |at: usize| {
        let i = protected.partition_point(|r| r.end <= at);
        protected.get(i).is_some_and(|r| r.start <= at)
    };
    let mut last_space = None;
    let mut previous = ' ';
    let mut chars = text[from..].char_indices().peekable();
    let mut count = 0usize;
    while let Some((i, c)) = chars.next() {
        let at = from + i;
        count += 1;
        if count > MAX_DECISION_CHARS {
            return last_space.unwrap_or(at);
        }
        let next = chars.peek().map(|(_, n)| *n);
        let ends = match c {
            '\n' | '\r' => true,
            '.' | '!' | '?' | '…' | ';' | ',' => {
                next.is_none_or(char::is_whitespace) && !inside(at)
            }
            '-' | '–' | '—' => {
                previous.is_whitespace() && next.is_some_and(char::is_whitespace)
            }
            _ => false,
        };
        if ends {
            return at;
        }
        if c.is_whitespace() {
            last_space = Some(at);
        }
        previous = c;
    }
    text.len()
}

/// Decision clauses of `text` (ranges; none inside another), at most [`MAX_IDENTIFIERS`].
/// `protected` are the identifier spans, which a clause never ends inside.
fn decisions(text: &str, protected: &[Range<usize>]) -> Vec<Range<usize>> {
    let mut found = Vec::new();
    'patterns: for (re, reach, group) in DECISION_PATTERNS.iter() {
        for caps in re.captures_iter(text) {
            let Some(whole) = caps.get(0) else { continue };
            let mut start = whole.start();
            let mut match_end = whole.end();
            let mut subject_first = false;
            if *group > 0 {
                let Some(name) = caps.get(*group).and_then(|m| clean_name(text, m.range())) else {
                    continue;
                };
                if name.start <= start {
                    start = name.start;
                } else {
                    match_end = name.end;
                    subject_first = true;
                }
            }
            // A leading filler word of a subject ("the release is owned by …", "ticket ZX-1
            // is …") is not part of the fact.
            if subject_first {
                if let Some(space) = text[start..match_end].find([' ', '\t']) {
                    if not_a_name(&text[start..start + space]) {
                        start += space;
                        start += text[start..].len() - text[start..].trim_start().len();
                    }
                }
            }
            let clause = clause_end(text, start, protected);
            let end = match reach {
                Reach::Match => match_end.min(clause),
                Reach::Clause => clause,
            };
            let t = text[start..end].trim_end_matches(|c: char| {
                c.is_whitespace() || matches!(c, ',' | ':' | '"' | '\'' | '(' | '[')
            });
            let words = t.split_whitespace().count();
            if words >= MIN_DECISION_WORDS || (matches!(reach, Reach::Match) && words >= 2) {
                found.push(start..start + t.len());
                if found.len() >= MAX_IDENTIFIERS {
                    break 'patterns;
                }
            }
        }
    }
    found.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
    // Sorted by start, longest first: a range is inside an earlier one iff it ends before the
    // furthest end so far.
    let mut out: Vec<Range<usize>> = Vec::with_capacity(found.len());
    let mut furthest = 0;
    for r in found {
        if out.is_empty() || r.end > furthest {
            furthest = r.end;
            out.push(r);
        }
    }
    out
}

/// Every identifier occurrence of `text`, in order of position: the non-overlapping [`spans`],
/// then names and decisions (which may overlap them and each other).
pub(crate) fn occurrences(text: &str) -> Vec<(Range<usize>, IdentifierKind)> {
    let mut found = spans(text);
    let protected: Vec<Range<usize>> = found.iter().map(|(r, _)| r.clone()).collect();
    found.extend(names(text).into_iter().map(|r| (r, IdentifierKind::Name)));
    found.extend(
        decisions(text, &protected)
            .into_iter()
            .map(|r| (r, IdentifierKind::Decision)),
    );
    // Stable: at one position, a pattern's identifier comes before a name or decision.
    found.sort_by_key(|(r, _)| r.start);
    found
}

/// Every identifier of `text`, once each, in order of first appearance; at most
/// [`MAX_IDENTIFIERS`].
pub(super) fn extract(text: &str) -> Vec<Identifier> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (range, kind) in occurrences(text) {
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
pub(super) fn extract_all(texts: &[&str]) -> Vec<Identifier> {
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
        assert_eq!(PATTERNS.len(), 20);
        assert_eq!(NAME_PATTERNS.len(), 4);
        assert_eq!(DECISION_PATTERNS.len(), 4);
    }

    #[test]
    fn the_stop_list_is_sorted_and_lower_case() {
        assert!(NOT_NAMES.windows(2).all(|w| w[0] < w[1]));
        assert!(NOT_NAMES.iter().all(|w| w.to_lowercase() == *w));
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
        // "42 left": a bare number of two digits is not an identifier (it was until the
        // retention list was found padded with them).
        check(
            "Pay 1,250.50 by 2024-05-12, version 1.2.3 or v2.0, ratio 0.75, at 10:30, 42 left, 420 right.",
            &[
                (Number, "1,250.50"),
                (DateTime, "2024-05-12"),
                (Version, "1.2.3"),
                (Version, "v2.0"),
                (Number, "0.75"),
                (DateTime, "10:30"),
                (Number, "420"),
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
            "Run `cargo test --lib` then ``a `b` c``; ```\nfenced 999\n``` and `unclosed",
            &[
                (Code, "cargo test --lib"),
                (Code, "a `b` c"),
                (Number, "999"),
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
        let all = extract_all(&["a 420", "420 and 430"]);
        let texts: Vec<&str> = all.iter().map(|i| i.text.as_str()).collect();
        assert_eq!(texts, vec!["420", "430"]);
    }

    #[test]
    fn bare_small_numbers_are_not_identifiers_but_numbers_with_units_are() {
        check("I have 2 cats and 4 dogs, 6 total", &[]);
        check(
            "It takes 30 ms, uses 5 GB and 10% CPU, costs $40, runs 3x faster, waits 2 hours.",
            &[
                (Number, "30 ms"),
                (Number, "5 GB"),
                (Number, "10%"),
                (Number, "$40"),
                (Id, "3x"),
                (Number, "2 hours"),
            ],
        );
        check(
            "Ticket ZX-4411, issue #12, build 5521, on 2026-12-03.",
            &[
                (Id, "ZX-4411"),
                (Id, "#12"),
                (Number, "5521"),
                (DateTime, "2026-12-03"),
            ],
        );
    }

    #[test]
    fn dates_in_words() {
        check(
            "Ship Dec 3, then Dec. 5, 2026, then 3 December 2026, the 7th of January, March 2027.",
            &[
                (DateTime, "Dec 3"),
                (DateTime, "Dec. 5, 2026"),
                (DateTime, "3 December 2026"),
                (DateTime, "7th of January"),
                (DateTime, "March 2027"),
            ],
        );
    }

    #[test]
    fn people_owners_and_decisions() {
        check(
            "Priya: ticket ZX-4411 is owned by Priya, due 2026-12-03, we decided to ship on Friday",
            &[
                (Name, "Priya"),
                (Id, "ZX-4411"),
                (Decision, "ZX-4411 is owned by Priya"),
                (Decision, "due 2026-12-03"),
                (DateTime, "2026-12-03"),
                (Decision, "decided to ship on Friday"),
            ],
        );
        // The owner alone, without a speaker line.
        check(
            "ticket ZX-4411 is owned by Priya",
            &[
                (Id, "ZX-4411"),
                (Decision, "ZX-4411 is owned by Priya"),
                (Name, "Priya"),
            ],
        );
        // Every speaker form: plain, listed, as the transcript renders it, as tests write it.
        for line in [
            "Priya: see you",
            "- Priya: see you",
            "[user Priya]: see you",
            "user (Priya): see you",
        ] {
            check(line, &[(Name, "Priya")]);
        }
        check(
            "the release is assigned to Bob Stone; ask Chen, Dana owns the rollout plan now.",
            &[
                (Decision, "release is assigned to Bob Stone"),
                (Name, "Bob Stone"),
                (Name, "Chen"),
                (Name, "Dana"),
                (Decision, "Dana owns the rollout plan now"),
            ],
        );
        check(
            "ok so we agreed: Marek's pager, Marek takes it, deadline is Dec 9.",
            &[
                (Decision, "agreed: Marek's pager"),
                (Name, "Marek"),
                (Decision, "deadline is Dec 9"),
                (DateTime, "Dec 9"),
            ],
        );
        // A list item that is only a name (an earlier summary's list) rolls forward.
        check("- Priya\n- Friday\n", &[(Name, "Priya")]);
    }

    #[test]
    fn decisions_are_short_and_need_content() {
        check("ok agreed. lol, decided.", &[]);
        let long = format!("we decided to {}, then more", "do the thing ".repeat(30));
        let ids = extract(&long);
        assert_eq!(ids.len(), 1, "{ids:?}");
        assert_eq!(ids[0].kind, Decision);
        assert!(ids[0].text.chars().count() <= MAX_DECISION_CHARS);
        assert!(ids[0].text.starts_with("decided to do the thing"));
        assert!(ids[0].appears_in(&long));
    }

    #[test]
    fn common_capitalised_words_are_not_names() {
        for text in [
            "The build is slow. We should fix it. Please check. Today is busy.",
            "Note: deploy later. Update: nothing new. Summary: fine.",
            "Thanks, see you Monday. Sorry, with The new build it works.",
            "Everyone agreed. They decided. Today said nothing. We will handle it.",
            "Exact identifiers:\n## Decisions\n- none",
            "Deploy went fine. Lunch was great. Coffee is cold.",
            "ask Everyone, from Today, thanks All, owned by The",
        ] {
            let names: Vec<String> = extract(text)
                .into_iter()
                .filter(|i| i.kind == Name)
                .map(|i| i.text)
                .collect();
            assert!(names.is_empty(), "{names:?} in {text:?}");
        }
    }

    #[test]
    fn the_speaker_of_a_line() {
        let line = "[user Priya Sharma]: ZX-1 is done";
        let (name, body) = speaker(line).unwrap();
        assert_eq!(
            (&line[name], &line[body..]),
            ("Priya Sharma", "ZX-1 is done")
        );
        assert_eq!(speaker("Note: later"), None);
        assert_eq!(speaker("he said Priya: hi"), None);
        assert_eq!(speaker("https://x.test/a"), None);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

        #[test]
        fn any_text_yields_bounded_verbatim_identifiers(
            chat in proptest::collection::vec(
                "(Priya|Bob|The|Note|[A-Z][a-z]{1,5}): [a-zA-Z0-9 ,.;#:/%$-]{0,80}",
                0..12,
            ),
            noise in "\\PC{0,300}",
        ) {
            let text = format!("{}\n{noise}", chat.join("\n"));
            for id in extract(&text) {
                proptest::prop_assert!(text.contains(&id.text), "{:?} not in the text", id.text);
                match id.kind {
                    Decision => proptest::prop_assert!(
                        id.text.chars().count() <= MAX_DECISION_CHARS
                    ),
                    Name => proptest::prop_assert!(
                        id.text.split_whitespace().count() <= MAX_NAME_WORDS
                            && !not_a_name(&id.text)
                    ),
                    Number => proptest::prop_assert!(
                        !(id.text.len() <= 2 && id.text.bytes().all(|b| b.is_ascii_digit()))
                    ),
                    _ => {}
                }
            }
        }
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
            "Priya:",
            ": Priya",
            "owned by",
            "decided",
            "due",
            "- ",
            "Priya's",
            "É:",
            "is owned by Ö",
        ] {
            let _ = extract(text);
        }
    }
}
