//! The inbound path over HTTP: `POST /v1/messages` → transcript → reply on `/v1/events`, the
//! session endpoints, and per-session order with many sessions at once.

use std::collections::HashMap;

use reqwest::StatusCode;
use serde_json::Value;

use crate::support::{
    data_dir, encode_key, eventually, group_key, one_turn_per_message, start_server,
    start_server_with, Entry, Msg, PATIENCE,
};

/// The fields `GET /v1/sessions` and `GET /v1/sessions/{key}` promise (SPEC §9a).
fn assert_session_object(session: &Value, key: &str, entries: u64) {
    assert_eq!(session["session_key"], key, "{session}");
    for field in ["session_id", "updated_at_ms", "entries", "tokens", "bytes"] {
        assert!(session[field].is_u64(), "{field} in {session}");
    }
    assert!(session["compaction_count"].is_u64(), "{session}");
    assert_eq!(session["entries"], entries, "{session}");
    assert!(session["tokens"].as_u64() > Some(0), "{session}");
    assert!(session["bytes"].as_u64() > Some(0), "{session}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_message_is_stored_answered_and_streamed() {
    let server = start_server().await;
    let (status, body) = server.get("/healthz").await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let key = group_key("-100123");
    // Subscribe first: once a stream is open, every later reply is on it.
    let mut events = server.events(Some(&key)).await;
    let mut all_events = server.events(None).await;

    // A message in another session: on the unfiltered stream only.
    let other = server.send(&Msg::group("other", "1", "elsewhere")).await;
    let reply = all_events.expect_next().await.json();
    assert_eq!(reply["session_key"], other.as_str(), "{reply}");

    let msg = Msg::group("-100123", "4242", "@bot hello");
    let (status, ack) = server.post_message(msg.json()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{ack}");
    assert_eq!(ack["status"], "accepted", "{ack}");
    assert_eq!(ack["session_key"], key.as_str(), "{ack}");
    assert_eq!(ack["message_id"], "4242", "{ack}");

    let reply = events.expect_next().await;
    assert_eq!(reply.event.as_deref(), Some("reply"), "{reply:?}");
    let reply = reply.json();
    assert_eq!(reply["session_key"], key.as_str(), "{reply}");
    assert_eq!(reply["in_reply_to"], serde_json::json!(["4242"]), "{reply}");
    let text = reply["text"].as_str().expect("reply text");
    assert!(text.starts_with("echo: received "), "{text}");
    assert!(text.ends_with("@bot hello"), "{text}");
    let reply_seq = reply["seq"].as_u64().expect("reply seq");

    // The reply is published after the turn is durable, so the transcript already has it.
    let transcript = server.transcript(&key).await.expect("the session exists");
    let kinds: Vec<&str> = transcript.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["user", "assistant"], "{transcript:?}");
    let (user, assistant) = (&transcript[0], &transcript[1]);
    assert_eq!(user.text, "@bot hello");
    assert_eq!(user.message_id.as_deref(), Some("4242"));
    assert_eq!(user.sender.as_deref(), Some("111"));
    assert!(user.timestamp_ms > 0 && user.tokens > 0, "{user:?}");
    assert_eq!(assistant.text, text);
    assert_eq!(assistant.seq, reply_seq);
    assert!(assistant.seq > user.seq);

    let reply_everywhere = all_events.expect_next().await.json();
    assert_eq!(reply_everywhere["seq"], reply_seq, "{reply_everywhere}");

    let sessions = server.sessions().await;
    let keys: Vec<&str> = sessions
        .iter()
        .filter_map(|s| s["session_key"].as_str())
        .collect();
    // Listed in key order.
    assert_eq!(keys, [key.as_str(), other.as_str()]);
    assert_session_object(&sessions[0], &key, 2);
    assert_session_object(&sessions[1], &other, 2);

    let (status, shown) = server.session(&key).await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    assert_eq!(shown, sessions[0]);
    // Keys are case-insensitive in URLs.
    let (status, shown_upper) = server.session(&key.to_uppercase()).await;
    assert_eq!(status, StatusCode::OK, "{shown_upper}");
    assert_eq!(shown_upper["session_key"], key.as_str());

    for path in [
        format!("/v1/sessions/{}", encode_key("agent:main:nope")),
        format!("/v1/sessions/{}/transcript", encode_key("agent:main:nope")),
        format!("/v1/sessions/{}/context", encode_key("agent:main:nope")),
    ] {
        let (status, body) = server.get(&path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert_eq!(body["error"]["code"], "not_found", "{path}: {body}");
        assert!(body["error"]["message"].is_string(), "{path}: {body}");
    }

    let (status, context) = server
        .get(&format!("/v1/sessions/{}/context", encode_key(&key)))
        .await;
    assert_eq!(status, StatusCode::OK, "{context}");
    let blocks = context["blocks"].as_array().expect("blocks");
    assert!(!blocks.is_empty(), "{context}");
    let total = context["total_tokens"].as_u64().expect("total_tokens");
    assert!(total > 0, "{context}");
    // The history (user + assistant) is in the context the next turn would send.
    let messages = context["messages"].to_string();
    assert!(messages.contains("@bot hello"), "{context}");
    assert!(messages.contains("echo: received"), "{context}");

    server.stop().await;
}

/// Every session's transcript alternates user/assistant, the users in send order, and each
/// assistant entry answers the user entry before it.
fn check_conversation(key: &str, entries: &[Entry], sent: &[String]) {
    let users: Vec<&str> = entries
        .iter()
        .filter(|e| e.kind == "user")
        .filter_map(|e| e.message_id.as_deref())
        .collect();
    assert_eq!(users, sent, "user entries of {key} out of order");
    assert_eq!(entries.len(), 2 * sent.len(), "{key}: {entries:?}");
    for pair in entries.chunks(2) {
        let (user, assistant) = (&pair[0], &pair[1]);
        assert_eq!(user.kind, "user", "{key}: {pair:?}");
        assert_eq!(assistant.kind, "assistant", "{key}: {pair:?}");
        assert!(
            // In group chats the model sees the sender in a labelled block before the text.
            assistant.text.contains("last: ") && assistant.text.ends_with(&user.text),
            "{key}: the reply does not answer its message: {pair:?}"
        );
    }
    let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{key}: {seqs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sessions_at_once_keep_order() {
    const SESSIONS: usize = 50;
    const MESSAGES: usize = 10;
    // Every entry stays in the transcript to be counted: no window-triggered compaction
    // (ten turns are more than the default group window shows). The window shows all ten
    // turns, so the echo's quote of the newest message is that message alone (no older
    // message recalled into it: recall fills the budget a turn leaves).
    let server = start_server_with(data_dir(), |c| {
        one_turn_per_message(c);
        c.compaction.window_trigger = false;
        c.context.presets = turnstile::Config::parse(
            "[context.presets.group]\nmax_messages = 40\nmax_tokens = 6000\n",
        )
        .expect("a group preset")
        .context
        .presets;
    })
    .await;

    let mut tasks = Vec::new();
    for s in 0..SESSIONS {
        let api = server.api.clone();
        tasks.push(tokio::spawn(async move {
            let chat = format!("chat-{s}");
            let mut sent = Vec::new();
            for m in 0..MESSAGES {
                let id = format!("s{s}-m{m}");
                let key = api
                    .send(&Msg::group(&chat, &id, &format!("message {m} of {chat}")))
                    .await;
                assert_eq!(key, group_key(&chat));
                sent.push(id);
            }
            (group_key(&chat), sent)
        }));
    }
    let mut sent: HashMap<String, Vec<String>> = HashMap::new();
    for task in tasks {
        let (key, ids) = task.await.expect("a sender task failed");
        sent.insert(key, ids);
    }

    let want = (2 * MESSAGES) as u64;
    let api = &server.api;
    eventually(
        PATIENCE,
        "every session to have all its replies",
        || async move {
            let sessions = api.sessions().await;
            let done = sessions.iter().filter(|s| s["entries"] == want).count();
            if sessions.len() == SESSIONS && done == SESSIONS {
                Ok(())
            } else {
                Err(format!(
                    "{} sessions, {done} with {want} entries",
                    sessions.len()
                ))
            }
        },
    )
    .await;

    for (key, ids) in &sent {
        let entries = server.transcript(key).await.expect("the session exists");
        check_conversation(key, &entries, ids);
    }
    server.stop().await;
}

/// Issue 39: `GET /v1/sessions` lists cold sessions too (from the cold tier's index, marked
/// `"cold": true`, with their record's fields), in key order among the hot ones and across
/// pages; `GET /v1/sessions/{key}` says the same, and the next message thaws the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_sessions_are_listed_with_the_hot_ones() {
    use turnstile::store::{EntryKind, Store, StoreBudget, TranscriptEntry, TurnCommit};
    use turnstile_actors::{DiskBudget, DiskUsage};

    let dir = data_dir();
    let chats = ["c1", "c2", "c3", "c4", "c5"];
    let cold_chats = ["c1", "c3", "c5"];
    {
        // A store whose janitor moved three idle sessions into the cold tier.
        let mut storage = turnstile::Config::with_data_dir(dir.path()).storage;
        storage.max_disk_bytes = 1 << 20;
        let store = Store::open(&storage).expect("opening the store");
        let commit = |chat: &str, now_ms: u64| {
            let entry = |kind| {
                let text = format!("{chat} {}", "padding ".repeat(16_000));
                TranscriptEntry::new(kind, text, 5, now_ms).with_message_id(format!("{chat}-m1"))
            };
            store
                .commit_turn(&TurnCommit {
                    session_key: group_key(chat),
                    entries: vec![entry(EntryKind::User), entry(EntryKind::Assistant)],
                    consumed: vec![],
                    now_ms,
                    channel_messages: vec![],
                    replica: None,
                })
                .expect("committing a turn");
        };
        // Real times: `prune_after_days` (on by default) would delete sessions from 1970.
        let now = crate::support::now_ms();
        for (i, chat) in cold_chats.iter().enumerate() {
            commit(chat, now - 60_000 + i as u64);
        }
        let janitor = StoreBudget::new(
            store.clone(),
            &storage,
            std::sync::Arc::new(|_: &str| false),
        );
        let limit = storage.max_disk_bytes;
        janitor
            .reclaim(
                &DiskUsage {
                    disk_bytes: limit,
                    limit_bytes: limit,
                    high_water_bytes: limit * 8 / 10,
                },
                true,
            )
            .expect("a janitor pass");
        for chat in cold_chats {
            let found = store.find_session(&group_key(chat)).unwrap();
            assert!(found.is_some_and(|f| f.cold), "{chat} was frozen");
        }
        for (i, chat) in ["c2", "c4"].iter().enumerate() {
            commit(chat, now + i as u64);
        }
        store.close().await.expect("closing the store");
    }

    let server = start_server_with(dir, |_| {}).await;
    let sessions = server.sessions().await;
    let listed: Vec<(&str, bool)> = sessions
        .iter()
        .map(|s| (s["session_key"].as_str().unwrap_or(""), s["cold"] == true))
        .collect();
    let keys: Vec<String> = chats.iter().map(|c| group_key(c)).collect();
    let want: Vec<(&str, bool)> = keys
        .iter()
        .zip(chats)
        .map(|(k, c)| (k.as_str(), cold_chats.contains(&c)))
        .collect();
    assert_eq!(listed, want, "{sessions:?}");
    for (session, key) in sessions.iter().zip(&keys) {
        assert_session_object(session, key, 2);
    }
    // Pages: two at a time, after the last key of the page before.
    let mut paged = Vec::new();
    let mut after = String::new();
    loop {
        let path = if after.is_empty() {
            "/v1/sessions?limit=2".to_string()
        } else {
            format!("/v1/sessions?limit=2&after={}", encode_key(&after))
        };
        let (status, page) = server.get(&path).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let page = page.as_array().expect("a page").clone();
        let Some(last) = page.last() else { break };
        after = last["session_key"].as_str().unwrap_or("").to_string();
        paged.extend(page);
    }
    assert_eq!(paged, sessions);
    let (status, shown) = server.session(&keys[0]).await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    assert_eq!(shown, sessions[0], "GET of a cold session");

    // The next message thaws it: listed hot, its history and the new turn in order.
    server.send(&Msg::group("c1", "c1-m2", "@bot again")).await;
    let api = &server.api;
    let key = &keys[0];
    eventually(PATIENCE, "the thawed session's turn", || async move {
        let (_, s) = api.session(key).await;
        if s["cold"] == false && s["entries"] == 4 {
            Ok(())
        } else {
            Err(s.to_string())
        }
    })
    .await;
    let transcript = server.transcript(key).await.expect("the session exists");
    let ids: Vec<Option<&str>> = transcript.iter().map(|e| e.message_id.as_deref()).collect();
    assert_eq!(ids, [Some("c1-m1"), Some("c1-m1"), Some("c1-m2"), None]);
    server.stop().await;
}
