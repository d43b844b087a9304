//! Each preflight rule alone, around one `check(config, message, expected)` function.

use super::*;
use crate::inbound::Sender;

const NOW: u64 = 1_000_000;

/// `[preflight]` keys in TOML (the section header is added here).
fn preflight(keys: &str) -> Preflight {
    let config = Config::parse(&format!("[preflight]\n{keys}")).unwrap();
    Preflight::new(&config).unwrap()
}

fn base(kind: ChatKind, chat: &str, id: &str) -> InboundMessage {
    InboundMessage {
        channel: "telegram".into(),
        account_id: "default".into(),
        chat_kind: kind,
        chat_id: chat.into(),
        thread_id: None,
        message_id: id.into(),
        sender: Sender {
            id: "111".into(),
            name: "Alice".into(),
            is_bot: false,
        },
        text: format!("text {id}"),
        mentions: vec![],
        mentioned_bot: false,
        reply_to: None,
        timestamp_ms: NOW,
        attachments: vec![],
        kind: MessageKind::Message,
    }
}

/// A group message that addresses the bot.
fn group(id: &str) -> InboundMessage {
    InboundMessage {
        mentioned_bot: true,
        ..base(ChatKind::Group, "-100", id)
    }
}

/// A group message that does not address the bot.
fn chatter(id: &str) -> InboundMessage {
    base(ChatKind::Group, "-100", id)
}

fn dm(id: &str) -> InboundMessage {
    base(ChatKind::Direct, "111", id)
}

fn event(id: &str, text: &str) -> InboundMessage {
    InboundMessage {
        kind: MessageKind::SystemEvent,
        text: text.into(),
        ..chatter(id)
    }
}

/// Decides at `now`; an acceptance is confirmed (as after a successful inbox write).
fn submit_at(p: &Preflight, msg: &InboundMessage, now: u64) -> Result<Admission, DropReason> {
    submit_as(p, msg, now, false, IdOrigin::Given)
}

/// [`submit_at`] with the session named or not and the id from `origin`.
fn submit_as(
    p: &Preflight,
    msg: &InboundMessage,
    now: u64,
    explicit_session: bool,
    origin: IdOrigin,
) -> Result<Admission, DropReason> {
    match p
        .decide(msg, explicit_session, now, &MemoryOnly, origin)
        .unwrap()
    {
        Verdict::Accept(a) => {
            p.confirm(&a, now);
            Ok(a)
        }
        Verdict::Drop(r) => Err(r),
    }
}

fn submit(p: &Preflight, msg: &InboundMessage) -> Result<Admission, DropReason> {
    submit_at(p, msg, NOW)
}

/// One message against a fresh preflight with `keys`.
fn check(keys: &str, msg: InboundMessage, expected: Result<(), DropReason>) {
    let p = preflight(keys);
    let got = submit(&p, &msg).map(|_| ());
    assert_eq!(got, expected, "keys {keys:?}, message {msg:?}");
}

#[test]
fn dedupe_drops_redeliveries() {
    let p = preflight("");
    assert!(submit(&p, &group("1")).is_ok());
    assert_eq!(submit(&p, &group("1")), Err(DropReason::Duplicate));
    // Another chat, thread, channel or account with the same message id is another message.
    for other in [
        InboundMessage {
            chat_id: "-200".into(),
            ..group("1")
        },
        InboundMessage {
            thread_id: Some("5".into()),
            ..group("1")
        },
        InboundMessage {
            channel: "discord".into(),
            ..group("1")
        },
        InboundMessage {
            account_id: "work".into(),
            ..group("1")
        },
    ] {
        assert!(submit(&p, &other).is_ok(), "{other:?}");
    }
    // A dropped message is remembered too, so it is not buffered twice.
    assert_eq!(submit(&p, &chatter("2")), Err(DropReason::NoMention));
    assert_eq!(submit(&p, &chatter("2")), Err(DropReason::Duplicate));
    assert_eq!(p.stats().duplicate, 2);
}

#[test]
fn dedupe_forgets_after_the_ttl_and_past_max_keys() {
    let p = preflight("dedupe_ttl_ms = 100\ndedupe_max_keys = 2\n");
    assert!(submit_at(&p, &group("1"), NOW).is_ok());
    assert_eq!(
        submit_at(&p, &group("1"), NOW + 99),
        Err(DropReason::Duplicate)
    );
    assert!(submit_at(&p, &group("1"), NOW + 100).is_ok());
    assert!(submit_at(&p, &group("2"), NOW + 101).is_ok());
    assert!(submit_at(&p, &group("3"), NOW + 102).is_ok());
    assert_eq!(p.dedupe_keys(), 2);
    assert!(
        submit_at(&p, &group("1"), NOW + 103).is_ok(),
        "evicted past max_keys"
    );
}

#[test]
fn a_minted_id_is_remembered_in_memory_and_a_unique_one_not_at_all() {
    let p = preflight("");
    let decide_and_confirm =
        |msg: &InboundMessage, origin: IdOrigin| submit_as(&p, msg, NOW, true, origin);
    let minted = dm("m-1");
    let first = decide_and_confirm(&minted, IdOrigin::Minted).unwrap();
    assert!(first.dedupe_key.is_some());
    assert_eq!(
        decide_and_confirm(&minted, IdOrigin::Minted).map(|_| ()),
        Err(DropReason::Duplicate),
        "a retry that brings the minted id again is a duplicate"
    );
    let unique = dm("u-1");
    let first = decide_and_confirm(&unique, IdOrigin::Unique).unwrap();
    assert_eq!(first.dedupe_key, None);
    assert_eq!(p.dedupe_keys(), 1, "the unique id took no room");
    assert!(decide_and_confirm(&unique, IdOrigin::Unique).is_ok());
    assert_eq!(p.stats().accepted, 3);
}

#[test]
fn dedupe_asks_the_durable_layer_on_a_memory_miss() {
    struct Remembers(String);
    impl DurableDedupe for Remembers {
        fn seen(&self, key: &str, _now: u64) -> Result<bool, StoreError> {
            Ok(key == self.0)
        }
    }
    let p = preflight("");
    let msg = group("7");
    let durable = Remembers(dedupe_key("main", &msg));
    let decide = |m: &InboundMessage| p.decide(m, false, NOW, &durable, IdOrigin::Given).unwrap();
    assert_eq!(decide(&msg), Verdict::Drop(DropReason::Duplicate));
    assert!(matches!(decide(&group("8")), Verdict::Accept(_)));
    assert!(
        matches!(
            preflight("")
                .decide(&msg, false, NOW, &durable, IdOrigin::Minted)
                .unwrap(),
            Verdict::Accept(_)
        ),
        "an id minted for one request is not looked up durably"
    );
    assert!(
        matches!(
            preflight("")
                .decide(&msg, false, NOW, &durable, IdOrigin::Unique)
                .unwrap(),
            Verdict::Accept(_)
        ),
        "an id nobody can present again is not looked up at all"
    );
    assert_eq!(
        dedupe_key("main", &msg),
        "telegram|default|main|-100||7",
        "channel|account|agent|peer|thread|message_id"
    );
}

#[test]
fn an_unconfirmed_acceptance_is_not_remembered() {
    let p = preflight("");
    let msg = group("1");
    let v = p
        .decide(&msg, false, NOW, &MemoryOnly, IdOrigin::Given)
        .unwrap();
    assert!(matches!(v, Verdict::Accept(_)));
    // The inbox write failed: no confirm. A retry must not be a duplicate.
    assert!(submit(&p, &msg).is_ok());
    assert_eq!(p.stats().accepted, 1);
}

#[test]
fn bots() {
    let own = |m: InboundMessage| InboundMessage {
        sender: Sender {
            id: "999".into(),
            name: "me".into(),
            is_bot: true,
        },
        ..m
    };
    let other = |m: InboundMessage| InboundMessage {
        sender: Sender {
            id: "555".into(),
            name: "OtherBot".into(),
            is_bot: true,
        },
        ..m
    };
    // The bot's own messages: always dropped, by bare or channel-scoped id.
    for keys in [
        "bot_user_ids = [\"999\"]\nallow_bots = true\nrequire_mention = false",
        "bot_user_ids = [\"Telegram:999\"]\nallow_bots = true",
    ] {
        check(keys, own(group("1")), Err(DropReason::Bot));
        check(keys, own(dm("1")), Err(DropReason::Bot));
    }
    check(
        "bot_user_ids = [\"discord:999\"]\nallow_bots = true",
        own(group("1")),
        Ok(()),
    );
    // Other bots per allow_bots.
    check("", other(group("1")), Err(DropReason::Bot));
    check("", other(dm("1")), Err(DropReason::Bot));
    check(
        "allow_bots = false",
        other(group("1")),
        Err(DropReason::Bot),
    );
    check("allow_bots = true", other(group("1")), Ok(()));
    check("allow_bots = \"mentions\"", other(group("1")), Ok(()));
    check(
        "allow_bots = \"mentions\"",
        other(chatter("1")),
        Err(DropReason::Bot),
    );
    check(
        "allow_bots = \"mentions\"\nmention_patterns = [\"@helper\"]",
        InboundMessage {
            text: "@Helper ping".into(),
            ..other(chatter("1"))
        },
        Ok(()),
    );
    check(
        "allow_bots = \"mentions\"\nrequire_mention = false",
        other(dm("1")),
        Err(DropReason::Bot),
    );
    // People are never dropped as bots.
    check("", group("1"), Ok(()));
    assert!(Config::parse("[preflight]\nallow_bots = \"sometimes\"").is_err());
}

#[test]
fn a_reply_to_the_bot_does_not_let_other_bots_in() {
    let p = preflight("bot_user_ids = [\"999\"]\nallow_bots = \"mentions\"");
    p.record_bot_message("telegram", "default", "-100", "b1");
    let m = InboundMessage {
        reply_to: Some("b1".into()),
        sender: Sender {
            id: "555".into(),
            name: "OtherBot".into(),
            is_bot: true,
        },
        ..chatter("1")
    };
    assert_eq!(submit(&p, &m), Err(DropReason::Bot));
}

#[test]
fn policy() {
    let from = |channel: &str, sender: &str, m: InboundMessage| InboundMessage {
        channel: channel.into(),
        sender: Sender {
            id: sender.into(),
            name: String::new(),
            is_bot: false,
        },
        ..m
    };
    check("dm_policy = \"open\"", dm("1"), Ok(()));
    check("dm_policy = \"disabled\"", dm("1"), Err(DropReason::Policy));
    check(
        "dm_policy = \"allowlist\"",
        dm("1"),
        Err(DropReason::Policy),
    );
    let list = "dm_policy = \"allowlist\"\nallow_from = [\"telegram:111\", \"222\", \"whatsapp:+1 (555) 123-4567\"]";
    check(list, dm("1"), Ok(()));
    check(
        list,
        from("discord", "111", dm("1")),
        Err(DropReason::Policy),
    );
    check(list, from("discord", "222", dm("1")), Ok(()));
    check(list, from("whatsapp", "+15551234567", dm("1")), Ok(()));
    check(
        list,
        from("whatsapp", "+15551234568", dm("1")),
        Err(DropReason::Policy),
    );
    check(
        "dm_policy = \"allowlist\"\nallow_from = [\"*\"]",
        from("x", "anyone", dm("1")),
        Ok(()),
    );
    // dm_policy does not gate groups, group_policy does not gate DMs.
    check("dm_policy = \"disabled\"", group("1"), Ok(()));
    check(
        "group_policy = \"disabled\"",
        group("1"),
        Err(DropReason::Policy),
    );
    check("group_policy = \"disabled\"", dm("1"), Ok(()));
    let groups = "group_policy = \"allowlist\"\ngroup_allow_from = [\"-100\", \"discord:G1\"]";
    check(groups, group("1"), Ok(()));
    check(
        groups,
        InboundMessage {
            chat_id: "-200".into(),
            ..group("1")
        },
        Err(DropReason::Policy),
    );
    check(
        groups,
        InboundMessage {
            chat_id: "g1".into(),
            ..from("discord", "1", group("1"))
        },
        Ok(()),
    );
    check(
        groups,
        InboundMessage {
            chat_kind: ChatKind::Channel,
            ..group("1")
        },
        Ok(()),
    );
}

#[test]
fn per_channel_overrides() {
    let keys = "group_policy = \"disabled\"\n[preflight.channels.Discord]\ngroup_policy = \"open\"\nrequire_mention = false\n";
    let discord = |m: InboundMessage| InboundMessage {
        channel: "discord".into(),
        ..m
    };
    check(keys, group("1"), Err(DropReason::Policy));
    check(keys, discord(chatter("1")), Ok(()));
    // Unset keys inherit: require_mention stays true on telegram.
    let keys = "[preflight.channels.discord]\nrequire_mention = false\n";
    check(keys, chatter("1"), Err(DropReason::NoMention));
    check(keys, discord(chatter("1")), Ok(()));
    assert!(Config::parse("[preflight.channels.x]\nbogus = 1\n").is_err());
}

#[test]
fn group_member_allowlist() {
    let from = |sender: &str, m: InboundMessage| InboundMessage {
        sender: Sender {
            id: sender.into(),
            name: "Mallory".into(),
            is_bot: false,
        },
        ..m
    };
    let keys = "group_member_allow_from = [\"telegram:111\", \"222\"]";
    check(keys, group("1"), Ok(()));
    check(keys, from("222", group("1")), Ok(()));
    check(keys, from("333", group("1")), Err(DropReason::Policy));
    check(
        keys,
        InboundMessage {
            chat_kind: ChatKind::Channel,
            ..from("333", group("1"))
        },
        Err(DropReason::Policy),
    );
    // Ids are normalised like allow_from: `channel:id` entries hold on their channel only.
    check(
        keys,
        InboundMessage {
            channel: "discord".into(),
            ..group("1")
        },
        Err(DropReason::Policy),
    );
    // Direct messages are dm_policy's business; platform events still queue.
    check(keys, from("333", dm("1")), Ok(()));
    check(
        keys,
        from("333", event("1", "Mallory joined")),
        Err(DropReason::SystemEvent),
    );
    // The chat must pass group_policy as well.
    check(
        &format!("{keys}\ngroup_policy = \"disabled\""),
        group("1"),
        Err(DropReason::Policy),
    );

    // An outsider's chatter is not kept as pending history and counts as `policy`.
    let p = preflight(keys);
    assert_eq!(
        submit(&p, &from("333", chatter("1"))),
        Err(DropReason::Policy)
    );
    // (the admission keeps chatter only for these two reasons, never for `policy`)
    assert!(!Preflight::keeps_chatter(
        &from("333", chatter("1")),
        false,
        DropReason::Policy
    ));
    assert_eq!(submit(&p, &chatter("2")), Err(DropReason::NoMention));
    assert!(submit(&p, &group("3")).unwrap().takes_history);
    assert_eq!(p.stats().policy, 1);

    // Per channel: an override replaces the list, an empty one lets every member in.
    let keys = "group_member_allow_from = [\"111\"]\n[preflight.channels.discord]\n\
                group_member_allow_from = []\n";
    let discord = |m: InboundMessage| InboundMessage {
        channel: "discord".into(),
        ..m
    };
    check(keys, from("333", group("1")), Err(DropReason::Policy));
    check(keys, discord(from("333", group("1"))), Ok(()));
}

#[test]
fn mention_gating() {
    check("", chatter("1"), Err(DropReason::NoMention));
    check("", group("1"), Ok(()));
    check("require_mention = false", chatter("1"), Ok(()));
    check(
        "",
        InboundMessage {
            chat_kind: ChatKind::Channel,
            ..chatter("1")
        },
        Err(DropReason::NoMention),
    );
    // Direct messages are never mention-gated.
    check("", dm("1"), Ok(()));
    // Patterns, case-insensitive.
    let pat = "mention_patterns = [\"\\\\bturnstile\\\\b\", \"^hey bot\"]";
    for (text, want) in [
        ("hello TurnStile!", Ok(())),
        ("hey bot, hi", Ok(())),
        ("turnstiles", Err(DropReason::NoMention)),
        ("say hey bot", Err(DropReason::NoMention)),
    ] {
        check(
            pat,
            InboundMessage {
                text: text.into(),
                ..chatter("1")
            },
            want,
        );
    }
    // One of the bot's ids in `mentions`.
    check(
        "bot_user_ids = [\"999\"]",
        InboundMessage {
            mentions: vec!["999".into()],
            ..chatter("1")
        },
        Ok(()),
    );
    assert!(Config::parse("[preflight]\nmention_patterns = [\"(\"]").is_err());
    assert!(Config::parse("[preflight.channels.x]\nmention_patterns = [\"[\"]").is_err());
}

#[test]
fn ignore_other_mentions() {
    let bob = |m: InboundMessage| InboundMessage {
        mentions: vec!["bob".into()],
        ..m
    };
    check("", bob(chatter("1")), Err(DropReason::NoMention));
    check(
        "ignore_other_mentions = true",
        bob(chatter("1")),
        Err(DropReason::OtherMention),
    );
    check(
        "ignore_other_mentions = true\nrequire_mention = false",
        bob(chatter("1")),
        Err(DropReason::OtherMention),
    );
    check(
        "ignore_other_mentions = true\nrequire_mention = false",
        chatter("1"),
        Ok(()),
    );
    // Addressing the bot as well wins.
    check("ignore_other_mentions = true", bob(group("1")), Ok(()));
    // Mentioning only the bot is not someone else.
    check(
        "ignore_other_mentions = true\nrequire_mention = false\nbot_user_ids = [\"999\"]",
        InboundMessage {
            mentions: vec!["999".into()],
            ..chatter("1")
        },
        Ok(()),
    );
}

#[test]
fn implicit_mention_by_replying_to_the_bot() {
    let p = preflight("bot_user_ids = [\"999\"]");
    let reply_to = |id: &str, to: &str| InboundMessage {
        reply_to: Some(to.into()),
        ..chatter(id)
    };
    assert_eq!(submit(&p, &reply_to("1", "b1")), Err(DropReason::NoMention));
    // The platform echoes the bot's message b1 (dropped as the bot's own)…
    let echo = InboundMessage {
        sender: Sender {
            id: "999".into(),
            name: "me".into(),
            is_bot: true,
        },
        ..chatter("b1")
    };
    assert_eq!(submit(&p, &echo), Err(DropReason::Bot));
    // …so a reply to it addresses the bot, in that chat only.
    assert!(submit(&p, &reply_to("2", "b1")).is_ok());
    let elsewhere = InboundMessage {
        chat_id: "-200".into(),
        ..reply_to("3", "b1")
    };
    assert_eq!(submit(&p, &elsewhere), Err(DropReason::NoMention));
    // A channel can report what it delivered.
    p.record_bot_message("Telegram", "default", "-200", "b2");
    assert_eq!(submit(&p, &reply_to("4", "b2")), Err(DropReason::NoMention));
    let there = InboundMessage {
        chat_id: "-200".into(),
        ..reply_to("5", "b2")
    };
    assert!(submit(&p, &there).is_ok());
}

#[test]
fn implicit_mention_in_a_thread_the_bot_answered_in() {
    let p = preflight("");
    let in_thread = |m: InboundMessage, t: &str| InboundMessage {
        channel: "slack".into(),
        thread_id: Some(t.into()),
        ..m
    };
    assert_eq!(
        submit(&p, &in_thread(chatter("1"), "t1")),
        Err(DropReason::NoMention)
    );
    let asked = in_thread(group("2"), "t1");
    assert!(submit(&p, &asked).is_ok());
    p.record_reply(&asked);
    assert!(submit(&p, &in_thread(chatter("3"), "t1")).is_ok());
    assert_eq!(
        submit(&p, &in_thread(chatter("4"), "t2")),
        Err(DropReason::NoMention)
    );
    // A Telegram forum topic is a chat of its own, not a thread the bot joined.
    let topic = InboundMessage {
        thread_id: Some("42".into()),
        ..group("5")
    };
    assert!(submit(&p, &topic).is_ok());
    p.record_reply(&topic);
    let later = InboundMessage {
        thread_id: Some("42".into()),
        ..chatter("6")
    };
    assert_eq!(submit(&p, &later), Err(DropReason::NoMention));
}

#[test]
fn system_events_are_dropped_as_events_and_normalised() {
    let p = preflight("");
    for (id, text) in [("e1", "Bob joined"), ("e2", "  ")] {
        assert_eq!(submit(&p, &event(id, text)), Err(DropReason::SystemEvent));
    }
    assert_eq!(p.stats().system_event, 2);
    // What the admission queues: trimmed, capped, a repeat of the last queued one skipped.
    let e = event_of(&event("e3", "  Carol joined "), None).unwrap();
    assert_eq!((e.text.as_str(), e.timestamp_ms), ("Carol joined", NOW));
    assert!(event_of(&event("e4", "Carol joined"), Some(&e)).is_none());
    assert!(event_of(&event("e5", "   "), None).is_none());
    let long = event_of(&event("e6", &"x".repeat(2_000)), None).unwrap();
    assert_eq!(long.text.chars().count(), MAX_SYSTEM_EVENT_CHARS + 1);
    // Accepted messages carry none from preflight itself (the admission reads the store).
    assert!(submit(&p, &group("2")).unwrap().system_events.is_empty());
}

#[test]
fn commands_are_never_chat() {
    let command = |m: InboundMessage| InboundMessage {
        kind: MessageKind::Command,
        text: "/help".into(),
        ..m
    };
    let p = preflight("");
    // Addressed or not, in a group or a DM: not a turn, and not pending history either.
    for m in [
        command(group("c1")),
        command(chatter("c2")),
        command(dm("c3")),
    ] {
        assert_eq!(submit(&p, &m), Err(DropReason::Command));
        assert!(!Preflight::keeps_chatter(&m, false, DropReason::Command));
    }
    assert_eq!(p.stats().command, 3);
    // The same text as chat is a turn.
    assert!(submit(
        &p,
        &InboundMessage {
            text: "/help".into(),
            ..group("c4")
        }
    )
    .is_ok());
    // Bot and policy rules still come first.
    check(
        "group_policy = \"disabled\"",
        command(group("c5")),
        Err(DropReason::Policy),
    );
}

#[test]
fn system_events_follow_bot_and_policy_rules() {
    // Events in a chat the policy refuses are dropped as policy; the bot's own are bot.
    check(
        "group_policy = \"disabled\"",
        event("e", "x"),
        Err(DropReason::Policy),
    );
    check(
        "bot_user_ids = [\"111\"]",
        event("e", "x"),
        Err(DropReason::Bot),
    );
    // Other bots' events are still events.
    check(
        "",
        InboundMessage {
            sender: Sender {
                id: "5".into(),
                name: "b".into(),
                is_bot: true,
            },
            ..event("e", "x")
        },
        Err(DropReason::SystemEvent),
    );
    check(
        "max_system_events = 0",
        event("e", "x"),
        Err(DropReason::SystemEvent),
    );
}

#[test]
fn explicit_sessions_pass_only_dedupe_and_system_events() {
    let p = preflight("dm_policy = \"disabled\"\nbot_user_ids = [\"111\"]");
    let decide = |m: &InboundMessage| {
        p.decide(m, true, NOW, &MemoryOnly, IdOrigin::Given)
            .unwrap()
    };
    let Verdict::Accept(a) = decide(&chatter("1")) else {
        panic!("explicit sessions skip bots, policy and mentions");
    };
    p.confirm(&a, NOW);
    assert_eq!(decide(&chatter("1")), Verdict::Drop(DropReason::Duplicate));
    assert_eq!(
        decide(&event("e1", "x")),
        Verdict::Drop(DropReason::SystemEvent)
    );
    let Verdict::Accept(a) = decide(&group("2")) else {
        panic!("accepted expected");
    };
    assert!(
        !a.takes_history,
        "an explicit session takes no group history"
    );
}

#[test]
fn group_messages_that_address_the_bot_take_the_pending_history() {
    let p = preflight("");
    assert_eq!(submit(&p, &chatter("1")), Err(DropReason::NoMention));
    assert!(Preflight::keeps_chatter(
        &chatter("1"),
        false,
        DropReason::NoMention
    ));
    assert!(Preflight::keeps_chatter(
        &chatter("1"),
        false,
        DropReason::OtherMention
    ));
    assert!(!Preflight::keeps_chatter(
        &chatter("1"),
        false,
        DropReason::Bot
    ));
    assert!(!Preflight::keeps_chatter(
        &chatter("1"),
        true,
        DropReason::NoMention
    ));
    assert!(!Preflight::keeps_chatter(
        &dm("1"),
        false,
        DropReason::NoMention
    ));
    assert!(!Preflight::keeps_chatter(
        &event("e", "x"),
        false,
        DropReason::NoMention
    ));
    assert!(submit(&p, &group("2")).unwrap().takes_history);
    assert!(!submit(&p, &dm("3")).unwrap().takes_history);
    // Pending lines are capped when handed over.
    let long = crate::store::ChannelMessage::of(
        &InboundMessage {
            text: "x".repeat(5_000),
            ..chatter("4")
        },
        false,
    );
    assert_eq!(
        history_line(&long).text.chars().count(),
        MAX_HISTORY_LINE_CHARS + 1
    );
}

#[test]
fn stats_count_every_decision() {
    let p = preflight(
        "bot_user_ids = [\"999\"]\ndm_policy = \"disabled\"\nignore_other_mentions = true",
    );
    let _ = submit(&p, &group("1"));
    let _ = submit(&p, &group("1"));
    let _ = submit(&p, &dm("2"));
    let _ = submit(&p, &chatter("3"));
    let _ = submit(
        &p,
        &InboundMessage {
            mentions: vec!["x".into()],
            ..chatter("4")
        },
    );
    let _ = submit(&p, &event("5", "joined"));
    let _ = submit(
        &p,
        &InboundMessage {
            sender: Sender {
                id: "999".into(),
                name: String::new(),
                is_bot: true,
            },
            ..group("6")
        },
    );
    let s = p.stats();
    assert_eq!(
        s,
        PreflightStats {
            accepted: 1,
            duplicate: 1,
            bot: 1,
            policy: 1,
            no_mention: 1,
            other_mention: 1,
            system_event: 1,
            command: 0,
        }
    );
    assert_eq!(s.dropped(DropReason::NoMention), 1);
}

#[test]
fn cap_chars_cuts_on_char_boundaries() {
    assert_eq!(cap_chars("héllo", 2), "hé…");
    assert_eq!(cap_chars("hé", 2), "hé");
    assert_eq!(cap_chars("", 0), "");
}

/// A config reload swaps the policy: the next message is screened under the new one, and the
/// dedupe memory stays (a redelivery is still a duplicate).
#[test]
fn a_new_policy_applies_to_the_next_message_and_dedupe_stays() {
    let p = preflight("");
    assert!(submit(&p, &dm("before")).is_ok());
    let closed =
        Config::parse("[preflight]\ndm_policy = \"allowlist\"\nallow_from = [\"222\"]").unwrap();
    p.set_policy(&closed.preflight).unwrap();
    assert_eq!(
        submit(&p, &dm("after")).map(|_| ()),
        Err(DropReason::Policy)
    );
    assert_eq!(
        submit(&p, &dm("before")).map(|_| ()),
        Err(DropReason::Duplicate),
        "the dedupe memory survives the swap"
    );
    let mut bad = closed.preflight.clone();
    bad.mention_patterns = vec!["(".into()];
    assert!(p.set_policy(&bad).is_err());
    assert_eq!(
        submit(&p, &dm("still-closed")).map(|_| ()),
        Err(DropReason::Policy),
        "a refused policy changes nothing"
    );
    p.set_policy(&Config::default().preflight).unwrap();
    assert!(submit(&p, &dm("open-again")).is_ok());
}
