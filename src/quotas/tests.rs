use super::*;
use crate::config::{Config, StorageConfig};
use crate::inbound::{ChatKind, MessageKind, Sender};
use crate::quotas::usage::MINUTE_MS;

fn message(channel: &str, chat: &str, sender: &str) -> InboundMessage {
    InboundMessage {
        channel: channel.into(),
        account_id: "default".into(),
        chat_kind: ChatKind::Group,
        chat_id: chat.into(),
        thread_id: None,
        message_id: "m".into(),
        sender: Sender {
            id: sender.into(),
            name: String::new(),
            is_bot: false,
        },
        text: "hi".into(),
        mentions: vec![],
        mentioned_bot: true,
        reply_to: None,
        timestamp_ms: 0,
        attachments: vec![],
        kind: MessageKind::Message,
    }
}

fn store(dir: &std::path::Path) -> Store {
    Store::open(&StorageConfig {
        data_dir: dir.to_path_buf(),
        cache_capacity_bytes: 1 << 20,
        ..StorageConfig::default()
    })
    .unwrap()
}

fn quotas(toml: &str, store: Store) -> Quotas {
    Quotas::new(&Config::parse(toml).unwrap().quotas, store)
}

const KEY: &str = "agent:main:slack:group:c1";
const T: u64 = 1_000_000_000;

/// Sends `msg` the way admission does; true when accepted.
fn send(q: &Quotas, msg: &InboundMessage, now: u64) -> bool {
    match q.check(msg, KEY, now).unwrap() {
        Ok(()) => {
            q.take(msg, KEY, now).unwrap();
            true
        }
        Err(_) => false,
    }
}

#[tokio::test]
async fn the_most_specific_rule_applies_per_subject() {
    let dir = tempfile::tempdir().unwrap();
    let q = quotas(
        "[[quotas]]\nmatch = { chat = \"*\" }\nmessages_per_minute = 100\n\
         [[quotas]]\nmatch = { sender = \"*\" }\nmessages_per_minute = 2\n\
         [[quotas]]\nmatch = { sender = \"slack:vip\" }\nmessages_per_minute = 5\n",
        store(dir.path()),
    );
    let alice = message("slack", "C1", "alice");
    let bob = message("slack", "C1", "Bob");
    let vip = message("slack", "C1", "VIP");
    assert!(send(&q, &alice, T) && send(&q, &alice, T));
    assert!(!send(&q, &alice, T), "alice's own bucket is empty");
    assert!(send(&q, &bob, T) && send(&q, &bob, T), "bob has his own");
    for _ in 0..5 {
        assert!(send(&q, &vip, T), "the exact rule beats \"*\"");
    }
    assert!(!send(&q, &vip, T));
    assert_eq!(
        q.usage("sender:slack:bob").unwrap().map(|u| u.bucket_at_ms),
        Some(T)
    );
    // Another channel's sender with the same id is another subject.
    assert!(send(&q, &message("telegram", "C1", "alice"), T));
}

#[tokio::test]
async fn a_notice_once_per_window_and_drop_rules_stay_silent() {
    let dir = tempfile::tempdir().unwrap();
    let q = quotas(
        "[[quotas]]\nmatch = { sender = \"a\" }\nmessages_per_minute = 1\nnotice = \"slow down\"\n\
         [[quotas]]\nmatch = { sender = \"b\" }\nmessages_per_minute = 1\nover = \"drop\"\n",
        store(dir.path()),
    );
    let a = message("slack", "C1", "a");
    assert!(send(&q, &a, T));
    let first = q.check(&a, KEY, T + 1).unwrap().unwrap_err();
    assert_eq!(first.notice.as_deref(), Some("slow down"));
    assert_eq!(first.limit, "messages");
    assert_eq!(first.subject, "sender:slack:a");
    assert_eq!(q.check(&a, KEY, T + 2).unwrap().unwrap_err().notice, None);
    let b = message("slack", "C1", "b");
    assert!(send(&q, &b, T));
    assert_eq!(q.check(&b, KEY, T + 1).unwrap().unwrap_err().notice, None);
    let stats = q.stats();
    assert_eq!(stats.refused_messages, 3);
    assert_eq!(stats.top[0].subject, "sender:slack:a");
    assert_eq!(stats.top[0].refused, 2);
}

#[tokio::test]
async fn tokens_per_day_refuse_after_the_turns_that_used_them() {
    let dir = tempfile::tempdir().unwrap();
    let q = quotas(
        "[[quotas]]\nmatch = { agent = \"main\" }\ntokens_per_day = 1000\n",
        store(dir.path()),
    );
    let m = message("slack", "C1", "a");
    assert!(send(&q, &m, T));
    q.charge_tokens(&m, KEY, 999, T).unwrap();
    assert!(send(&q, &m, T), "999 of 1000");
    q.charge_tokens(&m, KEY, 5, T).unwrap();
    let refused = q.check(&m, KEY, T).unwrap().unwrap_err();
    assert_eq!(refused.limit, "tokens");
    assert_eq!(refused.subject, "agent:main");
    // Another agent's sessions are not this rule's.
    assert!(q.check(&m, "agent:ops:slack:group:c1", T).unwrap().is_ok());
    assert!(send(&q, &m, T + usage::DAY_MS), "a new UTC day");
}

#[tokio::test]
async fn usage_survives_a_restart_and_a_reset_clears_it() {
    let dir = tempfile::tempdir().unwrap();
    let rules = "[[quotas]]\nmatch = { sender = \"*\" }\nmessages_per_minute = 1\n";
    let m = message("slack", "C1", "a");
    {
        let first = store(dir.path());
        let q = quotas(rules, first.clone());
        assert!(send(&q, &m, T));
        assert!(!send(&q, &m, T));
        first.close().await.unwrap();
    }
    let q = quotas(rules, store(dir.path()));
    assert!(
        !send(&q, &m, T + 1),
        "the bucket is still empty after a restart"
    );
    assert_eq!(q.usage("sender:slack:a").unwrap().unwrap().messages_over, 2);
    assert!(q.reset("sender:slack:a").unwrap());
    assert!(!q.reset("sender:slack:a").unwrap(), "nothing left to reset");
    assert!(send(&q, &m, T + 2), "a reset refills");
}

#[test]
fn the_agent_of_a_session_key() {
    assert_eq!(agent_of("agent:ops:slack:group:c1"), "ops");
    assert_eq!(agent_of("custom-key"), "main");
    assert_eq!(agent_of("agent::x"), "main");
}

/// A config reload swaps the rules: the next message is checked against the new ones, and
/// the usage counted under the old rule carries over to the subject's new rule.
#[tokio::test]
async fn new_rules_apply_to_the_next_message_and_keep_usage() {
    let dir = tempfile::tempdir().unwrap();
    let q = quotas("", store(dir.path()));
    let msg = message("slack", "c1", "u1");
    assert!(q.is_empty());
    assert!((0..5).all(|i| send(&q, &msg, T + i)), "no rule, no limit");

    let rules = |burst: u32| {
        Config::parse(&format!(
            "[[quotas]]\nmatch = {{ sender = \"*\" }}\nmessages_per_minute = 1\nburst = {burst}\n"
        ))
        .unwrap()
        .quotas
    };
    q.set_rules(&rules(2));
    assert!(!q.is_empty());
    assert!(send(&q, &msg, T + 10));
    assert!(send(&q, &msg, T + 11));
    assert!(!send(&q, &msg, T + 12), "the new burst of 2 is used up");
    assert_eq!(q.stats().rules, 1);

    q.set_rules(&rules(3));
    assert!(
        !send(&q, &msg, T + 13),
        "the emptied bucket carried over to the new rule"
    );
    assert!(
        send(&q, &msg, T + 13 + MINUTE_MS),
        "and refills at the new rule's rate"
    );

    q.set_rules(&[]);
    assert!(q.is_empty());
    assert!(send(&q, &msg, T + 15), "rules removed, no limit");
}
