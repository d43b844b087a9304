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
    // Every message answered before the shutdown is still there (replay only adds to it).
    let mut stored = HashSet::new();
    for (key, _) in &acked {
        for e in server.transcript(key).await.unwrap_or_default() {
            if e.kind == "user" {
                stored.extend(e.message_id);
            }
        }
    }
    let lost: Vec<&String> = answered.difference(&stored).collect();
    assert!(
        lost.is_empty(),
        "answered before SIGTERM, gone after: {lost:?}"
    );
    wait_all_answered(&server, &acked).await;
}
