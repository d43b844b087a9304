//! Thread starters of the Discord channel against the fake Discord (a test double on
//! loopback): a thread session shows the message that started the thread, read once over
//! REST (a failed read does not hold up the turn and is tried again at the next message),
//! kept across a restart without being read again; a forum post's first message is its own
//! starter and is not read. A thread the channel does not know yet is asked of REST until it
//! answers: a failing lookup never files the thread's messages under another session.

use std::time::Duration;

use crate::discord::{connected, replies, server, CHANNEL, PATIENCE};
use crate::support::eventually_some;
use crate::support::fake_discord::{mentioning_bot, message_json, FakeDiscord, GUILD_ID};

const STARTER: &str = "Thread started by User 2: Shall we plan the offsite?";

/// Reads of message `id` in channel `channel`.
fn reads(fake: &FakeDiscord, channel: u64, id: u64) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path == format!("/channels/{channel}/messages/{id}"))
        .count()
}

/// Posts an addressed message in `thread` and returns the text of the bot's reply (the
/// fixed model answers with the final user message it was sent).
async fn ask(fake: &FakeDiscord, thread: u64, text: &str, answered: usize) -> String {
    let id = fake.next_id();
    fake.post(mentioning_bot(message_json(
        id,
        thread,
        Some(GUILD_ID),
        1,
        false,
        text,
    )));
    assert_eq!(replies(fake, answered).await.last(), Some(&id));
    fake.sent()[answered - 1].1["content"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Lookups of `GET /channels/{channel}` (is it a thread, of which channel).
fn lookups(fake: &FakeDiscord, channel: u64) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path == format!("/channels/{channel}"))
        .count()
}

#[tokio::test]
async fn a_thread_whose_lookup_fails_for_a_while_keeps_its_own_session() {
    let fake = FakeDiscord::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = server(&fake, dir.path()).await;
    connected(&fake, 1).await;
    // A thread no gateway event named: the channel asks what it is, and Discord fails thrice.
    let thread = fake.next_id();
    fake.add_thread(thread, CHANNEL);
    fake.fail_channel_reads(3);
    let reply = ask(&fake, thread, "in an unknown thread", 1).await;
    assert!(reply.contains("in an unknown thread"), "{reply}");
    assert_eq!(fake.sent()[0].0, thread, "answered in the thread");
    assert_eq!(lookups(&fake, thread), 4, "asked until Discord answered");
    let sessions: Vec<String> = server
        .runtime
        .sessions(None, 100)
        .unwrap()
        .iter()
        .map(|s| s.session_key.clone())
        .collect();
    assert_eq!(
        sessions,
        vec![format!(
            "agent:main:discord:channel:{CHANNEL}:thread:{thread}"
        )],
        "the thread's own session, not a channel's"
    );
    // Known now: not asked again.
    ask(&fake, thread, "again", 2).await;
    assert_eq!(lookups(&fake, thread), 4);
    server.stop().await;
}

#[tokio::test]
async fn a_thread_shows_its_starter_read_once_and_kept_across_a_restart() {
    let fake = FakeDiscord::start().await;
    let dir = tempfile::tempdir().unwrap();
    let first = server(&fake, dir.path()).await;
    connected(&fake, 1).await;
    // A message in the channel, not addressing the bot, starts a thread (same id).
    let thread = fake.next_id();
    fake.post(message_json(
        thread,
        CHANNEL,
        Some(GUILD_ID),
        2,
        false,
        "Shall we plan the offsite?",
    ));
    fake.add_thread(thread, CHANNEL);

    // The first read fails: the turn is answered without the starter.
    fake.fail_message_reads(1);
    let reply = ask(&fake, thread, "first", 1).await;
    assert!(
        reply.contains("first") && !reply.contains(STARTER),
        "{reply}"
    );
    assert_eq!(reads(&fake, CHANNEL, thread), 1);
    // The next message reads it again, and it shows, labelled, before the message.
    let reply = ask(&fake, thread, "second", 2).await;
    assert!(reply.contains("Thread starter (untrusted"), "{reply}");
    assert!(
        reply.find(STARTER).unwrap() < reply.find("second").unwrap(),
        "{reply}"
    );
    assert_eq!(reads(&fake, CHANNEL, thread), 2);
    // Kept: not read again.
    let reply = ask(&fake, thread, "third", 3).await;
    assert!(reply.contains(STARTER), "{reply}");
    assert_eq!(reads(&fake, CHANNEL, thread), 2);
    first.stop().await;

    // After a restart it is still kept with the session: shown, not read again.
    let resumes = fake.resumes();
    let second = server(&fake, dir.path()).await;
    eventually_some(PATIENCE, "the resumed session", || {
        let fake = fake.clone();
        async move { (fake.resumes() > resumes).then_some(()) }
    })
    .await;
    let reply = ask(&fake, thread, "after the restart", 4).await;
    assert!(reply.contains(STARTER), "{reply}");
    assert_eq!(reads(&fake, CHANNEL, thread), 2);
    assert_eq!(reads(&fake, thread, thread), 0, "the parent had it");
    second.stop().await;
}

#[tokio::test]
async fn a_forum_post_is_its_own_starter_and_a_thread_without_one_is_not_read_twice() {
    let fake = FakeDiscord::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = server(&fake, dir.path()).await;
    connected(&fake, 1).await;
    // A forum post: the thread's first message has the thread's id.
    let forum = 40;
    let post = fake.next_id();
    fake.add_thread(post, forum);
    fake.post(mentioning_bot(message_json(
        post,
        post,
        Some(GUILD_ID),
        1,
        false,
        "Bug: the app crashes",
    )));
    assert_eq!(replies(&fake, 1).await, vec![post]);
    let reply = ask(&fake, post, "any idea?", 2).await;
    // The post itself is in the session's history: not repeated as a starter block.
    assert!(!reply.contains("Thread started by"), "{reply}");
    assert_eq!(reads(&fake, forum, post) + reads(&fake, post, post), 0);

    // A thread started without a message: both places asked once, then never again.
    let bare = fake.next_id();
    fake.add_thread(bare, CHANNEL);
    let reply = ask(&fake, bare, "hello", 3).await;
    assert!(!reply.contains("Thread started by"), "{reply}");
    ask(&fake, bare, "again", 4).await;
    assert_eq!(
        (reads(&fake, CHANNEL, bare), reads(&fake, bare, bare)),
        (1, 1)
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.stop().await;
}
