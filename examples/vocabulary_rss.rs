//! Prints the resident memory one tokenizer vocabulary adds to a process, for BENCHMARKS.md
//! (the idle-memory target counts the vocabulary in use separately).
//!
//! `cargo run --release --example vocabulary_rss`

use turnstile::loadtest::rss_of;
use turnstile::model::{Encoding, TokenCounter};

fn main() {
    let pid = std::process::id();
    let mib = |b: Option<u64>| b.map_or(f64::NAN, |b| b as f64 / (1024.0 * 1024.0));
    let before = rss_of(pid);
    let counter = TokenCounter::new(Encoding::Cl100k);
    let started = std::time::Instant::now();
    counter.warm_up();
    let loaded_in = started.elapsed();
    let after = rss_of(pid);
    println!(
        "cl100k_base: RSS {:.1} MiB before, {:.1} MiB after loading (+{:.1} MiB) in {:.0} ms",
        mib(before),
        mib(after),
        mib(after) - mib(before),
        loaded_in.as_secs_f64() * 1e3
    );
    let o200k = TokenCounter::new(Encoding::O200k);
    let started = std::time::Instant::now();
    o200k.warm_up();
    let loaded_in = started.elapsed();
    let both = rss_of(pid);
    println!(
        "o200k_base: +{:.1} MiB more in {:.0} ms (only the vocabulary of the configured model is loaded)",
        mib(both) - mib(after),
        loaded_in.as_secs_f64() * 1e3
    );
}
