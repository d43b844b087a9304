//! PluralKit in the Discord channel, against the fake Discord and a fake PluralKit API (both
//! test doubles on loopback): a proxied message is answered as its member's (the system's id as
//! sender) and its deleted original is not a second turn; an account's message that is not
//! proxied is answered after the wait, and a late repost of it is skipped; a plain webhook stays
//! a bot's message; a failed lookup leaves the original standing, and a failed account lookup
//! pauses holding; a message held across a graceful restart is settled from REST (still
//! there: answered once; deleted: not), and so is one held when the binary is killed; with no
//! wait the original is answered, its repost skipped.

use std::sync::Arc;
use std::time::Duration;

use crate::discord::{connected, replies, server_configured, CHANNEL, PATIENCE};
use crate::support::fake_discord::{
    mentioning_bot, message_json, webhook_json, FakeDiscord, GUILD_ID, TOKEN,
};
use crate::support::fake_pluralkit::FakePluralKit;
use crate::support::{env_var, eventually_some, FixedModel, ServerProcess, TestServer};

/// The account with a PluralKit system, and one without.
const PLURAL: u64 = 1;
const SINGLET: u64 = 2;
const WEBHOOK: u64 = 555;

async fn pk_server(
    fake: &FakeDiscord,
    pk: &FakePluralKit,
    dir: &std::path::Path,
    wait_ms: u64,
) -> TestServer {
    let base = pk.api_base.clone();
    let model = Arc::new(FixedModel {
        long_text: String::new(),
    });
    server_configured(fake, dir, model, move |d| {
        d.pluralkit = true;
        d.pluralkit_api_base = base;
        d.pluralkit_wait_ms = wait_ms;
    })
    .await
}

/// An addressed message from `account`; its id.
fn say(fake: &FakeDiscord, account: u64, text: &str) -> u64 {
    let id = fake.next_id();
    fake.post(mentioning_bot(message_json(
        id,
        CHANNEL,
        Some(GUILD_ID),
        account,
        false,
        text,
    )));
    id
}

/// PluralKit reposting `original` as `member`, addressed; the repost's id.
fn repost(fake: &FakeDiscord, pk: &FakePluralKit, original: u64, member: &str, text: &str) -> u64 {
    let id = fake.next_id();
    pk.proxy(id, original, PLURAL, member);
    fake.post(mentioning_bot(webhook_json(
        id, CHANNEL, WEBHOOK, member, text,
    )));
    id
}

fn content(fake: &FakeDiscord, i: usize) -> String {
    fake.sent()[i].1["content"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_proxied_message_is_the_members_and_its_original_is_not_a_second_turn() {
    let fake = FakeDiscord::start().await;
    let pk = FakePluralKit::start().await;
    pk.add_system(PLURAL, "exmpl");
    let dir = tempfile::tempdir().unwrap();
    let server = pk_server(&fake, &pk, dir.path(), 1_000).await;
    connected(&fake, 1).await;

    let original = say(&fake, PLURAL, "a: hello bot");
    let proxied = repost(&fake, &pk, original, "Ada", "hello bot");
    fake.delete(CHANNEL, original);
    assert_eq!(replies(&fake, 1).await, vec![proxied]);
    let reply = content(&fake, 0);
    assert!(reply.contains("Ada (id exmpl)"), "{reply}");
    assert!(!reply.contains("a: hello"), "{reply}");
    // Past the original's wait: it never becomes a turn.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(fake.sent().len(), 1, "one turn, the member's");
    let stats = server.runtime.preflight_stats();
    assert_eq!(stats.bot, 0, "the repost is not a bot's: {stats:?}");
    server.stop().await;
}

#[tokio::test]
async fn unproxied_messages_wait_then_stand_and_plain_webhooks_stay_bots() {
    let fake = FakeDiscord::start().await;
    let pk = FakePluralKit::start().await;
    pk.add_system(PLURAL, "exmpl");
    let dir = tempfile::tempdir().unwrap();
    let server = pk_server(&fake, &pk, dir.path(), 300).await;
    connected(&fake, 1).await;

    // An account without a system: not held.
    let first = say(&fake, SINGLET, "hi");
    assert_eq!(replies(&fake, 1).await, vec![first]);
    // An account with one, no proxy tags: answered as the account's once the wait ends.
    let plain = say(&fake, PLURAL, "no tags here");
    assert_eq!(replies(&fake, 2).await, vec![first, plain]);
    // A repost arriving after that is not a second turn; a webhook PluralKit does not know
    // is another bot's message.
    repost(&fake, &pk, plain, "Ada", "no tags here");
    let other = fake.next_id();
    fake.post(mentioning_bot(webhook_json(
        other,
        CHANNEL,
        777,
        "Notifier",
        "deploy done",
    )));
    let last = say(&fake, SINGLET, "still there?");
    assert_eq!(replies(&fake, 3).await, vec![first, plain, last]);
    // PluralKit failing to answer about a repost: the original stands.
    let held = say(&fake, PLURAL, "b: are you up?");
    pk.fail_next(1);
    repost(&fake, &pk, held, "Bea", "are you up?");
    assert_eq!(replies(&fake, 4).await, vec![first, plain, last, held]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(fake.sent().len(), 4);
    let stats = server.runtime.preflight_stats();
    assert_eq!(
        stats.bot, 2,
        "the notifier and the unresolved repost: {stats:?}"
    );
    let systems = pk
        .requests()
        .iter()
        .filter(|r| r.starts_with("/systems/"))
        .count();
    assert_eq!(systems, 2, "each account asked once: {:?}", pk.requests());
    server.stop().await;
}

#[tokio::test]
async fn messages_held_across_a_restart_are_settled_from_rest() {
    let fake = FakeDiscord::start().await;
    let pk = FakePluralKit::start().await;
    pk.add_system(PLURAL, "exmpl");
    let dir = tempfile::tempdir().unwrap();
    let first = pk_server(&fake, &pk, dir.path(), 10_000).await;
    connected(&fake, 1).await;
    let kept = say(&fake, PLURAL, "still here after the restart");
    let gone = say(&fake, PLURAL, "c: proxied while we were away");
    // Both held (PluralKit was asked about the account), then a graceful stop.
    let marker = say(&fake, SINGLET, "marker");
    assert_eq!(replies(&fake, 1).await, vec![marker]);
    first.stop().await;
    // PluralKit deleted one of them meanwhile.
    fake.delete(CHANNEL, gone);

    let second = pk_server(&fake, &pk, dir.path(), 10_000).await;
    assert_eq!(replies(&fake, 2).await, vec![marker, kept]);
    let after = say(&fake, SINGLET, "after");
    assert_eq!(replies(&fake, 3).await, vec![marker, kept, after]);
    eventually_some(PATIENCE, "the restarted session", || {
        let fake = fake.clone();
        async move { (fake.resumes() >= 1).then_some(()) }
    })
    .await;
    assert_eq!(fake.sent().len(), 3, "the deleted one is not answered");
    second.stop().await;
}

#[tokio::test]
async fn with_no_wait_the_original_is_answered_and_its_repost_skipped() {
    let fake = FakeDiscord::start().await;
    let pk = FakePluralKit::start().await;
    pk.add_system(PLURAL, "exmpl");
    let dir = tempfile::tempdir().unwrap();
    let server = pk_server(&fake, &pk, dir.path(), 0).await;
    connected(&fake, 1).await;
    let original = say(&fake, PLURAL, "a: quick");
    assert_eq!(replies(&fake, 1).await, vec![original]);
    repost(&fake, &pk, original, "Ada", "quick");
    let last = say(&fake, SINGLET, "next");
    assert_eq!(replies(&fake, 2).await, vec![original, last]);
    assert!(
        !pk.requests().iter().any(|r| r.starts_with("/systems/")),
        "nothing waits, so no account is asked about"
    );
    server.stop().await;
}

#[tokio::test]
async fn while_pluralkit_fails_nobody_is_held_or_asked_about_again() {
    let fake = FakeDiscord::start().await;
    let pk = FakePluralKit::start().await;
    pk.add_system(PLURAL, "exmpl");
    let dir = tempfile::tempdir().unwrap();
    // The account lookup fails: neither message is held (both answered without the 10 s
    // wait), and the second does not ask PluralKit again while lookups are paused.
    let server = pk_server(&fake, &pk, dir.path(), 10_000).await;
    connected(&fake, 1).await;
    pk.fail_next(1);
    let a = say(&fake, PLURAL, "one");
    let b = say(&fake, PLURAL, "two");
    assert_eq!(replies(&fake, 2).await, vec![a, b]);
    assert_eq!(
        pk.requests(),
        vec![format!("/systems/{PLURAL}")],
        "asked once, then paused"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_message_held_when_the_binary_is_killed_is_answered_once_after_the_restart() {
    let fake = FakeDiscord::start().await;
    let pk = FakePluralKit::start().await;
    pk.add_system(PLURAL, "exmpl");
    let token_env = env_var(TOKEN);
    let data = tempfile::tempdir().unwrap();
    let conf = tempfile::tempdir().unwrap();
    let toml = format!(
        "[queue]\nmode = \"followup\"\ndebounce_ms = 0\n\
         [channels.discord]\ntoken_env = \"{token_env}\"\napi_base = \"{}\"\n\
         retry_backoff_ms = 20\nmax_retry_backoff_ms = 200\n\
         pluralkit = true\npluralkit_api_base = \"{}\"\npluralkit_wait_ms = 10000\n",
        fake.api_base, pk.api_base
    );
    let mut bin = ServerProcess::start(data.path(), conf.path(), &toml).await;
    connected(&fake, 1).await;
    let held = say(&fake, PLURAL, "held when killed");
    let marker = say(&fake, SINGLET, "marker");
    assert_eq!(replies(&fake, 1).await, vec![marker]);
    bin.kill9();
    let _ = bin.wait_exit(PATIENCE).await;
    let mut bin = ServerProcess::start(data.path(), conf.path(), &toml).await;
    assert_eq!(replies(&fake, 2).await, vec![marker, held]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.sent().len(), 2, "answered once");
    bin.stop().await;
}
