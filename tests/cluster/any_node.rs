//! The whole API on any node for sessions another node owns: with `replicas = 2` each node
//! stores only its share of the sessions yet serves every one (reads forwarded) and answers
//! a chat completion for a partition it does not keep; a delete asked of a node that does not
//! own the session reaches every node through the changelog, and a streaming chat
//! completion sent to such a node hears the owner's deltas while the model still writes.

use reqwest::StatusCode;
use serde_json::json;
use std::collections::BTreeSet;

use turnstile::cluster::partition_of;
use turnstile::cluster::placement::replica_set;

use super::fake_streaming_model::{FakeStreamingModel, Script, FAKE_MODEL};
use super::nats::NatsCluster;
use super::serve::{holders, leases, wait_balanced, Nodes, PARTITIONS, SERIAL};
use super::support::{eventually, group_key, wait_all_answered_within, Msg, SseEvent, PATIENCE};

/// Lease of these tests: nothing fails in them, so only the start-up waits on it.
const LEASE_MS: u64 = 2_000;

/// Patience for a cluster to settle and its answers to reach every node.
fn patience() -> std::time::Duration {
    PATIENCE + std::time::Duration::from_millis(3 * LEASE_MS)
}

/// The index (0-based) of the node that owns `key`'s partition now.
async fn owner_of(nats: &NatsCluster, key: &str) -> usize {
    let kv = leases(nats).await;
    let owner_id = holders(&kv).await[&partition_of(key, PARTITIONS)].clone();
    owner_id[1..].parse::<usize>().expect("a node id n<i>") - 1
}

/// How many sessions each node stores (`/v1/stats`).
async fn stored(nodes: &Nodes) -> Vec<u64> {
    let mut counts = Vec::new();
    for i in 0..3 {
        let (status, body) = nodes.node(i).api.get("/v1/stats").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        counts.push(body["sessions"].as_u64().expect("a session count"));
    }
    counts
}

/// Three nodes with `replicas = 2`: every session is stored on exactly two of them (each
/// node holding about two thirds), yet every node serves every session with the same
/// transcript; a chat completion sent to the one node that keeps none of its session gets
/// its answer, and that node still stores nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_keeps_its_share_of_the_sessions_and_serves_them_all() {
    const SESSIONS: usize = 30;
    let _serial = SERIAL.lock().await;
    let Some(nats) = NatsCluster::start().await else {
        return;
    };
    let mut nodes = Nodes::start(&nats, 3, LEASE_MS, "replicas = 2\n").await;
    wait_balanced(&nats, &["n1", "n2", "n3"], patience()).await;

    let mut sent = Vec::new();
    for i in 0..SESSIONS {
        let (chat, id) = (format!("share-{i}"), format!("s-{i}"));
        let key = nodes
            .node(i % 3)
            .api
            .send(&Msg::group(&chat, &id, "hello"))
            .await;
        sent.push((key, vec![id]));
    }
    for i in 0..3 {
        wait_all_answered_within(&nodes.node(i).api, &sent, patience()).await;
    }
    for (key, _) in &sent {
        let here = nodes.node(0).api.transcript_json(key).await;
        let (_, info) = nodes.node(0).api.session(key).await;
        for i in 1..3 {
            let api = &nodes.node(i).api;
            assert_eq!(api.transcript_json(key).await, here, "{key} on n{}", i + 1);
            let (status, there) = api.session(key).await;
            assert_eq!(status, StatusCode::OK, "{there}");
            for field in ["session_key", "agent", "entries", "tokens", "bytes"] {
                assert_eq!(there[field], info[field], "{key} on n{}: {field}", i + 1);
            }
        }
    }
    // At least two copies of each; more only if a node's view missed a heartbeat under load
    // for a while (it then follows more partitions, and keeps what it applied).
    let counts = eventually(patience(), "every session stored on two nodes", || async {
        let counts = stored(&nodes).await;
        if counts.iter().sum::<u64>() >= 2 * SESSIONS as u64 {
            Ok(counts)
        } else {
            Err(format!("stored per node: {counts:?}"))
        }
    })
    .await;
    for (i, count) in counts.iter().enumerate() {
        assert!(
            *count < SESSIONS as u64,
            "n{} stores every session: {counts:?}",
            i + 1
        );
    }

    // A chat completion on the node outside the session's replica set.
    let key = "far-away";
    let owner = owner_of(&nats, key).await;
    let live: BTreeSet<String> = ["n1", "n2", "n3"].iter().map(|n| n.to_string()).collect();
    let owner_id = format!("n{}", owner + 1);
    let keepers = replica_set(partition_of(key, PARTITIONS), Some(&owner_id), &live, 2);
    let outsider = (0..3)
        .find(|i| !keepers.contains(&format!("n{}", i + 1)))
        .expect("one node outside a replica set of two");
    let before = stored(&nodes).await[outsider];
    let asked = &nodes.node(outsider).api;
    let response = asked
        .client
        .post(asked.url("/v1/chat/completions"))
        .header("x-session-key", key)
        .json(&json!({"model": "echo", "messages": [{"role": "user", "content": "hi"}]}))
        .timeout(patience())
        .send()
        .await
        .expect("a chat completion");
    assert_eq!(response.status(), StatusCode::OK);
    let body: serde_json::Value = response.json().await.expect("a JSON answer");
    let text = body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("last: hi"), "{body}");
    let entries = asked.transcript(key).await.expect("the session, forwarded");
    let kinds: Vec<&str> = entries.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, vec!["user", "assistant"], "{entries:?}");
    assert_eq!(
        stored(&nodes).await[outsider],
        before,
        "the outsider stored it"
    );
    nodes.stop().await;
}

/// A session deleted through a node that does not own it is gone on all three nodes when
/// the delete answers there (and on the others soon after); asked again, there is nothing to
/// delete; a later message to the same key starts the session afresh everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_on_a_node_that_does_not_own_the_session_reaches_every_node() {
    let _serial = SERIAL.lock().await;
    let Some(nats) = NatsCluster::start().await else {
        return;
    };
    let mut nodes = Nodes::start(&nats, 3, LEASE_MS, "").await;
    wait_balanced(&nats, &["n1", "n2", "n3"], patience()).await;

    let chat = "doomed";
    let key = group_key(chat);
    let owner = owner_of(&nats, &key).await;
    let (other, third) = ((owner + 1) % 3, (owner + 2) % 3);
    // Two turns (one answered before the next is sent, so they are not batched into one).
    for (via, id, text) in [(other, "d-1", "first"), (third, "d-2", "second")] {
        nodes.node(via).api.send(&Msg::group(chat, id, text)).await;
        let answered = vec![(key.clone(), vec![id.to_string()])];
        for n in 0..3 {
            wait_all_answered_within(&nodes.node(n).api, &answered, patience()).await;
        }
    }

    let asked = &nodes.node(other).api;
    let (status, body) = asked
        .delete(&format!(
            "/v1/sessions/{}",
            super::support::encode_key(&key)
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["session_key"], key.as_str(), "{body}");
    assert!(body["entries"].as_u64() >= Some(4), "{body}");
    // Answered once applied here: no wait needed on this node.
    let (status, body) = asked.session(&key).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "on the asked node: {body}");
    for i in [owner, third] {
        let api = &nodes.node(i).api;
        eventually(patience(), "the session gone on every node", || async {
            match api.session(&key).await {
                (StatusCode::NOT_FOUND, _) => Ok(()),
                (status, body) => Err(format!("n{}: {status} {body}", i + 1)),
            }
        })
        .await;
    }
    let (status, body) = nodes
        .node(third)
        .api
        .delete(&format!(
            "/v1/sessions/{}",
            super::support::encode_key(&key)
        ))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "deleted twice: {body}");

    // The same key again: a new session, on every node, holding only the new message.
    nodes
        .node(owner)
        .api
        .send(&Msg::group(chat, "d-3", "again"))
        .await;
    let again = vec![(key.clone(), vec!["d-3".to_string()])];
    for i in 0..3 {
        let api = &nodes.node(i).api;
        wait_all_answered_within(api, &again, patience()).await;
        let entries = api.transcript(&key).await.expect("the new session");
        let users: Vec<&str> = entries
            .iter()
            .filter(|e| e.kind == "user")
            .map(|e| e.text.as_str())
            .collect();
        assert_eq!(users.len(), 1, "n{}: {users:?}", i + 1);
        assert!(users[0].contains("again"), "n{}: {users:?}", i + 1);
    }
    nodes.stop().await;
}

fn content_of(event: &SseEvent) -> Option<String> {
    if event.data == "[DONE]" {
        return None;
    }
    event.json()["choices"][0]["delta"]["content"]
        .as_str()
        .map(str::to_string)
}

/// A streaming chat completion sent to a node that does not own its session gets the
/// owner's first delta while the model (a test double) still holds the rest of its answer,
/// then the rest and the end, with the whole text once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_request_on_a_node_that_does_not_own_the_session_hears_its_deltas() {
    let _serial = SERIAL.lock().await;
    let script = Script {
        gated: true,
        ..Script::text(&["Hello", ", ", "world", "!"])
    };
    let fake = FakeStreamingModel::start(script.clone()).await;
    let Some(nats) = NatsCluster::start().await else {
        return;
    };
    let extra = format!(
        "[model]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"{FAKE_MODEL}\"\n\
         max_retries = 0\n",
        fake.base_url
    );
    let mut nodes = Nodes::start(&nats, 3, LEASE_MS, &extra).await;
    wait_balanced(&nats, &["n1", "n2", "n3"], patience()).await;

    let key = "streamer";
    let owner = owner_of(&nats, key).await;
    let asked = &nodes.node((owner + 1) % 3).api;
    let request = asked
        .client
        .post(asked.url("/v1/chat/completions"))
        .header("x-session-key", key)
        .json(&json!({"model": "gpt-4o", "stream": true,
                      "messages": [{"role": "user", "content": "hi"}]}));
    let mut stream = asked.sse(request).await;
    let role = stream.expect_next().await.json();
    assert_eq!(role["choices"][0]["delta"]["role"], "assistant", "{role}");
    let first = stream.expect_next().await;
    assert_eq!(content_of(&first).as_deref(), Some("Hello"), "{first:?}");
    // The double holds everything after its first chunk until released: the first delta
    // came from the owner, across nodes, while its model call was still going.
    assert_eq!(fake.chunks_sent(), 1, "the model sent only its first chunk");

    fake.release();
    let rest = stream.rest().await;
    let (done, chunks) = rest.split_last().expect("events after the first");
    assert_eq!(done.data, "[DONE]");
    let contents: Vec<String> = chunks.iter().filter_map(content_of).collect();
    assert!(
        !contents.is_empty(),
        "no text after the first delta: {chunks:?}"
    );
    assert_eq!(format!("Hello{}", contents.concat()), script.whole());
    let finish = chunks.last().expect("a finish chunk").json();
    assert_eq!(finish["choices"][0]["finish_reason"], "stop", "{finish}");
    assert_eq!(fake.requests().len(), 1, "one model call");
    assert_eq!(
        fake.requests()[0]["stream"],
        true,
        "the owner's turn streamed"
    );
    nodes.stop().await;
}
