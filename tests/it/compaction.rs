//! Manual compaction over HTTP: `POST /v1/sessions/{key}/compact` answers before/after tokens,
//! the transcript starts with the `summary` entry, and the session counts the compaction.

use reqwest::StatusCode;

use crate::support::{
    data_dir, encode_key, group_key, one_turn_per_message, start_server_with, wait_all_answered,
    Msg,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_compaction_over_http() {
    let server = start_server_with(data_dir(), |c| {
        one_turn_per_message(c);
        c.context.max_tokens = 2_000;
        // No background compaction: the manual one is the first.
        c.compaction.soft_threshold = 1.0;
        c.compaction.window_trigger = false;
    })
    .await;
    let filler = "We went over the delivery schedule, the packaging and the invoice. ".repeat(3);
    let mut ids = Vec::new();
    let mut key = String::new();
    for n in 0..15 {
        let id = format!("m{n}");
        let text = format!("@bot please check order ORD-{n:04}. {filler}");
        key = server.send(&Msg::group("cmp", &id, &text)).await;
        ids.push(id);
    }
    assert_eq!(key, group_key("cmp"));
    wait_all_answered(&server, &[(key.clone(), ids)]).await;
    let (_, before) = server.session(&key).await;
    let path = format!("/v1/sessions/{}/compact", encode_key(&key));
    let (status, body) = server.post_raw(&path, String::new()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (tokens_before, tokens_after) = (
        body["tokens_before"].as_u64().unwrap(),
        body["tokens_after"].as_u64().unwrap(),
    );
    assert!(tokens_after < tokens_before, "{body}");
    let (_, after) = server.session(&key).await;
    assert_eq!(before["compaction_count"], 0, "{before}");
    assert_eq!(after["compaction_count"], 1, "{after}");
    assert_eq!(after["tokens"].as_u64(), Some(tokens_after), "{after}");
    let transcript = server.transcript_json(&key).await.unwrap();
    assert_eq!(transcript[0]["kind"], "summary", "{:?}", transcript[0]);
    assert!(transcript[0]["text"].as_str().unwrap().contains("ORD-0000"));
    server.stop().await;
}
