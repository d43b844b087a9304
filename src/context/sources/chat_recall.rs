//! `chat_recall`: older messages of a group chat, recalled from the chat's own record for the
//! current message. The chat's messages that the context does not already show (not in the
//! history window, not its chatter, not the pending history) are ranked with BM25
//! ([`crate::context::retrieval`]) against the current message, each message indexed by its
//! text, its sender's name ("When did Caroline…" favours Caroline's lines) and its month and
//! year ("…in May 2023"), the last two as a field of their own (no length normalisation: a
//! match on the sender alone does not favour the lines that say least); a member's name said
//! to them ("Thanks, Melanie!") is not a term of the line; a line said on a day the question
//! names ("on 31 July, 2023") counts more. A second round, seeded by the first round's best hits (what they name: people,
//! places, things), finds the other halves of a question that spans several lines. The hits
//! within `min_relative` of the best are taken best first, then weaker ones while the budget
//! the turn leaves lasts (more when there is room, fewer when not), each with a neighbour
//! where a hit is half of an exchange: the answer after a question, the question before a
//! short reply ("yes, last Friday"); the best hits bring a follow-up question put to them and
//! its answer ("we had a picnic" / "what did you play?" / "charades"), and optionally the
//! lines around them (`neighbours`). Questions put to the bot are not recalled (they are not
//! what the group said), nor lines the rolling summary already states. Analysed terms are
//! memoised per message (see [`Memo`]).
//!
//! The recalled lines come as one block, oldest first, each with its sender under a line of
//! the day it was said (`## Mon 8 May 2023`, then `Caroline: …`), so "when" questions can be
//! answered and, where two lines disagree ("standup at 9", later "standup moved to 10"), the
//! newer one reads as the current one. The day is written once per day, not on every line: it
//! costs about as many tokens as a short reply, and the budget it frees holds more lines.
//! Each line's tokens are counted once, with its newline, and the block's are their sum and
//! the frame's (text is cut into pieces at newlines before it is encoded, so the sum is the
//! block's count): the block is not counted again. Bounded: at most `max_candidates` messages
//! are read, `top_n` hits taken, each line cut to `max_snippet_chars`.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, PoisonError};

use foldhash::HashMap as FoldMap;

use jiff::tz::TimeZone;
use serde::Deserialize;

use super::memory_recall::recall_query;
use crate::context::analysis::{
    address_words, chat_date, date_terms, day_line, named_days, said_on, terms,
};
use crate::context::retrieval::{expansion, Corpus, Hit};
use crate::context::text::prefix_chars;
use crate::context::{
    BlockKind, BlockMeta, ContextBlock, ContextError, ContextSource, SessionView, StageContext,
    StageError, TokenBudget,
};
use crate::inbound::{untrusted, untrusted_block};
use crate::model::MESSAGE_OVERHEAD_TOKENS;
use crate::store::{ChannelMessage, Scan};

/// The label of the recalled messages' block.
pub const RECALL_LABEL: &str = "Recalled from earlier in this chat";
/// How the block introduces its lines.
const RECALL_NOTE: &str =
    "oldest first, under the day each was said; where lines disagree, the newer one is current";
const HOUR_MS: u64 = 3_600_000;
/// Every time zone's offset is a whole number of quarter hours, so all instants of one
/// quarter hour fall on one day: day lines are formatted once per quarter hour of an assembly.
const QUARTER_HOUR_MS: u64 = 900_000;

/// The day lines of one assembly, by quarter hour (see [`QUARTER_HOUR_MS`]); at most one per
/// candidate.
type Days = HashMap<u64, String>;
/// How much more a line counts when its sender is named in the question ("When did Caroline
/// …"). The sender's name is also one of the line's terms, but a name said in half the chat
/// weighs little in BM25 alone.
const SPEAKER_BOOST: f32 = 1.3;
/// A hit with fewer terms than this, after a question, is a reply that needs the question to
/// mean anything ("yes, last Friday").
const SHORT_REPLY_TERMS: usize = 6;

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    /// Hits recalled at most (their neighbours come on top). Default 40.
    top_n: usize,
    /// Older messages ranked at most (newest first). Default 1,000.
    max_candidates: usize,
    /// Longest recalled text, in characters. Default 600.
    max_snippet_chars: usize,
    /// Lowest BM25 score recalled. Default 0 (any match, while the budget lasts).
    min_score: f32,
    /// Lowest score recalled as a share of the best hit's. Default 0.25.
    min_relative: f32,
    /// How much more a line counts when its sender is named in the question. Default 1.3.
    speaker_boost: f32,
    /// The best hits of the first round that seed the second. Default 16.
    expand_seeds: usize,
    /// Terms the second round adds to the query. Default 8.
    expand_terms: usize,
    /// Weight of the strongest added term (a query term weighs 1). Default 0.6.
    expand_weight: f32,
    /// Hits taken at most once those within `min_relative` are in, while the budget lasts.
    /// Default 300.
    fill_n: usize,
    /// How much more a line counts when it was said on a day the question names ("on 31
    /// July, 2023"). Default 1.5.
    date_boost: f32,
    /// The best hits that bring the lines just before and after them (within an hour).
    /// Default 0 (off: on LoCoMo it moved one question of 757, and it brings chatter).
    neighbours: usize,
    /// The best hits that bring a follow-up question put to them (the next line, another
    /// member's question, within an hour) and its answer. Default 15.
    follow: usize,
    /// Whether lines come under a line of their day (`## Mon 8 May 2023`) rather than each
    /// with its date (`[Mon 8 May 2023] Caroline: …`). Default true (the date on every line
    /// costs budget that more lines could use).
    day_lines: bool,
    /// Whether a member's name said to them ("Thanks, Melanie!", "Hey Caroline!") is left out
    /// of the line's terms: greeting a member is not talking about them. Default true.
    skip_greeted: bool,
    /// Whether a line's sender and month match without BM25's length normalisation (they are
    /// not its text): a match on the sender alone then does not favour the lines that say
    /// least. Default true.
    sender_field: bool,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            top_n: 40,
            max_candidates: 1_000,
            max_snippet_chars: 600,
            min_score: 0.0,
            min_relative: 0.25,
            speaker_boost: SPEAKER_BOOST,
            expand_seeds: 16,
            expand_terms: 8,
            expand_weight: 0.6,
            fill_n: 300,
            date_boost: 1.5,
            neighbours: 0,
            follow: 15,
            day_lines: true,
            skip_greeted: true,
            sender_field: true,
        }
    }
}

/// Most messages whose terms [`Memo`] keeps (all chats together); it starts over when full.
const MAX_MEMO_MESSAGES: usize = 200_000;
/// Most distinct terms [`Memo`] keeps; it starts over when full.
const MAX_MEMO_TERMS: usize = 500_000;

/// The analysed terms of messages already ranked once, as ids of one vocabulary: a chat's
/// record only grows, so each assembly analyses only the messages said since the last one
/// (analysis was most of a recall's cost). Keyed by a hash of the chat, the message's id, seq
/// and text, so a message stored again with other text is analysed again.
#[derive(Default)]
struct Memo {
    vocabulary: FoldMap<Box<str>, u32>,
    messages: FoldMap<u64, Memoised>,
}

/// What [`Memo`] keeps of one message.
struct Memoised {
    /// Its analysed terms.
    terms: Arc<[u32]>,
    /// The terms of the words that stand where a name said to someone stands
    /// ([`address_words`]).
    address: Arc<[u32]>,
    /// The tokens of its recalled line, once counted.
    cost: Option<u32>,
}

/// The key of a message in [`Memo`].
fn memo_key(channel: &str, chat_id: &str, m: &ChannelMessage) -> u64 {
    foldhash::fast::FixedState::with_seed(0).hash_one((
        channel,
        chat_id,
        &m.message_id,
        m.seq,
        &m.text,
    ))
}

impl Memo {
    fn intern(&mut self, terms: Vec<String>) -> Vec<u32> {
        terms
            .into_iter()
            .map(|t| {
                let next = self.vocabulary.len() as u32;
                *self.vocabulary.entry(t.into_boxed_str()).or_insert(next)
            })
            .collect()
    }

    /// A message's terms and the terms of the words it may say to someone
    /// ([`address_words`]), analysed the first time.
    fn message_terms(&mut self, key: u64, m: &ChannelMessage) -> (Arc<[u32]>, Arc<[u32]>) {
        if let Some(e) = self.messages.get(&key) {
            return (Arc::clone(&e.terms), Arc::clone(&e.address));
        }
        let terms: Arc<[u32]> = self.intern(terms(&m.text)).into();
        let address: Arc<[u32]> = self.intern(address_words(&m.text)).into();
        self.messages.insert(
            key,
            Memoised {
                terms: Arc::clone(&terms),
                address: Arc::clone(&address),
                cost: None,
            },
        );
        (terms, address)
    }

    /// The tokens of a message's line (`count` counts it the first time).
    fn cost(&mut self, key: u64, count: impl FnOnce() -> u32) -> u32 {
        match self.messages.get_mut(&key) {
            Some(Memoised { cost: Some(c), .. }) => *c,
            Some(e) => *e.cost.insert(count()),
            None => count(),
        }
    }
}

pub(super) struct ChatRecallSource {
    p: Params,
    zone: TimeZone,
    memo: Mutex<Memo>,
}

impl ChatRecallSource {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, StageError> {
        let p: Params = c.params()?;
        if p.max_candidates > crate::store::MAX_CHAT_SCAN {
            return Err(StageError(format!(
                "chat_recall max_candidates must be at most {}",
                crate::store::MAX_CHAT_SCAN
            )));
        }
        if !(0.0..=1.0).contains(&p.min_relative) {
            return Err(StageError(
                "chat_recall min_relative must be between 0 and 1".into(),
            ));
        }
        let zone = super::time_zone(&c.config.context.time_zone)
            .map_err(|e| StageError(format!("context.time_zone: {e}")))?;
        Ok(Self {
            p,
            zone,
            memo: Mutex::new(Memo::default()),
        })
    }

    /// How a recalled message reads: `Name: text` under its day line (or `[Mon 8 May 2023]
    /// Name: text` without day lines), the text cut to `max_snippet_chars`.
    fn line(&self, m: &ChannelMessage) -> String {
        let text = untrusted(&m.text);
        let cut = prefix_chars(&text, self.p.max_snippet_chars);
        let ellipsis = if cut.len() < text.len() { "…" } else { "" };
        let who = untrusted(&m.sender_name);
        if self.p.day_lines {
            format!("{who}: {cut}{ellipsis}")
        } else {
            let day = chat_date(m.timestamp_ms, &self.zone);
            format!("[{day}] {who}: {cut}{ellipsis}")
        }
    }

    /// The block's lines for `messages` (oldest first): each message's line, after a line of
    /// its day wherever the day changes.
    fn lines<'m>(
        &self,
        messages: impl Iterator<Item = &'m ChannelMessage>,
        days: &mut Days,
    ) -> Vec<String> {
        let mut out = Vec::new();
        let mut day = String::new();
        for m in messages {
            if let Some(d) = self.day_of(m, days).filter(|d| *d != day) {
                out.push(d.clone());
                day = d;
            }
            out.push(self.line(m));
        }
        out
    }

    /// The day line a message needs, when lines come under day lines.
    fn day_of(&self, m: &ChannelMessage, days: &mut Days) -> Option<String> {
        if !self.p.day_lines {
            return None;
        }
        let line = days
            .entry(m.timestamp_ms / QUARTER_HOUR_MS)
            .or_insert_with(|| day_line(m.timestamp_ms, &self.zone));
        Some(line.clone())
    }
}

/// Whether a chat message is a question put to the bot (not a fact of the chat).
fn asks_the_bot(m: &ChannelMessage) -> bool {
    m.addressed && m.text.contains('?')
}

/// The follow-up exchange after the hit at `doc` (candidates oldest first): when the next
/// line is another member's question within an hour of the hit, that question and the line
/// after it (its answer, within the hour too). Nothing otherwise.
fn follow_up(candidates: &[ChannelMessage], doc: usize) -> Vec<usize> {
    let Some(hit) = candidates.get(doc) else {
        return Vec::new();
    };
    let near = |i: usize| {
        candidates
            .get(i)
            .filter(|n| n.timestamp_ms.abs_diff(hit.timestamp_ms) <= HOUR_MS)
    };
    let asked = near(doc + 1).is_some_and(|q| q.sender_id != hit.sender_id && q.text.contains('?'));
    if !asked {
        return Vec::new();
    }
    let mut out = vec![doc + 1];
    if near(doc + 2).is_some() {
        out.push(doc + 2);
    }
    out
}

/// The block around `lines` (already in the order shown).
fn frame(lines: &[String]) -> String {
    untrusted_block(
        &format!("{RECALL_LABEL} ({RECALL_NOTE})"),
        &lines.join("\n"),
    )
}

impl ContextSource for ChatRecallSource {
    fn name(&self) -> &str {
        "chat_recall"
    }

    fn default_priority(&self) -> u8 {
        55
    }

    fn collect(
        &self,
        session: &SessionView<'_>,
        budget: &TokenBudget,
    ) -> Result<Vec<ContextBlock>, ContextError> {
        if self.p.top_n == 0 || session.current.is_empty() {
            return Ok(Vec::new());
        }
        let Some(query) = recall_query(session) else {
            return Ok(Vec::new());
        };
        let window = session.chat()?;
        let Some(chat) = &window.chat else {
            return Ok(Vec::new());
        };
        // What the rolling summary states is not recalled again beside it.
        let transcript = session.transcript()?;
        let summary = transcript.summary.as_ref().map(|(_, e)| &*e.text);
        let summarised = |m: &ChannelMessage| {
            let text = m.text.trim();
            !text.is_empty() && summary.is_some_and(|s| s.contains(text))
        };
        let mut left = self.p.max_candidates;
        // Read newest first, kept oldest first.
        let candidates = session.store().chat_back(
            &chat.channel,
            &chat.chat_id,
            window.oldest_shown_seq,
            &mut |m| {
                if left == 0 {
                    return Scan::Stop;
                }
                left -= 1;
                // `is_shown` cannot fail here: the chat window is read already.
                if m.thread_id != chat.thread_id
                    || asks_the_bot(m)
                    || summarised(m)
                    || session.is_shown(&m.message_id).unwrap_or(true)
                {
                    Scan::Skip
                } else {
                    Scan::Take
                }
            },
        )?;
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        // Each message's terms, and how many of them are its own words (the rest: its
        // sender's name and its month and year).
        // A chat has few senders and few days: each is analysed once per assembly.
        let mut own_terms = Vec::with_capacity(candidates.len());
        let mut names: HashMap<&str, Vec<u32>> = HashMap::new();
        let mut months: HashMap<u64, Vec<u32>> = HashMap::new();
        // The memo's term ids, renumbered densely for this corpus.
        let mut local: FoldMap<u32, u32> = FoldMap::default();
        let mut renumber = |ids: &[u32]| -> Vec<u32> {
            ids.iter()
                .map(|g| {
                    let next = local.len() as u32;
                    *local.entry(*g).or_insert(next)
                })
                .collect()
        };
        let mut memo = self.memo.lock().unwrap_or_else(PoisonError::into_inner);
        if memo.messages.len() >= MAX_MEMO_MESSAGES || memo.vocabulary.len() >= MAX_MEMO_TERMS {
            *memo = Memo::default();
        }
        let mut docs: Vec<Vec<u32>> = Vec::with_capacity(candidates.len());
        let keys: Vec<u64> = candidates
            .iter()
            .map(|m| memo_key(&chat.channel, &chat.chat_id, m))
            .collect();
        // The members' names (memo ids), known before any line is indexed: a name a line
        // says to someone is told apart from one it talks about.
        let mut member_names: HashMap<&str, Vec<u32>> = HashMap::new();
        for m in &candidates {
            if !member_names.contains_key(m.sender_name.as_str()) {
                let n = memo.intern(terms(&m.sender_name));
                member_names.insert(m.sender_name.as_str(), n);
            }
        }
        let name_terms: HashSet<u32> = member_names.values().flatten().copied().collect();
        for (m, key) in candidates.iter().zip(&keys) {
            let (own, address) = memo.message_terms(*key, m);
            let greeted =
                |t: &u32| self.p.skip_greeted && address.contains(t) && name_terms.contains(t);
            let own: Vec<u32> = own.iter().copied().filter(|t| !greeted(t)).collect();
            let mut t = renumber(&own);
            own_terms.push(t.len());
            if !names.contains_key(m.sender_name.as_str()) {
                let n = member_names
                    .get(m.sender_name.as_str())
                    .map(|n| renumber(n))
                    .unwrap_or_default();
                names.insert(m.sender_name.as_str(), n);
            }
            t.extend_from_slice(&names[m.sender_name.as_str()]);
            // Keyed by the hour (a ranking hint, not what is shown: in a zone offset by
            // a half hour, a line said in the half hour around a month's turn may be
            // indexed under the other month).
            let hour = m.timestamp_ms / HOUR_MS;
            let month = months.entry(hour).or_insert_with(|| {
                let d = memo.intern(date_terms(m.timestamp_ms, &self.zone));
                renumber(&d)
            });
            t.extend_from_slice(month);
            docs.push(t);
        }
        let query_terms = terms(&query);
        let days = named_days(&query);
        let mut query: Vec<(u32, f32)> = Vec::new();
        for t in &query_terms {
            let id = memo.vocabulary.get(t.as_str()).and_then(|g| local.get(g));
            if let Some(id) = id {
                if !query.iter().any(|(q, _)| q == id) {
                    query.push((*id, 1.0));
                }
            }
        }
        let text_lens = self.p.sender_field.then_some(own_terms.as_slice());
        let corpus = Corpus::new(&docs, text_lens, local.len());
        // A question that names a member is about what that member said.
        let boost: Vec<f32> = candidates
            .iter()
            .map(|m| {
                let named = names
                    .get(m.sender_name.as_str())
                    .is_some_and(|name| name.iter().any(|t| query.iter().any(|(q, _)| q == t)));
                let by_speaker = if named { self.p.speaker_boost } else { 1.0 };
                let on_day = if said_on(m.timestamp_ms, &self.zone, &days) {
                    self.p.date_boost
                } else {
                    1.0
                };
                by_speaker * on_day
            })
            .collect();
        let ranked = |query: &[(u32, f32)]| -> Vec<Hit> {
            let mut hits: Vec<Hit> = corpus
                .scores(query)
                .into_iter()
                .enumerate()
                .filter(|(_, s)| *s > 0.0)
                .map(|(doc, s)| Hit {
                    doc,
                    score: s * boost[doc],
                })
                .collect();
            hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.doc.cmp(&a.doc)));
            hits
        };
        let mut hits = ranked(&query);
        // A second round seeded by the first's best hits: what they name (people, places,
        // things) finds the other halves of a question that spans several lines.
        if self.p.expand_seeds > 0 && !hits.is_empty() {
            let seeds: Vec<(usize, f32)> = hits
                .iter()
                .take(self.p.expand_seeds)
                .map(|h| (h.doc, h.score))
                .collect();
            let added = expansion(
                &corpus,
                &docs,
                &seeds,
                &query,
                self.p.expand_terms,
                self.p.expand_weight,
            );
            if !added.is_empty() {
                let mut wider = query.clone();
                wider.extend(added);
                hits = ranked(&wider);
            }
        }
        let Some(best) = hits.first().map(|h| h.score) else {
            return Ok(Vec::new());
        };
        let floor = self.p.min_score.max(best * self.p.min_relative);
        // The block's tokens are the frame's plus each chosen line's with its newline: text is
        // cut into pieces at newlines before it is encoded, so the sum is the count of the
        // whole block (the empty frame's one newline more), and the block is not counted
        // again (that was half a recall's cost).
        let frame_cost = session.tokens.count_recurring(&frame(&[])) + MESSAGE_OVERHEAD_TOKENS;
        let room = budget.remaining().saturating_sub(frame_cost);
        let mut day_lines = Days::new();
        let mut used = 0u32;
        let mut chosen: Vec<(usize, f32)> = Vec::new();
        let mut taken: HashSet<usize> = HashSet::new();
        // The day lines the chosen lines need so far (each paid for once).
        let mut days: HashSet<String> = HashSet::new();
        // The hits near the best first; then, while the budget lasts, the weaker ones.
        let strong = hits
            .iter()
            .take_while(|h| h.score >= floor)
            .take(self.p.top_n)
            .count();
        let weak = hits
            .iter()
            .skip(strong)
            .take_while(|h| h.score >= self.p.min_score)
            .take(self.p.fill_n);
        for (rank, hit) in hits.iter().take(strong).chain(weak).enumerate() {
            if used >= room {
                break;
            }
            let Some(m) = candidates.get(hit.doc) else {
                continue;
            };
            // Candidates are oldest first: the next message is at doc + 1, the one before at
            // doc − 1.
            let mut group = vec![hit.doc];
            if m.text.contains('?') {
                group.push(hit.doc + 1);
            }
            let short = own_terms
                .get(hit.doc)
                .is_some_and(|n| *n < SHORT_REPLY_TERMS);
            let after_a_question = hit
                .doc
                .checked_sub(1)
                .and_then(|i| candidates.get(i))
                .is_some_and(|p| p.text.contains('?'));
            if short && after_a_question {
                group.push(hit.doc - 1);
            }
            // The best hits come with the exchange around them: what they answer, and the
            // reply.
            if rank < self.p.neighbours {
                for i in [hit.doc.wrapping_sub(1), hit.doc + 1] {
                    let near = candidates.get(i).is_some_and(|n| {
                        n.timestamp_ms.abs_diff(m.timestamp_ms) <= HOUR_MS && !group.contains(&i)
                    });
                    if near {
                        group.push(i);
                    }
                }
            }
            // The best hits bring a follow-up question put to them and its answer: "I had a
            // picnic with friends" / "What did you play?" / "Charades!". The hit says what
            // the talk is about; the lines after it hold what was asked about it.
            if rank < self.p.follow {
                group.extend(follow_up(&candidates, hit.doc));
            }
            for i in group {
                let Some(m) = candidates.get(i) else {
                    continue;
                };
                if taken.contains(&i) {
                    continue;
                }
                // Each line counted with the newline after it (a newline merges with the
                // punctuation before it; no token spans a newline and the next line).
                let mut cost = memo.cost(keys[i], || {
                    session.tokens.count(&format!("{}\n", self.line(m)))
                });
                let day = self.day_of(m, &mut day_lines).filter(|d| !days.contains(d));
                if let Some(d) = &day {
                    cost += session.tokens.count_recurring(&format!("{d}\n"));
                }
                if used + cost > room {
                    continue;
                }
                used += cost;
                days.extend(day);
                taken.insert(i);
                chosen.push((i, hit.score));
            }
        }
        drop(memo);
        if chosen.is_empty() {
            return Ok(Vec::new());
        }
        // Oldest first, as the candidates are.
        chosen.sort_by_key(|c| c.0);
        let lines = self.lines(
            chosen.iter().filter_map(|(i, _)| candidates.get(*i)),
            &mut day_lines,
        );
        let content = frame(&lines);
        let tokens = frame_cost + used;
        let kept = chosen;
        for (i, _) in &kept {
            if let Some(m) = candidates.get(*i) {
                session.claim(&m.message_id);
            }
        }
        let newest = kept
            .iter()
            .filter_map(|(i, _)| candidates.get(*i))
            .map(|m| m.timestamp_ms)
            .max();
        let mut meta = BlockMeta {
            timestamp_ms: newest,
            ..BlockMeta::default()
        };
        meta.extra.insert("best_score".into(), format!("{best:.3}"));
        meta.extra.insert("recalled".into(), kept.len().to_string());
        meta.extra.insert(
            "chat_seqs".into(),
            kept.iter()
                .filter_map(|(i, _)| candidates.get(*i).map(|m| m.seq.to_string()))
                .collect::<Vec<_>>()
                .join(","),
        );
        Ok(vec![ContextBlock::new(
            BlockKind::ChatRecall,
            content,
            tokens,
        )
        .with_meta(meta)])
    }
}
