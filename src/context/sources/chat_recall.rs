//! `chat_recall`: older messages of a group chat, recalled from the chat's own record when the
//! current message asks about them. The chat's messages that the context does not already show
//! (not in the history window, not its chatter, not the pending history) are ranked with BM25
//! against the current message; the best `top_n` above `min_score` come as `chat_recall`
//! blocks, each with its score in the dump. A message is recalled only if it shares one of
//! the query's rarest words (found in at most 1 in [`RARE_SHARE`] candidates, and at most
//! twice as often as the rarest): a question phrased like earlier questions ("who owns ticket …") must not recall
//! those questions, but the one message that names the ticket. Bounded: at most `max_candidates` messages are
//! read, each snippet is cut to `max_snippet_chars`, and blocks only take the budget left.

use std::collections::HashSet;

use bm25::{EmbedderBuilder, Scorer, Tokenizer};
use serde::Deserialize;

use super::memory_recall::{recall_query, WordTokenizer};
use crate::context::text::prefix_chars;
use crate::context::{
    BlockKind, BlockMeta, ContextBlock, ContextError, ContextSource, SessionView, StageContext,
    StageError, TokenBudget,
};
use crate::inbound::{untrusted, untrusted_block};
use crate::model::MESSAGE_OVERHEAD_TOKENS;
use crate::store::{ChannelMessage, Scan};

/// A query word is distinctive when at most one in this many candidates has it.
const RARE_SHARE: usize = 20;
/// The label of a recalled message's block.
pub const RECALL_LABEL: &str = "Recalled from earlier in this chat";

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    /// Messages recalled at most. Default 3.
    top_n: usize,
    /// Older messages ranked at most (newest first). Default 1,000.
    max_candidates: usize,
    /// Longest recalled text, in characters. Default 400.
    max_snippet_chars: usize,
    /// Lowest BM25 score recalled. Default 1.0 (a match on one common word scores below it).
    min_score: f32,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            top_n: 3,
            max_candidates: 1_000,
            max_snippet_chars: 400,
            min_score: 1.0,
        }
    }
}

pub(super) struct ChatRecallSource {
    p: Params,
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
        Ok(Self { p })
    }
}

/// How a recalled message reads: `Name: text`, the text cut to `max_chars`.
fn snippet(m: &ChannelMessage, max_chars: usize) -> String {
    let text = untrusted(&m.text);
    let cut = prefix_chars(&text, max_chars);
    let ellipsis = if cut.len() < text.len() { "…" } else { "" };
    format!("{}: {cut}{ellipsis}", untrusted(&m.sender_name))
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
        let query = query.as_str();
        let window = session.chat()?;
        let Some(chat) = &window.chat else {
            return Ok(Vec::new());
        };
        let mut left = self.p.max_candidates;
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
                if m.thread_id != chat.thread_id || session.is_shown(&m.message_id).unwrap_or(true)
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
        let corpus: Vec<&str> = candidates.iter().map(|m| m.text.as_str()).collect();
        let words: Vec<HashSet<String>> = corpus
            .iter()
            .map(|t| WordTokenizer.tokenize(t).into_iter().collect())
            .collect();
        let rare_limit = (corpus.len() / RARE_SHARE).max(1);
        let df: Vec<(String, usize)> = WordTokenizer
            .tokenize(query)
            .into_iter()
            .map(|q| {
                let n = words.iter().filter(|w| w.contains(&q)).count();
                (q, n)
            })
            .filter(|(_, n)| (1..=rare_limit).contains(n))
            .collect();
        // The rarest words of the query (within twice the rarest one's count) are what a
        // recalled message must share.
        let rarest = df.iter().map(|(_, n)| *n).min().unwrap_or(0);
        let rare: HashSet<String> = df
            .into_iter()
            .filter(|(_, n)| *n <= rarest.saturating_mul(2))
            .map(|(q, _)| q)
            .collect();
        if rare.is_empty() {
            return Ok(Vec::new());
        }
        let embedder = EmbedderBuilder::<u32, WordTokenizer>::with_tokenizer_and_fit_to_corpus(
            WordTokenizer,
            &corpus,
        )
        .build();
        let mut scorer = Scorer::<usize, u32>::new();
        for (i, text) in corpus.iter().enumerate() {
            scorer.upsert(&i, embedder.embed(text));
        }
        let mut matches = scorer.matches(&embedder.embed(query));
        // Ties in a stable order: the newer message first.
        matches.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.id.cmp(&a.id)));
        let mut room = budget.remaining();
        let mut out = Vec::new();
        for hit in matches
            .iter()
            .filter(|h| h.score >= self.p.min_score)
            .filter(|h| words.get(h.id).is_some_and(|w| !w.is_disjoint(&rare)))
            .take(self.p.top_n)
        {
            let Some(m) = candidates.get(hit.id) else {
                continue;
            };
            let content = untrusted_block(RECALL_LABEL, &snippet(m, self.p.max_snippet_chars));
            let tokens = session.tokens.count(&content) + MESSAGE_OVERHEAD_TOKENS;
            if tokens > room {
                continue;
            }
            room -= tokens;
            let mut meta = BlockMeta {
                message_id: Some(m.message_id.clone().into()),
                timestamp_ms: Some(m.timestamp_ms),
                ..BlockMeta::default()
            };
            meta.extra
                .insert("score".into(), format!("{:.3}", hit.score));
            meta.extra.insert("chat_seq".into(), m.seq.to_string());
            out.push(ContextBlock::new(BlockKind::ChatRecall, content, tokens).with_meta(meta));
        }
        Ok(out)
    }
}
