//! `extractive`: the built-in summariser. No network, no model: it keeps the most informative
//! sentences of a span verbatim and lists every identifier the kept sentences do not carry.
//!
//! Sentences are ranked by a TF-IDF-like score (terms frequent in the span but found in few
//! sentences), plus bonuses for identifiers, for cue words of decisions, rules, to-dos and
//! requests, for recency, and for sentences of the previous summary (so a rolling summary
//! keeps its history). The best sentences that fit the token budget are kept in their original
//! order; the identifier list and the cap come from the retention check.
//!
//! Sentence splitting is hand-written on purpose: it must never split inside an identifier
//! (a code span may hold `. `), which a generic segmenter cannot know.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::ops::Range;

use crate::compaction::identifiers::{self, Identifier};
use crate::compaction::retention::{self, Retained};
use crate::model::TokenCounter;

/// Longest sentence kept whole, in bytes; longer ones are split at whitespace.
pub const MAX_SENTENCE_BYTES: usize = 600;

/// Most sentences ranked from one span (a span of 100k tokens has about 8,000).
pub const MAX_SENTENCES: usize = 20_000;

/// How far a sentence's score falls when every term of it is already said by the sentences
/// chosen before it (so near-duplicates do not crowd out other facts).
const REDUNDANCY_PENALTY: f64 = 0.6;

/// Words that carry no meaning for ranking, chat filler included.
const STOPWORDS: &[&str] = &[
    "a", "about", "also", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "cool",
    "could", "did", "do", "does", "for", "from", "get", "good", "got", "great", "guess", "had",
    "haha", "has", "have", "he", "hello", "her", "hi", "his", "how", "i", "if", "in", "into", "is",
    "it", "its", "just", "let's", "like", "lol", "me", "my", "nice", "no", "now", "of", "oh", "ok",
    "okay", "on", "one", "or", "our", "really", "she", "so", "some", "sounds", "sure", "thank",
    "thanks", "that", "the", "their", "them", "then", "there", "these", "they", "think", "this",
    "to", "too", "very", "was", "we", "well", "were", "what", "when", "which", "who", "will",
    "with", "would", "yeah", "yep", "yes", "you", "your",
];

/// A sentence with fewer content words than this, no identifier and no cue word says nothing
/// worth keeping ("ok thanks!", "cool cool."), however much room is left.
const MIN_CONTENT_TERMS: usize = 3;

/// Word stems that mark decisions, rules, to-dos and requests.
const CUE_STEMS: &[&str] = &[
    "decid",
    "agree",
    "todo",
    "to-do",
    "must",
    "need",
    "should",
    "never",
    "always",
    "don't",
    "do not",
    "please",
    "deadline",
    "remember",
    "important",
    "require",
    "constraint",
    "rule",
    "promise",
    "plan",
    "next step",
    "blocked",
    "fix",
];

/// Abbreviations after which a period does not end a sentence.
const ABBREVIATIONS: &[&str] = &["e.g", "i.e", "etc", "vs", "mr", "mrs", "ms", "dr", "approx"];

/// The header of an extractive summary: it says plainly that no model wrote it.
pub const EXTRACTIVE_HEADER: &str = "Summary (extractive: sentences kept verbatim, no model):";

/// The built-in extractive summariser.
#[derive(Debug, Clone, Copy)]
pub struct ExtractiveSummarizer {
    counter: TokenCounter,
}

#[derive(Debug)]
struct Sentence<'a> {
    text: &'a str,
    score: f64,
    tokens: u32,
    /// Distinct term ids, sorted.
    terms: Vec<u32>,
    /// Indexes of the identifiers it carries.
    ids: Vec<u32>,
    /// Worth keeping at all (see [`MIN_CONTENT_TERMS`]).
    informative: bool,
}

impl ExtractiveSummarizer {
    /// A summariser counting tokens with `counter`.
    pub fn new(counter: TokenCounter) -> Self {
        Self { counter }
    }

    /// Summarises `span` (rolling `previous` forward) in at most `max_tokens` tokens,
    /// keeping every identifier of both verbatim (unless even the identifier list alone
    /// exceeds `max_tokens`; then the least important are omitted and counted).
    pub fn summarize(&self, span: &str, previous: Option<&str>, max_tokens: u32) -> Retained {
        let previous_body = previous.map(|p| retention::split_section(p).0);
        let mut sentences = Vec::new();
        if let Some(body) = &previous_body {
            for text in split_sentences(body) {
                // Headings of a model-written summary are structure, not content.
                if text != EXTRACTIVE_HEADER
                    && text != retention::CUT_MARKER
                    && !text.starts_with('#')
                {
                    sentences.push((text, true));
                }
            }
        }
        sentences.extend(split_sentences(span).into_iter().map(|t| (t, false)));
        sentences.truncate(MAX_SENTENCES);
        let mut sources = vec![span];
        if let Some(p) = previous {
            sources.push(p);
        }
        let ids = identifiers::extract_all(&sources);
        let ranked = self.rank(&sentences, &ids);
        let body = self.select(&ranked, &ids, max_tokens);
        retention::enforce_ids(&ids, &body, max_tokens, &self.counter)
    }

    fn rank<'a>(&self, sentences: &[(&'a str, bool)], ids: &[Identifier]) -> Vec<Sentence<'a>> {
        let n = sentences.len().max(1) as f64;
        let id_index: HashMap<&str, u32> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.text.as_str(), u32::try_from(i).unwrap_or(u32::MAX)))
            .collect();
        let mut vocabulary: HashMap<String, u32> = HashMap::new();
        let mut tf: Vec<u32> = Vec::new();
        let terms: Vec<Vec<u32>> = sentences
            .iter()
            .map(|(text, _)| {
                let mut ids: Vec<u32> = words(text)
                    .into_iter()
                    .map(|w| {
                        let next = u32::try_from(vocabulary.len()).unwrap_or(u32::MAX);
                        let id = *vocabulary.entry(w).or_insert(next);
                        if id as usize >= tf.len() {
                            tf.resize(id as usize + 1, 0);
                        }
                        tf[id as usize] += 1;
                        id
                    })
                    .collect();
                ids.sort_unstable();
                ids.dedup();
                ids
            })
            .collect();
        let mut df = vec![0u32; tf.len()];
        for ids in &terms {
            for &t in ids {
                df[t as usize] += 1;
            }
        }
        let base: Vec<f64> = terms
            .iter()
            .map(|ids| {
                let sum: f64 = ids
                    .iter()
                    .map(|&t| {
                        let tf = f64::from(tf[t as usize].max(1));
                        let df = f64::from(df[t as usize].max(1));
                        (1.0 + tf.ln()) * (1.0 + (n / df).ln())
                    })
                    .sum();
                sum / (ids.len().max(1) as f64).sqrt()
            })
            .collect();
        let max_base = base.iter().copied().fold(f64::MIN_POSITIVE, f64::max);
        sentences
            .iter()
            .zip(base)
            .zip(terms)
            .enumerate()
            .map(|(i, (((text, carried), base), terms))| {
                let lower = text.to_lowercase();
                let mut carried_ids: Vec<u32> = identifiers::spans(text)
                    .into_iter()
                    .filter_map(|(r, _)| id_index.get(&text[r]).copied())
                    .collect();
                carried_ids.sort_unstable();
                carried_ids.dedup();
                let cue = CUE_STEMS.iter().any(|c| lower.contains(c)) || text.ends_with('?');
                let informative =
                    *carried || cue || !carried_ids.is_empty() || terms.len() >= MIN_CONTENT_TERMS;
                let score = base / max_base
                    + 0.35 * carried_ids.len().min(3) as f64 / 3.0
                    + if cue { 0.3 } else { 0.0 }
                    + 0.2 * (i as f64 / n)
                    + if *carried { 0.4 } else { 0.0 };
                Sentence {
                    text,
                    score,
                    tokens: self.counter.count(text).saturating_add(2),
                    terms,
                    ids: carried_ids,
                    informative,
                }
            })
            .collect()
    }

    /// Chooses the sentences of the summary and writes them in their original order.
    ///
    /// First pass: best first, into the budget left after reserving room for every
    /// identifier's list line (at most all but [`retention::BODY_FLOOR_SHARE`] of the budget),
    /// each sentence scored down by what the ones chosen before it already say (lazy greedy: a
    /// score only falls as more is chosen, so a stale score is an upper bound). Second pass:
    /// identifiers carried by chosen sentences need no list line, so the room that frees is
    /// filled with more sentences, each costing its tokens less the list lines it saves.
    fn select(&self, ranked: &[Sentence<'_>], ids: &[Identifier], max_tokens: u32) -> String {
        let list_heading = if ids.is_empty() {
            0
        } else {
            self.counter
                .count(retention::IDENTIFIERS_HEADING)
                .saturating_add(4)
        };
        let fixed = self
            .counter
            .count(EXTRACTIVE_HEADER)
            .saturating_add(list_heading)
            .saturating_add(2);
        let id_cost: Vec<u32> = ids
            .iter()
            .map(|id| self.counter.count(&id.display()).saturating_add(3))
            .collect();
        let list_tokens: u32 = id_cost.iter().sum();
        let max_reserve = (f64::from(max_tokens) * (1.0 - retention::BODY_FLOOR_SHARE)) as u32;
        let mut room = max_tokens
            .saturating_sub(list_tokens.min(max_reserve))
            .saturating_sub(fixed);
        let vocabulary = ranked
            .iter()
            .flat_map(|s| s.terms.last())
            .max()
            .map_or(0, |t| *t as usize + 1);
        let mut chosen = Chosen {
            keep: vec![false; ranked.len()],
            covered: vec![false; vocabulary],
            listed: vec![false; ids.len()],
        };
        let adjusted = |s: &Sentence<'_>, covered: &[bool]| {
            let seen = s.terms.iter().filter(|t| covered[**t as usize]).count();
            let overlap = seen as f64 / s.terms.len().max(1) as f64;
            s.score * (1.0 - REDUNDANCY_PENALTY * overlap)
        };
        let mut heap: BinaryHeap<Ranked> = ranked
            .iter()
            .enumerate()
            .filter(|(_, s)| s.informative)
            .map(|(index, s)| Ranked {
                score: s.score,
                index,
            })
            .collect();
        while let Some(top) = heap.pop() {
            let sentence = &ranked[top.index];
            if sentence.tokens > room {
                // Room only shrinks in this pass: it will never fit.
                continue;
            }
            let fresh = adjusted(sentence, &chosen.covered);
            if heap.peek().is_some_and(|next| fresh < next.score) {
                heap.push(Ranked {
                    score: fresh,
                    index: top.index,
                });
                continue;
            }
            room -= sentence.tokens;
            chosen.choose(sentence, top.index);
        }

        let body_tokens: u32 = (0..ranked.len())
            .filter(|&i| chosen.keep[i])
            .map(|i| ranked[i].tokens)
            .sum();
        let unlisted: u32 = (0..ids.len())
            .filter(|&i| !chosen.listed[i])
            .map(|i| id_cost[i])
            .sum();
        let mut room =
            i64::from(max_tokens) - i64::from(fixed) - i64::from(body_tokens) - i64::from(unlisted);
        let mut rest: Vec<(f64, usize)> = (0..ranked.len())
            .filter(|&i| !chosen.keep[i] && ranked[i].informative)
            .map(|i| (adjusted(&ranked[i], &chosen.covered), i))
            .collect();
        rest.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, i) in rest {
            let saved: u32 = ranked[i]
                .ids
                .iter()
                .filter(|id| !chosen.listed[**id as usize])
                .map(|id| id_cost[*id as usize])
                .sum();
            let net = i64::from(ranked[i].tokens) - i64::from(saved);
            if net <= room {
                room -= net;
                chosen.choose(&ranked[i], i);
            }
        }

        let mut body = String::from(EXTRACTIVE_HEADER);
        let mut seen = HashSet::new();
        for (i, sentence) in ranked.iter().enumerate() {
            // A sentence repeated (e.g. carried and said again) is kept once.
            if chosen.keep[i] && seen.insert(sentence.text) {
                body.push_str("\n- ");
                body.push_str(sentence.text);
            }
        }
        body
    }
}

/// What the chosen sentences cover.
struct Chosen {
    /// Chosen sentences.
    keep: Vec<bool>,
    /// Terms said by a chosen sentence.
    covered: Vec<bool>,
    /// Identifiers carried by a chosen sentence (no list line needed).
    listed: Vec<bool>,
}

impl Chosen {
    fn choose(&mut self, sentence: &Sentence<'_>, index: usize) {
        self.keep[index] = true;
        for t in &sentence.terms {
            self.covered[*t as usize] = true;
        }
        for id in &sentence.ids {
            self.listed[*id as usize] = true;
        }
    }
}

/// A sentence in the selection heap: highest score first, then the earliest.
#[derive(Debug)]
struct Ranked {
    score: f64,
    index: usize,
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked {}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then(other.index.cmp(&self.index))
    }
}

/// Lowercased words of `text` that count for ranking.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '\''))
        .filter(|w| w.chars().count() >= 2)
        .map(str::to_lowercase)
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .collect()
}

/// Splits `text` into trimmed sentences: at line breaks, and after `.`, `!`, `?` or `…`
/// followed by whitespace, except inside an identifier or after a known abbreviation. Strips
/// list markers. Sentences over [`MAX_SENTENCE_BYTES`] are split at whitespace.
pub fn split_sentences(text: &str) -> Vec<&str> {
    let protected: Vec<Range<usize>> = identifiers::spans(text)
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    let inside = |at: usize| {
        let i = protected.partition_point(|r| r.end <= at);
        protected.get(i).is_some_and(|r| r.start <= at)
    };
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let end_here = match c {
            '\n' => Some(at),
            '.' | '!' | '?' | '…' => {
                let next_is_space = chars.peek().is_none_or(|(_, n)| n.is_whitespace());
                let after = at + c.len_utf8();
                (next_is_space && !inside(at) && !after_abbreviation(&text[start..at]))
                    .then_some(after)
            }
            _ => None,
        };
        if let Some(end) = end_here {
            push_sentence(&text[start..end], &mut out);
            start = end;
        }
    }
    push_sentence(&text[start..], &mut out);
    out
}

fn after_abbreviation(before: &str) -> bool {
    let word = before
        .rsplit(|c: char| c.is_whitespace() || c == '(')
        .next()
        .unwrap_or("")
        .to_lowercase();
    ABBREVIATIONS.contains(&word.as_str())
        || (word.len() == 1 && word.chars().all(char::is_alphabetic))
}

fn push_sentence<'a>(raw: &'a str, out: &mut Vec<&'a str>) {
    let mut s = raw.trim();
    for marker in ["- ", "* ", "• "] {
        if let Some(rest) = s.strip_prefix(marker) {
            s = rest.trim_start();
        }
    }
    while !s.is_empty() {
        if s.len() <= MAX_SENTENCE_BYTES {
            out.push(s);
            return;
        }
        let mut cut = MAX_SENTENCE_BYTES;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        if let Some(space) = s[..cut].rfind(char::is_whitespace) {
            if space > MAX_SENTENCE_BYTES / 2 {
                cut = space;
            }
        }
        out.push(s[..cut].trim_end());
        s = s[cut..].trim_start();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compaction::identifiers::extract_all;
    use crate::model::Encoding;

    fn counter() -> TokenCounter {
        TokenCounter::new(Encoding::Cl100k)
    }

    #[test]
    fn splits_sentences_but_not_identifiers() {
        let text = "We use v1.2.3 now. See `a. b` and https://x.test/a.b?c=d. Done!\n- Next line e.g. this one\nLast";
        assert_eq!(
            split_sentences(text),
            vec![
                "We use v1.2.3 now.",
                "See `a. b` and https://x.test/a.b?c=d.",
                "Done!",
                "Next line e.g. this one",
                "Last"
            ]
        );
        let long = "word ".repeat(400);
        let parts = split_sentences(&long);
        assert!(parts.len() >= 3 && parts.iter().all(|p| p.len() <= MAX_SENTENCE_BYTES));
        assert!(split_sentences("").is_empty());
        assert_eq!(
            split_sentences("é".repeat(700).as_str()).concat(),
            "é".repeat(700)
        );
    }

    /// A synthetic conversation: filler, plus facts with identifiers.
    fn conversation(turns: usize) -> String {
        let mut text = String::new();
        for i in 0..turns {
            match i % 5 {
                0 => text.push_str(&format!(
                    "user (Alice): Ticket OPS-{} is about host web-{:02}; we decided to roll back to v2.{}.0.\n",
                    4000 + i,
                    i % 50,
                    i
                )),
                1 => text.push_str(&format!(
                    "assistant: The log at /var/log/svc/{i}.log shows error 0x{:x} at 12:{:02}. Please check `svc restart --id {i}`.\n",
                    0xbeef + i,
                    i % 60
                )),
                2 => text.push_str("user (Bob): ok thanks, that sounds reasonable to me for now I think.\n"),
                3 => text.push_str(&format!(
                    "assistant: Noted. The dashboard is https://grafana.example.com/d/{i} and @oncall-{} owns it.\n",
                    i % 7
                )),
                _ => text.push_str("user (Alice): Sure. Let's keep going and see what happens next with it.\n"),
            }
        }
        text
    }

    #[test]
    fn keeps_every_identifier_within_budget() {
        let span = conversation(60);
        let out = ExtractiveSummarizer::new(counter()).summarize(&span, None, 1_024);
        assert!(out.tokens <= 1_024, "{} tokens", out.tokens);
        assert_eq!(out.omitted, 0);
        assert!(out.text.starts_with(EXTRACTIVE_HEADER));
        for id in extract_all(&[&span]) {
            assert!(id.appears_in(&out.text), "{:?} lost", id.text);
        }
        assert!(
            out.text.matches("sounds reasonable").count() <= 1,
            "repeated sentences are kept once"
        );
    }

    #[test]
    fn facts_outrank_filler() {
        let span = "haha yes.\nok thanks!\nWe decided to migrate the billing service to Postgres.\n\
            sure, sounds good to me.\nlol.\nThe rule is that refunds never exceed the original charge.\n\
            cool cool.\nnice one.\nPlease send the quarterly invoice report to finance by Monday?\nyep.";
        let c = counter();
        let budget = c.count(EXTRACTIVE_HEADER) + 3 * 16 + 4;
        let out = ExtractiveSummarizer::new(c).summarize(span, None, budget);
        assert!(out.tokens <= budget, "{} > {budget}", out.tokens);
        assert!(
            out.text
                .contains("We decided to migrate the billing service to Postgres."),
            "{}",
            out.text
        );
        assert!(out.text.contains("refunds never exceed"));
        for filler in ["haha", "lol", "cool cool", "nice one", "yep"] {
            assert!(!out.text.contains(filler), "{filler} kept: {}", out.text);
        }
    }

    #[test]
    fn a_small_span_is_kept_whole_and_a_tiny_budget_is_respected() {
        let span = "We decided to ship on 2025-03-01. Alice owns PR #88.";
        let out = ExtractiveSummarizer::new(counter()).summarize(span, None, 1_024);
        assert!(out.text.contains("We decided to ship on 2025-03-01."));
        assert!(out.text.contains("Alice owns PR #88."));
        assert_eq!(out.restored, 0);
        let big = conversation(400);
        let out = ExtractiveSummarizer::new(counter()).summarize(&big, None, 100);
        assert!(out.tokens <= 100, "{} tokens", out.tokens);
        assert!(out.omitted > 0);
    }

    #[test]
    fn rolls_the_previous_summary_forward() {
        let s = ExtractiveSummarizer::new(counter());
        let first = s.summarize("We must never deploy on Fridays (rule R-1).", None, 512);
        let second = s.summarize(&conversation(10), Some(&first.text), 1_024);
        assert!(second
            .text
            .contains("We must never deploy on Fridays (rule R-1)."));
        assert_eq!(second.text.matches(EXTRACTIVE_HEADER).count(), 1);
        assert!(second.text.matches("Exact identifiers").count() <= 1);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        #[test]
        fn any_text_stays_within_budget(
            span in "\\PC{0,600}",
            previous in proptest::option::of("\\PC{0,200}"),
            max in 64u32..600,
        ) {
            let c = counter();
            let out = ExtractiveSummarizer::new(c).summarize(&span, previous.as_deref(), max);
            proptest::prop_assert!(out.tokens <= max, "{} > {max}", out.tokens);
            proptest::prop_assert_eq!(out.tokens, c.count(&out.text));
        }
    }
}
