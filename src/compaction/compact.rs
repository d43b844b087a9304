//! Compacting one session: choose the cut point, summarise the older span together with the
//! previous summary (rolling), and swap the summary in atomically.
//!
//! The cut keeps the newest `keep_recent_ratio × budget` tokens verbatim (in group chats also
//! at most the newest entries the history window shows) and never separates a tool call from
//! its result. In group and channel chats the span is summarised with the chatter its user
//! turns carried (read from the chat record), so the summary covers the whole conversation. A compaction that frees nothing is remembered and not repeated
//! for that span; summaries of identical spans are reused for [`SUMMARY_CACHE_TTL`].

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use jiff::tz::TimeZone;
use turnstile_actors::CompactionOutcome;

use super::extractive::DAY_MARKER;
use super::{SummarizeError, Summarizer};
use crate::context::analysis::chat_date;
use crate::context::{chat_kind_of_key, chatter_of};
use crate::error::StoreError;
use crate::inbound::ChatKind;
use crate::store::{ChannelMessage, EntryKind, Store, SummarySwap, SwapOutcome, TranscriptEntry};

/// The chatter each user entry of a span carried, by transcript seq.
type Chatter = HashMap<u64, Vec<ChannelMessage>>;

/// Newest entries read when compacting (back to the previous summary). Older unsummarised
/// entries past it — only possible after this many entries without any compaction — stay
/// stored but hidden behind the new summary.
pub(crate) const MAX_COMPACTION_READ_ENTRIES: usize = 20_000;
/// How long a summary of an identical span is reused.
pub(crate) const SUMMARY_CACHE_TTL: Duration = Duration::from_secs(3_600);
/// Summaries kept in the cache.
pub(crate) const SUMMARY_CACHE_ENTRIES: usize = 256;
/// Spans remembered as "compacting frees nothing".
pub(crate) const NO_GAIN_SPANS: usize = 4_096;
/// Attempts of a compaction whose swap lost to another one (the session changed meanwhile).
pub(crate) const MAX_SWAP_ATTEMPTS: usize = 3;

/// Why a compaction failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CompactError {
    /// Reading or writing the store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The summariser's worker died.
    #[error(transparent)]
    Summarize(#[from] SummarizeError),
    /// The session kept changing under the compaction.
    #[error("session {0:?} changed during compaction {MAX_SWAP_ATTEMPTS} times; retry later")]
    Contended(String),
}

/// A summary cache key: a hash of the previous summary and the span, and their lengths.
type SpanKey = (u64, usize);
/// A span by session id and its first and last sequence.
type SpanId = (u64, u64, u64);
/// Spans that compacting would not shrink: a set, and its insertion order for eviction.
type NoGain = (HashSet<SpanId>, VecDeque<SpanId>);

/// Compacts sessions of one store. Shared by the Compactor actor's tasks.
pub(crate) struct SessionCompactor {
    store: Store,
    summarizer: Summarizer,
    /// The chats' time zone (`context.time_zone`): a group summary's day lines are in it.
    zone: TimeZone,
    cache: Mutex<VecDeque<(SpanKey, Instant, String, u32)>>,
    no_gain: Mutex<NoGain>,
}

/// Where a compaction cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// Keep the newest this many tokens verbatim (`keep_recent_ratio × budget`).
    KeepRecent(u64),
    /// Keep the newest `tokens` tokens verbatim, and at most `entries` entries (a group chat's
    /// history window: what falls out of it is summarised).
    KeepNewest {
        /// Tokens kept at most.
        tokens: u64,
        /// Entries kept at most.
        entries: usize,
    },
    /// Compact every entry up to this sequence (a TTL `keep: summary` span), never fewer
    /// than needed to keep a tool call with its result.
    UpTo(u64),
}

/// The span a compaction replaces.
struct Plan {
    session_id: u64,
    epoch: u32,
    tokens_before: u64,
    previous: Option<(u64, TranscriptEntry)>,
    span: Vec<(u64, TranscriptEntry)>,
}

impl SessionCompactor {
    /// A compactor over `store`, summarising with `summarizer`.
    pub(crate) fn new(store: Store, summarizer: Summarizer) -> Self {
        Self {
            store,
            summarizer,
            zone: TimeZone::UTC,
            cache: Mutex::new(VecDeque::new()),
            no_gain: Mutex::new((HashSet::new(), VecDeque::new())),
        }
    }

    /// Dates group summaries in `zone` instead of UTC.
    pub(crate) fn with_time_zone(mut self, zone: TimeZone) -> Self {
        self.zone = zone;
        self
    }

    /// Compacts `session_key` up to `cut`. `Ok(None)` if there is no such session; an outcome with no
    /// entries compacted when nothing older than the kept part is left or compacting would
    /// free nothing.
    pub(crate) async fn compact(
        &self,
        session_key: &str,
        cut: Cut,
    ) -> Result<Option<CompactionOutcome>, CompactError> {
        for _ in 0..MAX_SWAP_ATTEMPTS {
            let Some(plan) = self.plan(session_key, cut)? else {
                return Ok(None);
            };
            let unchanged = CompactionOutcome {
                tokens_before: plan.tokens_before,
                tokens_after: plan.tokens_before,
                entries_compacted: 0,
            };
            let (Some((first, _)), Some((last, _))) = (plan.span.first(), plan.span.last()) else {
                return Ok(Some(unchanged));
            };
            let span_id = (plan.session_id, *first, *last);
            if self.lock_no_gain().0.contains(&span_id) {
                return Ok(Some(unchanged));
            }
            let chatter = self.chatter(session_key, &plan.span)?;
            let group = chat_kind_of_key(session_key) != ChatKind::Direct;
            let span_text = render_span(&plan.span, &chatter, group.then_some(&self.zone));
            let previous = plan.previous.as_ref().map(|(_, e)| &*e.text);
            let (text, tokens) = self.summary(&span_text, previous).await?;
            let counter = self.summarizer.counter();
            let chatter_tokens: u64 = chatter
                .values()
                .flatten()
                .map(|m| u64::from(counter.count(&m.text)))
                .sum();
            let replaced: u64 = plan
                .span
                .iter()
                .map(|(_, e)| u64::from(e.tokens))
                .sum::<u64>()
                + plan
                    .previous
                    .as_ref()
                    .map_or(0, |(_, e)| u64::from(e.tokens))
                + chatter_tokens;
            if u64::from(tokens) >= replaced {
                tracing::info!(
                    session_key,
                    replaced,
                    summary = tokens,
                    "compaction would free nothing; span remembered"
                );
                self.remember_no_gain(span_id);
                return Ok(Some(unchanged));
            }
            let summary = TranscriptEntry::summary(
                text,
                tokens,
                plan.span.last().map_or(0, |(_, e)| e.timestamp_ms),
            );
            let remove: Vec<u64> = plan
                .previous
                .iter()
                .chain(plan.span.iter())
                .map(|(seq, _)| *seq)
                .collect();
            match self.store.swap_summary(SummarySwap {
                session_key,
                session_id: plan.session_id,
                epoch: plan.epoch,
                remove: &remove,
                summary: &summary,
            })? {
                SwapOutcome::Done(record, ticket) => {
                    self.store.commit().wait(ticket).await?;
                    tracing::info!(
                        session_key,
                        before = plan.tokens_before,
                        after = record.tokens,
                        entries = remove.len(),
                        "session compacted"
                    );
                    return Ok(Some(CompactionOutcome {
                        tokens_before: plan.tokens_before,
                        tokens_after: record.tokens,
                        entries_compacted: remove.len() as u64,
                    }));
                }
                SwapOutcome::Changed => continue,
            }
        }
        Err(CompactError::Contended(session_key.to_string()))
    }

    /// Reads the session back to its previous summary and chooses the span to compact.
    fn plan(&self, session_key: &str, cut: Cut) -> Result<Option<Plan>, CompactError> {
        let Some(record) = self.store.session(session_key)? else {
            return Ok(None);
        };
        let (mut reached_summary, mut read) = (false, 0usize);
        let newest_first = self.store.newest_entries(record.id, |e| {
            let go = !reached_summary && read < MAX_COMPACTION_READ_ENTRIES;
            reached_summary |= e.kind == EntryKind::Summary;
            read += 1;
            go
        })?;
        let mut entries: Vec<(u64, TranscriptEntry)> = newest_first.into_iter().rev().collect();
        let previous = match entries.first() {
            Some((_, e)) if e.kind == EntryKind::Summary => Some(entries.remove(0)),
            _ => None,
        };
        let cut = match cut {
            Cut::KeepRecent(tokens) => cut_point(&entries, tokens, usize::MAX),
            Cut::KeepNewest { tokens, entries: n } => cut_point(&entries, tokens, n),
            Cut::UpTo(seq) => {
                let first_kept = entries
                    .iter()
                    .position(|(s, _)| *s > seq)
                    .unwrap_or(entries.len());
                keep_tool_pairs(&entries, first_kept)
            }
        };
        entries.truncate(cut);
        Ok(Some(Plan {
            session_id: record.id,
            epoch: record.compaction_count,
            tokens_before: record.tokens,
            previous,
            span: entries,
        }))
    }

    /// The chatter the user entries of `span` carried, in group and channel sessions.
    fn chatter(
        &self,
        session_key: &str,
        span: &[(u64, TranscriptEntry)],
    ) -> Result<Chatter, StoreError> {
        let mut out = Chatter::new();
        if chat_kind_of_key(session_key) == ChatKind::Direct {
            return Ok(out);
        }
        let Some((channel, chat_id)) = self.store.session_chat(session_key)? else {
            return Ok(out);
        };
        for (seq, e) in span {
            if let Some((_, lines)) = chatter_of(&self.store, &channel, &chat_id, e)? {
                if !lines.is_empty() {
                    out.insert(*seq, lines);
                }
            }
        }
        Ok(out)
    }

    /// The summary of `span` on top of `previous`: cached, or from the summariser.
    async fn summary(
        &self,
        span: &str,
        previous: Option<&str>,
    ) -> Result<(String, u32), CompactError> {
        let mut h = DefaultHasher::new();
        previous.hash(&mut h);
        span.hash(&mut h);
        let key = (h.finish(), span.len() + previous.map_or(0, str::len));
        {
            let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            cache.retain(|(_, at, _, _)| at.elapsed() < SUMMARY_CACHE_TTL);
            if let Some((_, _, text, tokens)) = cache.iter().find(|(k, ..)| *k == key) {
                return Ok((text.clone(), *tokens));
            }
        }
        let summary = self.summarizer.summarize(span, previous).await?;
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= SUMMARY_CACHE_ENTRIES {
            cache.pop_front();
        }
        cache.push_back((key, Instant::now(), summary.text.clone(), summary.tokens));
        Ok((summary.text, summary.tokens))
    }

    fn lock_no_gain(&self) -> std::sync::MutexGuard<'_, NoGain> {
        self.no_gain.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn remember_no_gain(&self, span: SpanId) {
        let mut guard = self.lock_no_gain();
        let (set, order) = &mut *guard;
        if set.insert(span) {
            order.push_back(span);
            if order.len() > NO_GAIN_SPANS {
                if let Some(old) = order.pop_front() {
                    set.remove(&old);
                }
            }
        }
    }
}

/// Index of the first entry kept verbatim: the newest `keep_tokens` stay (at most
/// `keep_entries` of them), moved earlier so a kept tool result keeps its call (and a round's
/// calls stay together).
pub(crate) fn cut_point(
    entries: &[(u64, TranscriptEntry)],
    keep_tokens: u64,
    keep_entries: usize,
) -> usize {
    let mut cut = entries.len();
    let mut kept = 0u64;
    while cut > 0 {
        let tokens = u64::from(entries[cut - 1].1.tokens);
        if kept + tokens > keep_tokens || entries.len() - cut >= keep_entries {
            break;
        }
        kept += tokens;
        cut -= 1;
    }
    keep_tool_pairs(entries, cut)
}

/// Moves `cut` earlier until it does not separate a tool call from its result (and a round's
/// calls stay together).
fn keep_tool_pairs(entries: &[(u64, TranscriptEntry)], mut cut: usize) -> usize {
    while cut > 0
        && cut < entries.len()
        && (entries[cut].1.kind == EntryKind::ToolResult
            || entries[cut - 1].1.kind == EntryKind::ToolCall)
    {
        cut -= 1;
    }
    cut
}

/// The span as the summariser reads it: one line per entry, with who said it; a group turn's
/// chatter comes before it, one line per message. In a group (`zone` set) the lines are what
/// the group said, under a day line (`## Mon 8 May 2023`) wherever the day changes; questions
/// put to the bot and its own replies are left out (they are not the group's facts).
fn render_span(
    span: &[(u64, TranscriptEntry)],
    chatter: &Chatter,
    zone: Option<&TimeZone>,
) -> String {
    let mut out = String::new();
    let mut day = String::new();
    let mut dated = |out: &mut String, ms: u64| {
        if let Some(zone) = zone {
            let d = chat_date(ms, zone);
            if d != day {
                out.push_str(DAY_MARKER);
                out.push_str(&d);
                out.push('\n');
                day = d;
            }
        }
    };
    for (seq, e) in span {
        for m in chatter.get(seq).into_iter().flatten() {
            dated(&mut out, m.timestamp_ms);
            out.push_str(&format!("[user {}]: {}\n", m.sender_name, m.text));
        }
        let to_or_from_the_bot =
            e.kind == EntryKind::Assistant || (e.kind == EntryKind::User && e.text.contains('?'));
        if zone.is_some() && to_or_from_the_bot {
            continue;
        }
        dated(&mut out, e.timestamp_ms);
        let who = match (e.kind, &e.sender, &e.tool) {
            (EntryKind::User, Some(s), _) => format!("user {}", s.name),
            (EntryKind::ToolCall, _, Some(t)) => format!("tool call {}({})", t.name, t.arguments),
            (EntryKind::ToolResult, _, Some(t)) => format!("tool result {}", t.name),
            (kind, ..) => format!("{kind:?}").to_lowercase(),
        };
        out.push_str(&format!("[{who}]: {}\n", e.text));
    }
    out
}

#[cfg(test)]
#[path = "compact_tests.rs"]
mod tests;
