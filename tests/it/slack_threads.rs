//! Thread starters of the Slack channel, through the real binary against the fake Slack and
//! a recording fake model (both test doubles on loopback): a reply in a thread shows the
//! thread's first message to the model once, read once with `conversations.replies`; the
//! thread's next messages do not read it again, nor does a restart after `kill -9`; a failed
//! read does not hold up the turn, and the thread's next message reads it again.

use serde_json::json;

use crate::fake_model::{Behaviour, FakeModel, Seen};
use crate::slack::{connected, disconnected, mention, CHANNEL, PATIENCE};
use crate::support::env_var;
use crate::support::fake_slack::{FakeSlack, APP_TOKEN, BOT_TOKEN};
use crate::support::{eventually_some, ServerProcess};

const PARENT_A: &str = "Shall we plan the offsite?";
const PARENT_B: &str = "Who has the release notes?";

fn toml(fake: &FakeSlack, model: &FakeModel) -> String {
    format!(
        "[model]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake\"\n\
         api_key_env = \"TURNSTILE_TEST_UNSET_KEY\"\n\
         [queue]\nmode = \"followup\"\ndebounce_ms = 0\n\
         [channels.slack]\nbot_token_env = \"{}\"\napp_token_env = \"{}\"\n\
         api_base = \"{}\"\nretry_backoff_ms = 20\nmax_retry_backoff_ms = 200\n",
        model.base_url,
        env_var(BOT_TOKEN),
        env_var(APP_TOKEN),
        fake.api_base
    )
}

/// Reads of a thread's first message alone (a catch-up's reads name `oldest`).
fn parent_reads(fake: &FakeSlack, thread: &str) -> usize {
    fake.calls("conversations.replies")
        .iter()
        .filter(|c| c.get("oldest").is_none() && c["ts"] == json!(thread))
        .count()
}

/// Posts a mention of the bot saying `text` in `thread`; returns the model request that
/// answered it.
async fn ask(fake: &FakeSlack, model: &FakeModel, thread: &str, text: &str) -> Seen {
    fake.post(CHANNEL, "U1", &mention(text), Some(thread));
    eventually_some(PATIENCE, &format!("the model asked about {text:?}"), || {
        let found = model
            .seen()
            .into_iter()
            .find(|s| s.last_user.contains(text));
        async move { found }
    })
    .await
}

#[tokio::test]
async fn a_thread_shows_its_first_message_read_once_and_a_failed_read_holds_up_nothing() {
    let fake = FakeSlack::start().await;
    let model = FakeModel::start(Behaviour::default()).await;
    let data = tempfile::tempdir().unwrap();
    let conf = tempfile::tempdir().unwrap();
    let config = toml(&fake, &model);
    let mut bin = ServerProcess::start(data.path(), conf.path(), &config).await;
    connected(&fake).await;

    // A message in the channel, not addressing the bot, and a mention in its thread: the
    // thread's session shows it once, labelled, before the message; one read.
    let a = fake.post(CHANNEL, "U2", PARENT_A, None);
    let seen = ask(&fake, &model, &a, "first in a").await;
    assert_eq!(seen.prompt.matches(PARENT_A).count(), 1, "{}", seen.prompt);
    let starter = seen
        .last_user
        .find(&format!("Thread started by U2: {PARENT_A}"));
    assert!(
        starter.is_some() && starter < seen.last_user.find("first in a"),
        "{}",
        seen.last_user
    );
    assert_eq!(parent_reads(&fake, &a), 1);
    // The thread's next message: shown again, not read again.
    let seen = ask(&fake, &model, &a, "second in a").await;
    assert_eq!(seen.prompt.matches(PARENT_A).count(), 1, "{}", seen.prompt);
    assert_eq!(parent_reads(&fake, &a), 1, "kept: not read again");

    // Another thread whose first read fails: the turn runs without it (the reply-thread
    // block may still show the message replied to, from what the channel recorded); the
    // next message reads it again and shows it, once.
    let b = fake.post(CHANNEL, "U3", PARENT_B, None);
    fake.fail_parent_reads(1);
    let seen = ask(&fake, &model, &b, "first in b").await;
    assert!(
        !seen.prompt.contains("Thread started by"),
        "{}",
        seen.prompt
    );
    assert_eq!(parent_reads(&fake, &b), 1);
    let seen = ask(&fake, &model, &b, "second in b").await;
    assert_eq!(seen.prompt.matches(PARENT_B).count(), 1, "{}", seen.prompt);
    assert_eq!(parent_reads(&fake, &b), 2);

    // kill -9 and a restart: the starter is kept with the session, shown, not read again.
    bin.kill9();
    let _ = bin.wait_exit(PATIENCE).await;
    disconnected(&fake).await;
    let mut bin = ServerProcess::start(data.path(), conf.path(), &config).await;
    connected(&fake).await;
    let seen = ask(&fake, &model, &a, "after the restart").await;
    assert_eq!(seen.prompt.matches(PARENT_A).count(), 1, "{}", seen.prompt);
    assert_eq!((parent_reads(&fake, &a), parent_reads(&fake, &b)), (1, 2));
    bin.stop().await;
}
