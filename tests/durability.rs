//! Crash safety of the real binary: SIGKILL under load at random moments, several runs on one
//! data dir. After each restart every acknowledged message must be in its session's
//! transcript exactly once and answered; afterwards `turnstile doctor` must find nothing
//! undecodable or inconsistent.

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::{message, post, run_cli, session_key, transcript, ServerProcess};

/// Kill-and-restart cycles.
const RUNS: usize = 4;
/// Concurrent senders during each run.
const SENDERS: usize = 8;
/// Chats the senders write to.
const CHATS: usize = 6;

/// Group chats get the `assistant` preset with a budget no run can fill (a run acknowledges
/// thousands of messages per chat) and no window trigger, so no session is compacted and every acknowledged message
/// must be found verbatim (compaction folds old messages into a summary; `tests/it` checks
/// acknowledged messages across kills with that).
const CONFIG: &str = "[storage]\ndurability = \"strict\"\n[lanes]\nidle_timeout_ms = 2000\n\
                      [compaction]\nwindow_trigger = false\n\
                      [context]\nmax_tokens = 100000000\n\
                      [context.presets.assistant]\nmax_tokens = 100000000\n\
                      [context.chat_kinds]\ngroup = \"assistant\"\n";

/// A small deterministic generator, seeded from the clock, for the kill moments.
fn kill_delay_ms(run: usize) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    150 + (nanos
        .wrapping_mul(6364136223846793005)
        .wrapping_add(run as u64)
        >> 33)
        % 900
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_messages_survive_kill_9() {
    let data = tempfile::tempdir().unwrap();
    let conf = tempfile::tempdir().unwrap();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    // session key → message ids acknowledged, across all runs.
    let acked: Arc<Mutex<HashMap<String, HashSet<String>>>> = Arc::default();
    for run in 0..RUNS {
        let mut server = ServerProcess::start(data.path(), conf.path(), CONFIG).await;
        let url = server.url.clone();
        let mut senders = Vec::new();
        for s in 0..SENDERS {
            let (client, url, acked) = (client.clone(), url.clone(), Arc::clone(&acked));
            senders.push(tokio::spawn(async move {
                for n in 0.. {
                    let chat = format!("c{}", (s + n) % CHATS);
                    let id = format!("r{run}-s{s}-n{n}");
                    match post(&client, &url, &message(&chat, &id, &format!("hello {id}"))).await {
                        Ok(true) => {
                            acked
                                .lock()
                                .unwrap()
                                .entry(session_key(&chat))
                                .or_default()
                                .insert(id);
                        }
                        Ok(false) => {}
                        Err(_) => return,
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(kill_delay_ms(run))).await;
        server.kill9();
        for s in senders {
            let _ = s.await;
        }
        let server = ServerProcess::start(data.path(), conf.path(), CONFIG).await;
        let snapshot = acked.lock().unwrap().clone();
        check_all_answered(&client, &server.url, &snapshot).await;
        drop(server);
    }
    let total: usize = acked.lock().unwrap().values().map(HashSet::len).sum();
    println!("{total} acknowledged messages over {RUNS} SIGKILL runs, each answered exactly once");
    assert!(
        total > 50,
        "the load was too small to mean anything: {total}"
    );
    let dir = data.path().to_str().unwrap();
    let (ok, report) = run_cli(&["doctor", "--data-dir", dir]);
    assert!(ok, "doctor found problems:\n{report}");
    assert!(report.contains("problems found: 0"), "{report}");
}

/// Waits until every acknowledged message appears exactly once as a user entry and the
/// session's last entry is an answer.
async fn check_all_answered(
    client: &reqwest::Client,
    url: &str,
    acked: &HashMap<String, HashSet<String>>,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut missing = Vec::new();
        for (key, ids) in acked {
            let entries = transcript(client, url, key).await;
            let mut seen: HashMap<&str, usize> = HashMap::new();
            for e in &entries {
                if e["kind"] == "user" {
                    if let Some(id) = e["message_id"].as_str() {
                        *seen.entry(id).or_default() += 1;
                    }
                }
            }
            for (id, n) in &seen {
                assert_eq!(*n, 1, "{key}: message {id} processed {n} times");
            }
            let unanswered = entries.last().is_some_and(|e| e["kind"] != "assistant");
            let absent = ids
                .iter()
                .filter(|id| !seen.contains_key(id.as_str()))
                .count();
            if absent > 0 || unanswered {
                missing.push(format!(
                    "{key}: {absent} missing, last answered: {}",
                    !unanswered
                ));
            }
        }
        if missing.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "acknowledged messages lost or unanswered: {missing:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
