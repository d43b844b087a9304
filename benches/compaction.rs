//! Criterion benches of compaction's plain-Rust pieces: the extractive summariser and the
//! fact-retention check over a synthetic chat span of about 10,000 tokens (2,000 under `CI`).

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use turnstile::compaction::{retention, ExtractiveSummarizer};
use turnstile::model::{Encoding, TokenCounter};

fn ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// A deterministic chat span of about `tokens` tokens: ordinary talk with ids, numbers, URLs,
/// paths, mentions and code spans mixed in.
fn span(tokens: u32, counter: &TokenCounter) -> String {
    let lines = [
        "user (Alice): Can we move the release of v{a}.{b}.0 to Thursday? The build {n} failed on src/server/mod.rs again.",
        "assistant: The failure in job https://ci.example.com/jobs/{n} comes from `cargo test --lib`; commit {h} changed the timeout to {a}{b}0 ms.",
        "user (Bob): ok, makes sense. I think we talked about this last week as well, nothing new there.",
        "assistant: Noted. Ticket OPS-{n} tracks it and @carol-{b} owns the fix; logs are in /var/log/turnstile/{n}.log.",
        "user (Alice): We decided to keep the budget at {n} tokens and never deploy on Fridays. Please remind me at 10:{b}5.",
        "assistant: Sure. For the record, the dashboard at https://grafana.example.com/d/{h} shows p99 latency of {a}.{b} s.",
    ];
    let mut text = String::new();
    let mut i = 0u32;
    while counter.count(&text) < tokens {
        for _ in 0..12 {
            let line = lines[(i as usize) % lines.len()]
                .replace("{a}", &(i % 7).to_string())
                .replace("{b}", &(i % 5).to_string())
                .replace("{n}", &(4_000 + i * 37).to_string())
                .replace(
                    "{h}",
                    &format!("{:08x}", 0x9e37_79b9u32.wrapping_mul(i + 1)),
                );
            text.push_str(&line);
            text.push('\n');
            i += 1;
        }
    }
    text
}

fn compaction(c: &mut Criterion) {
    let counter = TokenCounter::new(Encoding::Cl100k);
    counter.warm_up();
    let tokens = if ci() { 2_000 } else { 10_000 };
    let text = span(tokens, &counter);
    let summarizer = ExtractiveSummarizer::new(counter);
    let mut group = c.benchmark_group("compaction");
    group.sample_size(10);
    group.bench_function(format!("extractive_{tokens}_tokens_to_1024"), |b| {
        b.iter(|| summarizer.summarize(black_box(&text), None, 1_024))
    });
    let summary =
        "## Decisions\n- Keep the budget; no Friday deploys.\n## Open TODOs\n- Fix the build.";
    group.bench_function(format!("retention_{tokens}_tokens"), |b| {
        b.iter(|| retention::enforce(&[black_box(&text)], summary, 1_024, &counter))
    });
    group.finish();
}

criterion_group!(benches, compaction);
criterion_main!(benches);
