//! Session-key vectors: one `check(config, message, expected_key)` per rule of SPEC §2.2.

use super::*;
use crate::inbound::Sender;

/// A message on `channel` of `kind` in `chat` from `sender`; adjust fields with struct update.
fn msg(channel: &str, kind: ChatKind, chat: &str, sender: &str) -> InboundMessage {
    InboundMessage {
        channel: channel.into(),
        account_id: "default".into(),
        chat_kind: kind,
        chat_id: chat.into(),
        thread_id: None,
        message_id: "m1".into(),
        sender: Sender {
            id: sender.into(),
            name: "Someone".into(),
            is_bot: false,
        },
        text: "hi".into(),
        mentions: vec![],
        mentioned_bot: false,
        reply_to: None,
        timestamp_ms: 1,
        attachments: vec![],
        kind: Default::default(),
    }
}

fn dm(channel: &str, sender: &str) -> InboundMessage {
    msg(channel, ChatKind::Direct, sender, sender)
}

fn group(channel: &str, chat: &str) -> InboundMessage {
    msg(channel, ChatKind::Group, chat, "111")
}

fn thread(mut m: InboundMessage, id: &str) -> InboundMessage {
    m.thread_id = Some(id.into());
    m
}

fn account(mut m: InboundMessage, id: &str) -> InboundMessage {
    m.account_id = id.into();
    m
}

/// `config` is the body of a `[session]` table in TOML.
fn check(config: &str, m: InboundMessage, expected: &str) {
    let parsed: SessionConfig = toml::from_str(config).unwrap();
    let keys = SessionKeys::new(&parsed).unwrap();
    assert_eq!(keys.key(&m), expected, "config {config:?}, message {m:?}");
}

const PER_PEER: &str = r#"dm_scope = "per-peer""#;
const PER_CHANNEL: &str = r#"dm_scope = "per-channel-peer""#;
const PER_ACCOUNT: &str = r#"dm_scope = "per-account-channel-peer""#;
const LINKS: &str = r#"
dm_scope = "per-peer"
[identity_links]
Alice = ["telegram:111", "222", "WhatsApp:+1 (555) 123-4567"]
"#;

#[test]
fn direct_message_scopes() {
    check("", dm("telegram", "111"), "agent:main:main");
    check("", dm("discord", "999"), "agent:main:main");
    check(r#"dm_scope = "main""#, dm("slack", "U1"), "agent:main:main");
    check(PER_PEER, dm("telegram", "111"), "agent:main:direct:111");
    check(PER_PEER, dm("discord", "111"), "agent:main:direct:111");
    check(
        PER_CHANNEL,
        dm("telegram", "111"),
        "agent:main:telegram:direct:111",
    );
    check(
        PER_ACCOUNT,
        dm("telegram", "111"),
        "agent:main:telegram:default:direct:111",
    );
    check(
        PER_ACCOUNT,
        account(dm("telegram", "111"), "Work Bot"),
        "agent:main:telegram:work-bot:direct:111",
    );
    check(
        PER_ACCOUNT,
        account(dm("telegram", "111"), "  "),
        "agent:main:telegram:default:direct:111",
    );
    check(PER_PEER, dm("slack", " UserX "), "agent:main:direct:userx");
}

#[test]
fn agent_ids_are_normalised() {
    check(
        r#"agent_id = "Sales Bot""#,
        dm("t", "1"),
        "agent:sales-bot:main",
    );
    check(r#"agent_id = """#, dm("t", "1"), "agent:main:main");
    check(
        r#"agent_id = "--Ops!!Team--""#,
        group("slack", "C1"),
        "agent:ops-team:slack:group:c1",
    );
}

#[test]
fn groups_and_channels() {
    check(
        "",
        group("telegram", "-100123"),
        "agent:main:telegram:group:-100123",
    );
    check(
        "",
        msg("discord", ChatKind::Channel, "123", "u"),
        "agent:main:discord:channel:123",
    );
    // No account id and no dm_scope in group keys.
    check(
        PER_ACCOUNT,
        account(group("slack", "C1"), "work"),
        "agent:main:slack:group:c1",
    );
    check(
        "",
        group(" Telegram ", " -100 "),
        "agent:main:telegram:group:-100",
    );
    check(
        "",
        group("Slack", "CHAN-ABC"),
        "agent:main:slack:group:chan-abc",
    );
    // Group chat ids on phone channels are not phone numbers.
    check(
        "",
        group("whatsapp", "12036304@g.us"),
        "agent:main:whatsapp:group:12036304@g.us",
    );
    check(
        "",
        group("whatsapp", "15551234567"),
        "agent:main:whatsapp:group:15551234567",
    );
}

#[test]
fn threads_and_telegram_topics() {
    check(
        "",
        thread(msg("slack", ChatKind::Channel, "C1", "u"), "1700.1"),
        "agent:main:slack:channel:c1:thread:1700.1",
    );
    check(
        "",
        thread(group("discord", "G"), "T9"),
        "agent:main:discord:group:g:thread:t9",
    );
    check(
        "",
        thread(group("telegram", "-100123"), "42"),
        "agent:main:telegram:group:-100123:topic:42",
    );
    check(
        "",
        thread(msg("telegram", ChatKind::Channel, "-100777", "u"), "1"),
        "agent:main:telegram:channel:-100777:topic:1",
    );
    check(
        PER_PEER,
        thread(dm("telegram", "111"), "7"),
        "agent:main:direct:111:thread:7",
    );
    check(
        "",
        thread(dm("slack", "U1"), "T1"),
        "agent:main:main:thread:t1",
    );
    check(
        "",
        thread(group("slack", "C1"), "  "),
        "agent:main:slack:group:c1",
    );
}

#[test]
fn global_scope() {
    check(r#"scope = "global""#, dm("telegram", "111"), "global");
    check(r#"scope = "global""#, group("telegram", "-1"), "global");
    check(
        "scope = \"global\"\ndm_scope = \"per-peer\"",
        thread(group("slack", "C1"), "t"),
        "global",
    );
    check(r#"scope = "per-sender""#, dm("t", "1"), "agent:main:main");
}

#[test]
fn identity_links() {
    check(LINKS, dm("telegram", "111"), "agent:main:direct:alice");
    // A bare peer matches on every channel.
    check(LINKS, dm("discord", "222"), "agent:main:direct:alice");
    check(
        &LINKS.replace("per-peer", "per-channel-peer"),
        dm("discord", "222"),
        "agent:main:discord:direct:alice",
    );
    // A channel-scoped peer matches only on its channel.
    check(LINKS, dm("discord", "111"), "agent:main:direct:111");
    // Phone numbers are compared in E.164.
    check(
        LINKS,
        dm("whatsapp", "whatsapp:+15551234567"),
        "agent:main:direct:alice",
    );
    // Ignored under `main`, and never applied to groups.
    check(
        &LINKS.replace("per-peer", "main"),
        dm("telegram", "111"),
        "agent:main:main",
    );
    check(
        LINKS,
        group("telegram", "111"),
        "agent:main:telegram:group:111",
    );
}

#[test]
fn phone_numbers_become_e164() {
    check(
        PER_PEER,
        dm("whatsapp", "whatsapp:+1 (555) 123-4567"),
        "agent:main:direct:+15551234567",
    );
    check(
        PER_CHANNEL,
        dm("WhatsApp", "+1 555-123-4567"),
        "agent:main:whatsapp:direct:+15551234567",
    );
    check(
        PER_PEER,
        dm("whatsapp", "15551234567@s.whatsapp.net"),
        "agent:main:direct:+15551234567",
    );
    check(
        PER_PEER,
        dm("signal", "+44 20 7946 0958"),
        "agent:main:direct:+442079460958",
    );
    check(
        PER_PEER,
        dm("sms", "tel:5551234567"),
        "agent:main:direct:+5551234567",
    );
    // Not phone numbers: a Signal UUID, too many digits, a non-phone channel, letters.
    check(
        PER_PEER,
        dm("signal", "A1B2C3D4-0000-4000-8000-00000000000F"),
        "agent:main:direct:a1b2c3d4-0000-4000-8000-00000000000f",
    );
    check(
        PER_PEER,
        dm("whatsapp", "+1234567890123456"),
        "agent:main:direct:+1234567890123456",
    );
    check(
        PER_PEER,
        dm("telegram", "5551234567"),
        "agent:main:direct:5551234567",
    );
    check(
        PER_PEER,
        dm("sms", "INFO-SERVICE"),
        "agent:main:direct:info-service",
    );
    check(PER_PEER, dm("sms", "12345"), "agent:main:direct:12345");
}

#[test]
fn peer_ids_never_panic_on_odd_input() {
    for raw in [
        "é:+1",
        "smé:1",
        "whatsapp:",
        "@c.us",
        "é@c.us",
        "+",
        "ー@s.whatsapp.net",
    ] {
        for channel in ["whatsapp", "sms", "signal", "telegram"] {
            let _ = peer_id(channel, raw);
            let _ = normalize_peer_entry(raw);
        }
    }
}

#[test]
fn bad_identity_links_are_config_errors() {
    let bad = |toml: &str| {
        let c: SessionConfig = toml::from_str(toml).unwrap();
        SessionKeys::new(&c).unwrap_err().to_string()
    };
    let e = bad("[identity_links]\nalice = [\"telegram:1\"]\nbob = [\"Telegram:1\"]\n");
    assert!(e.contains("both"), "{e}");
    assert!(bad("[identity_links]\n\" \" = [\"1\"]\n").contains("empty"));
    assert!(bad("[identity_links]\nalice = [\"telegram:\"]\n").contains("empty"));
    // The same peer twice under one name is fine.
    let c: SessionConfig = toml::from_str("[identity_links]\nalice = [\"1\", \"1\"]\n").unwrap();
    assert!(SessionKeys::new(&c).is_ok());
}

#[test]
fn id_normalisation() {
    for (raw, want) in [
        ("Main", "main"),
        ("  Sales Bot  ", "sales-bot"),
        ("a!!b", "a-b"),
        ("--x--", "x"),
        ("", "main"),
        ("***", "main"),
        ("ok_id-1", "ok_id-1"),
    ] {
        assert_eq!(normalize_id(raw, "main"), want, "{raw:?}");
    }
    assert_eq!(normalize_id(&"a".repeat(100), "main").len(), 64);
}

#[test]
fn the_default_helper_matches_the_default_config() {
    let m = thread(group("Telegram", "-5"), "3");
    assert_eq!(
        session_key("Main", &m),
        SessionKeys::new(&SessionConfig::default()).unwrap().key(&m)
    );
}

#[test]
fn user_ids_map_to_distinct_keys_that_survive_normalising() {
    let users = [
        "alice-oa", "CaseUser", "caseuser", "caseUser", "a b", "a%20b", " a", "ÄBC", "äbc", "x\ty",
    ];
    let keys: Vec<String> = users.iter().map(|u| user_session_key(u)).collect();
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(
            &normalize_session_key(k),
            k,
            "{:?} changes when normalised",
            users[i]
        );
        assert!(crate::inbound::check_session_key(k).is_ok(), "{k:?}");
        for (j, other) in keys.iter().enumerate().skip(i + 1) {
            assert_ne!(k, other, "{:?} and {:?} collide", users[i], users[j]);
        }
    }
    assert_eq!(keys[0], "alice-oa", "lower-case ids keep their key");
    assert_eq!(keys[1], "%43ase%55ser");
}

/// The ids of the property test: the key's separators and words, escapes, case and white
/// space variants, and ids that spell out another id's key parts, so near-collisions (`a` in
/// thread `b` against `a:thread:b`) meet often.
const IDS: [&str; 20] = [
    "a",
    "b",
    "A",
    " a",
    "",
    ":",
    "%",
    "%3a",
    "a%3ab",
    "a:b",
    "a:thread:b",
    "b:thread:a",
    "a:topic:b",
    "direct:a",
    "group:a",
    "thread",
    "direct",
    "group",
    "main",
    "telegram",
];

/// What a message's session must be told apart by under `scope` (ids compared trimmed and
/// without regard to case, as documented): two messages share a session exactly when these
/// are equal.
fn identity(keys: &SessionKeys, m: &InboundMessage) -> Vec<String> {
    let norm = |s: &str| s.trim().to_lowercase();
    let channel = channel_name(&m.channel);
    let thread = m
        .thread_id
        .as_deref()
        .map(norm)
        .filter(|t| !t.is_empty())
        .unwrap_or_default();
    match m.chat_kind {
        ChatKind::Direct => {
            let peer = peer_id(&channel, &m.sender.id);
            // The shared main session, which no peer id can name.
            let main = || vec!["\0main".to_string()];
            let mut who = match keys.dm_scope {
                _ if peer.is_empty() => main(),
                DmScope::Main => main(),
                DmScope::PerPeer => vec![peer],
                DmScope::PerChannelPeer => vec![channel, peer],
                DmScope::PerAccountChannelPeer => {
                    vec![channel, normalize_id(&m.account_id, "default"), peer]
                }
            };
            who.insert(0, "direct".into());
            who.push(thread);
            who
        }
        kind => {
            let chat = norm(&m.chat_id);
            let chat = if chat.is_empty() {
                "unknown".into()
            } else {
                chat
            };
            // A Telegram chat id may carry its forum topic (the channel writes it so).
            let (chat, thread) = match chat.split_once(":topic:") {
                Some((c, t)) if channel == "telegram" && thread.is_empty() => {
                    (c.to_string(), t.trim().to_string())
                }
                _ => (chat, thread),
            };
            vec![kind.as_str().into(), channel, chat, thread]
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

    /// Distinct (channel, account, kind, chat, thread, peer) never share a key; equal ones
    /// always do. Each case keys 64 messages built from the same few pieces, so near-misses
    /// (`room` + thread `t1` against `room:thread:t1`) meet within a case.
    #[test]
    fn keys_are_injective(
        messages in proptest::collection::vec(
            (
                proptest::collection::vec(0usize..IDS.len(), 5),
                0usize..3,
                proptest::bool::ANY,
            ),
            64,
        ),
        scope in 0usize..4,
    ) {
        let dm_scope = [
            DmScope::Main,
            DmScope::PerPeer,
            DmScope::PerChannelPeer,
            DmScope::PerAccountChannelPeer,
        ][scope];
        let keys = SessionKeys::new(&SessionConfig { dm_scope, ..Default::default() }).unwrap();
        let mut seen: HashMap<String, Vec<String>> = HashMap::new();
        for (ids, kind, thread) in &messages {
            let kind = [ChatKind::Direct, ChatKind::Group, ChatKind::Channel][*kind];
            let mut m = msg(IDS[ids[0]], kind, IDS[ids[2]], IDS[ids[4]]);
            m.account_id = IDS[ids[1]].into();
            m.thread_id = thread.then(|| IDS[ids[3]].into());
            let who = identity(&keys, &m);
            let key = keys.key(&m);
            if let Some(before) = seen.get(&key) {
                proptest::prop_assert_eq!(before, &who, "both keyed {}", key);
            }
            seen.insert(key, who);
        }
        let identities: std::collections::HashSet<&Vec<String>> = seen.values().collect();
        proptest::prop_assert_eq!(identities.len(), seen.len(), "one identity, two keys: {:?}", seen);
    }
}

#[test]
fn a_chat_id_cannot_name_another_chats_thread() {
    let keys = SessionKeys::for_agent("main");
    let threaded = thread(group("webhook", "room"), "t1");
    let lookalike = group("webhook", "room:thread:t1");
    assert_eq!(
        keys.key(&threaded),
        "agent:main:webhook:group:room:thread:t1"
    );
    assert_eq!(
        keys.key(&lookalike),
        "agent:main:webhook:group:room%3athread%3at1"
    );
    assert_eq!(
        keys.key(&group("webhook", "50%")),
        "agent:main:webhook:group:50%25"
    );
}
