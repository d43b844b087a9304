//! A graceful restart on the same data dir changes nothing a client can see.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::support::{
    data_dir, eventually, one_turn_per_message, start_server_with, Api, Msg, PATIENCE,
};

/// Every session and its whole transcript, as the API shows them.
async fn snapshot(api: &Api) -> BTreeMap<String, (Value, Vec<Value>)> {
    let mut all = BTreeMap::new();
    for session in api.sessions().await {
        let key = session["session_key"]
            .as_str()
            .expect("session_key")
            .to_string();
        let transcript = api
            .transcript_json(&key)
            .await
            .expect("a listed session exists");
        all.insert(key, (session, transcript));
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transcripts_are_identical_after_a_restart() {
    let server = start_server_with(data_dir(), one_turn_per_message).await;
    let dir = server.dir.clone().expect("the server owns its data dir");
    for chat in ["a", "b", "c"] {
        for m in 0..4 {
            server
                .send(&Msg::group(
                    chat,
                    &format!("{chat}-{m}"),
                    &format!("{chat} says {m}"),
                ))
                .await;
        }
    }
    let api = &server.api;
    eventually(PATIENCE, "all 12 messages answered", || async move {
        let sessions = api.sessions().await;
        let entries: u64 = sessions.iter().filter_map(|s| s["entries"].as_u64()).sum();
        if sessions.len() == 3 && entries == 24 {
            Ok(())
        } else {
            Err(format!("{} sessions, {entries} entries", sessions.len()))
        }
    })
    .await;
    let before = snapshot(&server.api).await;
    server.stop().await;

    let server = start_server_with(dir.clone(), one_turn_per_message).await;
    let after = snapshot(&server.api).await;
    assert_eq!(before, after);

    // The restarted server carries on where it left off.
    server.send(&Msg::group("a", "a-4", "a says 4")).await;
    let key = before
        .keys()
        .find(|k| k.ends_with(":a"))
        .expect("session a")
        .clone();
    let (api, key) = (&server.api, key.as_str());
    let transcript = eventually(PATIENCE, "the new message answered", || async move {
        let t = api.transcript_json(key).await.unwrap_or_default();
        if t.len() == 10 {
            Ok(t)
        } else {
            Err(format!("{} entries", t.len()))
        }
    })
    .await;
    assert_eq!(transcript[..8], before[key].1[..]);
    assert_eq!(transcript[8]["message_id"], "a-4");
    assert_eq!(transcript[9]["kind"], "assistant");
    server.stop().await;
}
