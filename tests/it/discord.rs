//! The Discord channel against the fake Discord (`tests/support/fake_discord.rs`, a test
//! double on loopback): the preflight matrix through the whole runtime (addressed, chatter,
//! commands, replies to the bot, the bot's own echo), replies in place that ping nobody
//! (`@everyone` in the model's answer included) through 429s, an op 7 reconnect mid-burst, a
//! failed resume caught up over REST, `kill -9` of the real binary and restarts (resumed,
//! then caught up) — every message answered exactly once, in order — and a 4004 close that
//! stops the channel with its reason.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use turnstile::config::DiscordConfig;
use turnstile::Runtime;

use crate::support::fake_discord::{mentioning_bot, message_json, FakeDiscord, GUILD_ID, TOKEN};
use crate::support::{
    config, env_var, eventually_some, one_turn_per_message, FixedModel, GateModel, ServerProcess,
    SharedGate, TestServer,
};

pub(crate) const CHANNEL: u64 = 20;
pub(crate) const PATIENCE: Duration = Duration::from_secs(20);

pub(crate) fn discord_config(fake: &FakeDiscord, token_env: &str) -> DiscordConfig {
    DiscordConfig {
        token_env: token_env.into(),
        api_base: fake.api_base.clone(),
        retry_backoff_ms: 20,
        max_retry_backoff_ms: 200,
        ..DiscordConfig::default()
    }
}

pub(crate) async fn server(fake: &FakeDiscord, dir: &std::path::Path) -> TestServer {
    let model = Arc::new(FixedModel {
        long_text: "y".repeat(4_500),
    });
    server_with(fake, dir, model).await
}

pub(crate) async fn server_with(
    fake: &FakeDiscord,
    dir: &std::path::Path,
    model: Arc<dyn turnstile::model::Model>,
) -> TestServer {
    server_configured(fake, dir, model, |_| {}).await
}

/// A server whose `[channels.discord]` is the fake's, changed by `edit`.
pub(crate) async fn server_configured(
    fake: &FakeDiscord,
    dir: &std::path::Path,
    model: Arc<dyn turnstile::model::Model>,
    edit: impl FnOnce(&mut DiscordConfig),
) -> TestServer {
    let token_env = env_var(TOKEN);
    let mut c = config(dir);
    one_turn_per_message(&mut c);
    let mut discord = discord_config(fake, &token_env);
    edit(&mut discord);
    c.channels.discord = Some(discord);
    let runtime = Runtime::builder()
        .config(c)
        .model(model)
        .build()
        .await
        .unwrap();
    TestServer::serve(runtime, None).await
}

/// An addressed guild message `id` in channel 20.
pub(crate) fn addressed(fake: &FakeDiscord, text: &str) -> (u64, Value) {
    let id = fake.next_id();
    (
        id,
        mentioning_bot(message_json(id, CHANNEL, Some(GUILD_ID), 1, false, text)),
    )
}

/// Waits until the bot has sent `n` messages; returns the message ids they reply to, in the
/// order they were sent.
pub(crate) async fn replies(fake: &FakeDiscord, n: usize) -> Vec<u64> {
    eventually_some(PATIENCE, &format!("{n} replies"), || {
        let fake = fake.clone();
        async move {
            let sent = fake.sent();
            (sent.len() >= n).then(|| {
                sent.iter()
                    .filter_map(|(_, m)| m["message_reference"]["message_id"].as_str())
                    .map(|id| id.parse().unwrap())
                    .collect()
            })
        }
    })
    .await
}

/// Waits for the gateway session to be up (READY handled: the bot's GUILD_CREATE came).
pub(crate) async fn connected(fake: &FakeDiscord, identifies: u64) {
    eventually_some(PATIENCE, "the gateway session", || {
        let fake = fake.clone();
        async move { (fake.identifies() >= identifies).then_some(()) }
    })
    .await;
    // READY and GUILD_CREATE are handled before anything dispatched after them.
}

async fn metrics(server: &TestServer) -> String {
    reqwest::get(server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_preflight_matrix_and_replies_that_ping_nobody() {
    let fake = FakeDiscord::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = server(&fake, dir.path()).await;
    connected(&fake, 1).await;

    // Two refusals first: a JSON 429 and a proxy's HTML page; the reply still goes, once.
    fake.rate_limit_next_sends(1);
    fake.html_429_next_sends(1);
    let (m1, msg) = addressed(&fake, "@everyone hello <@&5>");
    fake.post(msg);
    assert_eq!(replies(&fake, 1).await, vec![m1]);
    let (_, first) = fake.sent()[0].clone();
    assert!(
        first["content"]
            .as_str()
            .unwrap()
            .contains("@everyone hello"),
        "{first}"
    );
    let posts: Vec<Value> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == format!("/channels/{CHANNEL}/messages"))
        .map(|r| r.body)
        .collect();
    assert_eq!(posts.len(), 3, "two refused, one accepted");
    for body in &posts {
        assert_eq!(
            body["allowed_mentions"],
            json!({"parse": [], "replied_user": true})
        );
        assert_eq!(
            body["message_reference"]["message_id"],
            json!(m1.to_string())
        );
        assert_eq!(body["enforce_nonce"], json!(true));
        assert_eq!(
            body["nonce"], posts[0]["nonce"],
            "every try carries the same nonce"
        );
    }

    // Chatter is not answered, nor a command, nor another bot; a reply to the bot is.
    let id = fake.next_id();
    fake.post(message_json(
        id,
        CHANNEL,
        Some(GUILD_ID),
        1,
        false,
        "just talking",
    ));
    let (_, command) = addressed(&fake, "/help");
    fake.post(command);
    let id = fake.next_id();
    fake.post(mentioning_bot(message_json(
        id,
        CHANNEL,
        Some(GUILD_ID),
        55,
        true,
        "beep",
    )));
    let bot_reply = fake.sent()[0].1.clone();
    let m5 = fake.next_id();
    let mut reply = message_json(m5, CHANNEL, Some(GUILD_ID), 1, false, "and then?");
    reply["type"] = json!(19);
    reply["message_reference"] =
        json!({"message_id": bot_reply["id"], "channel_id": CHANNEL.to_string(), "type": 0});
    reply["referenced_message"] = bot_reply;
    fake.post(reply);
    // A thread (unknown to the channel until it asks): its own session, answered in it.
    fake.add_thread(30, CHANNEL);
    let m6 = fake.next_id();
    fake.post(mentioning_bot(message_json(
        m6,
        30,
        Some(GUILD_ID),
        1,
        false,
        "in a thread",
    )));
    let mut answered = replies(&fake, 3).await;
    answered.sort_unstable();
    assert_eq!(answered, vec![m1, m5, m6]);
    assert!(
        fake.sent().iter().any(|(channel, _)| *channel == 30),
        "the thread's reply goes to the thread"
    );
    let stats = server.runtime.preflight_stats();
    assert_eq!(
        (stats.no_mention, stats.command, stats.bot),
        (1, 1, 1),
        "{stats:?}"
    );
    // Failed once in a cold CI run (not reproduced): say what the thread's message became.
    assert!(
        server
            .runtime
            .session("agent:main:discord:channel:20:thread:30")
            .unwrap()
            .is_some(),
        "the thread's session; sessions {:?}; requests about channel 30 {:?}",
        server
            .runtime
            .sessions(None, 100)
            .unwrap()
            .iter()
            .map(|s| s.session_key.clone())
            .collect::<Vec<_>>(),
        fake.requests()
            .iter()
            .filter(|r| r.path.starts_with("/channels/30"))
            .map(|r| format!("{} {}", r.method, r.path))
            .collect::<Vec<_>>()
    );
    // A long answer: 2,000-character messages, only the first replying.
    let (m7, long) = addressed(&fake, "long one");
    fake.post(long);
    let sent = eventually_some(PATIENCE, "the long reply", || {
        let fake = fake.clone();
        async move { (fake.sent().len() >= 6).then(|| fake.sent()) }
    })
    .await;
    let parts: Vec<&Value> = sent[3..].iter().map(|(_, m)| m).collect();
    assert_eq!(
        parts[0]["message_reference"]["message_id"],
        json!(m7.to_string())
    );
    assert!(parts[1].get("message_reference").is_none());
    let text: String = parts
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, "y".repeat(4_500));
    assert!(parts
        .iter()
        .all(|m| m["content"].as_str().unwrap().chars().count() <= 2_000));
    let text = metrics(&server).await;
    // The two refused sends were retried inside twilight's client (its limiter waits them
    // out); `turnstile_channel_rate_limit_waits_total` counts only 429s that reach the channel.
    assert!(
        text.contains("turnstile_channel_skipped_total{channel=\"discord\",reason=\"own\"}"),
        "{text}"
    );
    server.stop().await;
}

#[tokio::test]
async fn typing_shows_while_a_turn_runs() {
    let fake = FakeDiscord::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(GateModel::default());
    let server = server_with(&fake, dir.path(), Arc::new(SharedGate(Arc::clone(&gate)))).await;
    connected(&fake, 1).await;
    let (m1, msg) = addressed(&fake, "think hard");
    fake.post(msg);
    gate.entered.notified().await;
    eventually_some(PATIENCE, "the typing indicator", || {
        let fake = fake.clone();
        async move {
            fake.requests()
                .iter()
                .any(|r| r.method == "POST" && r.path == format!("/channels/{CHANNEL}/typing"))
                .then_some(())
        }
    })
    .await;
    gate.release.notify_one();
    assert_eq!(replies(&fake, 1).await, vec![m1]);
    server.stop().await;
}

#[tokio::test]
async fn an_op7_reconnect_mid_burst_resumes_and_answers_each_message_once_in_order() {
    let fake = FakeDiscord::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = server(&fake, dir.path()).await;
    connected(&fake, 1).await;
    let mut ids = Vec::new();
    for i in 0..8 {
        if i == 4 {
            fake.reconnect();
        }
        let (id, msg) = addressed(&fake, &format!("burst {i}"));
        ids.push(id);
        fake.post(msg);
    }
    assert_eq!(replies(&fake, 8).await, ids);
    // The messages after the op 7 can be answered through the REST catch-up before the
    // resume lands (a cold CI run saw every reply and no resume yet): wait for the resume.
    eventually_some(PATIENCE, "the resume", || {
        let fake = fake.clone();
        async move { (fake.resumes() >= 1).then_some(()) }
    })
    .await;
    assert_eq!(fake.identifies(), 1, "resumed, not identified again");
    assert!(
        fake.connections().iter().any(|p| p == "/resume"),
        "{:?}",
        fake.connections()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.sent().len(), 8, "nothing answered twice");
    server.stop().await;
}

#[tokio::test]
async fn a_failed_resume_catches_up_over_rest_exactly_once() {
    let fake = FakeDiscord::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = server(&fake, dir.path()).await;
    connected(&fake, 1).await;
    let (m1, msg) = addressed(&fake, "before");
    fake.post(msg);
    assert_eq!(replies(&fake, 1).await, vec![m1]);
    // The connection drops, the session is gone: what was said meanwhile is only in the
    // channel's history.
    fake.refuse_resumes(true);
    let mut ids = vec![m1];
    for i in 0..3 {
        let (id, msg) = addressed(&fake, &format!("while away {i}"));
        ids.push(id);
        fake.post_unseen(msg);
    }
    fake.close(4000);
    assert_eq!(replies(&fake, 4).await, ids);
    assert_eq!(fake.identifies(), 2);
    // Read back from the newest message handled there: the bot's own reply.
    let after = fake.sent()[0].1["id"].clone();
    assert!(fake.requests().iter().any(|r| r.method == "GET"
        && r.path == format!("/channels/{CHANNEL}/messages")
        && r.body["after"] == after));
    let text = metrics(&server).await;
    assert!(
        text.contains("turnstile_channel_caught_up_total{channel=\"discord\"}"),
        "{text}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.sent().len(), 4, "nothing answered twice");
    server.stop().await;
}

#[tokio::test]
async fn a_4004_close_stops_the_channel_with_its_reason() {
    let fake = FakeDiscord::start().await;
    fake.close_on_identify(4004);
    let dir = tempfile::tempdir().unwrap();
    let server = server(&fake, dir.path()).await;
    let text = eventually_some(PATIENCE, "the stopped state", || {
        let server = &server;
        async move {
            let text = metrics(server).await;
            text.contains("authentication failed (4004)")
                .then_some(text)
        }
    })
    .await;
    assert!(text.contains("state=\"stopped\""), "{text}");
    // Stopped, not retrying: the task has ended, so no second IDENTIFY can come.
    assert_eq!(fake.identifies(), 1);
    server.stop().await;
}

#[tokio::test]
async fn kill9_and_restarts_of_the_binary_resume_then_catch_up() {
    let fake = FakeDiscord::start().await;
    let token_env = env_var(TOKEN);
    let data = tempfile::tempdir().unwrap();
    let conf = tempfile::tempdir().unwrap();
    let toml = format!(
        "[queue]\nmode = \"followup\"\ndebounce_ms = 0\n\
         [channels.discord]\ntoken_env = \"{token_env}\"\napi_base = \"{}\"\n\
         retry_backoff_ms = 20\nmax_retry_backoff_ms = 200\n",
        fake.api_base
    );
    let mut bin = ServerProcess::start(data.path(), conf.path(), &toml).await;
    connected(&fake, 1).await;
    let (m1, msg) = addressed(&fake, "first");
    fake.post(msg);
    assert_eq!(replies(&fake, 1).await, vec![m1]);

    // kill -9; meanwhile two messages, buffered by the gateway for the session.
    bin.kill9();
    let _ = bin.wait_exit(PATIENCE).await;
    let mut ids = vec![m1];
    for i in 0..2 {
        let (id, msg) = addressed(&fake, &format!("while killed {i}"));
        ids.push(id);
        fake.post(msg);
    }
    let mut bin = ServerProcess::start(data.path(), conf.path(), &toml).await;
    assert_eq!(replies(&fake, 3).await, ids);
    assert_eq!(
        fake.identifies(),
        1,
        "the restart resumed the saved session"
    );

    // Again, but the session is gone by then: the restart identifies and catches up.
    bin.kill9();
    let _ = bin.wait_exit(PATIENCE).await;
    fake.refuse_resumes(true);
    for i in 0..2 {
        let (id, msg) = addressed(&fake, &format!("while gone {i}"));
        ids.push(id);
        fake.post_unseen(msg);
    }
    let mut bin = ServerProcess::start(data.path(), conf.path(), &toml).await;
    assert_eq!(replies(&fake, 5).await, ids);
    assert_eq!(fake.identifies(), 2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.sent().len(), 5, "nothing answered twice");
    bin.stop().await;
}

#[tokio::test]
async fn the_http_api_takes_a_message_type_and_a_command_is_not_a_turn() {
    let server = crate::support::start_server().await;
    let message = |id: &str, extra: Value| {
        let mut m = json!({"channel": "webhook", "chat_kind": "group", "chat_id": "room",
            "message_id": id, "sender": {"id": "u1"}, "text": "/help", "mentioned_bot": true});
        m.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        m
    };
    let (status, body) = server
        .post_message(&message("c1", json!({"message_type": "command"})))
        .await;
    assert_eq!(
        (status.as_u16(), body["reason"].clone()),
        (200, json!("command")),
        "{body}"
    );
    let (status, _) = server
        .post_message(&message("c2", json!({"message_type": "chat"})))
        .await;
    assert_eq!(status.as_u16(), 202, "the same text as chat is a turn");
    let (status, body) = server
        .post_message(&message("c3", json!({"message_type": "shout"})))
        .await;
    assert_eq!(status.as_u16(), 400, "{body}");
    server.stop().await;
}

/// A streamed reply (a test-double model writing one piece per release) shows as one message
/// edited as it grows under a tight edit bucket (the fake's: two per 2 s). Discord names a
/// bucket only in a 429, so at most one edit is refused; after it the edits wait for room or
/// are skipped, and the message ends with the whole text; nothing else is posted.
#[tokio::test]
async fn a_streamed_reply_is_one_message_edited_within_the_edit_bucket() {
    use crate::fake_streaming_model::{use_model, FakeStreamingModel, Script};
    let fake = FakeDiscord::start().await;
    fake.edit_bucket(2, Duration::from_secs(2));
    let script = Script {
        step_gated: true,
        ..Script::text(&["one ", "two ", "three ", "four ", "five"])
    };
    let model = FakeStreamingModel::start(script.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let token_env = env_var(TOKEN);
    let mut c = config(dir.path());
    one_turn_per_message(&mut c);
    use_model(&mut c, &model.base_url);
    c.channels.discord = Some(DiscordConfig {
        edit_interval_ms: 250,
        ..discord_config(&fake, &token_env)
    });
    let runtime = Runtime::builder().config(c).build().await.unwrap();
    let server = TestServer::serve(runtime, None).await;
    connected(&fake, 1).await;

    let (m1, msg) = addressed(&fake, "stream please");
    fake.post(msg);
    assert_eq!(replies(&fake, 1).await, vec![m1], "the preview replies");
    assert_eq!(fake.sent()[0].1["content"], json!("one "));
    for _ in 1..script.chunks.len() {
        model.release();
        // Paced past the edit interval, so the preview has edits to make.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let whole = script.whole();
    eventually_some(PATIENCE, "the whole text", || {
        let fake = fake.clone();
        let whole = whole.clone();
        async move { (fake.sent()[0].1["content"] == json!(whole)).then_some(()) }
    })
    .await;
    assert_eq!(fake.sent().len(), 1, "one message: {:?}", fake.sent());
    assert!(
        fake.edits_refused() <= 1,
        "{} edits refused",
        fake.edits_refused()
    );
    let edits: Vec<Value> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .map(|r| r.body)
        .collect();
    assert!(
        (1..=script.chunks.len()).contains(&edits.len()),
        "at most one edit per piece: {edits:?}"
    );
    for body in &edits {
        assert_eq!(body["allowed_mentions"]["parse"], json!([]), "{body}");
    }
    server.stop().await;
}
