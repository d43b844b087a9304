//! Nothing acknowledged is lost across `kill -9` (SPEC §11): the real binary is killed while
//! requests are in flight, restarted on the same data dir, and must answer every message it
//! acknowledged, in order, each exactly once.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::{data_dir, spawn_binary, wait_all_answered, Load};

/// Sessions under load, one sequential sender each.
const SENDERS: usize = 8;
/// Kill/restart cycles.
const CYCLES: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_messages_survive_kill_9() {
    let dir = data_dir();
    // Every id acknowledged so far, per session, in send order.
    let mut acked: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for cycle in 0..CYCLES {
        let mut server = spawn_binary(dir.path()).await;
        // What the previous incarnation acknowledged was replayed and answered.
        let so_far: Vec<(String, Vec<String>)> = acked.clone().into_iter().collect();
        wait_all_answered(&server, &so_far).await;

        let load = Load::start(&server, SENDERS, &format!("c{cycle}"));
        load.wait_for_acks(3 * SENDERS).await;
        // Let the load run a little longer so the kill lands among requests in flight.
        tokio::time::sleep(Duration::from_millis(300)).await;
        server.kill9();
        for (key, ids) in load.finish().await {
            acked.entry(key).or_default().extend(ids);
        }
    }

    let server = spawn_binary(dir.path()).await;
    let all: Vec<(String, Vec<String>)> = acked.into_iter().collect();
    assert_eq!(all.len(), SENDERS);
    wait_all_answered(&server, &all).await;
}

/// `POST /v1/chat/completions` waits for no flush of its own before the reply (the turn's
/// commit flush covers the inbox write): across `kill -9`, every request answered 200 has its
/// message and reply stored, and every message the restarted server finds is answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_answered_before_kill_9_are_stored() {
    let dir = data_dir();
    let mut server = spawn_binary(dir.path()).await;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut senders = Vec::new();
    for s in 0..SENDERS {
        let api = server.api.clone();
        let stop = stop_rx.clone();
        senders.push(tokio::spawn(async move {
            // Texts answered 200, in order.
            let mut answered = Vec::new();
            for n in 0.. {
                if *stop.borrow() {
                    break;
                }
                let text = format!("oa{s}-{n}");
                let body = serde_json::json!({
                    "user": format!("oakill{s}"),
                    "messages": [{"role": "user", "content": text}],
                });
                let sent = api
                    .client
                    .post(api.url("/v1/chat/completions"))
                    .json(&body)
                    .timeout(Duration::from_secs(10))
                    .send()
                    .await;
                match sent {
                    Ok(r) if r.status().is_success() => answered.push(text),
                    // The kill: no answer, or a connection reset.
                    _ => break,
                }
            }
            (format!("oakill{s}"), answered)
        }));
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    server.kill9();
    let _ = stop_tx.send(true);
    let mut answered = Vec::new();
    for sender in senders {
        answered.push(sender.await.expect("a sender task"));
    }
    assert!(
        answered.iter().any(|(_, texts)| !texts.is_empty()),
        "some requests were answered before the kill"
    );

    let server = spawn_binary(dir.path()).await;
    for (key, texts) in answered {
        let entries = crate::support::eventually(
            Duration::from_secs(30),
            "every stored message answered after the restart",
            || {
                let server = &server;
                let key = key.clone();
                async move {
                    let entries = server.transcript(&key).await.unwrap_or_default();
                    let users = entries.iter().filter(|e| e.kind == "user").count();
                    let replies = entries.iter().filter(|e| e.kind == "assistant").count();
                    if users == replies {
                        Ok(entries)
                    } else {
                        Err(format!("{users} messages, {replies} replies"))
                    }
                }
            },
        )
        .await;
        let stored: Vec<&str> = entries
            .iter()
            .filter(|e| e.kind == "user")
            .map(|e| e.text.as_str())
            .collect();
        for text in &texts {
            assert_eq!(
                stored.iter().filter(|s| **s == text.as_str()).count(),
                1,
                "{key}: the answered message {text} is stored once"
            );
        }
    }
}
