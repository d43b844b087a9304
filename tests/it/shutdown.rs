//! SIGTERM stops the real binary gracefully: exit status 0, and a restart on the same data
//! dir shows every message that was answered before and answers every one acknowledged.

use std::collections::HashSet;
use std::time::Duration;

use crate::support::{data_dir, spawn_binary, wait_all_answered, Load};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_cleanly_and_loses_nothing() {
    let dir = data_dir();
    let mut server = spawn_binary(dir.path()).await;
    let mut events = server.events(None).await;

    let load = Load::start(&server, 4, "term");
    load.wait_for_acks(20).await;
    server.sigterm();
    let status = server
        .wait_exit(Duration::from_secs(10))
        .await
        .unwrap_or_else(|| panic!("still running 10 s after SIGTERM:\n{}", server.log_text()));
    assert!(
        status.success(),
        "exit status {status}:\n{}",
        server.log_text()
    );
    // Its stderr went to a file: plain lines, no terminal colour codes.
    let log = server.log_text();
    assert!(log.contains("INFO"), "{log}");
    assert!(
        !log.contains('\x1b'),
        "ANSI codes in a log written to a file:\n{log}"
    );
    let acked = load.finish().await;

    // The server ends the event stream when it shuts down; every reply sent before is here.
    let answered: HashSet<String> = events
        .rest()
        .await
        .iter()
        .filter(|e| e.event.as_deref() == Some("reply"))
        .flat_map(|e| {
            let data = e.json();
            data["in_reply_to"]
                .as_array()
                .expect("in_reply_to")
                .iter()
                .map(|id| id.as_str().expect("an id").to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(!answered.is_empty(), "no reply before shutdown");

    let server = spawn_binary(dir.path()).await;
    // Every message answered before the shutdown is still there (replay only adds to it), or,
    // in a transcript that starts with a compaction summary, folded into it: the oldest
    // acknowledged ones before the first still stored (as `all_answered` accepts).
    let mut stored = HashSet::new();
    for (key, ids) in &acked {
        let entries = server.transcript(key).await.unwrap_or_default();
        let users: HashSet<String> = entries
            .iter()
            .filter(|e| e.kind == "user")
            .filter_map(|e| e.message_id.clone())
            .collect();
        if entries.first().is_some_and(|e| e.kind == "summary") {
            stored.extend(ids.iter().take_while(|id| !users.contains(*id)).cloned());
        }
        stored.extend(users);
    }
    let lost: Vec<&String> = answered.difference(&stored).collect();
    assert!(
        lost.is_empty(),
        "answered before SIGTERM, gone after: {lost:?}"
    );
    wait_all_answered(&server, &acked).await;
}

/// A drain finishes the work it has (issue 44): SIGTERM while turns run on a slow model
/// (a test double holding its answers until released) — `/readyz` and new messages get `503`,
/// every running turn's client gets its answer, the process exits 0, and after a restart
/// each session holds exactly one reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_running_turns_to_their_clients() {
    use crate::fake_model::{Behaviour, FakeModel};
    use crate::support::{eventually, ServerProcess, PATIENCE};
    const CLIENTS: usize = 8;
    let fake = FakeModel::start(Behaviour {
        held: true,
        ..Behaviour::default()
    })
    .await;
    let dir = data_dir();
    let config_dir = tempfile::tempdir().expect("a config dir");
    let config = format!(
        "[model]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"slow\"\n\
         api_key_env = \"TURNSTILE_TEST_UNSET_KEY\"\n[server]\nshutdown_grace_ms = 30000\n",
        fake.base_url
    );
    let mut server = ServerProcess::start(dir.path(), config_dir.path(), &config).await;
    let http = reqwest::Client::new();
    let mut clients = tokio::task::JoinSet::new();
    for i in 0..CLIENTS {
        let http = http.clone();
        let url = format!("{}/v1/chat/completions", server.url);
        clients.spawn(async move {
            let r = http
                .post(url)
                .header("X-Session-Key", format!("drain-{i}"))
                .json(&serde_json::json!({
                    "model": "slow",
                    "messages": [{"role": "user", "content": format!("question {i}")}],
                }))
                .send()
                .await
                .expect("an answer, not a dropped connection");
            let status = r.status();
            let body: serde_json::Value = r.json().await.expect("a JSON answer");
            (i, status, body)
        });
    }
    eventually(PATIENCE, "every turn at the model", || {
        let arrived = fake.arrived();
        async move {
            if arrived >= CLIENTS {
                Ok(())
            } else {
                Err(format!("{arrived} of {CLIENTS} at the model"))
            }
        }
    })
    .await;
    server.sigterm();

    // While the turns run: not ready (once the signal is handled), and new messages are
    // refused with a retry hint.
    eventually(PATIENCE, "/readyz to answer 503 after SIGTERM", || {
        let ready = http.get(format!("{}/readyz", server.url)).send();
        async move {
            let status = ready.await.map_err(|e| e.to_string())?.status();
            if status == reqwest::StatusCode::SERVICE_UNAVAILABLE {
                Ok(())
            } else {
                Err(format!("/readyz answered {status}"))
            }
        }
    })
    .await;
    let refused = http
        .post(format!("{}/v1/messages", server.url))
        .json(&crate::support::Msg::group("drain-chat", "late-1", "too late").json())
        .send()
        .await
        .expect("a new message is answered during the drain");
    assert_eq!(refused.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused.headers().contains_key("retry-after"));

    fake.release();
    while let Some(done) = clients.join_next().await {
        let (i, status, body) = done.expect("a client task");
        assert_eq!(status, reqwest::StatusCode::OK, "client {i}: {body}");
        assert!(
            body["choices"][0]["message"]["content"]
                .as_str()
                .is_some_and(|c| !c.is_empty()),
            "client {i}: {body}"
        );
    }
    let status = server
        .wait_exit(Duration::from_secs(40))
        .await
        .unwrap_or_else(|| panic!("still running after the drain:\n{}", server.log_text()));
    assert!(status.success(), "exit {status}:\n{}", server.log_text());

    // Nothing runs twice: a restart replays no finished turn.
    let mut again = ServerProcess::start(dir.path(), config_dir.path(), &config).await;
    for i in 0..CLIENTS {
        let entries = again
            .api
            .transcript(&format!("drain-{i}"))
            .await
            .unwrap_or_default();
        let replies = entries.iter().filter(|e| e.kind == "assistant").count();
        assert_eq!(replies, 1, "drain-{i}: {entries:?}");
    }
    again.stop().await;
}
