//! Criterion benches of the turn path's plain-Rust pieces: token counting (ordinary and
//! adversarial input), context assembly over a long session, and preflight per message.
//! Sizes shrink when `CI` is set.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::hint::black_box;
use turnstile::context::{assemble, AssemblyInput, TokenBudget};
use turnstile::inbound::preflight::{DurableDedupe, MemoryOnly, Verdict};
use turnstile::inbound::{ChatKind, InboundMessage, MessageKind, Preflight, Sender, SessionKeys};
use turnstile::model::{Encoding, TokenCounter};
use turnstile::store::{EntryKind, Store, TranscriptEntry};
use turnstile::Config;

fn ci() -> bool {
    std::env::var_os("CI").is_some()
}

fn token_counting(c: &mut Criterion) {
    let counter = TokenCounter::new(Encoding::Cl100k);
    counter.warm_up();
    let kib = if ci() { 4 } else { 32 };
    let prose = "The quick brown fox jumps over the lazy dog. ".repeat(kib * 1024 / 45);
    let adversarial = "x".repeat(kib * 1024);
    let mut group = c.benchmark_group("count_tokens");
    group.bench_with_input(
        BenchmarkId::new("prose", format!("{kib}KiB")),
        &prose,
        |b, t| b.iter(|| counter.count(black_box(t))),
    );
    group.bench_with_input(
        BenchmarkId::new("no_whitespace", format!("{kib}KiB")),
        &adversarial,
        |b, t| b.iter(|| counter.count(black_box(t))),
    );
    group.finish();
}

fn assembly(c: &mut Criterion) {
    let entries = if ci() { 100 } else { 1_000 };
    let history: Vec<(u64, TranscriptEntry)> = (0..entries)
        .rev()
        .map(|i| {
            (
                i as u64 + 1,
                TranscriptEntry {
                    kind: if i % 2 == 0 {
                        EntryKind::User
                    } else {
                        EntryKind::Assistant
                    },
                    text: format!("message number {i} with a little bit of text in it"),
                    message_id: None,
                    sender: None,
                    timestamp_ms: i as u64,
                    tokens: 40,
                    tool: None,
                },
            )
        })
        .collect();
    let current = vec![("what now?".to_string(), 4)];
    c.bench_function(&format!("assemble_{entries}_entries_8k_budget"), |b| {
        b.iter(|| {
            assemble(AssemblyInput {
                system_prompt: ("You are a helpful assistant.", 7),
                history_newest_first: black_box(&history),
                older_entries_not_loaded: 0,
                current: &current,
                budget: TokenBudget::new(8_000, 128_000, 4_096),
            })
        })
    });
}

fn group_message(id: u64, mentioned: bool) -> InboundMessage {
    InboundMessage {
        channel: "telegram".into(),
        account_id: "default".into(),
        chat_kind: ChatKind::Group,
        chat_id: format!("-100{}", id % 500),
        thread_id: None,
        message_id: id.to_string(),
        sender: Sender {
            id: "111".into(),
            name: "Alice".into(),
            is_bot: false,
        },
        text: "hello there, could someone have a look at the build please".into(),
        mentions: vec![],
        mentioned_bot: mentioned,
        reply_to: None,
        timestamp_ms: 1_764_470_000_000,
        attachments: vec![],
        kind: MessageKind::Message,
    }
}

/// Key derivation, decide and (for acceptances) confirm, as `TurnBackend::admit` runs them.
fn admit_once(
    keys: &SessionKeys,
    preflight: &Preflight,
    durable: &dyn DurableDedupe,
    msg: &InboundMessage,
) -> bool {
    let key = keys.key(msg);
    match preflight.decide(msg, &key, false, 1_764_470_000_000, durable) {
        Ok(Verdict::Accept(a)) => {
            preflight.confirm(&a, 1_764_470_000_000);
            true
        }
        _ => false,
    }
}

fn preflight(c: &mut Criterion) {
    let config = Config::parse(
        "[preflight]\nbot_user_ids = [\"999\"]\nmention_patterns = [\"\\\\bturnstile\\\\b\", \"^hey bot\"]\n",
    )
    .unwrap();
    let keys = SessionKeys::new(&config.session).unwrap();
    let n = if ci() { 1_000 } else { 100_000 };
    let mentioned: Vec<InboundMessage> = (0..n).map(|i| group_message(i, true)).collect();
    let chatter: Vec<InboundMessage> = (0..n).map(|i| group_message(i, false)).collect();
    let mut group = c.benchmark_group("preflight");
    let run =
        |b: &mut criterion::Bencher<'_>, msgs: &[InboundMessage], durable: &dyn DurableDedupe| {
            let p = Preflight::new(&config).unwrap();
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) % msgs.len();
                admit_once(&keys, &p, durable, black_box(&msgs[i]))
            })
        };
    group.bench_function("accept_addressed_memory_only", |b| {
        run(b, &mentioned, &MemoryOnly)
    });
    group.bench_function("drop_no_mention_to_history", |b| {
        run(b, &chatter, &MemoryOnly)
    });
    group.bench_function("drop_duplicate", |b| {
        let p = Preflight::new(&config).unwrap();
        admit_once(&keys, &p, &MemoryOnly, &mentioned[0]);
        b.iter(|| admit_once(&keys, &p, &MemoryOnly, black_box(&mentioned[0])))
    });
    // The sled lookup made on every memory miss (the tree holds 10k keys).
    let dir = std::env::temp_dir().join(format!("turnstile-bench-{}", std::process::id()));
    let rt = tokio::runtime::Runtime::new().unwrap();
    {
        let _guard = rt.enter();
        let mut storage = config.storage.clone();
        storage.data_dir = dir.clone();
        let store = Store::open(&storage).unwrap();
        {
            for i in 0..10_000u64 {
                let _ = store.enqueue_deduped(
                    "k",
                    turnstile::store::InboxRecord {
                        message: group_message(i, true),
                        accepted_at_ms: 0,
                        system_events: vec![],
                        group_history: vec![],
                    },
                    Some(turnstile::store::DedupeMark {
                        key: &format!("seed|{i}"),
                        expires_at_ms: u64::MAX,
                        now_ms: 0,
                    }),
                );
            }
            group.bench_function("accept_addressed_with_sled_lookup", |b| {
                run(b, &mentioned, &store)
            });
            let _ = rt.block_on(store.close());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    group.finish();
}

criterion_group!(benches, token_counting, assembly, preflight);
criterion_main!(benches);
