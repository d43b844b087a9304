//! `extractive`: the built-in summariser. No network, no model: it keeps the sentences of a
//! span that carry facts, and lists every identifier the kept sentences do not carry.
//!
//! It must really compress: it aims at [`TARGET_SHARE`] of the span's tokens (plus the
//! previous summary, which rolls forward whole while it fits), never more than `max_tokens`,
//! rather than filling `max_tokens` (which kept 97% of a short group chat). Sentences carrying
//! a fact (an identifier, name, date or decision other than the line's own speaker; a name,
//! time or mention only in a line that says something besides it) rank above all others; within that, by a TF-IDF-like score (terms frequent in the span but found in
//! few sentences), bonuses for more identifiers, for cue words of decisions, rules, to-dos and
//! requests, for recency, and for sentences of the previous summary. A fact-bearing line loses
//! its chatter clauses ("lol ok, ZX-1 is owned by Priya" keeps "ZX-1 is owned by Priya").
//! The kept sentences are written in their original order; identifiers they do not carry, and
//! the cap, come from the retention check, so no fact is lost to the goal.
//!
//! Sentence splitting is hand-written on purpose: it must never split inside an identifier
//! (a code span may hold `. `), which a generic segmenter cannot know.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::ops::Range;

use crate::compaction::identifiers::{self, Identifier, IdentifierKind};
use crate::compaction::retention::{self, Retained};
use crate::context::analysis::is_stop_word;
use crate::model::TokenCounter;

/// Longest sentence kept whole, in bytes; longer ones are split at whitespace.
pub(super) const MAX_SENTENCE_BYTES: usize = 600;

/// Opens a day line of a group span (`## Mon 8 May 2023`, see `compact::render_span`): not a
/// sentence to rank, but the day of the lines after it. A summary writes it above the first
/// line it keeps from that day, so what is kept still says when it was said.
pub(super) const DAY_MARKER: &str = crate::context::analysis::DAY_MARKER;

/// Most sentences ranked from one span (a span of 100k tokens has about 8,000).
pub(super) const MAX_SENTENCES: usize = 20_000;

/// Share of the span's tokens an extractive summary aims at: the product promise is a summary
/// of at most 35% of a chat span, and token estimates of the parts drift by a few points.
pub(super) const TARGET_SHARE: f64 = 0.3;

/// Smallest goal in tokens, so a short span is kept (nearly) whole instead of being cut to a
/// header and a list.
pub(super) const MIN_GOAL_TOKENS: u32 = 64;

/// Most clauses a sentence is cut into when its chatter is dropped (a sentence holds at most
/// [`MAX_SENTENCE_BYTES`], so this only bounds pathological punctuation).
const MAX_CLAUSES: usize = 64;

/// A clause of a fact-bearing line with fewer content words than this, no identifier and no
/// cue word is chatter ("lol ok", "so annoying") and is dropped from the line.
const CHATTER_CLAUSE_TERMS: usize = 2;

/// Score added to a sentence that carries a fact, so every fact line outranks every line of
/// chatter or prose (a TF-IDF score is at most 1 plus bonuses below this).
const FACT_BONUS: f64 = 2.0;

/// How far a sentence's score falls when every term of it is already said by the sentences
/// chosen before it (so near-duplicates do not crowd out other facts).
const REDUNDANCY_PENALTY: f64 = 0.6;

/// Chat filler that carries no meaning for ranking and is not on the stop list
/// (`context::analysis::is_stop_word`, NLTK's English list, which is for prose): greetings,
/// acknowledgements, interjections and hedges ("ok thanks!", "lol yeah I guess").
const CHAT_FILLER: &[&str] = &[
    "also", "cool", "could", "get", "good", "got", "great", "guess", "haha", "hello", "hi",
    "let's", "like", "lol", "nice", "oh", "ok", "okay", "one", "really", "sounds", "sure", "thank",
    "thanks", "think", "well", "would", "yeah", "yep", "yes",
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
pub(super) const EXTRACTIVE_HEADER: &str =
    "Summary (extractive: lines with facts kept, chatter dropped, no model):";

/// How every extractive header begins, this version's and earlier ones ("Summary (extractive:
/// sentences kept verbatim, no model):"): a rolling summary drops them all.
const EXTRACTIVE_HEADER_PREFIX: &str = "Summary (extractive";

/// The built-in extractive summariser.
#[derive(Debug, Clone, Copy)]
pub struct ExtractiveSummarizer {
    counter: TokenCounter,
}

#[derive(Debug)]
struct Sentence<'a> {
    /// The sentence, without its chatter clauses when it carries a fact.
    text: Cow<'a, str>,
    score: f64,
    tokens: u32,
    /// Distinct term ids, sorted.
    terms: Vec<u32>,
    /// Indexes of the identifiers it carries.
    ids: Vec<u32>,
    /// Worth keeping at all (see [`MIN_CONTENT_TERMS`]).
    informative: bool,
    /// From the previous summary.
    previous: bool,
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
                // Headings of a model-written summary are structure, not content; day lines
                // roll forward with the lines under them.
                let structure = text.starts_with(EXTRACTIVE_HEADER_PREFIX)
                    || text == retention::CUT_MARKER
                    || (text.starts_with('#') && !text.starts_with(DAY_MARKER));
                if !structure {
                    sentences.push((text, true));
                }
            }
        }
        sentences.extend(split_sentences(span).into_iter().map(|t| (t, false)));
        sentences.truncate(MAX_SENTENCES);
        // A day line's date is not an identifier to keep: it is written with what it dates.
        let span_text = without_day_lines(span);
        let previous_text = previous.map(without_day_lines);
        let mut sources = vec![span_text.as_ref()];
        if let Some(p) = &previous_text {
            sources.push(p.as_ref());
        }
        let ids = identifiers::extract_all(&sources);
        let (ranked, span_tokens) = self.rank(&sentences, &ids);
        let (goal, previous_fits) = goal(span_tokens, &ranked, max_tokens);
        let body = self.select(&ranked, &ids, goal, previous_fits);
        retention::enforce_ids(&ids, &body, max_tokens, &self.counter)
    }

    /// Ranks `sentences` (each flagged when it comes from the previous summary). Also returns
    /// the tokens of the span's own sentences as written.
    fn rank<'a>(
        &self,
        sentences: &[(&'a str, bool)],
        ids: &[Identifier],
    ) -> (Vec<Sentence<'a>>, u32) {
        let n = sentences.len().max(1) as f64;
        let id_index: HashMap<&str, u32> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.text.as_str(), u32::try_from(i).unwrap_or(u32::MAX)))
            .collect();
        let mut span_tokens = 0u32;
        // Which identifiers each sentence carries, and which of them are facts (not the line's
        // own speaker); fact lines lose their chatter clauses.
        let analysed: Vec<Analysed<'a>> = sentences
            .iter()
            .map(|&(text, carried)| {
                if text.starts_with(DAY_MARKER) {
                    return Analysed {
                        text: Cow::Borrowed(text),
                        tokens: self.counter.count(text),
                        ids: Vec::new(),
                        facts: 0,
                        body_start: text.len(),
                    };
                }
                let written = self.counter.count(text);
                if !carried {
                    span_tokens = span_tokens.saturating_add(written);
                }
                let found = identifiers::occurrences(text);
                let mut carried_ids = carried_by(text, &found, &id_index);
                let speaker = identifiers::speaker(text);
                let body_start = speaker.as_ref().map_or(0, |(_, end)| *end);
                let own = speaker.and_then(|(name, _)| id_index.get(&text[name]).copied());
                // A name, a time or a mention alone is not a fact ("Woohoo Melanie!"): it
                // makes one only in a line that says something besides it.
                let others: Vec<u32> = carried_ids
                    .iter()
                    .copied()
                    .filter(|&i| Some(i) != own)
                    .collect();
                let weak = |i: &u32| ids.get(*i as usize).is_some_and(|id| id.kind.is_weak());
                let said = words(text.get(body_start..).unwrap_or_default()).len();
                let facts = if said.saturating_sub(others.iter().filter(|i| weak(i)).count())
                    >= MIN_CONTENT_TERMS
                {
                    others.len()
                } else {
                    others.iter().filter(|i| !weak(i)).count()
                };
                let text = if carried || facts == 0 {
                    Cow::Borrowed(text)
                } else {
                    let carried = carried_ids.iter().filter_map(|&i| ids.get(i as usize));
                    shorten(text, body_start, &found, carried)
                };
                let tokens = match &text {
                    Cow::Borrowed(_) => written,
                    Cow::Owned(short) => {
                        carried_ids.retain(|&i| {
                            ids.get(i as usize).is_some_and(|id| id.appears_in(short))
                        });
                        self.counter.count(short)
                    }
                };
                Analysed {
                    text,
                    tokens,
                    ids: carried_ids,
                    facts,
                    body_start,
                }
            })
            .collect();
        let mut vocabulary: HashMap<String, u32> = HashMap::new();
        let mut tf: Vec<u32> = Vec::new();
        let terms: Vec<Vec<u32>> = analysed
            .iter()
            .map(|a| {
                // The speaker's name is who said it, not what was said.
                let mut ids: Vec<u32> = words(a.text.get(a.body_start..).unwrap_or_default())
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
        let ranked = sentences
            .iter()
            .zip(analysed)
            .zip(base)
            .zip(terms)
            .enumerate()
            .map(|(i, ((((_, carried), analysed), base), terms))| {
                let Analysed {
                    text,
                    tokens,
                    ids,
                    facts,
                    ..
                } = analysed;
                // A question is a pending ask when it says something ("anyone for lunch?"
                // does not).
                let cue =
                    has_cue(&text) || (text.ends_with('?') && terms.len() >= MIN_CONTENT_TERMS);
                let day = text.starts_with(DAY_MARKER);
                let informative =
                    !day && (*carried || cue || facts > 0 || terms.len() >= MIN_CONTENT_TERMS);
                let score = base / max_base
                    + if facts > 0 { FACT_BONUS } else { 0.0 }
                    + 0.35 * facts.min(3) as f64 / 3.0
                    + if cue { 0.3 } else { 0.0 }
                    + 0.2 * (i as f64 / n)
                    + if *carried { 0.4 } else { 0.0 };
                Sentence {
                    tokens: tokens.saturating_add(2),
                    text,
                    score,
                    terms,
                    ids,
                    informative,
                    previous: *carried,
                }
            })
            .collect();
        (ranked, span_tokens)
    }

    /// Chooses the sentences of the summary and writes them in their original order.
    ///
    /// First pass: best first, into the goal left after reserving room for every
    /// identifier's list line (at most all but [`retention::BODY_FLOOR_SHARE`] of the goal),
    /// each sentence scored down by what the ones chosen before it already say (lazy greedy: a
    /// score only falls as more is chosen, so a stale score is an upper bound). Second pass:
    /// identifiers carried by chosen sentences need no list line, so the room that frees is
    /// filled with more sentences, each costing its tokens less the list lines it saves; a
    /// sentence that saves at least what it costs is always taken (it shrinks the summary,
    /// even when the facts alone overshoot the goal).
    ///
    /// With `previous_fits`, the previous summary's sentences are chosen before either pass.
    fn select(
        &self,
        ranked: &[Sentence<'_>],
        ids: &[Identifier],
        goal: u32,
        previous_fits: bool,
    ) -> String {
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
        let max_reserve = (f64::from(goal) * (1.0 - retention::BODY_FLOOR_SHARE)) as u32;
        let mut room = goal
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
        if previous_fits {
            for (index, sentence) in ranked.iter().enumerate().filter(|(_, s)| s.previous) {
                room = room.saturating_sub(sentence.tokens);
                chosen.choose(sentence, index);
            }
        }
        let mut heap: BinaryHeap<Ranked> = ranked
            .iter()
            .enumerate()
            .filter(|(i, s)| s.informative && !chosen.keep[*i])
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
            i64::from(goal) - i64::from(fixed) - i64::from(body_tokens) - i64::from(unlisted);
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
            if net <= room || net <= 0 {
                room -= net;
                chosen.choose(&ranked[i], i);
            }
        }

        let mut body = String::from(EXTRACTIVE_HEADER);
        let mut seen = HashSet::new();
        let mut day: Option<&str> = None;
        for (i, sentence) in ranked.iter().enumerate() {
            if sentence.text.starts_with(DAY_MARKER) {
                day = Some(sentence.text.as_ref());
                continue;
            }
            // A sentence repeated (e.g. carried and said again) is kept once.
            if chosen.keep[i] && seen.insert(sentence.text.as_ref()) {
                if let Some(d) = day.take() {
                    if seen.insert(d) {
                        body.push('\n');
                        body.push_str(d);
                    }
                }
                body.push_str("\n- ");
                body.push_str(&sentence.text);
            }
        }
        body
    }
}

/// A sentence before ranking: its text (shortened when it carries a fact) and that text's
/// tokens, the identifiers it carries, how many of them are facts (not the speaker's own
/// name), and where the text after its speaker prefix starts.
struct Analysed<'a> {
    text: Cow<'a, str>,
    tokens: u32,
    ids: Vec<u32>,
    facts: usize,
    body_start: usize,
}

/// The summary's goal in tokens: [`TARGET_SHARE`] of the span (at least
/// [`MIN_GOAL_TOKENS`]) plus the previous summary's sentences, at most `max_tokens`.
/// Also says whether all of the previous summary fits in it beside the span's share (then it
/// is kept whole: a rolling summary keeps its history).
fn goal(span_tokens: u32, ranked: &[Sentence<'_>], max_tokens: u32) -> (u32, bool) {
    let previous: u32 = ranked
        .iter()
        .filter(|s| s.previous)
        .map(|s| s.tokens)
        .fold(0, u32::saturating_add);
    let share = ((f64::from(span_tokens) * TARGET_SHARE) as u32).max(MIN_GOAL_TOKENS);
    let wanted = share.saturating_add(previous);
    (wanted.min(max_tokens), wanted <= max_tokens)
}

/// Whether `text` has a cue word of a decision, rule, to-do or request.
fn has_cue(text: &str) -> bool {
    let lower = text.to_lowercase();
    CUE_STEMS.iter().any(|c| lower.contains(c))
}

/// Indexes (into the span's identifiers, via `id_index`) of the identifiers `text` carries:
/// those `found` in it, and names found elsewhere that it says again ("Priya, can you …"
/// after "owned by Priya"). Sorted, once each.
fn carried_by(
    text: &str,
    found: &[(Range<usize>, IdentifierKind)],
    id_index: &HashMap<&str, u32>,
) -> Vec<u32> {
    let mut out: Vec<u32> = found
        .iter()
        .filter_map(|(r, _)| id_index.get(&text[r.clone()]).copied())
        .collect();
    let is_word = |c: char| c.is_alphanumeric() || matches!(c, '\'' | '’' | '-');
    let mut words: Vec<Range<usize>> = Vec::new();
    let mut start = None;
    for (at, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        match (is_word(c), start) {
            (false, Some(from)) => {
                words.push(from..at);
                start = None;
            }
            (true, None) => start = Some(at),
            _ => {}
        }
    }
    let capitalised = |r: &Range<usize>| text[r.clone()].starts_with(char::is_uppercase);
    for (k, word) in words.iter().enumerate() {
        if !capitalised(word) {
            continue;
        }
        let w = &text[word.clone()];
        let bare = w.strip_suffix("'s").or_else(|| w.strip_suffix("’s"));
        let pair = words
            .get(k + 1)
            .filter(|next| capitalised(next) && matches!(&text[word.end..next.start], " " | "\t"))
            .map(|next| &text[word.start..next.end]);
        for candidate in [Some(w), bare, pair].into_iter().flatten() {
            out.extend(id_index.get(candidate).copied());
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// `text` without its chatter clauses: after the speaker prefix (ending at `body_start`),
/// clauses (cut at `, `, `; ` and ` - ` outside the identifiers `found` in it, names and
/// decisions aside) that hold none of `facts`, no cue word and fewer than
/// [`CHATTER_CLAUSE_TERMS`] content words are dropped; a gap between kept clauses is marked
/// ` … `. Unchanged when every clause, or none, says something.
fn shorten<'a, 'i>(
    text: &'a str,
    body_start: usize,
    found: &[(Range<usize>, IdentifierKind)],
    facts: impl Iterator<Item = &'i Identifier>,
) -> Cow<'a, str> {
    let facts: Vec<&Identifier> = facts.collect();
    // Sorted and non-overlapping, as `partition_point` needs.
    let protected: Vec<Range<usize>> = found
        .iter()
        .filter(|(_, kind)| !matches!(kind, IdentifierKind::Name | IdentifierKind::Decision))
        .map(|(r, _)| r.clone())
        .collect();
    let inside = |at: usize| {
        let i = protected.partition_point(|r| r.end <= at);
        protected.get(i).is_some_and(|r| r.start <= at)
    };
    let mut clauses: Vec<Range<usize>> = Vec::new();
    let mut start = body_start;
    let bytes = text.as_bytes();
    let mut at = body_start;
    while at < bytes.len() && clauses.len() < MAX_CLAUSES {
        let separator = match bytes[at] {
            b',' | b';' if bytes.get(at + 1) == Some(&b' ') => 2,
            b'-' if at > 0 && bytes[at - 1] == b' ' && bytes.get(at + 1) == Some(&b' ') => 2,
            _ => 0,
        };
        if separator > 0 && !inside(at) {
            clauses.push(start..at);
            start = at + separator;
            at = start;
        } else {
            at += 1;
        }
    }
    clauses.push(start..text.len());
    if clauses.len() < 2 {
        return Cow::Borrowed(text);
    }
    let says_something = |r: &Range<usize>| {
        let clause = text[r.clone()].trim_end_matches(' ');
        facts.iter().any(|id| id.appears_in(clause))
            || has_cue(clause)
            || words(clause).len() >= CHATTER_CLAUSE_TERMS
    };
    let keep: Vec<bool> = clauses.iter().map(says_something).collect();
    if keep.iter().all(|k| *k) || !keep.iter().any(|k| *k) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    out.push_str(&text[..body_start]);
    let mut previous: Option<usize> = None;
    for (i, clause) in clauses.iter().enumerate().filter(|(i, _)| keep[*i]) {
        match previous {
            Some(p) if p + 1 == i => out.push_str(&text[clauses[p].end..clause.start]),
            Some(_) => out.push_str(" … "),
            None => {}
        }
        out.push_str(text[clause.clone()].trim_end_matches(' '));
        previous = Some(i);
    }
    Cow::Owned(out)
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
/// `text` without its day lines.
fn without_day_lines(text: &str) -> Cow<'_, str> {
    if !text.contains(DAY_MARKER) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.lines()
            .filter(|l| !l.starts_with(DAY_MARKER))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '\''))
        .filter(|w| w.chars().count() >= 2)
        .map(str::to_lowercase)
        .filter(|w| !is_stop_word(w) && !CHAT_FILLER.contains(&w.as_str()))
        .collect()
}

/// Splits `text` into trimmed sentences: at line breaks, and after `.`, `!`, `?` or `…`
/// followed by whitespace, except inside an identifier or after a known abbreviation. Strips
/// list markers. Sentences over [`MAX_SENTENCE_BYTES`] are split at whitespace.
pub(super) fn split_sentences(text: &str) -> Vec<&str> {
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

    /// Planted facts of [`group_chat`]: the line, and its id, owner and date.
    const PLANTED: [(&str, &str, &str, &str); 10] = [
        ("Priya: ticket ZX-4411 is owned by Priya, due 2026-12-03, we decided to ship on Friday", "ZX-4411", "Priya", "2026-12-03"),
        ("Bob: lol ok, PR #1234 is owned by Chen, due Dec 3, we agreed to freeze the API", "#1234", "Chen", "Dec 3"),
        ("Dana: Omar owns INC-7781 now, deadline is 2026-12-10, decided to roll back the cache", "INC-7781", "Omar", "2026-12-10"),
        ("Chen: haha fine, OPS-2290 is assigned to Dana, due 5 December 2026, we agreed to keep the old endpoint", "OPS-2290", "Dana", "5 December 2026"),
        ("Omar: so BILL-318 is owned by Bob, due 2026-12-15, we decided to bill monthly", "BILL-318", "Bob", "2026-12-15"),
        ("Priya: anyway, SEC-5120 is owned by Priya, due Dec 18, decided to rotate the keys first", "SEC-5120", "Priya", "Dec 18"),
        ("Bob: heads up, DATA-7002 is assigned to Omar, due 2026-12-20, we agreed to drop the legacy export", "DATA-7002", "Omar", "2026-12-20"),
        ("Dana: Chen owns MOB-6613, due 2026-12-22, we decided to delay the iOS release", "MOB-6613", "Chen", "2026-12-22"),
        ("Chen: ok so QA-9045 is owned by Dana, due Jan 7, we agreed to run the load test twice", "QA-9045", "Dana", "Jan 7"),
        ("Omar: last one, INFRA-8800 is owned by Bob, due 2027-01-12, decided to move to two regions", "INFRA-8800", "Bob", "2027-01-12"),
    ];

    /// A five-person group chat of 100 lines: chatter, and every tenth line a planted fact.
    fn group_chat() -> String {
        const PEOPLE: [&str; 5] = ["Priya", "Bob", "Chen", "Dana", "Omar"];
        const CHATTER: [&str; 27] = [
            "lol",
            "ok see you",
            "anyone for lunch?",
            "the build is slow again today",
            "haha yes",
            "brb coffee",
            "did anyone watch the game last night",
            "same here",
            "my internet is so flaky today",
            "ok",
            "thanks!",
            "lol that's wild",
            "who's bringing snacks on thursday",
            "in a meeting, back in a bit",
            "nice",
            "good morning all",
            "weather is terrible here",
            "sounds good",
            "yep",
            "anyone else's laptop fan going crazy",
            "omg the coffee machine is broken again",
            "see you tomorrow",
            "I have 2 cats and 4 dogs, 6 total",
            "can someone share the wifi password",
            "ugh mondays",
            "sure thing",
            "back now",
        ];
        let mut text = String::new();
        for i in 0..100 {
            if i % 10 == 3 {
                text.push_str(PLANTED[i / 10].0);
            } else {
                text.push_str(PEOPLE[(i * 3) % 5]);
                text.push_str(": ");
                text.push_str(CHATTER[(i * 7) % CHATTER.len()]);
            }
            text.push('\n');
        }
        text
    }

    #[test]
    fn a_group_chat_is_compressed_and_keeps_every_fact() {
        let c = counter();
        let span = group_chat();
        let out = ExtractiveSummarizer::new(c).summarize(&span, None, 1_024);
        let (input, output) = (c.count(&span), out.tokens);
        assert!(
            f64::from(output) <= 0.35 * f64::from(input),
            "{input} -> {output} tokens:\n{}",
            out.text
        );
        assert_eq!(out.omitted, 0);
        for (_, id, owner, date) in PLANTED {
            for fact in [id, owner, date] {
                assert!(out.text.contains(fact), "{fact} lost:\n{}", out.text);
            }
        }
        for decision in [
            "decided to ship on Friday",
            "agreed to freeze the API",
            "decided to move to two regions",
        ] {
            assert!(
                out.text.contains(decision),
                "{decision} lost:\n{}",
                out.text
            );
        }
        for id in extract_all(&[&span]) {
            assert!(
                id.appears_in(&out.text),
                "{:?} lost:\n{}",
                id.text,
                out.text
            );
        }
        for chatter in [
            "anyone for lunch?",
            "ok see you",
            "lol that's wild",
            "2 cats",
            "brb",
        ] {
            assert!(!out.text.contains(chatter), "{chatter} kept:\n{}", out.text);
        }
        // Fact lines lose their chatter clauses.
        assert!(
            out.text.contains("- Bob: PR #1234 is owned by Chen"),
            "{}",
            out.text
        );
        let kept_chatter = retention::split_section(&out.text)
            .0
            .lines()
            .filter(|l| l.starts_with("- ") && !PLANTED.iter().any(|p| l.contains(p.1)))
            .count();
        assert!(
            kept_chatter <= 2,
            "{kept_chatter} chatter lines kept:\n{}",
            out.text
        );
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

        #[test]
        fn any_chat_keeps_every_fact_within_budget(
            lines in proptest::collection::vec(
                "(Priya|Bob|Chen|Dana|Omar|The|Note): (lol|ok see you|[a-z ,]{0,40}|(lol, )?[A-Z]{2,4}-[0-9]{3,4} is owned by (Priya|Bob|Chen)(, due 2026-12-[0-3][0-9])?(, we decided to [a-z ]{1,20})?)",
                1..60,
            ),
            max in 96u32..1_200,
        ) {
            let c = counter();
            let span = lines.join("\n");
            let out = ExtractiveSummarizer::new(c).summarize(&span, None, max);
            proptest::prop_assert!(out.tokens <= max, "{} > {max}", out.tokens);
            if out.omitted == 0 {
                for id in extract_all(&[&span]) {
                    proptest::prop_assert!(id.appears_in(&out.text), "{:?} lost", id.text);
                }
            }
        }
    }
}
