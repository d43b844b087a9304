//! The LoCoMo scenario (`turnstile loadtest --scenario locomo --data FILE…`): does the context
//! carry what real people said, long after they said it?
//!
//! LoCoMo (ACL 2024, `snap-research/locomo`) publishes long real conversations between two
//! people over weeks, with questions whose answers name the turns that hold them (`evidence`).
//! Each conversation is replayed into a group chat as unaddressed messages from its two
//! speakers, timestamped with their session dates (a shared photo becomes
//! `[shares a photo: caption]`); then a third member asks every question of categories 1–4,
//! mentioning the bot. A recording test model answers with a fixed line, so the figures are the
//! context engine's alone: a question is *covered* when the text of every evidence turn is in
//! the request of its turn, and a covered temporal question is *dated* when each evidence
//! line shows its session's date, on the line or on the day line above it (`## Mon 8 May
//! 2023`) in the same message. For comparison: what a recency window of
//! the same budget would cover, and what the whole conversation costs. The summariser is
//! measured on its own: each session summarised as one span, the share of LoCoMo's annotated
//! observations of it whose content words are in the summary.
//!
//! The data stays outside the repository: the scenario reads the files it is given.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use serde::Serialize;
use serde_json::Value;

use super::group_memory::{group_message, send, RecordingModel};
use crate::compaction::ExtractiveSummarizer;
use crate::config::Config;
use crate::context::analysis::{chat_date, day_line, terms, DAY_MARKER};
use crate::error::Error;
use crate::inbound::untrusted;
use crate::model::{Encoding, ModelRequest, TokenCounter};
use crate::runtime::Runtime;

/// Seconds between two turns of one LoCoMo session (the data gives the session's start only).
const TURN_SPACING_MS: u64 = 30_000;
/// Seconds between two questions.
const QUESTION_SPACING_MS: u64 = 60_000;
/// Most conversations one run replays (LoCoMo has ten).
pub const MAX_CONVERSATIONS: usize = 64;
/// Most turns read from one conversation (LoCoMo's longest has 689).
const MAX_TURNS: usize = 10_000;
/// Most questions read from one conversation (LoCoMo's most is about 260).
const MAX_QUESTIONS: usize = 2_000;
/// The third member who asks the questions.
const ASKER: (&str, &str) = ("locomo-asker", "Quinn");
/// The question categories measured: multi-hop, temporal, open-domain, single-hop (5,
/// adversarial, has no evidence to find).
pub const CATEGORIES: [(u8, &str); 4] = [
    (1, "multi-hop"),
    (2, "temporal"),
    (3, "open-domain"),
    (4, "single-hop"),
];

/// One turn of a conversation, as sent.
#[derive(Debug, Clone)]
pub struct Turn {
    /// LoCoMo's id (`D1:3`).
    pub id: String,
    /// Who said it.
    pub speaker: String,
    /// The text as sent (with the photo caption).
    pub text: String,
    /// When it was sent.
    pub timestamp_ms: u64,
}

/// One question.
#[derive(Debug, Clone)]
pub struct Question {
    /// The question text.
    pub text: String,
    /// LoCoMo's category (1–4).
    pub category: u8,
    /// Ids of the turns that hold the answer.
    pub evidence: Vec<String>,
}

/// One conversation, parsed.
#[derive(Debug, Clone)]
pub struct Conversation {
    /// Its name (the file's stem).
    pub name: String,
    /// Every turn, in order.
    pub turns: Vec<Turn>,
    /// The questions of categories 1–4 whose evidence names turns of the conversation.
    pub questions: Vec<Question>,
    /// Questions left out because an evidence id names no turn.
    pub unresolved: usize,
    /// Per session (in order): the indexes of its turns and its annotated observations.
    pub sessions: Vec<(std::ops::Range<usize>, Vec<String>)>,
}

/// Parses LoCoMo's `"1:56 pm on 8 May, 2023"`.
pub fn parse_session_date(text: &str) -> Option<DateTime> {
    let (time, date) = text.trim().split_once(" on ")?;
    let (clock, half) = time.trim().split_once(' ')?;
    let (h, m) = clock.split_once(':')?;
    let (mut h, m): (i8, i8) = (h.parse().ok()?, m.parse().ok()?);
    match half.to_ascii_lowercase().as_str() {
        "am" if h == 12 => h = 0,
        "pm" if h < 12 => h += 12,
        "am" | "pm" => {}
        _ => return None,
    }
    let mut parts = date.split([' ', ',']).filter(|p| !p.is_empty());
    let day: i8 = parts.next()?.parse().ok()?;
    let month = parts.next()?;
    let year: i16 = parts.next()?.parse().ok()?;
    const MONTHS: [&str; 12] = [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ];
    let month = MONTHS.iter().position(|n| n.eq_ignore_ascii_case(month))? as i8 + 1;
    DateTime::new(year, month, day, h, m, 0, 0).ok()
}

/// Why a LoCoMo conversation file does not parse; each message starts with the
/// conversation's name.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// Not JSON.
    #[error("{name}: {source}")]
    Json {
        /// The conversation's name.
        name: String,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// A session whose `session_N_date_time` is missing or unreadable.
    #[error("{name}: session_{session} has no readable date")]
    NoDate {
        /// The conversation's name.
        name: String,
        /// The session's number.
        session: usize,
    },
    /// A session date that does not exist in the time zone.
    #[error("{name}: session_{session}: {source}")]
    Date {
        /// The conversation's name.
        name: String,
        /// The session's number.
        session: usize,
        /// What the time zone said.
        source: jiff::Error,
    },
    /// More than `MAX_TURNS` (10,000) turns.
    #[error("{0}: more than {MAX_TURNS} turns")]
    TooManyTurns(String),
    /// No session with turns.
    #[error("{0}: no session turns (not a LoCoMo conversation?)")]
    NoTurns(String),
}

/// Parses one LoCoMo conversation (`name` labels it in the report); session dates are read
/// in `zone`.
pub fn parse(name: &str, json: &str, zone: &TimeZone) -> Result<Conversation, ParseError> {
    let root: Value = serde_json::from_str(json).map_err(|source| ParseError::Json {
        name: name.to_string(),
        source,
    })?;
    // The release nests the sessions under `conversation`; the copies here are flat.
    let conv = root.get("conversation").unwrap_or(&root);
    let mut turns = Vec::new();
    let mut sessions = Vec::new();
    for n in 1.. {
        let Some(list) = conv.get(format!("session_{n}")).and_then(Value::as_array) else {
            if conv.get(format!("session_{n}_date_time")).is_some() {
                continue; // a dated session without turns
            }
            break;
        };
        let date = conv
            .get(format!("session_{n}_date_time"))
            .and_then(Value::as_str)
            .and_then(parse_session_date)
            .ok_or_else(|| ParseError::NoDate {
                name: name.to_string(),
                session: n,
            })?;
        let start = zone.to_timestamp(date).map_err(|source| ParseError::Date {
            name: name.to_string(),
            session: n,
            source,
        })?;
        let start_ms = u64::try_from(start.as_millisecond()).unwrap_or(0);
        let first = turns.len();
        for (i, t) in list.iter().enumerate() {
            if turns.len() >= MAX_TURNS {
                return Err(ParseError::TooManyTurns(name.to_string()));
            }
            let field = |k: &str| t.get(k).and_then(Value::as_str).unwrap_or_default();
            let mut text = field("text").to_string();
            if !field("blip_caption").is_empty() {
                text = format!("{text} [shares a photo: {}]", field("blip_caption"));
            }
            turns.push(Turn {
                id: field("dia_id").to_string(),
                speaker: field("speaker").to_string(),
                text,
                timestamp_ms: start_ms + i as u64 * TURN_SPACING_MS,
            });
        }
        let observations = root
            .get(format!("session_{n}_observation"))
            .or_else(|| conv.get(format!("session_{n}_observation")))
            .and_then(Value::as_object)
            .map(|by_speaker| {
                by_speaker
                    .values()
                    .filter_map(Value::as_array)
                    .flatten()
                    .filter_map(|o| o.get(0).and_then(Value::as_str).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        sessions.push((first..turns.len(), observations));
    }
    if turns.is_empty() {
        return Err(ParseError::NoTurns(name.to_string()));
    }
    let ids: HashSet<&str> = turns.iter().map(|t| t.id.as_str()).collect();
    let mut questions = Vec::new();
    let mut unresolved = 0;
    for q in root
        .get("qa")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let category = q.get("category").and_then(Value::as_u64).unwrap_or(0);
        if !(1..=4).contains(&category) || questions.len() >= MAX_QUESTIONS {
            continue;
        }
        // A few evidence entries hold two ids in one string ("D8:6; D9:17").
        let evidence: Vec<String> = q
            .get("evidence")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .flat_map(|e| e.split(|c: char| c == ';' || c == ',' || c.is_whitespace()))
            .filter(|e| !e.is_empty())
            .map(str::to_string)
            .collect();
        if evidence.is_empty() || evidence.iter().any(|e| !ids.contains(e.as_str())) {
            unresolved += 1;
            continue;
        }
        questions.push(Question {
            text: q
                .get("question")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            category: category as u8,
            evidence,
        });
    }
    Ok(Conversation {
        name: name.to_string(),
        turns,
        questions,
        unresolved,
        sessions,
    })
}

/// Covered questions of one category.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CategoryFigures {
    /// Questions asked.
    pub questions: usize,
    /// Questions whose every evidence turn was in the request.
    pub covered: usize,
}

impl CategoryFigures {
    /// `covered / questions` in percent.
    pub fn pct(&self) -> f64 {
        pct(self.covered, self.questions)
    }
}

/// The median and the 99th percentile of sorted `values`.
fn percentiles(values: &[u32]) -> (u32, u32) {
    let at = |q: f64| {
        let i = ((values.len() as f64 * q).ceil() as usize).saturating_sub(1);
        values.get(i).copied().unwrap_or(0)
    };
    (at(0.5), at(0.99))
}

fn pct(n: usize, of: usize) -> f64 {
    if of == 0 {
        0.0
    } else {
        n as f64 * 100.0 / of as f64
    }
}

/// The figures of one conversation, or of all of them together.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LocomoFigures {
    /// The conversation (or `total`).
    pub name: String,
    /// Turns replayed.
    pub turns: usize,
    /// Questions asked (categories 1–4).
    pub questions: usize,
    /// Questions left out because their evidence names no turn.
    pub unresolved: usize,
    /// Questions whose every evidence turn was in the request.
    pub covered: usize,
    /// Per category, in [`CATEGORIES`] order.
    pub categories: Vec<CategoryFigures>,
    /// Covered temporal questions whose every evidence line showed its date.
    pub temporal_dated: usize,
    /// Prompt tokens of the question turns: every value (for the median of a total).
    #[serde(skip)]
    pub tokens: Vec<u32>,
    /// Prompt tokens per question turn: median.
    pub tokens_p50: u32,
    /// … the largest.
    pub tokens_max: u32,
    /// The turn budget of the chat.
    pub budget: u32,
    /// Microseconds of one uncached assembly per question: every value.
    #[serde(skip)]
    pub assembly_us: Vec<u32>,
    /// … median.
    pub assembly_us_p50: u32,
    /// … 99th percentile.
    pub assembly_us_p99: u32,
    /// Questions a recency window of `budget` tokens of the conversation would cover.
    pub recency_covered: usize,
    /// Tokens of the whole conversation as `Name: text` lines.
    pub whole_tokens: u32,
    /// Observations of the sessions (summary retention).
    pub observations: usize,
    /// … whose content words are all in their session's summary.
    pub observations_retained: usize,
}

impl LocomoFigures {
    /// `covered / questions` in percent.
    pub fn covered_pct(&self) -> f64 {
        pct(self.covered, self.questions)
    }

    fn add(&mut self, o: &LocomoFigures) {
        self.turns += o.turns;
        self.questions += o.questions;
        self.unresolved += o.unresolved;
        self.covered += o.covered;
        if self.categories.is_empty() {
            self.categories = vec![CategoryFigures::default(); CATEGORIES.len()];
        }
        for (a, b) in self.categories.iter_mut().zip(&o.categories) {
            a.questions += b.questions;
            a.covered += b.covered;
        }
        self.temporal_dated += o.temporal_dated;
        self.tokens.extend_from_slice(&o.tokens);
        self.tokens.sort_unstable();
        self.tokens_p50 = self.tokens.get(self.tokens.len() / 2).copied().unwrap_or(0);
        self.tokens_max = self.tokens_max.max(o.tokens_max);
        self.assembly_us.extend_from_slice(&o.assembly_us);
        self.assembly_us.sort_unstable();
        (self.assembly_us_p50, self.assembly_us_p99) = percentiles(&self.assembly_us);
        self.budget = self.budget.max(o.budget);
        self.recency_covered += o.recency_covered;
        self.whole_tokens = self.whole_tokens.max(o.whole_tokens);
        self.observations += o.observations;
        self.observations_retained += o.observations_retained;
    }
}

/// The report of a run: per conversation, then the total (`whole_tokens`: the largest).
#[derive(Debug, Clone, Serialize)]
pub struct LocomoReport {
    /// One entry per conversation.
    pub conversations: Vec<LocomoFigures>,
    /// All of them together.
    pub total: LocomoFigures,
}

/// The text of a turn as the context shows it (sanitised the way untrusted text is).
fn shown(turn: &Turn) -> String {
    untrusted(&turn.text)
}

/// The content words of `text` (lower case, no stop words), for the retention measure.
fn content_words(text: &str) -> HashSet<String> {
    terms(text).into_iter().collect()
}

/// Writes one question's request, with its evidence and whether each line was found, to
/// `<dir>/<conversation>-q<k>-<category>-<ok|miss>.txt` (for reading why a question missed).
#[allow(clippy::too_many_arguments)]
fn write_dump(
    dir: &Path,
    conv: &Conversation,
    k: usize,
    q: &Question,
    covered: bool,
    evidence: &[&Turn],
    found: &[bool],
    request: &ModelRequest,
) -> Result<(), Error> {
    let mut text = format!("Q: {}\n", q.text);
    for (t, found) in evidence.iter().zip(found) {
        let found = if *found { "found" } else { "missing" };
        text.push_str(&format!("{} {}: {} [{found}]\n", t.id, t.speaker, t.text));
    }
    for m in &request.messages {
        text.push_str(&format!("\n--- {:?}\n{}\n", m.role, m.content));
    }
    let outcome = if covered { "ok" } else { "miss" };
    let path = dir.join(format!("{}-q{k}-{}-{outcome}.txt", conv.name, q.category));
    std::fs::write(&path, text)
        .map_err(|source| Error::Store(crate::error::StoreError::DataDir { path, source }))
}

/// Replays `conv` into its own group chat of `runtime` and measures it.
async fn replay(
    runtime: &Runtime,
    model: &RecordingModel,
    conv: &Conversation,
    zone: &TimeZone,
    counter: &TokenCounter,
    summary_tokens: u32,
    dump: Option<&Path>,
) -> Result<LocomoFigures, Error> {
    let chat_id = format!("locomo-{}", conv.name);
    let speaker_ids: HashMap<&str, String> = conv
        .turns
        .iter()
        .map(|t| {
            (
                t.speaker.as_str(),
                format!("locomo-{}", t.speaker.to_lowercase()),
            )
        })
        .collect();
    for (i, t) in conv.turns.iter().enumerate() {
        let sender = (speaker_ids[t.speaker.as_str()].as_str(), t.speaker.as_str());
        let m = group_message(
            &chat_id,
            format!("{}-t{i}", conv.name),
            sender,
            &t.text,
            t.timestamp_ms,
            false,
        );
        send(runtime, m).await?;
    }
    let by_id: HashMap<&str, &Turn> = conv.turns.iter().map(|t| (t.id.as_str(), t)).collect();
    let now_ms = crate::clock::now_ms();
    let start_ms = now_ms.saturating_sub(conv.questions.len() as u64 * QUESTION_SPACING_MS);
    let mut fig = LocomoFigures {
        name: conv.name.clone(),
        turns: conv.turns.len(),
        questions: conv.questions.len(),
        unresolved: conv.unresolved,
        categories: vec![CategoryFigures::default(); CATEGORIES.len()],
        ..LocomoFigures::default()
    };
    let first_request = model.requests().len();
    let key = crate::inbound::SessionKeys::for_agent("main").key(&group_message(
        &chat_id,
        String::new(),
        ASKER,
        "",
        0,
        true,
    ));

    for (k, q) in conv.questions.iter().enumerate() {
        let text = format!("@bot {}", q.text);
        let id = format!("{}-q{k}", conv.name);
        let ts = start_ms + k as u64 * QUESTION_SPACING_MS;
        let question = group_message(&chat_id, id, ASKER, &text, ts, true);
        if k > 0 {
            // What the question's turn pays for its context (the session exists from the
            // first question on).
            fig.assembly_us.push(
                u32::try_from(runtime.time_assembly(&key, question.clone())?.as_micros())
                    .unwrap_or(u32::MAX),
            );
        }
        send(runtime, question).await?;
        let requests = model.requests();
        let request: Option<&ModelRequest> = requests.iter().skip(first_request).rev().find(|r| {
            r.messages
                .last()
                .is_some_and(|m| m.content.contains(&untrusted(&text)))
        });
        let Some(request) = request else { continue };
        fig.tokens.push(request.prompt_tokens);
        // Each line with the day line above it in its message, if any.
        let lines: Vec<(&str, Option<&str>)> = request
            .messages
            .iter()
            .flat_map(|m| {
                let mut day = None;
                m.content.lines().map(move |l| {
                    if l.starts_with(DAY_MARKER) {
                        day = Some(l);
                    }
                    (l, day)
                })
            })
            .collect();
        let evidence: Vec<&Turn> = q
            .evidence
            .iter()
            .filter_map(|e| by_id.get(e.as_str()).copied())
            .collect();
        let line_of = |t: &Turn| {
            let s = shown(t);
            lines.iter().find(|l| l.0.contains(s.as_str())).copied()
        };
        let covered = evidence.iter().all(|t| line_of(t).is_some());
        if let Some(dir) = dump {
            let found: Vec<bool> = evidence.iter().map(|t| line_of(t).is_some()).collect();
            write_dump(dir, conv, k, q, covered, &evidence, &found, request)?;
        }
        let slot = CATEGORIES
            .iter()
            .position(|(c, _)| *c == q.category)
            .unwrap_or(0);
        fig.categories[slot].questions += 1;
        if covered {
            fig.covered += 1;
            fig.categories[slot].covered += 1;
            let dated = evidence.iter().all(|t| {
                line_of(t).is_some_and(|(l, day)| {
                    l.contains(&chat_date(t.timestamp_ms, zone))
                        || day == Some(day_line(t.timestamp_ms, zone).as_str())
                })
            });
            if q.category == 2 && dated {
                fig.temporal_dated += 1;
            }
        }
    }
    fig.assembly_us.sort_unstable();
    (fig.assembly_us_p50, fig.assembly_us_p99) = percentiles(&fig.assembly_us);
    fig.tokens.sort_unstable();
    fig.tokens_p50 = fig.tokens.get(fig.tokens.len() / 2).copied().unwrap_or(0);
    fig.tokens_max = fig.tokens.last().copied().unwrap_or(0);
    fig.budget = runtime.context_dump(&key)?.map_or(0, |a| a.budget.total);
    // The baselines: the newest turns that fit the budget, and the whole conversation.
    let costs: Vec<u32> = conv
        .turns
        .iter()
        .map(|t| counter.count(&format!("{}: {}", t.speaker, t.text)) + 4)
        .collect();
    fig.whole_tokens = costs.iter().sum();
    let mut room = fig.budget;
    let mut recent: HashSet<&str> = HashSet::new();
    for (t, c) in conv.turns.iter().zip(&costs).rev() {
        if *c > room {
            break;
        }
        room -= c;
        recent.insert(t.id.as_str());
    }
    fig.recency_covered = conv
        .questions
        .iter()
        .filter(|q| q.evidence.iter().all(|e| recent.contains(e.as_str())))
        .count();
    // The summariser on its own: each session as one span.
    let summarizer = ExtractiveSummarizer::new(*counter);
    for (range, observations) in &conv.sessions {
        let span: String = conv.turns[range.clone()]
            .iter()
            .map(|t| format!("[user {}]: {}\n", t.speaker, t.text))
            .collect();
        let summary = content_words(&summarizer.summarize(&span, None, summary_tokens).text);
        fig.observations += observations.len();
        fig.observations_retained += observations
            .iter()
            .filter(|o| {
                let words = content_words(o);
                // The speaker's own name opens most observations; it is not the fact.
                let shared = words.iter().filter(|w| summary.contains(*w)).count();
                !words.is_empty() && shared * 2 >= words.len()
            })
            .count();
    }
    Ok(fig)
}

/// Runs the scenario on `conversations` against a runtime built from `config` (its model
/// replaced by the [`RecordingModel`]; followup queueing so each question is its own turn).
/// With `dump`, each question's request is written there (see [`write_dump`]).
pub async fn run(
    conversations: &[Conversation],
    mut config: Config,
    dump: Option<&Path>,
) -> Result<LocomoReport, Error> {
    config.queue.mode = crate::config::QueueModeSetting::Followup;
    config.queue.debounce_ms = 0;
    // The config is validated: its zone resolves.
    let zone =
        crate::context::sources::time_zone(&config.context.time_zone).unwrap_or(TimeZone::UTC);
    let summary_tokens = config.compaction.summary_max_tokens;
    let model = Arc::new(RecordingModel::default());
    let runtime = Runtime::builder()
        .config(config)
        .model(model.clone())
        .build()
        .await?;
    let counter = TokenCounter::new(Encoding::Cl100k);
    let mut report = LocomoReport {
        conversations: Vec::new(),
        total: LocomoFigures {
            name: "total".into(),
            ..LocomoFigures::default()
        },
    };
    for conv in conversations.iter().take(MAX_CONVERSATIONS) {
        let fig = match replay(
            &runtime,
            &model,
            conv,
            &zone,
            &counter,
            summary_tokens,
            dump,
        )
        .await
        {
            Ok(f) => f,
            Err(e) => {
                let _ = runtime.shutdown().await;
                return Err(e);
            }
        };
        report.total.add(&fig);
        report.conversations.push(fig);
    }
    runtime.shutdown().await?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_locomo_dates() {
        let d = parse_session_date("1:56 pm on 8 May, 2023").unwrap();
        assert_eq!(d.to_string(), "2023-05-08T13:56:00");
        let d = parse_session_date("12:04 am on 1 January, 2024").unwrap();
        assert_eq!(d.to_string(), "2024-01-01T00:04:00");
        assert!(parse_session_date("yesterday").is_none());
    }

    #[test]
    fn parses_a_small_conversation() {
        let json = r#"{
          "speaker_a": "Ann", "speaker_b": "Ben",
          "session_1_date_time": "9:00 am on 2 March, 2023",
          "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "Look!", "blip_caption": "a dog on a beach"}
          ],
          "session_1_observation": {"Ann": [["Ann adopted a cat.", "D1:1"]]},
          "qa": [
            {"question": "What did Ann adopt?", "answer": "a cat", "evidence": ["D1:1"], "category": 4},
            {"question": "Odd?", "answer": "x", "evidence": ["D9:9"], "category": 1},
            {"question": "Trick?", "adversarial_answer": "x", "evidence": ["D1:1"], "category": 5}
          ]
        }"#;
        let c = parse("c", json, &TimeZone::UTC).unwrap();
        assert_eq!(c.turns.len(), 2);
        assert_eq!(c.turns[1].text, "Look! [shares a photo: a dog on a beach]");
        assert_eq!(c.questions.len(), 1);
        assert_eq!(c.unresolved, 1);
        assert_eq!(c.sessions[0].1, vec!["Ann adopted a cat.".to_string()]);
        assert!(parse("x", "{}", &TimeZone::UTC).is_err());
        assert!(parse("x", "not json", &TimeZone::UTC).is_err());
    }
}
