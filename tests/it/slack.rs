//! The Slack channel against the fake Slack (`tests/support/fake_slack.rs`, a test double on
//! loopback): a mention in a channel answered in its thread, chatter and commands not
//! answered, a DM, a thread as its own session, `<!channel>` in the model's answer escaped,
//! long answers in pieces; envelopes acknowledged and a redelivered one (and a message's
//! `app_mention` twin) handled once; a 429 backed off for its `Retry-After`; a disconnect
//! mid-burst and restarts of the real binary (graceful and `kill -9`) caught up through
//! `conversations.history`/`replies` — every message answered exactly once, in order; an
//! outage of 250 messages (and 40 thread replies), and 250 posted while the binary was
//! killed, read back page by page through `next_cursor`, and past `catch_up_max_per_conversation` the newest answered with the cursor
//! left past them; the HTTP Events API's signature and `url_verification`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use turnstile::config::{SlackConfig, SlackMode};
use turnstile::Runtime;

use crate::support::fake_slack::{FakeSlack, APP_TOKEN, BOT_TOKEN, BOT_USER};
use crate::support::{
    config, env_var, eventually_some, one_turn_per_message, FixedModel, ServerProcess, TestServer,
};

pub(crate) const CHANNEL: &str = "C20";
pub(crate) const PATIENCE: Duration = Duration::from_secs(20);

fn slack_config(fake: &FakeSlack) -> SlackConfig {
    SlackConfig {
        bot_token_env: env_var(BOT_TOKEN),
        app_token_env: env_var(APP_TOKEN),
        api_base: fake.api_base.clone(),
        retry_backoff_ms: 20,
        max_retry_backoff_ms: 200,
        ..SlackConfig::default()
    }
}

async fn server_with(dir: &std::path::Path, slack: SlackConfig) -> TestServer {
    server_queueing(dir, slack, 20).await
}

/// A server whose sessions queue up to `queue_cap` messages (a catch-up hands a burst to
/// one session at once; past `[queue] cap` the session would summarize the oldest).
async fn server_queueing(
    dir: &std::path::Path,
    slack: SlackConfig,
    queue_cap: usize,
) -> TestServer {
    let mut c = config(dir);
    one_turn_per_message(&mut c);
    c.queue.cap = queue_cap;
    c.channels.slack = Some(slack);
    let runtime = Runtime::builder()
        .config(c)
        .model(Arc::new(FixedModel {
            long_text: "y".repeat(4_500),
        }))
        .build()
        .await
        .unwrap();
    TestServer::serve(runtime, None).await
}

pub(crate) async fn connected(fake: &FakeSlack) {
    eventually_some(PATIENCE, "the socket mode connection", || {
        let fake = fake.clone();
        async move { fake.is_live().then_some(()) }
    })
    .await;
}

/// Waits until the fake Slack sees the server's connection gone (a stop or a kill).
pub(crate) async fn disconnected(fake: &FakeSlack) {
    eventually_some(PATIENCE, "the connection closed", || {
        let fake = fake.clone();
        async move { (!fake.is_live()).then_some(()) }
    })
    .await;
}

/// Waits until the bot has sent `n` messages; returns them, oldest first.
pub(crate) async fn sent(fake: &FakeSlack, n: usize) -> Vec<(String, Value)> {
    eventually_some(PATIENCE, &format!("{n} bot messages"), || {
        let fake = fake.clone();
        async move {
            let sent = fake.sent();
            (sent.len() >= n).then_some(sent)
        }
    })
    .await
}

/// The threads the bot's first `n` messages went to, in order.
async fn reply_threads(fake: &FakeSlack, n: usize) -> Vec<String> {
    sent(fake, n)
        .await
        .iter()
        .map(|(_, m)| m["thread_ts"].as_str().unwrap_or("").to_string())
        .collect()
}

async fn metrics(url: String) -> String {
    reqwest::get(url).await.unwrap().text().await.unwrap()
}

pub(crate) fn mention(text: &str) -> String {
    format!("<@{BOT_USER}> {text}")
}

#[tokio::test]
async fn mentions_are_answered_in_thread_dms_inline_and_threads_are_sessions() {
    let fake = FakeSlack::start().await;
    fake.set_type("D1", "im");
    let dir = tempfile::tempdir().unwrap();
    let server = server_with(dir.path(), slack_config(&fake)).await;
    connected(&fake).await;

    // A mention in a channel: answered in a thread under it; `<!channel>` pings nobody.
    let m1 = fake.post(CHANNEL, "U1", &mention("<!channel> hello"), None);
    let first = sent(&fake, 1).await;
    let (channel, reply) = &first[0];
    assert_eq!(channel, CHANNEL);
    assert_eq!(reply["thread_ts"], json!(m1));
    let text = reply["text"].as_str().unwrap();
    assert!(text.contains("&lt;!channel&gt; hello"), "{text}");
    assert!(!text.contains("<!channel>"), "{text}");
    let post = &fake.calls("chat.postMessage")[0];
    assert_eq!(post["link_names"], json!(false));

    // Chatter, a `/help` text and a slash command are not answered.
    fake.post(CHANNEL, "U1", "just talking", None);
    fake.post(CHANNEL, "U1", &mention("/help"), None);
    fake.slash_command(CHANNEL, "U1", "/ask", "anything");
    // A reply in the bot's thread needs no mention: its own session, answered in the thread.
    let t1 = fake.post(CHANNEL, "U2", "and then?", Some(&m1));
    // A DM: answered inline.
    let d1 = fake.post("D1", "U3", "psst", None);
    let all = sent(&fake, 3).await;
    let thread_reply = all
        .iter()
        .find(|(c, m)| c == CHANNEL && m["text"].as_str().unwrap().contains("and then?"))
        .expect("the thread reply");
    assert_eq!(thread_reply.1["thread_ts"], json!(m1));
    let dm = all.iter().find(|(c, _)| c == "D1").expect("the DM reply");
    assert!(dm.1.get("thread_ts").is_none(), "{}", dm.1);
    assert!(dm.1["text"].as_str().unwrap().contains("psst"));
    let key = format!("agent:main:slack:channel:c20:thread:{m1}");
    assert!(server.runtime.session(&key).unwrap().is_some(), "{key}");
    assert!(server
        .runtime
        .session("agent:main:slack:channel:c20")
        .unwrap()
        .is_some());
    let _ = (t1, d1);

    // A long answer: pieces of 4,000 characters, all in the thread.
    let m5 = fake.post(CHANNEL, "U1", &mention("long one"), None);
    let all = sent(&fake, 5).await;
    let parts: Vec<&Value> = all[3..].iter().map(|(_, m)| m).collect();
    assert!(
        parts.iter().all(|m| m["thread_ts"] == json!(m5)),
        "{all:#?}"
    );
    let joined: String = parts.iter().map(|m| m["text"].as_str().unwrap()).collect();
    assert_eq!(joined, "y".repeat(4_500));

    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.sent().len(), 5, "nothing else answered");
    let stats = server.runtime.preflight_stats();
    assert_eq!((stats.no_mention, stats.command), (1, 2), "{stats:?}");
    // Every envelope was acknowledged.
    let acks = fake.acks();
    for id in fake.envelope_ids() {
        assert!(acks.contains(&id), "{id} not acknowledged");
    }
    let text = metrics(server.url("/metrics")).await;
    assert!(
        text.contains("turnstile_channel_skipped_total{channel=\"slack\",reason=\"own\"}"),
        "{text}"
    );
    // (The connection state is a process-wide gauge other tests here move too.)
    assert!(
        text.contains("turnstile_channel_connection{channel=\"slack\",state=\"connected\"}"),
        "{text}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_redelivered_envelope_and_an_app_mention_twin_are_handled_once() {
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = server_with(dir.path(), slack_config(&fake)).await;
    connected(&fake).await;
    // A mention comes as a `message` and an `app_mention` envelope; then Slack, having seen
    // no ack in time, sends the last one again.
    let m1 = fake.post(CHANNEL, "U1", &mention("once please"), None);
    fake.redeliver_last();
    assert_eq!(reply_threads(&fake, 1).await, vec![m1]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.sent().len(), 1, "answered once");
    let text = metrics(server.url("/metrics")).await;
    assert!(
        text.contains("turnstile_channel_skipped_total{channel=\"slack\",reason=\"duplicate\"}"),
        "{text}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_429_is_backed_off_for_its_retry_after() {
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut slack = slack_config(&fake);
    slack.max_retry_backoff_ms = 5_000;
    // The final send's back-off is the subject: no preview to take the 429 first.
    slack.stream_edits = false;
    let server = server_with(dir.path(), slack).await;
    connected(&fake).await;
    fake.rate_limit_next_posts(1, 1);
    let m1 = fake.post(CHANNEL, "U1", &mention("hi"), None);
    assert_eq!(reply_threads(&fake, 1).await, vec![m1.clone()]);
    let posts: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "chat.postMessage")
        .collect();
    assert_eq!(posts.len(), 2, "one refused, one accepted");
    let waited = posts[1].at - posts[0].at;
    assert!(waited >= Duration::from_millis(950), "{waited:?}");
    assert_eq!(posts[0].body, posts[1].body, "the same message again");
    let text = metrics(server.url("/metrics")).await;
    assert!(
        text.contains("turnstile_channel_rate_limit_waits_total{channel=\"slack\"}"),
        "{text}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_disconnect_mid_burst_loses_nothing_and_answers_nothing_twice() {
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = server_with(dir.path(), slack_config(&fake)).await;
    connected(&fake).await;
    let mut ids = Vec::new();
    for i in 0..10 {
        if i == 4 {
            fake.disconnect("refresh_requested");
        }
        if i == 7 {
            // And once more without a word (a dropped connection).
            fake.drop_connection();
        }
        ids.push(fake.post(CHANNEL, "U1", &mention(&format!("burst {i}")), None));
    }
    assert_eq!(reply_threads(&fake, 10).await, ids);
    assert!(fake.opens() >= 2, "reconnected");
    assert_eq!(fake.max_open_connections(), 1, "one connection at a time");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.sent().len(), 10, "nothing answered twice");
    let history = fake.calls("conversations.history");
    assert!(!history.is_empty(), "caught up");
    assert!(history.iter().all(|h| h["channel"] == json!(CHANNEL)));
    let text = metrics(server.url("/metrics")).await;
    assert!(
        text.contains("turnstile_channel_reconnects_total{channel=\"slack\"}"),
        "{text}"
    );
    server.stop().await;
}

#[tokio::test]
async fn restarts_of_the_binary_catch_up_through_history_exactly_once() {
    let fake = FakeSlack::start().await;
    let bot_env = env_var(BOT_TOKEN);
    let app_env = env_var(APP_TOKEN);
    let data = tempfile::tempdir().unwrap();
    let conf = tempfile::tempdir().unwrap();
    let toml = format!(
        "[queue]\nmode = \"followup\"\ndebounce_ms = 0\n\
         [channels.slack]\nbot_token_env = \"{bot_env}\"\napp_token_env = \"{app_env}\"\n\
         api_base = \"{}\"\nretry_backoff_ms = 20\nmax_retry_backoff_ms = 200\n",
        fake.api_base
    );
    let mut bin = ServerProcess::start(data.path(), conf.path(), &toml).await;
    connected(&fake).await;
    let m1 = fake.post(CHANNEL, "U1", &mention("first"), None);
    let mut expected = vec![m1.clone()];
    assert_eq!(reply_threads(&fake, 1).await, expected);

    // A graceful stop; meanwhile two mentions and a reply in the bot's thread, which no
    // socket delivers.
    bin.stop().await;
    disconnected(&fake).await;
    let a = fake.post(CHANNEL, "U1", &mention("while stopped 0"), None);
    let b = fake.post(CHANNEL, "U1", &mention("while stopped 1"), None);
    fake.post(CHANNEL, "U2", "in the thread meanwhile", Some(&m1));
    let mut bin = ServerProcess::start(data.path(), conf.path(), &toml).await;
    let sent_now = sent(&fake, 4).await;
    let mut threads: Vec<String> = sent_now[1..]
        .iter()
        .map(|(_, m)| m["thread_ts"].as_str().unwrap().to_string())
        .collect();
    threads.sort();
    let mut want = vec![a.clone(), b.clone(), m1.clone()];
    want.sort();
    assert_eq!(threads, want);
    expected.extend([a, b]);
    let history = fake.calls("conversations.history");
    assert!(
        history
            .iter()
            .any(|h| h["channel"] == json!(CHANNEL) && h["oldest"] == json!(m1)),
        "read back from the newest message handled: {history:?}"
    );
    assert!(fake
        .calls("conversations.replies")
        .iter()
        .any(|r| r["ts"] == json!(m1)));

    // kill -9 this time; the restart catches up again, from where the last one left.
    bin.kill9();
    let _ = bin.wait_exit(PATIENCE).await;
    disconnected(&fake).await;
    for i in 0..2 {
        expected.push(fake.post(CHANNEL, "U1", &mention(&format!("while killed {i}")), None));
    }
    let mut bin = ServerProcess::start(data.path(), conf.path(), &toml).await;
    let all = sent(&fake, 6).await;
    let last: Vec<String> = all[4..]
        .iter()
        .map(|(_, m)| m["thread_ts"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(last, expected[3..].to_vec(), "in order");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(fake.sent().len(), 6, "nothing answered twice");
    let url = bin.url("/metrics");
    eventually_some(PATIENCE, "the caught-up count", || {
        let url = url.clone();
        async move {
            metrics(url)
                .await
                .contains("turnstile_channel_caught_up_total{channel=\"slack\"}")
                .then_some(())
        }
    })
    .await;
    bin.stop().await;
}

#[tokio::test]
async fn the_http_events_api_checks_signatures_and_answers_at_once() {
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().unwrap();
    let secret = "fake-signing-secret";
    let mut slack = slack_config(&fake);
    slack.mode = SlackMode::Http;
    slack.signing_secret_env = env_var(secret);
    let server = server_with(dir.path(), slack).await;
    let url = server.url("/v1/channels/slack/events");
    let client = reqwest::Client::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    let send = |body: Value, ts: String, sig: Option<String>| {
        let client = client.clone();
        let url = url.clone();
        async move {
            let body = body.to_string();
            let sig = sig.unwrap_or_else(|| {
                turnstile::channels::slack_sign(secret.as_bytes(), &ts, body.as_bytes())
            });
            let r = client
                .post(url)
                .header("x-slack-request-timestamp", ts)
                .header("x-slack-signature", sig)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let challenge = json!({"type": "url_verification", "challenge": "c-123", "token": "x"});
    let (status, body) = send(challenge.clone(), now.clone(), None).await;
    assert_eq!((status, body), (200, json!({"challenge": "c-123"})));
    let (status, _) = send(challenge.clone(), now.clone(), Some("v0=00".into())).await;
    assert_eq!(status, 401);
    let stale = (now.parse::<u64>().unwrap() - 600).to_string();
    let (status, _) = send(challenge, stale, None).await;
    assert_eq!(status, 401, "older than five minutes");

    let ts = fake.next_ts();
    let event = json!({"type": "event_callback", "team_id": "T1", "event_id": "EvH1",
        "event": {"type": "app_mention", "channel": CHANNEL, "user": "U1",
                  "text": mention("over http"), "ts": ts}});
    let (status, _) = send(event.clone(), now.clone(), None).await;
    assert_eq!(status, 200);
    // Slack's retry of the same event: acknowledged, not answered again.
    let (status, _) = send(event, now, None).await;
    assert_eq!(status, 200);
    assert_eq!(reply_threads(&fake, 1).await, vec![ts]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.sent().len(), 1);
    assert_eq!(fake.opens(), 0, "no socket mode in http mode");
    server.stop().await;
}

#[tokio::test]
async fn a_refused_app_token_or_link_disabled_stops_the_channel_with_its_reason() {
    // A wrong app-level token: `apps.connections.open` refuses it for good.
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut slack = slack_config(&fake);
    slack.app_token_env = env_var("xapp-not-the-right-one");
    let server = server_with(dir.path(), slack).await;
    let url = server.url("/metrics");
    let text = eventually_some(PATIENCE, "the stopped state", || {
        let url = url.clone();
        async move {
            let text = metrics(url).await;
            text.contains("invalid_auth").then_some(text)
        }
    })
    .await;
    assert!(text.contains("channel=\"slack\",reason="), "{text}");
    assert!(text.contains("state=\"stopped\""), "{text}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        fake.calls("apps.connections.open").len(),
        1,
        "no retry loop"
    );
    server.stop().await;

    // Socket Mode turned off for the app while connected.
    let fake = FakeSlack::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = server_with(dir.path(), slack_config(&fake)).await;
    connected(&fake).await;
    fake.disconnect("link_disabled");
    let url = server.url("/metrics");
    eventually_some(PATIENCE, "the stopped state", || {
        let url = url.clone();
        async move { metrics(url).await.contains("link_disabled").then_some(()) }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.opens(), 1, "not reconnected");
    server.stop().await;
}

/// A streamed reply (a test-double model writing one piece per release) shows as one message
/// in the thread, edited with `chat.update` as it grows, and ends with the whole text; nothing
/// else is posted.
#[tokio::test]
async fn a_streamed_reply_is_one_message_edited_as_it_grows() {
    use crate::fake_streaming_model::{use_model, FakeStreamingModel, Script};
    let fake = FakeSlack::start().await;
    let script = Script {
        step_gated: true,
        ..Script::text(&["one ", "two ", "three ", "four ", "<!here> five"])
    };
    let model = FakeStreamingModel::start(script.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    one_turn_per_message(&mut c);
    use_model(&mut c, &model.base_url);
    c.channels.slack = Some(SlackConfig {
        edit_interval_ms: 250,
        ..slack_config(&fake)
    });
    let runtime = Runtime::builder().config(c).build().await.unwrap();
    let server = TestServer::serve(runtime, None).await;
    connected(&fake).await;

    let m1 = fake.post(CHANNEL, "U1", &mention("stream please"), None);
    let first = sent(&fake, 1).await;
    assert_eq!(first[0].1["text"], json!("one "));
    assert_eq!(
        first[0].1["thread_ts"],
        json!(m1),
        "the preview is in the thread"
    );
    for _ in 1..script.chunks.len() {
        model.release();
        // Paced past the edit interval, so the preview has edits to make.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let whole = "one two three four &lt;!here&gt; five";
    eventually_some(PATIENCE, "the whole text", || {
        let fake = fake.clone();
        async move { (fake.sent()[0].1["text"] == json!(whole)).then_some(()) }
    })
    .await;
    assert_eq!(fake.sent().len(), 1, "one message: {:?}", fake.sent());
    let updates = fake
        .requests()
        .iter()
        .filter(|r| r.method == "chat.update")
        .count();
    assert!(
        (2..=script.chunks.len()).contains(&updates),
        "edits while streaming and a last one, at most one per piece: {updates}"
    );
    server.stop().await;
}

/// The marker of message `i` of a burst (`kind` tells bursts apart), found back in the
/// bot's answer to it.
fn marker(kind: char, i: usize) -> String {
    format!("[{kind}{i:03}]")
}

/// The markers of burst `kind` the bot's answers in thread `thread` answer, in the order
/// sent. An answer echoes its request, whose context block may quote earlier messages: the
/// message answered is the one quoted last.
fn markers(sent: &[(String, Value)], thread: &str, kind: char, n: usize) -> Vec<usize> {
    sent.iter()
        .filter(|(_, m)| m["thread_ts"] == json!(thread))
        .filter_map(|(_, m)| {
            let text = m["text"].as_str().unwrap_or("");
            (0..n)
                .max_by_key(|i| text.rfind(&marker(kind, *i)).map(|at| at + 1).unwrap_or(0))
                .filter(|i| text.contains(&marker(kind, *i)))
        })
        .collect()
}

#[tokio::test]
async fn an_outage_of_250_messages_is_caught_up_page_by_page_in_order() {
    let fake = FakeSlack::start().await;
    // Pages smaller than asked for, as Slack answers some apps: only `next_cursor` reaches
    // everything.
    fake.cap_pages(15);
    let dir = tempfile::tempdir().unwrap();
    let server = server_queueing(dir.path(), slack_config(&fake), 1_000).await;
    connected(&fake).await;
    let m1 = fake.post(CHANNEL, "U1", &mention("first"), None);
    assert_eq!(reply_threads(&fake, 1).await, vec![m1.clone()]);

    // The channel hears nothing of these (an outage): 250 mentions, and 40 replies in the
    // bot's thread.
    let mut top = Vec::new();
    for i in 0..250 {
        top.push(fake.post_unseen(CHANNEL, "U1", &mention(&marker('m', i)), None));
    }
    for i in 0..40 {
        fake.post_unseen(CHANNEL, "U2", &marker('t', i), Some(&m1));
    }
    fake.disconnect("refresh_requested");

    let all = eventually_some(Duration::from_secs(120), "291 bot messages", || {
        let fake = fake.clone();
        async move {
            let sent = fake.sent();
            (sent.len() >= 291).then_some(sent)
        }
    })
    .await;
    let threads: Vec<String> = all[1..]
        .iter()
        .map(|(_, m)| m["thread_ts"].as_str().unwrap_or("").to_string())
        .filter(|t| *t != m1)
        .collect();
    assert_eq!(threads, top, "every mention answered once, in order");
    let in_thread = markers(&all[1..], &m1, 't', 40);
    assert_eq!(
        in_thread,
        (0..40).collect::<Vec<_>>(),
        "every thread reply, in order"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(fake.sent().len(), 291, "nothing answered twice");
    let history = fake.calls("conversations.history");
    assert!(
        history.iter().filter(|h| h["cursor"].is_string()).count() >= 16,
        "followed next_cursor: {}",
        history.len()
    );
    assert!(fake
        .calls("conversations.replies")
        .iter()
        .any(|r| r["cursor"].is_string()));
    server.stop().await;
}

#[tokio::test]
async fn past_its_bound_a_catch_up_answers_the_newest_and_its_cursor_holds() {
    let fake = FakeSlack::start().await;
    fake.cap_pages(15);
    let dir = tempfile::tempdir().unwrap();
    let slack = SlackConfig {
        catch_up_max_per_conversation: 100,
        ..slack_config(&fake)
    };
    let server = server_queueing(dir.path(), slack, 1_000).await;
    connected(&fake).await;
    let m1 = fake.post(CHANNEL, "U1", &mention("first"), None);
    assert_eq!(reply_threads(&fake, 1).await, vec![m1.clone()]);
    let mut top = Vec::new();
    for i in 0..250 {
        top.push(fake.post_unseen(CHANNEL, "U1", &mention(&marker('m', i)), None));
    }
    fake.disconnect("refresh_requested");
    let all = sent(&fake, 101).await;
    let threads: Vec<String> = all[1..]
        .iter()
        .map(|(_, m)| m["thread_ts"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(threads, top[150..].to_vec(), "the newest 100, in order");

    // The cursor is past them: a later message and another catch-up answer only it.
    let late = fake.post(CHANNEL, "U1", &mention("after"), None);
    fake.disconnect("refresh_requested");
    let all = sent(&fake, 102).await;
    assert_eq!(all[101].1["thread_ts"], json!(late));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(fake.sent().len(), 102, "nothing read back twice");
    server.stop().await;
}

#[tokio::test]
async fn a_restart_after_250_messages_answers_each_once_in_order() {
    let fake = FakeSlack::start().await;
    fake.cap_pages(15);
    let data = tempfile::tempdir().unwrap();
    let conf = tempfile::tempdir().unwrap();
    let toml = format!(
        "[queue]\nmode = \"followup\"\ndebounce_ms = 0\ncap = 1000\n\
         [channels.slack]\nbot_token_env = \"{}\"\napp_token_env = \"{}\"\n\
         api_base = \"{}\"\nretry_backoff_ms = 20\nmax_retry_backoff_ms = 200\n",
        env_var(BOT_TOKEN),
        env_var(APP_TOKEN),
        fake.api_base
    );
    let mut bin = ServerProcess::start(data.path(), conf.path(), &toml).await;
    connected(&fake).await;
    let m1 = fake.post(CHANNEL, "U1", &mention("first"), None);
    assert_eq!(reply_threads(&fake, 1).await, vec![m1.clone()]);
    bin.kill9();
    let _ = bin.wait_exit(PATIENCE).await;
    disconnected(&fake).await;
    let mut expected = vec![m1];
    for i in 0..250 {
        expected.push(fake.post(CHANNEL, "U1", &mention(&marker('m', i)), None));
    }
    let mut bin = ServerProcess::start(data.path(), conf.path(), &toml).await;
    let all = eventually_some(Duration::from_secs(120), "251 bot messages", || {
        let fake = fake.clone();
        async move {
            let sent = fake.sent();
            (sent.len() >= 251).then_some(sent)
        }
    })
    .await;
    let threads: Vec<String> = all
        .iter()
        .map(|(_, m)| m["thread_ts"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(threads, expected, "every one answered once, in order");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(fake.sent().len(), 251, "nothing answered twice");
    bin.stop().await;
}
