//! `turnstile loadtest`: the library driver against a test server, and the real binary against
//! the real binary, both bounded and small.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use turnstile::loadtest::{self, HttpTarget, LoadSpec};

use crate::support::{data_dir, spawn_binary, start_server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_driver_counts_every_ack_and_reply() {
    let server = start_server().await;
    let target = HttpTarget::new(&server.url(""), None, None).expect("client");
    let spec = LoadSpec {
        sessions: 6,
        messages: 5,
        concurrency: 3,
        group_mix: false,
        rate: None,
        max_duration: Duration::from_secs(60),
        drain: Duration::from_secs(30),
        progress: false,
        run_id: "it".into(),
    };
    let report = loadtest::run(Arc::new(target), spec).await;
    assert_eq!(report.sent, 30);
    assert_eq!(report.accepted, 30, "{report}");
    assert_eq!(report.replied, 30, "{report}");
    assert_eq!(report.unanswered, 0);
    assert!(report.errors.is_empty(), "{report}");
    assert_eq!(report.ack_latency.count, 30);
    assert_eq!(report.turn_latency.count, 30);
    assert!(report.turn_latency.max_ms > 0.0);
    assert!(
        (1..=30).contains(&report.turns),
        "one turn answers one or more messages: {report}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_paces_the_sends() {
    let server = start_server().await;
    let target = HttpTarget::new(&server.url(""), None, None).expect("client");
    let spec = LoadSpec {
        sessions: 4,
        messages: 5,
        concurrency: 4,
        group_mix: false,
        rate: Some(50.0),
        max_duration: Duration::from_secs(60),
        drain: Duration::from_secs(30),
        progress: false,
        run_id: "paced".into(),
    };
    let report = loadtest::run(Arc::new(target), spec).await;
    assert_eq!(report.accepted, 20, "{report}");
    assert_eq!(report.replied, 20, "{report}");
    // The last of 20 messages is due 19/50 s after the start, however fast the server is.
    assert!(report.send_seconds >= 19.0 / 50.0, "{report}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_loads_the_binary_and_prints_json() {
    let dir = data_dir();
    let server = spawn_binary(dir.path()).await;
    let url = server.api.url("");
    let pid = server.pid().to_string();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_turnstile"))
            .args(["loadtest", "--url", &url, "--sessions", "4"])
            .args(["--messages", "3", "--concurrency", "2", "--json"])
            .args(["--server-pid", &pid])
            .stdin(Stdio::null())
            .output()
    })
    .await
    .expect("the loadtest task")
    .expect("running turnstile loadtest");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("the report is JSON");
    assert_eq!(report["accepted"], 12, "{report}");
    assert_eq!(report["replied"], 12, "{report}");
    assert!(report["rss_bytes"].as_u64().unwrap_or(0) > 0, "{report}");
    for key in ["p50_ms", "p90_ms", "p99_ms", "max_ms"] {
        assert!(report["turn_latency"][key].is_number(), "{report}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_plots_latency_over_time_and_a_histogram() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let plot = dir.path().join("latency.svg");
    let path = plot.clone();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_turnstile"))
            .args(["loadtest", "--in-process", "--sessions", "4"])
            .args(["--messages", "5", "--concurrency", "2", "--json"])
            .arg("--plot")
            .arg(&path)
            .stdin(Stdio::null())
            .output()
    })
    .await
    .expect("the loadtest task")
    .expect("running turnstile loadtest");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("stdout stays the JSON report");
    assert_eq!(report["replied"], 20, "{report}");
    let svg = std::fs::read_to_string(&plot).expect("the plot was written");
    assert!(svg.starts_with("<svg"), "not an SVG");
    assert!(
        svg.contains("turn latency over time — 20 replies"),
        "{svg:.300}"
    );
    assert!(svg.contains("turn latency histogram — 20 replies"));
    assert!(svg.contains("<circle"), "a dot per reply");
}
