//! `[[quotas]]` over HTTP: a sender over its message quota is dropped with one notice, never
//! queued; the count survives a restart; the admin API reads and resets it (audited); the
//! OpenAI endpoint answers 429 `quota_exceeded`.

use serde_json::{json, Value};

use crate::support::{data_dir, encode_key, start_server_with, Msg, PATIENCE};

const SUBJECT: &str = "sender:telegram:111";

fn quota(config: &mut turnstile::Config) {
    crate::support::one_turn_per_message(config);
    config.quotas = turnstile::Config::parse(
        "[[quotas]]\nmatch = { sender = \"*\" }\nmessages_per_minute = 1\nburst = 2\n\
         notice = \"easy, one a minute\"\n",
    )
    .expect("a valid quota")
    .quotas;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_quota_is_dropped_with_one_notice_and_survives_a_restart() {
    let server = start_server_with(data_dir(), quota).await;
    let dir = server.dir.clone().expect("the server owns its data dir");
    let key = crate::support::group_key("q1");
    let mut events = server.api.events(Some(&key)).await;
    let mut answers = Vec::new();
    for i in 0..4 {
        let msg = Msg::group("q1", &format!("q1-{i}"), &format!("hello {i}"));
        answers.push(server.api.post_message(msg.json()).await);
    }
    let statuses: Vec<u16> = answers.iter().map(|(s, _)| s.as_u16()).collect();
    assert_eq!(statuses, [202, 202, 200, 200], "{answers:?}");
    assert_eq!(answers[2].1["reason"], "quota", "{:?}", answers[2].1);
    assert_eq!(answers[2].1["limit"], "messages");
    // Two turns answered, and one notice (for the first refusal only), in some order.
    let mut texts = Vec::new();
    while texts.len() < 3 {
        let event = tokio::time::timeout(PATIENCE, events.expect_next())
            .await
            .expect("replies within patience");
        if event.event.as_deref() == Some("reply") {
            texts.push(
                event.json()["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
    }
    assert_eq!(
        texts.iter().filter(|t| *t == "easy, one a minute").count(),
        1,
        "{texts:?}"
    );
    let (_, session) = server.api.session(&key).await;
    assert_eq!(
        session["entries"], 4,
        "two turns, never the refused: {session}"
    );

    let (status, usage) = server
        .api
        .get(&format!("/v1/admin/quotas/{}", encode_key(SUBJECT)))
        .await;
    assert_eq!(status, 200, "{usage}");
    assert_eq!(usage["usage"]["messages_over"], 2);
    let (_, summary) = server.api.get("/v1/admin/quotas").await;
    assert_eq!(summary["top"][0]["subject"], SUBJECT, "{summary}");
    let (_, stats) = server.api.get("/v1/stats").await;
    assert_eq!(stats["quotas"]["refused_messages"], 2, "{stats}");
    let (_, metrics) = server.api.get("/metrics").await;
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    assert!(
        metrics.contains(&format!(
            "turnstile_quota_offender_refused{{subject=\"{SUBJECT}\"}} 2\n"
        )),
        "{metrics}"
    );

    server.stop().await;
    let server = start_server_with(dir, quota).await;
    let msg = Msg::group("q1", "q1-after", "still there?");
    let (status, body) = server.api.post_message(msg.json()).await;
    assert_eq!(
        (status.as_u16(), &body["reason"]),
        (200, &json!("quota")),
        "{body}"
    );

    let (status, _) = server
        .api
        .delete(&format!("/v1/admin/quotas/{}", encode_key(SUBJECT)))
        .await;
    assert_eq!(status, 200);
    let (status, _) = server
        .api
        .get(&format!("/v1/admin/quotas/{}", encode_key(SUBJECT)))
        .await;
    assert_eq!(status, 404, "reset");
    let msg = Msg::group("q1", "q1-reset", "and now?");
    let (status, body) = server.api.post_message(msg.json()).await;
    assert_eq!(status, 202, "{body}");
    let (_, audit) = server.api.get("/v1/admin/audit?tail=5").await;
    let audit = audit.to_string();
    assert!(
        audit.contains("quota.reset") && audit.contains(SUBJECT),
        "{audit}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_endpoint_answers_429_quota_exceeded() {
    let server = start_server_with(data_dir(), |config| {
        quota(config);
        config.quotas[0].matches = turnstile::config::QuotaMatch {
            agent: Some("main".into()),
            ..Default::default()
        };
    })
    .await;
    let body =
        json!({"model": "echo", "messages": [{"role": "user", "content": "hi"}], "user": "u1"});
    let mut statuses = Vec::new();
    let mut last = Value::Null;
    for _ in 0..3 {
        let r = server
            .api
            .client
            .post(server.api.url("/v1/chat/completions"))
            .json(&body)
            .send()
            .await
            .expect("POST /v1/chat/completions");
        statuses.push(r.status().as_u16());
        last = r.json().await.unwrap_or(Value::Null);
    }
    assert_eq!(statuses, [200, 200, 429], "{last}");
    assert_eq!(last["error"]["code"], "quota_exceeded", "{last}");
    server.stop().await;
}
