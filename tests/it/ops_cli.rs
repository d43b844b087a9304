//! The operator surface: metrics after a turn, `DELETE` (409 mid-turn), manual compaction, and the CLI against a server (`--url`) and a data dir (`--data-dir`).

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use turnstile::Runtime;

use crate::support::{
    channel_message, config, env_var, eventually_some, GateModel, SharedGate, TestServer,
};

const KEY: &str = "operator-key";

fn cli(args: &[&str], key_env: &str) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(args)
        .args(["--api-key-env", key_env])
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_of(out: &(bool, String, String)) -> Value {
    assert!(out.0, "command failed: {}", out.2);
    serde_json::from_str(&out.1).unwrap_or_else(|e| panic!("{e}: {}", out.1))
}

async fn transcript_len(url: &str, key: &str) -> usize {
    let r = reqwest::Client::new()
        .get(format!("{url}/v1/sessions/{key}/transcript"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    if r.status() != StatusCode::OK {
        return 0;
    }
    r.json::<Value>().await.unwrap().as_array().unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_commands_against_a_server_and_a_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let key_env = env_var(KEY);
    let mut c = config(dir.path());
    c.server.api_key_env = key_env.clone();
    // A tiny budget: the long message below fills more than 90% of it.
    c.context.max_tokens = 300;
    let server = TestServer::with_config(c).await;
    let url = server.base.clone();
    let http = reqwest::Client::new();
    for (chat, id, text) in [
        ("a", "1", "hello".to_string()),
        ("b", "2", "word ".repeat(275)),
    ] {
        let r = http
            .post(format!("{url}/v1/messages"))
            .bearer_auth(KEY)
            .json(&channel_message("webhook", chat, id, &text))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::ACCEPTED);
    }
    for key in [
        "agent%3Amain%3Awebhook%3Agroup%3Aa",
        "agent%3Amain%3Awebhook%3Agroup%3Ab",
    ] {
        let url = url.clone();
        eventually_some(Duration::from_secs(10), "a turn", move || {
            let url = url.clone();
            async move { (transcript_len(&url, key).await == 2).then_some(()) }
        })
        .await;
    }

    // The turn's metrics are recorded just after its commit becomes visible: poll.
    let needles = [
        "turnstile_inbound_accepted_total{channel=\"api\"}",
        "turnstile_turns_total{outcome=\"ok\"}",
        "turnstile_turn_phase_seconds_bucket{phase=\"model\"",
        "turnstile_turn_phase_seconds_bucket{phase=\"queue_wait\"",
        "turnstile_turn_prompt_tokens_bucket",
        "turnstile_context_budget_ratio_bucket",
        "turnstile_context_budget_warnings_total",
        "turnstile_live_lanes",
        "turnstile_inbox_depth",
        "turnstile_disk_bytes",
        "turnstile_sessions",
    ];
    let mut last = String::new();
    for _ in 0..100 {
        last = http
            .get(format!("{url}/metrics"))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if needles.iter().all(|n| last.contains(n)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for needle in needles {
        assert!(last.contains(needle), "{needle} missing:\n{last}");
    }

    let listed = json_of(&cli(
        &["sessions", "list", "--url", &url, "--json"],
        &key_env,
    ));
    assert_eq!(listed.as_array().unwrap().len(), 2);
    let (ok, table, _) = cli(&["sessions", "list", "--url", &url], &key_env);
    assert!(
        ok && table.starts_with("SESSION") && table.contains("agent:main:webhook:group:a"),
        "{table}"
    );

    let stats = json_of(&cli(&["stats", "--url", &url, "--json"], &key_env));
    assert_eq!(stats["sessions"], 2);
    assert!(stats["turns"].as_u64().unwrap() >= 2);
    assert!(stats["max_context_tokens"].as_u64().unwrap() > 200);
    assert!(stats["disk_bytes"].as_u64().unwrap() > 0);
    let (ok, human, _) = cli(&["stats", "--url", &url], &key_env);
    assert!(ok && human.contains("disk use"), "{human}");

    let shown = json_of(&cli(
        &[
            "sessions",
            "show",
            "agent:main:webhook:group:a",
            "--url",
            &url,
            "--json",
        ],
        &key_env,
    ));
    assert_eq!(shown["entries"], 2);
    let dump = json_of(&cli(
        &[
            "sessions",
            "dump",
            "agent:main:webhook:group:a",
            "--url",
            &url,
            "--json",
        ],
        &key_env,
    ));
    assert!(!dump["blocks"].as_array().unwrap().is_empty());
    let (ok, human, _) = cli(
        &[
            "sessions",
            "dump",
            "agent:main:webhook:group:a",
            "--url",
            &url,
        ],
        &key_env,
    );
    assert!(ok && human.contains("kept blocks"), "{human}");

    let (ok, human, err) = cli(
        &[
            "sessions",
            "compact",
            "agent:main:webhook:group:a",
            "--url",
            &url,
        ],
        &key_env,
    );
    assert!(
        ok && human.contains("compacted") && human.contains("tokens"),
        "{human} {err}"
    );
    let (ok, _, err) = cli(&["sessions", "show", "nope", "--url", &url], &key_env);
    assert!(!ok && err.contains("404"), "{err}");
    let (ok, _, err) = cli(
        &["sessions", "list", "--url", &url],
        "TURNSTILE_IT_SURELY_UNSET",
    );
    assert!(!ok && err.contains("401"), "without the key: {err}");

    let removed = json_of(&cli(
        &[
            "sessions",
            "rm",
            "agent:main:webhook:group:b",
            "--url",
            &url,
            "--json",
        ],
        &key_env,
    ));
    assert_eq!(removed["entries"], 2);
    server.stop().await;

    // No server now: the same commands on the data dir.
    let data_dir = dir.path().to_str().unwrap();
    let stats = json_of(&cli(&["stats", "--data-dir", data_dir, "--json"], &key_env));
    assert_eq!(stats["sessions"], 1);
    assert!(stats["turns"].is_null(), "no process figures offline");
    let (ok, table, err) = cli(&["sessions", "list", "--data-dir", data_dir], &key_env);
    assert!(ok, "{err}");
    assert!(table.contains("agent:main:webhook:group:a") && !table.contains("group:b"));
    let removed = json_of(&cli(
        &[
            "sessions",
            "rm",
            "agent:main:webhook:group:a",
            "--data-dir",
            data_dir,
            "--json",
        ],
        &key_env,
    ));
    assert_eq!(removed["entries"], 2);
    let (ok, table, _) = cli(&["sessions", "list", "--data-dir", data_dir], &key_env);
    assert!(ok && table.contains("no sessions"), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_is_refused_while_a_turn_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.server.api_key_env = "TURNSTILE_IT_SURELY_UNSET".into();
    let gate = Arc::new(GateModel::default());
    let runtime = Runtime::builder()
        .config(c)
        .model(Arc::new(SharedGate(Arc::clone(&gate))))
        .build()
        .await
        .unwrap();
    let server = TestServer::serve(runtime, None).await;
    let http = reqwest::Client::new();
    let session = format!(
        "{}/v1/sessions/agent%3Amain%3Awebhook%3Agroup%3Ag",
        server.base
    );
    let entered = gate.entered.notified();
    let r = http
        .post(format!("{}/v1/messages", server.base))
        .json(&channel_message("webhook", "g", "1", "hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    tokio::time::timeout(Duration::from_secs(5), entered)
        .await
        .unwrap();
    let busy = http.delete(&session).send().await.unwrap();
    assert_eq!(busy.status(), StatusCode::CONFLICT);
    assert!(busy.headers().contains_key("retry-after"));
    gate.release.notify_one();
    let url = server.base.clone();
    eventually_some(Duration::from_secs(10), "the turn to finish", || {
        let url = url.clone();
        async move {
            let r = reqwest::get(format!(
                "{url}/v1/sessions/agent%3Amain%3Awebhook%3Agroup%3Ag/transcript"
            ))
            .await
            .ok()?;
            let v: Value = r.json().await.ok()?;
            (v.as_array()?.len() == 2).then_some(())
        }
    })
    .await;
    let deleted = eventually_some(Duration::from_secs(5), "the delete", || {
        let (http, session) = (http.clone(), session.clone());
        async move {
            let r = http.delete(&session).send().await.ok()?;
            (r.status() == StatusCode::OK).then_some(r)
        }
    })
    .await;
    let body: Value = deleted.json().await.unwrap();
    assert_eq!(body["entries"], 2);
    assert_eq!(
        http.get(&session).send().await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        http.delete(&session).send().await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    let compact = http
        .post(format!("{session}/compact"))
        .send()
        .await
        .unwrap();
    assert_eq!(compact.status(), StatusCode::NOT_FOUND);
    server.stop().await;
}
