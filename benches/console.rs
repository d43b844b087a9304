//! The server-side cost of one refresh of the operator console's overview: `GET /v1/stats`
//! plus `GET /v1/stats/history?after_ms=<newest>` (what the page asks every 2 s), through the
//! real router — guard, handlers, JSON — in process, without a socket. The stats walk every
//! stored session, so the cost is measured at 1,000 and 10,000 sessions (100 under `CI`).
//! `history_full` is the first load of a page (the whole sample ring as it stands).

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tokio::sync::watch;
use tower::ServiceExt;
use turnstile::clock::now_ms;
use turnstile::loadtest::{self, InProcessTarget, LoadSpec};
use turnstile::server::{app_with_auth, Auth};
use turnstile::Runtime;

/// Largest response body read.
const MAX_BODY: usize = 1 << 20;

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

async fn get(app: &axum::Router, uri: &str) -> usize {
    let request = Request::get(uri).body(Body::empty()).expect("a request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::OK, "{uri}");
    axum::body::to_bytes(response.into_body(), MAX_BODY)
        .await
        .expect("a body")
        .len()
}

fn overview(c: &mut Criterion) {
    let rt = runtime();
    let sizes: &[usize] = if ci() { &[100] } else { &[1_000, 10_000] };
    let mut group = c.benchmark_group("console_overview");
    group.sample_size(if ci() { 10 } else { 50 });
    group.measurement_time(Duration::from_secs(if ci() { 1 } else { 8 }));
    for &sessions in sizes {
        let dir = tempfile::tempdir().expect("a temp dir");
        let runtime = rt
            .block_on(Runtime::builder().data_dir(dir.path()).build())
            .expect("a runtime");
        let spec = LoadSpec {
            sessions,
            messages: 1,
            concurrency: 64,
            group_mix: false,
            rate: None,
            max_duration: Duration::from_secs(600),
            drain: Duration::from_secs(120),
            progress: false,
            run_id: "console-bench".into(),
        };
        let report = rt.block_on(loadtest::run(InProcessTarget::new(runtime.clone()), spec));
        assert_eq!(report.replied as usize, sessions, "{report}");
        let (_closing_tx, closing) = watch::channel(false);
        let app = rt.block_on(async { app_with_auth(runtime.clone(), closing, Auth::none()) });
        let bytes = rt.block_on(get(&app, "/v1/stats"));
        println!("{sessions} sessions: /v1/stats is {bytes} bytes");
        group.bench_with_input(BenchmarkId::new("refresh", sessions), &sessions, |b, _| {
            b.iter(|| {
                rt.block_on(async {
                    let after = format!("/v1/stats/history?after_ms={}", now_ms());
                    get(&app, "/v1/stats").await + get(&app, &after).await
                })
            })
        });
        group.bench_with_input(
            BenchmarkId::new("history_full", sessions),
            &sessions,
            |b, _| b.iter(|| rt.block_on(get(&app, "/v1/stats/history"))),
        );
        rt.block_on(runtime.shutdown()).expect("shutdown");
    }
    group.finish();
}

criterion_group!(benches, overview);
criterion_main!(benches);
