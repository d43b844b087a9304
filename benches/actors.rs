//! Criterion benches of the actor skeleton with an instant in-memory backend: messages/s
//! through the supervisor to live lanes (1k and 100k sessions) and to mostly passivated
//! sessions (re-spawn and passivation), and the cost of spawning a lane.
//! Sizes shrink when `CI` is set.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use turnstile_actors::{
    Backend, BackendError, LaneSettings, QueueItem, QueueMode, QueuePolicy, SessionKey,
    SupervisorHandle, TurnBatch, TurnControl, TurnError, TurnFailure, TurnReport,
};

fn ci() -> bool {
    std::env::var_os("CI").is_some()
}

#[derive(Clone)]
struct Item(u64);

impl QueueItem for Item {
    fn seq(&self) -> u64 {
        self.0
    }
}

/// Admits everything, runs every turn instantly, counts completions.
struct Instant0 {
    settings: LaneSettings,
    seq: AtomicU64,
    done: AtomicU64,
}

impl Backend for Instant0 {
    type Event = SessionKey;
    type Item = Item;
    type Accepted = ();
    type Refused = ();

    fn lane_settings(&self) -> &LaneSettings {
        &self.settings
    }

    fn admit(&self, key: SessionKey) -> Result<(SessionKey, Item, ()), ()> {
        Ok((key, Item(self.seq.fetch_add(1, Ordering::Relaxed) + 1), ()))
    }

    fn refuse_shutting_down(&self) {}

    /// Nothing is durable here: every item reaches its lane by `Enqueue`.
    async fn pending(&self, _: &SessionKey, _: u64, _: usize) -> Result<Vec<Item>, BackendError> {
        Ok(Vec::new())
    }

    fn queue_policy(&self, _: &Item) -> QueuePolicy {
        QueuePolicy {
            mode: QueueMode::Followup,
            debounce: Duration::ZERO,
            ..QueuePolicy::default()
        }
    }

    async fn run_turn(
        &self,
        _: SessionKey,
        batch: TurnBatch<Item>,
        _: TurnControl<Item>,
    ) -> Result<TurnReport, TurnError> {
        self.done
            .fetch_add(batch.all_items().count() as u64, Ordering::Relaxed);
        Ok(TurnReport::default())
    }

    async fn abandon_turn(&self, _: SessionKey, _: TurnBatch<Item>, _: TurnFailure) {}
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A supervisor over the instant backend, keeping at most `max_live_lanes` lanes.
async fn supervisor(max_live_lanes: usize) -> (SupervisorHandle<Instant0>, Arc<Instant0>) {
    let backend = Arc::new(Instant0 {
        settings: LaneSettings {
            max_live_lanes,
            ..LaneSettings::default()
        },
        seq: AtomicU64::new(0),
        done: AtomicU64::new(0),
    });
    let (h, _) = SupervisorHandle::start(Arc::clone(&backend))
        .await
        .expect("supervisor");
    (h, backend)
}

/// Sends `messages` spread over `keys` from `concurrency` tasks; returns when all ran.
async fn send(
    h: &SupervisorHandle<Instant0>,
    backend: &Instant0,
    keys: &Arc<Vec<SessionKey>>,
    messages: u64,
    concurrency: u64,
) -> Duration {
    let target = backend.done.load(Ordering::Relaxed) + messages;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..concurrency {
        let h = h.clone();
        let keys = Arc::clone(keys);
        tasks.push(tokio::spawn(async move {
            let mut i = t;
            while i < messages {
                let key = keys[(i as usize) % keys.len()].clone();
                let _ = h.submit(key).await;
                i += concurrency;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    while backend.done.load(Ordering::Relaxed) < target {
        tokio::task::yield_now().await;
    }
    start.elapsed()
}

/// One timed run: `messages` over `keys`. With `warm`, every key first gets a message
/// (untimed), so the timed messages reach live lanes; `max_live_lanes` below the key count
/// makes most timed messages re-spawn a passivated lane.
async fn run(
    keys: &Arc<Vec<SessionKey>>,
    messages: u64,
    max_live_lanes: usize,
    warm: bool,
) -> Duration {
    let (h, backend) = supervisor(max_live_lanes).await;
    if warm {
        send(&h, &backend, keys, keys.len() as u64, 64).await;
    }
    let elapsed = send(&h, &backend, keys, messages, 64).await;
    h.shutdown(Duration::from_secs(60)).await;
    elapsed
}

fn keys(n: usize) -> Arc<Vec<SessionKey>> {
    Arc::new(
        (0..n)
            .map(|i| format!("agent:main:bench:direct:{i}").into())
            .collect(),
    )
}

/// Messages/s to live lanes with 1k and 100k sessions (the routing path: DashMap lookup,
/// recency, mailbox), and to 100k sessions of which at most 10k are live (the default
/// `max_live_lanes`: most messages re-spawn a passivated lane and passivate another).
fn routing(c: &mut Criterion) {
    let rt = runtime();
    let messages: u64 = if ci() { 2_000 } else { 50_000 };
    let large = if ci() { 2_000 } else { 100_000 };
    let mut group = c.benchmark_group("supervisor_routing");
    // One iteration is a whole run (seconds); ten of them make the sample.
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(20));
    group.throughput(Throughput::Elements(messages));
    for (name, sessions, max_live, warm) in [
        ("live_lanes", 1_000usize, 1_001usize, true),
        ("live_lanes", large, large + 1, true),
        ("passivated_10k_live", large, large / 10, true),
    ] {
        let keys = keys(sessions);
        group.bench_with_input(BenchmarkId::new(name, sessions), &keys, |b, keys| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += rt.block_on(run(keys, messages, max_live, warm));
                }
                total
            })
        });
    }
    group.finish();
}

fn lane_spawn(c: &mut Criterion) {
    let rt = runtime();
    let lanes: u64 = if ci() { 500 } else { 10_000 };
    let keys = keys(lanes as usize);
    let mut group = c.benchmark_group("lane_spawn");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(lanes));
    group.bench_function(BenchmarkId::new("first_message_to_new_keys", lanes), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                // One message per key: every message spawns its lane.
                total += rt.block_on(run(&keys, lanes, lanes as usize + 1, false));
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, routing, lane_spawn);
criterion_main!(benches);
