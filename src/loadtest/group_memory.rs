//! The group-memory scenario (`turnstile loadtest --scenario group-memory`): does the bot still
//! know, at the end of a long group chat, what was said in it?
//!
//! Five people chat in one group; the bot is mentioned about every twentieth message; facts
//! (a ticket id, its owner, a due date and a decision) are planted early, in the middle and
//! late, most of them said without addressing the bot. At the end one question per fact asks
//! about it. A test model records every request it is sent and answers with a fixed line, so
//! the figures are the context engine's alone: the share of probes whose fact (id, owner and
//! date on one line) is in the request, the prompt tokens per turn, and what sending the whole
//! chat every time would cost. Everything is generated from a seed: a run is reproducible.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::Serialize;

use crate::config::Config;
use crate::error::{Error, ModelError};
use crate::inbound::Refusal;
use crate::inbound::{ChatKind, InboundMessage, MessageKind, Sender};
use crate::model::{Encoding, Model, ModelReply, ModelRequest, Role, TokenCounter};
use crate::runtime::{Runtime, SubmitError};

/// The people in the chat.
const PEOPLE: [(&str, &str); 5] = [
    ("101", "Alice"),
    ("102", "Bob"),
    ("103", "Carol"),
    ("104", "Dave"),
    ("105", "Priya"),
];
/// Owners named in facts (people in the chat and colleagues outside it).
const OWNERS: [&str; 8] = [
    "Priya", "Marta", "Kenji", "Alice", "Olusegun", "Bob", "Ines", "Carol",
];
/// What was decided about a ticket.
const DECISIONS: [&str; 6] = [
    "ship it behind a feature flag",
    "roll back the schema change",
    "move it to the next sprint",
    "ask the vendor for a patch",
    "split it into two tickets",
    "pair on it on Thursday",
];
/// Chatter without facts.
const CHATTER: [&str; 24] = [
    "lol",
    "anyone for lunch?",
    "the build is slow again today",
    "ok see you later",
    "did someone move the standup?",
    "coffee machine is broken again",
    "I will be late tomorrow morning",
    "nice work everyone",
    "can someone review my pull request when you have a minute",
    "thanks!",
    "the wifi on the third floor keeps dropping",
    "who is on call this weekend?",
    "haha yes",
    "I pushed a fix for the flaky test",
    "meeting notes are in the usual doc",
    "brb",
    "is the staging cluster down or is it just me",
    "sounds good to me",
    "let us take this offline",
    "ping me if you need anything",
    "weather is terrible today",
    "I am going to grab a coffee",
    "that dashboard looks much better now",
    "agreed",
];
/// Topics of the questions the bot is asked along the way.
const TOPICS: [&str; 6] = [
    "the release plan",
    "our test coverage",
    "the on-call rota",
    "the new dashboard",
    "the flaky build",
    "the retro",
];
/// Longest the scenario waits for one reply.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest scenario run (messages before the probes, facts).
pub const MAX_MESSAGES: usize = 100_000;

/// What to run.
#[derive(Debug, Clone)]
pub struct GroupMemorySpec {
    /// Chat messages before the probes.
    pub messages: usize,
    /// Facts planted (one probe each).
    pub facts: usize,
    /// The bot is mentioned on every `mention_every`-th message.
    pub mention_every: usize,
    /// Seeds the generator.
    pub seed: u64,
}

impl Default for GroupMemorySpec {
    fn default() -> Self {
        Self {
            messages: 500,
            facts: 30,
            mention_every: 20,
            seed: 42,
        }
    }
}

/// One planted fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    /// The ticket id (`ZX-4411`).
    pub id: String,
    /// Who owns it.
    pub owner: String,
    /// When it is due (`2026-12-03`).
    pub due: String,
    /// What was decided.
    pub decision: String,
    /// Index of the message that says it.
    pub at: usize,
    /// Whether that message addressed the bot.
    pub addressed: bool,
}

impl Fact {
    /// The sentence that plants it.
    pub fn sentence(&self) -> String {
        format!(
            "ticket {} is owned by {}, due {}; we decided to {}",
            self.id, self.owner, self.due, self.decision
        )
    }

    /// The question that probes it.
    pub fn probe(&self) -> String {
        format!("@bot who owns ticket {} and when is it due?", self.id)
    }

    /// Whether `text` answers the probe: one line holds the id, the owner and the date.
    pub fn answered_in(&self, text: &str) -> bool {
        text.lines()
            .any(|l| l.contains(&self.id) && l.contains(&self.owner) && l.contains(&self.due))
    }
}

/// One chat message of the scenario.
#[derive(Debug, Clone)]
pub struct ChatLine {
    /// Sender index into the people.
    pub person: usize,
    /// The text.
    pub text: String,
    /// Whether it addresses the bot.
    pub addressed: bool,
}

/// The generated chat: its messages and the facts planted in them.
#[derive(Debug, Clone)]
pub struct Script {
    /// The messages, in order (probes not included).
    pub lines: Vec<ChatLine>,
    /// The facts.
    pub facts: Vec<Fact>,
}

/// Generates the chat of `spec` (deterministic for a seed).
pub fn script(spec: &GroupMemorySpec) -> Script {
    let mut rng = fastrand::Rng::with_seed(spec.seed);
    let messages = spec.messages.clamp(1, MAX_MESSAGES);
    let every = spec.mention_every.max(2);
    let mut lines: Vec<ChatLine> = (0..messages)
        .map(|i| {
            let person = rng.usize(..PEOPLE.len());
            if i % every == every - 1 {
                let topic = TOPICS[rng.usize(..TOPICS.len())];
                ChatLine {
                    person,
                    text: format!("@bot what do you think about {topic}?"),
                    addressed: true,
                }
            } else {
                ChatLine {
                    person,
                    text: CHATTER[rng.usize(..CHATTER.len())].to_string(),
                    addressed: false,
                }
            }
        })
        .collect();
    let n = spec.facts.min(messages);
    let mut facts = Vec::with_capacity(n);
    for k in 0..n {
        // Spread over the chat: early, middle and late.
        let at = (k * messages) / n.max(1) + rng.usize(..(messages / n.max(1)).max(1));
        let at = at.min(messages - 1);
        let letters: String = (0..2).map(|_| rng.uppercase()).collect();
        let fact = Fact {
            id: format!("{letters}-{}", rng.u32(1_000..10_000)),
            owner: OWNERS[rng.usize(..OWNERS.len())].to_string(),
            due: format!("2026-12-{:02}", rng.u32(1..29)),
            decision: DECISIONS[rng.usize(..DECISIONS.len())].to_string(),
            at,
            // Every third fact is told to the bot; the others are said between people.
            addressed: k % 3 == 2,
        };
        let line = &mut lines[at];
        line.text = if fact.addressed {
            format!("@bot please remember: {}", fact.sentence())
        } else {
            fact.sentence()
        };
        line.addressed = fact.addressed;
        facts.push(fact);
    }
    Script { lines, facts }
}

/// The figures of one run.
#[derive(Debug, Clone, Serialize)]
pub struct GroupMemoryReport {
    /// Messages before the probes.
    pub messages: usize,
    /// Probes sent (one per fact).
    pub probes: usize,
    /// Probes whose fact was in the request.
    pub answerable: usize,
    /// `answerable / probes`, in percent.
    pub answerable_pct: f64,
    /// Ids of the facts that were not.
    pub missed: Vec<String>,
    /// Answerable probes whose fact was in the rolling summary (the system message).
    pub via_summary: usize,
    /// … in a recalled chat message.
    pub via_recall: usize,
    /// … in the conversation (history, pending chatter).
    pub via_history: usize,
    /// Model calls (turns).
    pub turns: usize,
    /// Prompt tokens per turn (our count): median.
    pub prompt_tokens_p50: u32,
    /// Prompt tokens per turn: the largest.
    pub prompt_tokens_max: u32,
    /// The turn budget of the chat (the group preset's token limit, within the model window).
    pub budget: u32,
    /// Tokens of the whole chat (every message and reply as `Name: text`) at the last probe:
    /// what a send-everything baseline needs.
    pub baseline_tokens: u32,
    /// Compactions the session went through.
    pub compactions: u32,
}

/// The test model: records each request, answers with a fixed line.
#[derive(Default)]
pub struct RecordingModel {
    requests: Mutex<Vec<ModelRequest>>,
}

impl RecordingModel {
    /// The line it answers with.
    pub const ANSWER: &'static str = "Noted.";

    /// The requests so far.
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Model for RecordingModel {
    fn name(&self) -> &str {
        "recording-test-model"
    }

    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request.clone());
        Box::pin(async {
            Ok(ModelReply {
                text: Self::ANSWER.to_string(),
                ..ModelReply::default()
            })
        })
    }
}

/// Seconds between two messages of the chat (a busy group: 500 messages in about 40 minutes).
const SPACING_MS: u64 = 5_000;

/// The inbound message `i` of the chat, sent at `start_ms + i × SPACING_MS`.
fn inbound(
    chat_id: &str,
    start_ms: u64,
    i: usize,
    person: usize,
    text: &str,
    addressed: bool,
) -> InboundMessage {
    let sender = PEOPLE[person % PEOPLE.len()];
    let at = start_ms + i as u64 * SPACING_MS;
    group_message(chat_id, format!("gm-{i}"), sender, text, at, addressed)
}

/// A Telegram group message of the scenarios: `sender` is (id, name); `addressed` mentions
/// the bot.
pub(crate) fn group_message(
    chat_id: &str,
    message_id: String,
    sender: (&str, &str),
    text: &str,
    timestamp_ms: u64,
    addressed: bool,
) -> InboundMessage {
    InboundMessage {
        channel: "telegram".into(),
        account_id: "default".into(),
        chat_kind: ChatKind::Group,
        chat_id: chat_id.into(),
        thread_id: None,
        message_id,
        sender: Sender {
            id: sender.0.into(),
            name: sender.1.into(),
            is_bot: false,
        },
        text: text.into(),
        mentions: Vec::new(),
        mentioned_bot: addressed,
        reply_to: None,
        timestamp_ms,
        attachments: Vec::new(),
        kind: MessageKind::Message,
    }
}

/// Whether `content` holds `fact` in a recalled chat message.
fn recalled(content: &str, fact: &Fact) -> bool {
    content
        .split(crate::context::sources::RECALL_LABEL)
        .skip(1)
        .any(|block| {
            block
                .split("```")
                .nth(1)
                .is_some_and(|b| fact.answered_in(b))
        })
}

/// Sends one message and, when it addresses the bot, waits for the reply.
pub(crate) async fn send(runtime: &Runtime, message: InboundMessage) -> Result<(), Error> {
    let addressed = message.mentioned_bot;
    let mut waiter = runtime.reply_to(&message.message_id);
    match runtime.submit(message).await {
        Ok(_) if addressed => {
            tokio::time::timeout(REPLY_TIMEOUT, waiter.recv())
                .await
                .map_err(|_| Error::NotAvailable("no reply within the scenario's timeout"))?;
            Ok(())
        }
        Ok(_) | Err(SubmitError::Refused(Refusal::Dropped(_))) => Ok(()),
        Err(SubmitError::Refused(refusal)) => Err(Error::Overloaded(refusal.to_string())),
        Err(SubmitError::Failed(e)) => Err(e),
    }
}

/// Runs the scenario against a runtime built from `config` (its model replaced by the
/// [`RecordingModel`]; followup queueing so each mention is its own turn).
pub async fn run(spec: &GroupMemorySpec, mut config: Config) -> Result<GroupMemoryReport, Error> {
    config.queue.mode = crate::config::QueueModeSetting::Followup;
    config.queue.debounce_ms = 0;
    let model = Arc::new(RecordingModel::default());
    let runtime = Runtime::builder()
        .config(config)
        .model(model.clone())
        .build()
        .await?;
    let script = script(spec);
    let chat_id = format!("group-memory-{}", spec.seed);
    // The chat ends now: its last message is not in the future, its first about 40 minutes
    // ago (so the group preset's TTL rules apply as they would to a real chat).
    let total = (script.lines.len() + script.facts.len()) as u64;
    let now_ms = crate::clock::now_ms();
    let start_ms = now_ms.saturating_sub(total * SPACING_MS);
    let counter = TokenCounter::new(Encoding::Cl100k);
    let mut baseline = 0u32;
    let mut line_cost = |name: &str, text: &str| {
        baseline = baseline.saturating_add(counter.count(&format!("{name}: {text}")) + 4);
    };
    for (i, line) in script.lines.iter().enumerate() {
        line_cost(PEOPLE[line.person].1, &line.text);
        if line.addressed {
            line_cost("bot", RecordingModel::ANSWER);
        }
        send(
            &runtime,
            inbound(
                &chat_id,
                start_ms,
                i,
                line.person,
                &line.text,
                line.addressed,
            ),
        )
        .await?;
    }
    let first_probe = model.requests().len();
    let mut missed = Vec::new();
    let (mut via_summary, mut via_recall, mut via_history) = (0, 0, 0);
    for (k, fact) in script.facts.iter().enumerate() {
        let i = script.lines.len() + k;
        let person = k % PEOPLE.len();
        line_cost(PEOPLE[person].1, &fact.probe());
        line_cost("bot", RecordingModel::ANSWER);
        send(
            &runtime,
            inbound(&chat_id, start_ms, i, person, &fact.probe(), true),
        )
        .await?;
        let requests = model.requests();
        let asked = requests.iter().skip(first_probe).find(|r| {
            r.messages
                .last()
                .is_some_and(|m| m.content.contains(&fact.probe()))
        });
        let holder = asked.and_then(|r| r.messages.iter().find(|m| fact.answered_in(&m.content)));
        match holder {
            Some(m) if m.role == Role::System => via_summary += 1,
            Some(m) if recalled(&m.content, fact) => via_recall += 1,
            Some(_) => via_history += 1,
            None => {}
        }
        if holder.is_none() {
            missed.push(fact.id.clone());
        }
    }
    let requests = model.requests();
    let mut tokens: Vec<u32> = requests.iter().map(|r| r.prompt_tokens).collect();
    tokens.sort_unstable();
    let key = crate::inbound::SessionKeys::for_agent("main")
        .key(&inbound(&chat_id, start_ms, 0, 0, "", true));
    let compactions = runtime.session(&key)?.map_or(0, |s| s.compaction_count);
    let budget = runtime.context_dump(&key)?.map_or(0, |a| a.budget.total);
    runtime.shutdown().await?;
    let probes = script.facts.len();
    let answerable = probes - missed.len();
    Ok(GroupMemoryReport {
        messages: script.lines.len(),
        probes,
        answerable,
        answerable_pct: if probes == 0 {
            100.0
        } else {
            answerable as f64 * 100.0 / probes as f64
        },
        missed,
        via_summary,
        via_recall,
        via_history,
        turns: requests.len(),
        prompt_tokens_p50: tokens.get(tokens.len() / 2).copied().unwrap_or(0),
        prompt_tokens_max: tokens.last().copied().unwrap_or(0),
        budget,
        baseline_tokens: baseline,
        compactions,
    })
}
