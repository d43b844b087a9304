//! Heap bytes per live lane and per passivated session, measured with a counting allocator
//! around the real runtime (echo model, sled in a temporary dir): sessions are loaded through
//! `turnstile::loadtest` in process, then the live heap is read with their lanes live and
//! again after every lane passivated. Prints one line per figure (not a Criterion bench:
//! the figures are bytes, not time). Sizes shrink when `CI` is set; CI only compiles it.
//!
//! `cargo bench --bench memory`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use turnstile::loadtest::{self, InProcessTarget, LoadSpec};
use turnstile::{Config, Runtime};

/// The system allocator, counting live bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards every call to `System` unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn spec(sessions: usize, run_id: &str) -> LoadSpec {
    LoadSpec {
        sessions,
        messages: 1,
        concurrency: 64,
        group_mix: false,
        rate: None,
        max_duration: Duration::from_secs(300),
        drain: Duration::from_secs(60),
        progress: false,
        run_id: run_id.into(),
    }
}

/// Waits until no lane is live (they passivate after `idle_timeout_ms`).
async fn all_passivated(runtime: &Runtime) {
    for _ in 0..600 {
        if runtime.live_lanes() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn measure(sessions: usize) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut config = Config::default();
    config.storage.data_dir = dir.path().to_path_buf();
    config.storage.durability = turnstile::config::Durability::Batched;
    config.lanes.max_live_lanes = sessions * 3;
    config.lanes.idle_timeout_ms = 3_000;
    config.server.events_buffer = 1 << 16;
    let runtime = Runtime::builder().config(config).build().await?;
    let target = InProcessTarget::new(runtime.clone());
    // Warm-up: vocabulary, caches, first sled pages.
    loadtest::run(target.clone(), spec(200, "warm")).await;
    all_passivated(&runtime).await;
    let base = live();

    let report = loadtest::run(target.clone(), spec(sessions, "a")).await;
    let lanes = runtime.live_lanes();
    let with_lanes = live();
    all_passivated(&runtime).await;
    let passivated = live();
    // A second batch of new sessions: the marginal cost of one more passivated session, with
    // sled's page cache already warm.
    loadtest::run(target.clone(), spec(sessions, "b")).await;
    all_passivated(&runtime).await;
    let passivated_twice = live();

    let per = |bytes: isize, n: usize| bytes as f64 / n.max(1) as f64;
    println!(
        "sessions {sessions}: {} replied, {lanes} lanes live after the load",
        report.replied
    );
    println!(
        "heap per live session (lane and everything else the turn left): {:.0} B",
        per(with_lanes - base, lanes)
    );
    println!(
        "heap per passivated session: {:.0} B (first {sessions}); {:.0} B (next {sessions})",
        per(passivated - base, sessions),
        per(passivated_twice - passivated, sessions)
    );
    runtime.shutdown().await?;
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `cargo bench` passes `--bench`; nothing to parse.
    let sessions = if std::env::var_os("CI").is_some() {
        500
    } else {
        10_000
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(measure(sessions))
}
