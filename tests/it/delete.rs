//! `DELETE /v1/sessions/{key}` is final: the messages the session's lane still held in memory
//! go with the stored data, and a message sent afterwards starts a new session.

use reqwest::StatusCode;
use serde_json::Value;

use super::support::{encode_key, eventually, group_key, start_server, Api, Entry, Msg, PATIENCE};

/// Rounds of the race; each posts a burst and deletes it at once.
const ROUNDS: usize = 50;
/// Messages per burst.
const BURST: usize = 10;

/// Deletes `key`, retrying while a turn of it runs (`409`); returns the `200` body.
async fn delete_when_not_busy(api: &Api, key: &str) -> Value {
    let path = format!("/v1/sessions/{}", encode_key(key));
    eventually(PATIENCE, "the delete to go through", || async {
        let (status, body) = api.delete(&path).await;
        match status {
            StatusCode::OK => Ok(body),
            StatusCode::CONFLICT => Err(format!("busy: {body}")),
            other => panic!("DELETE {key}: {other} {body}"),
        }
    })
    .await
}

/// The transcript of `key` once it holds an answer to `message_id`.
async fn answered(api: &Api, key: &str, message_id: &str) -> Vec<Entry> {
    eventually(
        PATIENCE,
        "the message after the delete to be answered",
        || async {
            let entries = api.transcript(key).await.unwrap_or_default();
            let user = entries
                .iter()
                .position(|e| e.kind == "user" && e.message_id.as_deref() == Some(message_id));
            match user {
                Some(at) if entries[at..].iter().any(|e| e.kind == "assistant") => Ok(entries),
                _ => Err(format!("{entries:?}")),
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_session_stays_deleted_and_the_next_message_starts_a_new_one() {
    // The default config: `collect` with a 500 ms debounce, so most of each burst is still
    // waiting in the lane's memory when the delete arrives.
    let server = start_server().await;
    for round in 0..ROUNDS {
        let chat = format!("-100{round}");
        let key = group_key(&chat);
        for n in 0..BURST {
            server
                .send(&Msg::group(&chat, &format!("m{n}"), "@bot hi"))
                .await;
        }
        let gone = delete_when_not_busy(&server, &key).await;
        assert!(
            gone["pending_messages"]
                .as_u64()
                .is_some_and(|n| n <= BURST as u64),
            "round {round}: {gone}"
        );
        let (status, body) = server.session(&key).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "round {round}: {body}");

        // The lane answers in order, so once the next message is answered nothing deleted can
        // still be on its way: it would have been answered first, or with it.
        server.send(&Msg::group(&chat, "after", "@bot again")).await;
        let entries = answered(&server, &key, "after").await;
        let users: Vec<Option<&str>> = entries
            .iter()
            .filter(|e| e.kind == "user")
            .map(|e| e.message_id.as_deref())
            .collect();
        assert_eq!(
            users,
            [Some("after")],
            "round {round}: deleted messages came back: {entries:?}"
        );
        let (status, session) = server.session(&key).await;
        assert_eq!(status, StatusCode::OK, "round {round}: {session}");
        assert_eq!(
            session["entries"],
            entries.len() as u64,
            "round {round}: a fresh session holds only the new turn"
        );
    }
}
