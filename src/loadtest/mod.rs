//! `turnstile loadtest`: bounded load against a server over HTTP or against an in-process
//! runtime, with HDR histograms of ack latency (submit → accepted) and turn latency
//! (submit → reply), throughput, and errors by kind.
//!
//! Every run is bounded twice: by its message count (`sessions × messages`) and by
//! `max_duration`; it then waits at most `drain` for outstanding replies.
//! [`run_with_timeline`] also keeps latency over time (bounded, `timeline.rs`), which
//! `plot.rs` draws as SVG for `--plot`.

pub mod group_memory;
pub mod locomo;
pub mod plot;
mod report;
mod target;
mod timeline;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub use report::{Latency, Report};
pub use target::{rss_of, HttpTarget, InProcessTarget, Outcome, Target};
pub use timeline::{Point, Timeline};

use crate::inbound::{ChatKind, InboundMessage, Sender};

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// Distinct sessions.
    pub sessions: usize,
    /// Messages per session, sent in order.
    pub messages: usize,
    /// Concurrent senders.
    pub concurrency: usize,
    /// Mix in group chats: several senders per group, only some messages mention the bot.
    pub group_mix: bool,
    /// Offered load in messages per second across all senders (open loop: message `k` is due
    /// `k / rate` seconds after the start); `None` sends as fast as the target accepts.
    pub rate: Option<f64>,
    /// Stop sending after this long even if messages remain.
    pub max_duration: Duration,
    /// After sending, wait at most this long for outstanding replies.
    pub drain: Duration,
    /// Show a progress bar on stderr.
    pub progress: bool,
    /// Distinguishes this run's message ids from earlier runs against the same server.
    pub run_id: String,
}

/// Highest latency the histograms record (longer ones are clamped), in microseconds.
const MAX_LATENCY_US: u64 = 600_000_000;

fn histogram() -> Histogram<u64> {
    // Three significant digits over 1 µs ..= 10 min.
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("constant histogram bounds are valid")
}

/// The message `m` of session `s`.
pub fn message(spec: &LoadSpec, s: usize, m: usize) -> InboundMessage {
    // Every session is a chat of its own (a direct message would share `agent:main:main` under
    // the default `dm_scope`). In the group mix, odd sessions have three members and only every
    // third message addresses the bot; the others address it always.
    let group = spec.group_mix && s % 2 == 1;
    let (chat_kind, sender, mentioned) = if group {
        (
            ChatKind::Group,
            format!("member-{}", m % 3),
            m.is_multiple_of(3),
        )
    } else {
        (ChatKind::Group, format!("user-{s}"), true)
    };
    InboundMessage {
        channel: "loadtest".into(),
        account_id: "default".into(),
        chat_kind,
        chat_id: format!("chat-{s}"),
        thread_id: None,
        message_id: format!("{}-{s}-{m}", spec.run_id),
        sender: Sender {
            id: sender.clone(),
            name: sender,
            is_bot: false,
        },
        text: format!("message {m} of session {s}: the quick brown fox jumps over the lazy dog"),
        mentions: Vec::new(),
        mentioned_bot: mentioned,
        reply_to: None,
        timestamp_ms: 0,
        attachments: Vec::new(),
        kind: crate::inbound::MessageKind::Message,
    }
}

struct Shared {
    sent_at: DashMap<String, Instant>,
    ack: Mutex<Histogram<u64>>,
    turn: Mutex<Histogram<u64>>,
    errors: DashMap<String, u64>,
    accepted: AtomicU64,
    dropped: AtomicU64,
    replied: AtomicU64,
    turns: AtomicU64,
    /// The next send slot, for `rate`.
    slot: AtomicU64,
    /// Latency over time, for the plot.
    timeline: Mutex<Timeline>,
}

fn record(h: &Mutex<Histogram<u64>>, d: Duration) {
    let us = u64::try_from(d.as_micros())
        .unwrap_or(u64::MAX)
        .clamp(1, MAX_LATENCY_US);
    if let Ok(mut h) = h.lock() {
        let _ = h.record(us);
    }
}

/// Runs the load against `target` and reports.
pub async fn run<T: Target>(target: Arc<T>, spec: LoadSpec) -> Report {
    run_with_timeline(target, spec).await.0
}

/// Runs the load against `target` and reports, with the turn latencies over time.
pub async fn run_with_timeline<T: Target>(target: Arc<T>, spec: LoadSpec) -> (Report, Timeline) {
    let total = (spec.sessions * spec.messages) as u64;
    let shared = Arc::new(Shared {
        sent_at: DashMap::new(),
        ack: Mutex::new(histogram()),
        turn: Mutex::new(histogram()),
        errors: DashMap::new(),
        accepted: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
        replied: AtomicU64::new(0),
        turns: AtomicU64::new(0),
        slot: AtomicU64::new(0),
        timeline: Mutex::new(Timeline::new(histogram())),
    });
    // The timeline's clock; `started` (below) times the sending.
    let origin = Instant::now();
    let bar = if spec.progress {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        if let Ok(style) =
            ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} sent, {msg}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    } else {
        ProgressBar::hidden()
    };

    let replies = {
        let shared = Arc::clone(&shared);
        let mut stream = target.replies().await;
        tokio::spawn(async move {
            while let Some(ids) = stream.recv().await {
                let now = Instant::now();
                let mut ours = false;
                for id in ids {
                    if let Some((_, at)) = shared.sent_at.remove(&id) {
                        record(&shared.turn, now - at);
                        if let Ok(mut t) = shared.timeline.lock() {
                            t.record(at.saturating_duration_since(origin), now - at);
                        }
                        shared.replied.fetch_add(1, Ordering::Relaxed);
                        ours = true;
                    }
                }
                if ours {
                    shared.turns.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };

    let started = Instant::now();
    let deadline = started + spec.max_duration;
    let mut senders = Vec::new();
    let concurrency = spec.concurrency.clamp(1, spec.sessions.max(1));
    for worker in 0..concurrency {
        let target = Arc::clone(&target);
        let shared = Arc::clone(&shared);
        let spec = spec.clone();
        let bar = bar.clone();
        senders.push(tokio::spawn(async move {
            for m in 0..spec.messages {
                for s in (worker..spec.sessions).step_by(concurrency) {
                    if let Some(rate) = spec.rate {
                        let slot = shared.slot.fetch_add(1, Ordering::Relaxed);
                        let due = started + Duration::from_secs_f64(slot as f64 / rate);
                        tokio::time::sleep_until(due.into()).await;
                    }
                    if Instant::now() >= deadline {
                        return;
                    }
                    let msg = message(&spec, s, m);
                    let id = msg.message_id.clone();
                    let at = Instant::now();
                    shared.sent_at.insert(id.clone(), at);
                    let outcome = target.submit(msg).await;
                    record(&shared.ack, at.elapsed());
                    match outcome {
                        Outcome::Accepted => {
                            shared.accepted.fetch_add(1, Ordering::Relaxed);
                        }
                        Outcome::Dropped(_) => {
                            shared.sent_at.remove(&id);
                            shared.dropped.fetch_add(1, Ordering::Relaxed);
                        }
                        Outcome::Error(kind) => {
                            shared.sent_at.remove(&id);
                            *shared.errors.entry(kind).or_insert(0) += 1;
                        }
                    }
                    bar.inc(1);
                }
            }
        }));
    }
    for s in senders {
        let _ = s.await;
    }
    let send_elapsed = started.elapsed();
    bar.set_message("waiting for replies");
    let drain_deadline = Instant::now() + spec.drain;
    while shared.replied.load(Ordering::Relaxed) < shared.accepted.load(Ordering::Relaxed)
        && Instant::now() < drain_deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed();
    replies.abort();
    bar.finish_and_clear();

    let ack = shared
        .ack
        .lock()
        .map(|h| Latency::of(&h))
        .unwrap_or_default();
    let turn = shared
        .turn
        .lock()
        .map(|h| Latency::of(&h))
        .unwrap_or_default();
    let accepted = shared.accepted.load(Ordering::Relaxed);
    let replied = shared.replied.load(Ordering::Relaxed);
    let turns = shared.turns.load(Ordering::Relaxed);
    let timeline = shared
        .timeline
        .lock()
        .map(|t| t.clone())
        .unwrap_or_else(|_| Timeline::new(histogram()));
    let report = Report {
        target: target.describe(),
        sessions: spec.sessions,
        messages_per_session: spec.messages,
        concurrency,
        sent: accepted
            + shared.dropped.load(Ordering::Relaxed)
            + shared.errors.iter().map(|e| *e.value()).sum::<u64>(),
        accepted,
        dropped: shared.dropped.load(Ordering::Relaxed),
        replied,
        unanswered: accepted.saturating_sub(replied),
        turns,
        errors: shared
            .errors
            .iter()
            .map(|e| (e.key().clone(), *e.value()))
            .collect(),
        send_seconds: send_elapsed.as_secs_f64(),
        total_seconds: elapsed.as_secs_f64(),
        accepted_per_second: accepted as f64 / send_elapsed.as_secs_f64().max(1e-9),
        replies_per_second: replied as f64 / elapsed.as_secs_f64().max(1e-9),
        turns_per_second: turns as f64 / elapsed.as_secs_f64().max(1e-9),
        ack_latency: ack,
        turn_latency: turn,
        rss_bytes: target.rss_bytes(),
    };
    (report, timeline)
}
