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
