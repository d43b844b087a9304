//! `chat_recall`: older messages of a group chat, recalled from the chat's own record for the
//! current message. The chat's messages that the context does not already show (not in the
//! history window, not its chatter, not the pending history) are ranked with BM25
//! ([`crate::context::retrieval`]) against the current message, each message indexed by its
//! text, its sender's name ("When did Caroline…" favours Caroline's lines) and its month and
//! year ("…in May 2023"). The hits within `min_relative` of the best are taken best first
//! while they fit the budget the turn has left (more when there is room, fewer when not), each
//! with a neighbour where a hit is half of an exchange: the answer after a question, the
//! question before a short reply ("yes, last Friday"). Questions put to the bot are not
//! recalled (they are not what the group said), nor lines the rolling summary already states.
//!
//! The recalled lines come as one block, oldest first, each with its day and sender
//! (`[Mon 8 May 2023] Caroline: …`), so "when" questions can be answered and, where two
//! lines disagree ("standup at 9", later "standup moved to 10"), the newer one reads as the
//! current one. Bounded: at most `max_candidates` messages are read, `top_n` hits taken, each
//! line cut to `max_snippet_chars`.

use std::collections::{HashMap, HashSet};

use jiff::tz::TimeZone;
use serde::Deserialize;

use super::memory_recall::recall_query;
use crate::context::analysis::{chat_date, date_terms, terms};
use crate::context::retrieval::bm25;
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
const RECALL_NOTE: &str = "oldest first; where lines disagree, the newer one is current";
const HOUR_MS: u64 = 3_600_000;
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
    /// Lowest BM25 score recalled. Default 1.0 (a match on one common word scores below it).
    min_score: f32,
    /// Lowest score recalled as a share of the best hit's. Default 0.25.
    min_relative: f32,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            top_n: 40,
            max_candidates: 1_000,
            max_snippet_chars: 600,
            min_score: 1.0,
            min_relative: 0.25,
        }
    }
}

pub(super) struct ChatRecallSource {
    p: Params,
    zone: TimeZone,
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
        Ok(Self { p, zone })
    }

    /// How a recalled message reads: `[Mon 8 May 2023] Name: text`, the text cut to
    /// `max_snippet_chars`.
    fn line(&self, m: &ChannelMessage) -> String {
        let text = untrusted(&m.text);
        let cut = prefix_chars(&text, self.p.max_snippet_chars);
        let ellipsis = if cut.len() < text.len() { "…" } else { "" };
        format!(
            "[{}] {}: {cut}{ellipsis}",
            chat_date(m.timestamp_ms, &self.zone),
            untrusted(&m.sender_name)
        )
    }
}

/// Whether a chat message is a question put to the bot (not a fact of the chat).
fn asks_the_bot(m: &ChannelMessage) -> bool {
    m.addressed && m.text.contains('?')
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
        let mut names: HashMap<&str, Vec<String>> = HashMap::new();
        let mut months: HashMap<u64, Vec<String>> = HashMap::new();
        let docs: Vec<Vec<String>> = candidates
            .iter()
            .map(|m| {
                let mut t = terms(&m.text);
                own_terms.push(t.len());
                t.extend_from_slice(
                    names
                        .entry(m.sender_name.as_str())
                        .or_insert_with(|| terms(&m.sender_name)),
                );
                // Keyed by the hour (a ranking hint, not what is shown: in a zone offset by
                // a half hour, a line said in the half hour around a month's turn may be
                // indexed under the other month).
                t.extend_from_slice(
                    months
                        .entry(m.timestamp_ms / HOUR_MS)
                        .or_insert_with(|| date_terms(m.timestamp_ms, &self.zone)),
                );
                t
            })
            .collect();
        let query = terms(&query);
        let mut hits = bm25(&docs, &query);
        // A question that names a member is about what that member said.
        for h in &mut hits {
            let by_named = candidates
                .get(h.doc)
                .and_then(|m| names.get(m.sender_name.as_str()))
                .is_some_and(|name| name.iter().any(|t| query.contains(t)));
            if by_named {
                h.score *= SPEAKER_BOOST;
            }
        }
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.doc.cmp(&a.doc)));
        let Some(best) = hits.first().map(|h| h.score) else {
            return Ok(Vec::new());
        };
        let floor = self.p.min_score.max(best * self.p.min_relative);
        let room = budget
            .remaining()
            .saturating_sub(session.tokens.count(&frame(&[])) + MESSAGE_OVERHEAD_TOKENS);
        let mut used = 0u32;
        let mut chosen: Vec<(usize, f32)> = Vec::new();
        let mut taken: HashSet<usize> = HashSet::new();
        for hit in hits
            .iter()
            .take_while(|h| h.score >= floor)
            .take(self.p.top_n)
        {
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
            for i in group {
                let Some(m) = candidates.get(i) else {
                    continue;
                };
                if taken.contains(&i) {
                    continue;
                }
                let cost = session.tokens.count(&self.line(m)) + 1;
                if used + cost > room {
                    continue;
                }
                used += cost;
                taken.insert(i);
                chosen.push((i, hit.score));
            }
        }
        if chosen.is_empty() {
            return Ok(Vec::new());
        }
        // Oldest first, as the candidates are.
        chosen.sort_by_key(|c| c.0);
        let lines: Vec<String> = chosen
            .iter()
            .filter_map(|(i, _)| candidates.get(*i).map(|m| self.line(m)))
            .collect();
        let mut content = frame(&lines);
        let mut tokens = session.tokens.count(&content) + MESSAGE_OVERHEAD_TOKENS;
        // Counted line by line the total can drift by a token or two: drop the weakest lines
        // until the block fits (bounded by the number of lines).
        let mut kept = chosen.clone();
        while tokens > budget.remaining() && !kept.is_empty() {
            let weakest = kept
                .iter()
                .enumerate()
                .min_by(|a, b| a.1 .1.total_cmp(&b.1 .1))
                .map_or(0, |(k, _)| k);
            kept.remove(weakest);
            let lines: Vec<String> = kept
                .iter()
                .filter_map(|(i, _)| candidates.get(*i).map(|m| self.line(m)))
                .collect();
            content = frame(&lines);
            tokens = session.tokens.count(&content) + MESSAGE_OVERHEAD_TOKENS;
        }
        if kept.is_empty() {
            return Ok(Vec::new());
        }
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
