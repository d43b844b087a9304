//! The figure "messages caught up after a 30 s outage, duplicates: 0", for Discord
//! and Slack: the real binary connected to the fake platform (a test double on loopback)
//! and a recording fake model, killed (`kill -9`) and kept down for `OUTAGE_S` seconds
//! (default 30) while the fake platform receives addressed user messages at a steady
//! `RATE_PER_S` (default 2) spread round-robin over [`CONVERSATIONS`] conversations (four
//! channels and a thread in each), then restarted; the messages go on for [`AFTER`] after
//! the restart, so live ones meet the catch-up. Each message carries a `turn-N` marker that
//! the fake model repeats in its answer, so every answer the bot posts names the message it
//! answered. Discord runs twice: its gateway session resumed (the events of the outage
//! replayed) and not resumable (read back over REST). Prints the messages sent during the outage and after, those answered, caught
//! up, duplicates (answers past the first per message), missing, the time from the restart
//! to the last outage message's answer, and the channel's own counters.
//!
//! Bounds: at 2/s for 30 s, 60 messages and 10 more after the restart over 8
//! conversations, at most 9 per conversation —
//! under `[queue] cap` (20: past it a session drops or summarizes its oldest queued
//! messages) and far under the catch-up bounds (Slack's `catch_up_max_per_conversation`,
//! 1,000 per conversation or thread; Discord's `MAX_CATCH_UP_PER_CHANNEL`, 100 per channel). A longer outage or a higher rate needs more
//! conversations to stay under the cap. Every conversation is warmed up before the kill: a
//! catch-up reads back only conversations the channel has seen.
//!
//! `#[ignore]`d: a benchmark of about a minute each, run by
//! `benches/loadtest/channel_outage.sh`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::fake_model::{Behaviour, FakeModel};
use crate::support::fake_discord::{mentioning_bot, message_json, FakeDiscord, GUILD_ID, TOKEN};
use crate::support::fake_slack::{FakeSlack, APP_TOKEN, BOT_TOKEN, BOT_USER};
use crate::support::{env_var, eventually_some, ServerProcess};

/// Conversations the messages are spread over: four channels and one thread in each.
const CONVERSATIONS: usize = 8;
/// Messages keep coming this long after the restart.
const AFTER: Duration = Duration::from_secs(5);
/// Longest wait for the last answer after the restart.
const DEADLINE: Duration = Duration::from_secs(180);
/// How long answers are still counted after the last one expected (late duplicates).
const SETTLE: Duration = Duration::from_secs(3);
/// How often the answers are looked at while waiting.
const POLL: Duration = Duration::from_millis(50);
const PATIENCE: Duration = Duration::from_secs(30);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The platform side of the run.
trait Platform {
    /// Posts a message addressing the bot, saying `text`, in conversation `i`.
    fn post(&self, i: usize, text: &str);
    /// The texts of every message the bot posted so far.
    fn answers(&self) -> Vec<String>;
}

/// The number N of each `turn-N` marker in `text`.
fn markers(text: &str) -> Vec<u64> {
    text.match_indices("turn-")
        .filter_map(|(i, _)| {
            let digits: String = text[i + 5..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        })
        .collect()
}

/// Answers per marker so far.
fn answered(platform: &impl Platform) -> BTreeMap<u64, usize> {
    let mut count = BTreeMap::new();
    for text in platform.answers() {
        if let Some(n) = markers(&text).first() {
            *count.entry(*n).or_insert(0) += 1;
        }
    }
    count
}

fn text(n: u64) -> String {
    format!("question turn-{n}")
}

/// Posts messages `next..` at `rate` per second for `length`, round-robin over the
/// conversations; returns the markers posted.
async fn post_for(
    platform: &impl Platform,
    next: &mut u64,
    rate: u64,
    length: Duration,
) -> Vec<u64> {
    let mut posted = Vec::new();
    let start = Instant::now();
    let every = Duration::from_millis(1_000 / rate.max(1));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while start.elapsed() < length {
        tick.tick().await;
        let n = *next;
        *next += 1;
        platform.post(usize::try_from(n).unwrap() % CONVERSATIONS, &text(n));
        posted.push(n);
    }
    posted
}

/// What one run measured.
struct Figures {
    outage: Vec<u64>,
    after: Vec<u64>,
    counts: BTreeMap<u64, usize>,
    restart_to_last: Option<Duration>,
    restart_to_first: Option<Duration>,
    metrics: String,
}

impl Figures {
    fn print(&self, channel: &str, outage_s: u64, rate: u64) {
        let answered_of =
            |list: &[u64]| list.iter().filter(|n| self.counts.contains_key(n)).count();
        let missing: Vec<u64> = self
            .outage
            .iter()
            .chain(&self.after)
            .filter(|n| !self.counts.contains_key(n))
            .copied()
            .collect();
        let duplicates: usize = self.counts.values().map(|c| c.saturating_sub(1)).sum();
        let ms = |d: Option<Duration>| {
            d.map_or("never".to_string(), |d| format!("{} ms", d.as_millis()))
        };
        println!("== {channel}: {outage_s} s outage, {rate} messages/s over {CONVERSATIONS} conversations ==");
        println!("sent during the outage:      {}", self.outage.len());
        println!("caught up (answered):        {}", answered_of(&self.outage));
        println!(
            "sent live after the restart: {} (answered {})",
            self.after.len(),
            answered_of(&self.after)
        );
        println!(
            "answers in all:              {}",
            self.counts.values().sum::<usize>()
        );
        println!("duplicates:                  {duplicates}");
        println!("missing:                     {} {missing:?}", missing.len());
        println!("restart -> first answer:     {}", ms(self.restart_to_first));
        println!(
            "restart -> last catch-up answer: {}",
            ms(self.restart_to_last)
        );
        let ours = format!("channel=\"{channel}\"");
        for line in self.metrics.lines().filter(|l| {
            l.starts_with("turnstile_channel_")
                && l.contains(&ours)
                && !l.starts_with("turnstile_channel_connection")
        }) {
            println!("  {line}");
        }
    }
}

/// Warms up, kills the binary, posts through the outage, restarts it, posts on for
/// [`AFTER`], and waits for the answers.
async fn run(
    platform: &impl Platform,
    mut bin: ServerProcess,
    restart: impl std::future::Future<Output = ServerProcess>,
    disconnected: impl std::future::Future<Output = ()>,
) -> Figures {
    let outage_s = env_u64("OUTAGE_S", 30);
    let rate = env_u64("RATE_PER_S", 2);
    // Warm-up: one message per conversation, each answered, so the channel knows them all.
    for i in 0..CONVERSATIONS {
        platform.post(i, "warming up");
    }
    eventually_some(PATIENCE, "the warm-up answered", || {
        let n = platform.answers().len();
        async move { (n >= CONVERSATIONS).then_some(()) }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    bin.kill9();
    let _ = bin.wait_exit(PATIENCE).await;
    disconnected.await;
    let mut next = 1;
    let outage = post_for(platform, &mut next, rate, Duration::from_secs(outage_s)).await;
    let restarted = Instant::now();
    // While the binary restarts and catches up, messages go on; the answers are watched.
    let watch = async {
        let (mut first, mut last) = (None, None);
        while last.is_none() && restarted.elapsed() < DEADLINE {
            let counts = answered(platform);
            if first.is_none() && !counts.is_empty() {
                first = Some(restarted.elapsed());
            }
            if outage.iter().all(|n| counts.contains_key(n)) {
                last = Some(restarted.elapsed());
            }
            tokio::time::sleep(POLL).await;
        }
        (first, last)
    };
    let (bin, after, (restart_to_first, restart_to_last)) =
        tokio::join!(restart, post_for(platform, &mut next, rate, AFTER), watch);
    // Then everything answered, and a while longer for late duplicates.
    let mut all_since: Option<Instant> = None;
    while restarted.elapsed() < DEADLINE {
        let counts = answered(platform);
        if outage.iter().chain(&after).all(|n| counts.contains_key(n)) {
            match all_since {
                None => all_since = Some(Instant::now()),
                Some(t) if t.elapsed() >= SETTLE => break,
                Some(_) => {}
            }
        }
        tokio::time::sleep(POLL).await;
    }
    let metrics = match reqwest::get(bin.url("/metrics")).await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    let mut bin = bin;
    bin.stop().await;
    Figures {
        outage,
        after,
        counts: answered(platform),
        restart_to_last,
        restart_to_first,
        metrics,
    }
}

/// The fake model, answering with the marker of the message answered (the last in the
/// final user message: context blocks before it may quote other messages).
async fn fake_model() -> FakeModel {
    FakeModel::start(Behaviour {
        last_marker: true,
        ..Behaviour::default()
    })
    .await
}

/// Model requests whose final user message quotes more than one message's marker (context
/// blocks showing other messages of the conversation).
fn quoting(model: &FakeModel) -> usize {
    model
        .seen()
        .iter()
        .filter(|s| {
            let mut m = markers(&s.last_user);
            m.sort_unstable();
            m.dedup();
            m.len() > 1
        })
        .count()
}

fn model_toml(model: &FakeModel) -> String {
    format!(
        "[model]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake\"\n\
         api_key_env = \"TURNSTILE_TEST_UNSET_KEY\"\n\
         [queue]\nmode = \"followup\"\ndebounce_ms = 0\n",
        model.base_url
    )
}

fn check(figures: &Figures) {
    let duplicates: usize = figures.counts.values().map(|c| c.saturating_sub(1)).sum();
    assert_eq!(duplicates, 0, "nothing answered twice");
    assert!(
        figures
            .outage
            .iter()
            .chain(&figures.after)
            .all(|n| figures.counts.contains_key(n)),
        "every message answered"
    );
}

// --- Slack ---

/// The fake Slack with four channels, and the bot's thread under each warm-up message.
struct Slack {
    fake: FakeSlack,
    /// The thread of each channel: the ts of its first warm-up message (the bot answers in
    /// a thread under it).
    threads: std::sync::Mutex<Vec<Option<String>>>,
}

const SLACK_CHANNELS: [&str; 4] = ["C30", "C31", "C32", "C33"];

impl Platform for Slack {
    fn post(&self, i: usize, text: &str) {
        let channel = SLACK_CHANNELS[i % 4];
        let text = format!("<@{BOT_USER}> {text}");
        if i < 4 {
            let ts = self.fake.post(channel, "U1", &text, None);
            let mut threads = self.threads.lock().unwrap();
            if threads[i].is_none() {
                threads[i] = Some(ts);
            }
        } else {
            let thread = self.threads.lock().unwrap()[i - 4].clone();
            self.fake.post(channel, "U2", &text, thread.as_deref());
        }
    }

    fn answers(&self) -> Vec<String> {
        self.fake
            .sent()
            .into_iter()
            .map(|(_, m)| m["text"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

#[tokio::test]
#[ignore = "a benchmark: benches/loadtest/channel_outage.sh"]
async fn slack_outage_is_caught_up_once() {
    let fake = FakeSlack::start().await;
    let model = fake_model().await;
    let data = tempfile::tempdir().unwrap();
    let conf = tempfile::tempdir().unwrap();
    let toml = format!(
        "{}[channels.slack]\nbot_token_env = \"{}\"\napp_token_env = \"{}\"\napi_base = \"{}\"\n",
        model_toml(&model),
        env_var(BOT_TOKEN),
        env_var(APP_TOKEN),
        fake.api_base
    );
    let bin = ServerProcess::start(data.path(), conf.path(), &toml).await;
    let live = |want: bool| {
        let fake = fake.clone();
        async move {
            eventually_some(PATIENCE, "the socket mode connection", || {
                let live = fake.is_live();
                async move { (live == want).then_some(()) }
            })
            .await;
        }
    };
    live(true).await;
    let platform = Slack {
        fake: fake.clone(),
        threads: std::sync::Mutex::new(vec![None; 4]),
    };
    // A thread exists once its channel's first message is posted: `run` warms the
    // conversations in order, the channels (0–3) before their threads (4–7).
    let restart = ServerProcess::start(data.path(), conf.path(), &toml);
    let figures = run(&platform, bin, restart, live(false)).await;
    figures.print("slack", env_u64("OUTAGE_S", 30), env_u64("RATE_PER_S", 2));
    println!(
        "  model requests {}, quoting other messages' markers {}",
        model.seen().len(),
        quoting(&model)
    );
    println!(
        "  conversations.history/replies reads: {}/{}",
        fake.calls("conversations.history").len(),
        fake.calls("conversations.replies").len()
    );
    check(&figures);
}

// --- Discord ---

/// The fake Discord with four guild channels and a thread in each.
struct Discord {
    fake: FakeDiscord,
    /// Conversation → its channel id (threads are channels).
    channels: Vec<u64>,
}

impl Platform for Discord {
    fn post(&self, i: usize, text: &str) {
        let id = self.fake.next_id();
        let channel = self.channels[i % CONVERSATIONS];
        self.fake.post(mentioning_bot(message_json(
            id,
            channel,
            Some(GUILD_ID),
            1,
            false,
            text,
        )));
    }

    fn answers(&self) -> Vec<String> {
        self.fake
            .sent()
            .into_iter()
            .map(|(_, m)| m["content"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

#[tokio::test]
#[ignore = "a benchmark: benches/loadtest/channel_outage.sh"]
async fn discord_outage_resumed_is_caught_up_once() {
    discord_outage(true).await;
}

#[tokio::test]
#[ignore = "a benchmark: benches/loadtest/channel_outage.sh"]
async fn discord_outage_not_resumable_is_caught_up_once() {
    discord_outage(false).await;
}

/// The Discord run: with `resumable`, the gateway keeps the session's events through the
/// outage and replays them on RESUME (as Discord does while a session is resumable);
/// without, the RESUME is refused (op 9), the restart identifies anew and the messages of
/// the outage are only in the channels' REST history, read back by the catch-up.
async fn discord_outage(resumable: bool) {
    let fake = FakeDiscord::start().await;
    let model = fake_model().await;
    let data = tempfile::tempdir().unwrap();
    let conf = tempfile::tempdir().unwrap();
    let toml = format!(
        "{}[channels.discord]\ntoken_env = \"{}\"\napi_base = \"{}\"\n",
        model_toml(&model),
        env_var(TOKEN),
        fake.api_base
    );
    // Four channels (the fake's guild lists 20 and 21; others are read over REST) and a
    // thread in each, started from a message (the thread's starter).
    let parents = [20u64, 21, 22, 23];
    let mut channels = parents.to_vec();
    for parent in parents {
        let thread = fake.next_id();
        fake.post_unseen(message_json(
            thread,
            parent,
            Some(GUILD_ID),
            2,
            false,
            "a thread about the outage",
        ));
        fake.add_thread(thread, parent);
        channels.push(thread);
    }
    let bin = ServerProcess::start(data.path(), conf.path(), &toml).await;
    eventually_some(PATIENCE, "the gateway session", || {
        let n = fake.identifies();
        async move { (n >= 1).then_some(()) }
    })
    .await;
    let platform = Discord {
        fake: fake.clone(),
        channels,
    };
    let restart = ServerProcess::start(data.path(), conf.path(), &toml);
    let down = async {
        if !resumable {
            fake.refuse_resumes(true);
        }
    };
    let figures = run(&platform, bin, restart, down).await;
    let how = if resumable {
        "resumable"
    } else {
        "not resumable"
    };
    println!("(discord: the gateway session {how})");
    figures.print("discord", env_u64("OUTAGE_S", 30), env_u64("RATE_PER_S", 2));
    println!(
        "  model requests {}, quoting other messages' markers {}",
        model.seen().len(),
        quoting(&model)
    );
    println!(
        "  identifies {}, resumes {}, history reads {}",
        fake.identifies(),
        fake.resumes(),
        fake.requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path.ends_with("/messages"))
            .count()
    );
    check(&figures);
}
