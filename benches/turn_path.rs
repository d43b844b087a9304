//! Criterion benches of the turn path's plain-Rust pieces: token counting (ordinary and
//! adversarial input) and context assembly of a long session through the whole pipeline
//! (sources, processors, rendering) with stored token counts, and preflight per message.
//! Sizes shrink when `CI` is set.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::hint::black_box;
use turnstile::context::{
    AssemblyRequest, ContextEngine, CurrentMessage, MemoryStore, PresetConfig, Registry,
};
use turnstile::inbound::preflight::{DurableDedupe, MemoryOnly, Verdict};
use turnstile::inbound::{ChatKind, InboundMessage, MessageKind, Preflight, Sender, SessionKeys};
use turnstile::model::{Encoding, TokenCounter};
use turnstile::store::{InboxRecord, Store, TranscriptEntry};
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
    let spaces = " ".repeat(kib * 1024);
    let mut group = c.benchmark_group("count_tokens");
    for (name, text) in [
        ("prose", &prose),
        ("no_whitespace", &adversarial),
        ("all_whitespace", &spaces),
    ] {
        group.bench_with_input(BenchmarkId::new(name, format!("{kib}KiB")), text, |b, t| {
            b.iter(|| counter.count(black_box(t)))
        });
    }
    group.finish();
}

const NOW: u64 = 1_764_470_000_000;

fn session(entries: u64) -> MemoryStore {
    let mut store = MemoryStore::new();
    for i in 0..entries {
        store.push_entry(1, {
            let text = format!("message number {i} with a little bit of text in it");
            // All within the last 30 minutes: TTL keeps everything.
            let at = NOW - (entries - i) * 1_000;
            if i % 2 == 0 {
                TranscriptEntry::user(text, 40, at).with_message_id(format!("m{i}"))
            } else {
                TranscriptEntry::assistant(text, 40, at)
            }
        });
    }
    store
}

fn engine(max_messages: usize, cache: usize) -> ContextEngine {
    let mut config = Config::default();
    config.context.cache_max_sessions = cache;
    config.context.presets.insert(
        "assistant".into(),
        PresetConfig {
            max_messages: Some(max_messages),
            max_tokens: Some(8_000),
            ttl: None,
        },
    );
    ContextEngine::new(
        &config,
        &Registry::builtin(),
        TokenCounter::new(Encoding::Cl100k),
    )
    .expect("the bench config is valid")
}

fn assembly(c: &mut Criterion) {
    TokenCounter::new(Encoding::Cl100k).warm_up();
    let entries = if ci() { 100 } else { 1_000 };
    let store = session(entries);
    let current = [CurrentMessage {
        inbox_seq: 1,
        record: Arc::new(InboxRecord {
            message: InboundMessage {
                channel: "bench".into(),
                account_id: "default".into(),
                chat_kind: ChatKind::Direct,
                chat_id: "c".into(),
                thread_id: None,
                message_id: "now".into(),
                sender: Sender {
                    id: "u".into(),
                    name: "U".into(),
                    is_bot: false,
                },
                text: "what now?".into(),
                mentions: vec![],
                mentioned_bot: false,
                reply_to: None,
                timestamp_ms: NOW,
                attachments: vec![],
                kind: turnstile::inbound::MessageKind::Message,
            },
            accepted_at_ms: NOW,
            system_events: vec![],
            group_history: vec![],
        }),
        tokens: 4,
    }];
    let request = AssemblyRequest {
        session_key: "agent:main:main",
        stored: store.stored(1),
        current: &current,
        queue: Default::default(),
        now_ms: NOW,
    };
    // The budget binds (about 180 of the entries fit 8k tokens) / the 100-message limit binds.
    for (name, max_messages) in [("budget_bound", 10_000), ("message_limit_100", 100)] {
        let engine = engine(max_messages, 0);
        c.bench_function(
            &format!("assemble_{entries}_entries_8k_budget/{name}"),
            |b| {
                b.iter(|| {
                    engine
                        .assemble(&store, black_box(request.clone()))
                        .map(|a| a.budget.used)
                })
            },
        );
    }
    // What a turn does: assemble, then render the messages it sends.
    let engine_render = engine(10_000, 0);
    c.bench_function(
        &format!("assemble_{entries}_entries_8k_budget/budget_bound_with_messages"),
        |b| {
            b.iter(|| {
                engine_render
                    .assemble(&store, black_box(request.clone()))
                    .map(|a| a.messages().len())
            })
        },
    );
    let cached = engine(10_000, 16);
    c.bench_function(
        &format!("assemble_{entries}_entries_8k_budget/cache_hit"),
        |b| {
            b.iter(|| {
                cached
                    .assemble(&store, black_box(request.clone()))
                    .map(|a| a.budget.used)
            })
        },
    );
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
    let _key = std::hint::black_box(keys.key(msg));
    match preflight.decide(
        msg,
        false,
        1_764_470_000_000,
        durable,
        turnstile::inbound::IdOrigin::Given,
    ) {
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
