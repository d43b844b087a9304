//! Criterion benches of the store's write path on real sled files: a turn's commit alone
//! (`commit_turn`: one transaction per turn) and through the `TurnCommitter` (concurrent turns
//! grouped into one transaction), with 1 and 32 concurrent writers, under `strict` (the writer
//! waits for the group-commit flush) and `batched` durability; and the admission write
//! (`enqueue_deduped`). Sizes shrink when `CI` is set.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use turnstile::config::{Durability, StorageConfig};
use turnstile::inbound::{ChatKind, InboundMessage, MessageKind, Sender};
use turnstile::store::{
    DedupeMark, EntryKind, InboxRecord, Store, TranscriptEntry, TurnCommit, TurnCommitter,
};

fn ci() -> bool {
    std::env::var_os("CI").is_some()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn entry(kind: EntryKind, text: &str) -> TranscriptEntry {
    TranscriptEntry::new(kind, text, 12, 1)
}

fn record(id: &str) -> InboxRecord {
    InboxRecord {
        message: InboundMessage {
            channel: "bench".into(),
            account_id: "default".into(),
            chat_kind: ChatKind::Group,
            chat_id: format!("chat-{id}"),
            thread_id: None,
            message_id: id.into(),
            sender: Sender {
                id: "u".into(),
                name: "U".into(),
                is_bot: false,
            },
            text: "the quick brown fox jumps over the lazy dog".into(),
            mentions: vec![],
            mentioned_bot: true,
            reply_to: None,
            timestamp_ms: 1,
            attachments: vec![],
            kind: MessageKind::Message,
        },
        accepted_at_ms: 1,
        system_events: vec![],
        group_history: vec![],
    }
}

fn turn(session: usize, consumed: u64) -> TurnCommit {
    TurnCommit {
        session_key: format!("agent:main:bench:group:s{session}"),
        entries: vec![
            entry(
                EntryKind::User,
                "the quick brown fox jumps over the lazy dog",
            ),
            entry(
                EntryKind::Assistant,
                "echo: the quick brown fox jumps over the lazy dog",
            ),
        ],
        consumed: vec![consumed],
        now_ms: 1_764_470_000_000,
        channel_messages: vec![],
        replica: None,
    }
}

fn open(dir: &std::path::Path, durability: Durability) -> Store {
    Store::open(&StorageConfig {
        data_dir: dir.to_path_buf(),
        durability,
        ..StorageConfig::default()
    })
    .expect("store")
}

/// `writers` tasks each commit `per_writer` turns (each after queueing its message), alone or
/// through one committer, waiting for durability as a turn does. Returns the elapsed time.
async fn commit_run(store: &Store, writers: usize, per_writer: usize, grouped: bool) -> Duration {
    let committer = TurnCommitter::start();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (store, committer) = (store.clone(), committer.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..per_writer {
                let session = w * per_writer + i;
                let Ok((item, _)) = store.enqueue(&format!("k{session}"), record("m")) else {
                    return;
                };
                let t = turn(session, item.seq);
                let done = if grouped {
                    committer.commit(&store, t).await
                } else {
                    let store = store.clone();
                    tokio::task::spawn_blocking(move || store.commit_turn(&t))
                        .await
                        .unwrap_or_else(|_| Err(turnstile::error::StoreError::Invariant("join")))
                };
                if let Ok(done) = done {
                    let _ = store.commit().wait(done.ticket).await;
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    start.elapsed()
}

fn commits(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("store_commit");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(10));
    let turns = if ci() { 64 } else { 2_048 };
    for durability in [Durability::Strict, Durability::Batched] {
        for writers in [1usize, 32] {
            for grouped in [false, true] {
                let name = format!(
                    "{}_{}",
                    match durability {
                        Durability::Strict => "strict",
                        Durability::Batched => "batched",
                    },
                    if grouped {
                        "grouped"
                    } else {
                        "one_tx_per_turn"
                    }
                );
                let per_writer = turns / writers;
                group.throughput(Throughput::Elements((per_writer * writers) as u64));
                group.bench_function(BenchmarkId::new(name, format!("{writers}_writers")), |b| {
                    b.iter_custom(|iters| {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            let Ok(dir) = tempfile::tempdir() else {
                                return total;
                            };
                            total += rt.block_on(async {
                                let store = open(dir.path(), durability);
                                let d = commit_run(&store, writers, per_writer, grouped).await;
                                let _ = store.close().await;
                                d
                            });
                        }
                        total
                    })
                });
            }
        }
    }
    group.finish();
}

fn admission(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("temp dir");
    let store = rt.block_on(async { open(dir.path(), Durability::Batched) });
    let mut n = 0u64;
    c.bench_function("store_enqueue_deduped", |b| {
        b.iter(|| {
            n += 1;
            let key = format!("dedupe-{n}");
            let mark = DedupeMark {
                key: &key,
                expires_at_ms: u64::MAX,
                now_ms: 1,
            };
            store.enqueue_deduped(&format!("k{}", n % 1000), record(&key), Some(mark))
        })
    });
    rt.block_on(async {
        let _ = store.close().await;
    });
}

criterion_group!(benches, commits, admission);
criterion_main!(benches);
