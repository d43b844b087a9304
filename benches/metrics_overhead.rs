//! What observability costs per turn: the metric calls one turn makes (inbound counter, the
//! turn timer's phases, histograms, span fields), without a recorder and with the Prometheus
//! recorder, next to a whole echo turn (submit, assemble, model, commit, reply) for scale.
//! Sizes shrink when `CI` is set.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use tracing::Instrument;
use turnstile::config::Durability;
use turnstile::inbound::{ChatKind, InboundMessage, Sender};
use turnstile::metrics::{self, TurnTimer};
use turnstile::{Config, Runtime};

fn ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// The metric calls of one turn, as the turn path makes them.
fn one_turn_of_metrics() {
    metrics::inbound_accepted("api");
    let span = metrics::turn_span("agent:main:bench", 1);
    let _entered = span.enter();
    let mut t = TurnTimer::start(1_000, 1_002);
    t.assembled("agent:main:bench", 1_200, 27_904);
    t.model_done();
    t.finished(40);
}

fn turn_metrics(c: &mut Criterion) {
    let mut group = c.benchmark_group("turn_metrics");
    if ci() {
        group.measurement_time(Duration::from_secs(1));
    }
    group.bench_function("no_recorder", |b| b.iter(one_turn_of_metrics));
    metrics::install_prometheus();
    group.bench_function("prometheus", |b| b.iter(one_turn_of_metrics));
    group.finish();
}

fn echo_turn(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = Config::with_data_dir(dir.path());
    // Flushes would dominate; this measures the turn path itself.
    config.storage.durability = Durability::Batched;
    let runtime = rt
        .block_on(Runtime::builder().config(config).build())
        .expect("runtime");
    let mut n = 0u64;
    let mut group = c.benchmark_group("echo_turn");
    group.sample_size(if ci() { 10 } else { 50 });
    group.bench_function("submit_to_reply", |b| {
        b.iter(|| {
            n += 1;
            let message = InboundMessage {
                channel: "bench".into(),
                account_id: "default".into(),
                chat_kind: ChatKind::Group,
                chat_id: format!("c{}", n % 64),
                thread_id: None,
                message_id: format!("m{n}"),
                sender: Sender {
                    id: "u".into(),
                    name: "U".into(),
                    is_bot: false,
                },
                text: "hello there, how are you today?".into(),
                mentions: vec![],
                mentioned_bot: true,
                reply_to: None,
                timestamp_ms: 0,
                attachments: vec![],
                kind: turnstile::inbound::MessageKind::Message,
            };
            rt.block_on(
                async {
                    let mut waiter = runtime.reply_to(&message.message_id);
                    let _ = runtime.submit(message.clone()).await;
                    waiter.recv().await
                }
                .in_current_span(),
            )
        })
    });
    group.finish();
    let _ = rt.block_on(runtime.shutdown());
}

criterion_group!(benches, turn_metrics, echo_turn);
criterion_main!(benches);
