//! Criterion benches of the turn path's plain-Rust pieces: token counting (ordinary and
//! adversarial input) and context assembly over a long session. Sizes shrink when `CI` is set.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::hint::black_box;
use turnstile::context::{assemble, AssemblyInput, TokenBudget};
use turnstile::model::{Encoding, TokenCounter};
use turnstile::store::{EntryKind, TranscriptEntry};

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

criterion_group!(benches, token_counting, assembly);
criterion_main!(benches);
