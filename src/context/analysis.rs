//! Text analysis for ranking: the one way recall and retrieval cut text into terms. English
//! Snowball stemming ("moved", "moving" → `move`), the NLTK stop list and Unicode folding, from
//! the `bm25` crate's analyser and its stemmer, so a question and the line that answers it meet on the
//! same terms even when their words differ in form.
//!
//! Also the one way a chat line is dated for the model (`chat_date`): who said what is not
//! enough to answer "when" questions; the line must carry its day.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use bm25::{DefaultTokenizer, Language, Tokenizer};
use jiff::tz::TimeZone;
use jiff::Timestamp;
use rust_stemmers::{Algorithm, Stemmer};

/// Folding, lower case, word splitting and the stop list; stemming is done here, memoised.
static ANALYZER: LazyLock<DefaultTokenizer> = LazyLock::new(|| {
    DefaultTokenizer::builder()
        .language_mode(Language::English)
        .normalization(true)
        .stemming(false)
        .stopwords(true)
        .build()
});

/// The one stop list: NLTK's English list, from the `stop-words` crate as the analyser's own
/// (`bm25` builds its list from the same crate and language; the words are ASCII, so its
/// folding leaves them as they are).
static STOP_WORDS: LazyLock<HashSet<&'static str>> = LazyLock::new(|| {
    stop_words::get(stop_words::LANGUAGE::English)
        .iter()
        .copied()
        .collect()
});

/// Whether `word` (lower case) is on the stop list [`terms`] drops: for callers that cut text
/// their own way (the extractive summariser).
pub(crate) fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.contains(word)
}

static STEMMER: LazyLock<Stemmer> = LazyLock::new(|| Stemmer::create(Algorithm::English));

/// Most words whose stems one thread remembers; the memo is cleared when it is full. A chat's
/// vocabulary is a few thousand words, so a recall over 1,000 messages stems each word once.
pub(crate) const MAX_STEM_MEMO: usize = 50_000;

thread_local! {
    static STEMS: RefCell<HashMap<String, String>> = RefCell::new(HashMap::new());
}

fn stem(word: String) -> String {
    STEMS.with(|memo| {
        let mut memo = memo.borrow_mut();
        if let Some(s) = memo.get(&word) {
            return s.clone();
        }
        let stemmed = STEMMER.stem(&word).into_owned();
        if memo.len() >= MAX_STEM_MEMO {
            memo.clear();
        }
        memo.insert(word, stemmed.clone());
        stemmed
    })
}

/// Longest text analysed, in bytes: ranking a message by its first 4 KiB is enough, and it
/// bounds the work one hostile message can cause.
pub(crate) const MAX_ANALYSED_BYTES: usize = 4_096;

/// The terms of `text`: lower case, folded to ASCII, stop words out, stemmed; one-character
/// terms (punctuation, initials) dropped.
pub(crate) fn terms(text: &str) -> Vec<String> {
    let text = cut_at_boundary(text, MAX_ANALYSED_BYTES);
    ANALYZER
        .tokenize(text)
        .into_iter()
        .map(stem)
        .filter(|t| t.chars().nth(1).is_some())
        .collect()
}

fn cut_at_boundary(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Most words a clause may have to be an address ("Thanks, Melanie!", "Hey Caroline!"): the
/// name and at most one word before it.
const MAX_ADDRESS_WORDS: usize = 2;

/// The terms of the capitalised words of `text` that stand where a name said *to* someone
/// stands: a word that makes a clause of its own or closes a two-word clause, set off by
/// punctuation ("Thanks, Melanie!", "Hey Caroline! …", "Way to go, Jon!"). The caller keeps
/// those that are names of the chat's members: a line that greets a member is not about that
/// member ("Thanks, Melanie!" says nothing about what Melanie did), while "I went with
/// Melanie." names her and is kept.
pub(crate) fn address_words(text: &str) -> Vec<String> {
    let text = cut_at_boundary(text, MAX_ANALYSED_BYTES);
    let mut out: Vec<String> = Vec::new();
    for clause in text.split([',', '.', '!', '?', ';', ':', '\n']) {
        let words: Vec<&str> = clause.split_whitespace().collect();
        let Some(last) = words.last() else { continue };
        if words.len() > MAX_ADDRESS_WORDS || !last.chars().next().is_some_and(char::is_uppercase) {
            continue;
        }
        // "I" and "I'm" are not names.
        if last.chars().nth(1).is_none_or(|c| !c.is_alphabetic()) {
            continue;
        }
        for t in terms(last) {
            if !out.contains(&t) {
                out.push(t);
            }
        }
    }
    out
}

/// [`terms`] as a `bm25` tokenizer (for the crate's embedder and scorer).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Terms;

impl Tokenizer for Terms {
    fn tokenize(&self, input_text: &str) -> Vec<String> {
        terms(input_text)
    }
}

/// The day a message was sent, in the chat's time zone, as shown beside recalled and
/// summarised lines: `Mon 8 May 2023` (the weekday places "last Friday").
pub(crate) fn chat_date(ms: u64, zone: &TimeZone) -> String {
    let Ok(ts) = Timestamp::from_millisecond(i64::try_from(ms).unwrap_or(i64::MAX)) else {
        return String::new();
    };
    jiff::fmt::strtime::format("%a %-d %B %Y", &ts.to_zoned_datetime(zone.clone()))
        .unwrap_or_default()
}

/// Opens a day line (`## Mon 8 May 2023`): recalled and summarised lines are shown under the
/// day they were said, written once per day rather than on every line (a date costs about as
/// many tokens as a short reply), so each line still reads with its day.
pub(crate) const DAY_MARKER: &str = "## ";

/// The day line above the lines said on the day of `ms`: `## Mon 8 May 2023`.
pub(crate) fn day_line(ms: u64, zone: &TimeZone) -> String {
    format!("{DAY_MARKER}{}", chat_date(ms, zone))
}

/// The terms a message's date adds to its text for ranking: its month and year, so "what
/// did she do in May 2023" favours that month's lines.
pub(crate) fn date_terms(ms: u64, zone: &TimeZone) -> Vec<String> {
    let Ok(ts) = Timestamp::from_millisecond(i64::try_from(ms).unwrap_or(i64::MAX)) else {
        return Vec::new();
    };
    terms(
        &jiff::fmt::strtime::format("%B %Y", &ts.to_zoned_datetime(zone.clone()))
            .unwrap_or_default(),
    )
}

/// Days a text names ("on 31 July, 2023", "May 3, 2023", "3rd June"): (year if given,
/// month, day). A question that names the day something was said favours that day's lines.
pub(crate) fn named_days(text: &str) -> Vec<(Option<i16>, i8, i8)> {
    static DAY_MONTH: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(
            r"(?i)\b(\d{1,2})(?:st|nd|rd|th)?(?:\s+of)?\s+(jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?(?:,?\s*(\d{4}))?\b",
        )
        .expect("a valid pattern")
    });
    static MONTH_DAY: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(
            r"(?i)\b(jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?\s+(\d{1,2})(?:st|nd|rd|th)?\b(?:,?\s*(\d{4}))?",
        )
        .expect("a valid pattern")
    });
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let month = |m: &str| {
        let m = m.to_ascii_lowercase();
        MONTHS
            .iter()
            .position(|x| m.starts_with(x))
            .map(|i| i as i8 + 1)
    };
    let text = cut_at_boundary(text, MAX_ANALYSED_BYTES);
    let mut out = Vec::new();
    let mut push = |d: Option<&str>, m: Option<&str>, y: Option<&str>| {
        let (Some(d), Some(m)) = (d.and_then(|d| d.parse::<i8>().ok()), m.and_then(month)) else {
            return;
        };
        if (1..=31).contains(&d) {
            let y = y.and_then(|y| y.parse::<i16>().ok());
            if !out.contains(&(y, m, d)) {
                out.push((y, m, d));
            }
        }
    };
    for c in DAY_MONTH.captures_iter(text) {
        push(
            c.get(1).map(|x| x.as_str()),
            c.get(2).map(|x| x.as_str()),
            c.get(3).map(|x| x.as_str()),
        );
    }
    for c in MONTH_DAY.captures_iter(text) {
        push(
            c.get(2).map(|x| x.as_str()),
            c.get(1).map(|x| x.as_str()),
            c.get(3).map(|x| x.as_str()),
        );
    }
    out
}

/// Whether a message sent at `ms` was sent on one of `days` (in `zone`).
pub(crate) fn said_on(ms: u64, zone: &TimeZone, days: &[(Option<i16>, i8, i8)]) -> bool {
    if days.is_empty() {
        return false;
    }
    let Ok(ts) = Timestamp::from_millisecond(i64::try_from(ms).unwrap_or(i64::MAX)) else {
        return false;
    };
    let d = ts.to_zoned_datetime(zone.clone()).date();
    days.iter()
        .any(|(y, m, day)| y.is_none_or(|y| y == d.year()) && *m == d.month() && *day == d.day())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems_and_drops_stop_words() {
        assert_eq!(terms("When did Caroline move?"), vec!["carolin", "move"]);
        assert_eq!(terms("She moved from Sweden"), vec!["move", "sweden"]);
        assert_eq!(terms("the a of"), Vec::<String>::new());
        assert!(["the", "a", "of", "not", "don't"]
            .iter()
            .all(|w| is_stop_word(w)));
        assert!(!is_stop_word("sweden"));
        assert_eq!(terms("Café"), vec!["cafe"]);
    }

    #[test]
    fn names_said_to_someone_are_told_apart_from_names_talked_about() {
        assert_eq!(
            address_words("Thanks, Melanie! That was fun."),
            vec!["thank", "melani"]
        );
        assert_eq!(address_words("Hey Caroline! How are you?"), vec!["carolin"]);
        assert_eq!(address_words("Way to go, Jon!"), vec!["jon"]);
        assert_eq!(
            address_words("Yeah Nate, your cooking is great"),
            vec!["nate"]
        );
        assert!(address_words("I went camping with Melanie.").is_empty());
        assert!(address_words("I'm fine. I think so!").is_empty());
        assert!(address_words("").is_empty());
    }

    #[test]
    fn long_text_is_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_ANALYSED_BYTES);
        assert!(terms(&long).iter().map(String::len).sum::<usize>() <= MAX_ANALYSED_BYTES);
    }

    #[test]
    fn dates_show_the_day_in_the_zone() {
        // 2023-05-08 13:56 UTC
        let ms = 1_683_554_160_000;
        assert_eq!(chat_date(ms, &TimeZone::UTC), "Mon 8 May 2023");
        assert_eq!(day_line(ms, &TimeZone::UTC), "## Mon 8 May 2023");
        let tokyo = TimeZone::get("Asia/Tokyo").unwrap();
        assert_eq!(chat_date(ms + 11 * 3_600_000, &tokyo), "Tue 9 May 2023");
        assert_eq!(date_terms(ms, &TimeZone::UTC), vec!["may", "2023"]);
        assert_eq!(
            named_days("What did she do on 8 May, 2023 and on June 3rd?"),
            vec![(Some(2023), 5, 8), (None, 6, 3)]
        );
        assert_eq!(named_days("on May 8, 2023"), vec![(Some(2023), 5, 8)]);
        assert!(named_days("may I ask about 2023?").is_empty());
        assert!(said_on(ms, &TimeZone::UTC, &named_days("on 8 May 2023")));
        assert!(!said_on(ms, &TimeZone::UTC, &named_days("on 9 May 2023")));
        assert!(said_on(ms, &TimeZone::UTC, &named_days("May 8")));
    }
}
