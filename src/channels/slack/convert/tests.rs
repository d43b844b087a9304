//! The preflight matrix of Slack messages, message by message (the channel's half; the rules
//! it hands on are checked against preflight in `tests/it/slack.rs`).

use serde_json::{json, Value};

use super::*;
use crate::config::{AllowBots, Config};

const BOT: &str = "UBOT";

fn config(extra: &str) -> SlackConfig {
    Config::parse(&format!("[channels.slack]\n{extra}"))
        .unwrap()
        .channels
        .slack
        .unwrap()
}

fn bot() -> Identity {
    Identity {
        user_id: BOT.into(),
        bot_id: Some("BBOT".into()),
        team_id: Some("T1".into()),
    }
}

/// A message by U1 in C20; `edit` changes the JSON.
fn message(ts: &str, text: &str, edit: impl FnOnce(&mut Value)) -> SlackMessage {
    let mut m = json!({"type": "message", "channel": "C20", "channel_type": "channel",
        "user": "U1", "text": text, "ts": ts, "team": "T1",
        "user_profile": {"display_name": "", "real_name": "Ann Lee"}});
    edit(&mut m);
    serde_json::from_value(m).unwrap()
}

fn place(channel_type: &str) -> Place<'static> {
    Place {
        channel: "C20",
        channel_type: match channel_type {
            "im" => "im",
            "group" => "group",
            "mpim" => "mpim",
            _ => "channel",
        },
        team: Some("T1"),
        bot_thread: false,
        app_mention: false,
    }
}

fn convert(extra: &str, m: &SlackMessage, p: Place<'_>) -> Result<Converted, Skip> {
    to_inbound(m, p, &bot(), &config(extra))
}

#[test]
fn a_channel_message_is_a_channel_chat_with_its_rules() {
    let c = convert(
        "",
        &message("1700000000.000100", "hello &lt;b&gt; &amp; co", |_| {}),
        place("channel"),
    )
    .unwrap();
    let m = &c.message;
    assert_eq!(
        (m.channel.as_str(), m.chat_kind),
        ("slack", ChatKind::Channel)
    );
    assert_eq!((m.chat_id.as_str(), m.thread_id.as_deref()), ("C20", None));
    assert_eq!(
        (m.message_id.as_str(), m.sender.id.as_str()),
        ("1700000000.000100", "U1")
    );
    assert_eq!(m.sender.name, "Ann Lee");
    assert_eq!(m.text, "hello <b> & co");
    assert_eq!(m.kind, MessageKind::Message);
    assert!(!m.mentioned_bot);
    assert_eq!(m.timestamp_ms, 1_700_000_000_000);
    assert_eq!(
        c.rules,
        ChatRules {
            require_mention: Some(true),
            allow_bots: Some(AllowBots::No)
        }
    );
    assert_eq!(c.route.guild_id.as_deref(), Some("T1"));
    let keys = crate::inbound::SessionKeys::for_agent("main");
    assert_eq!(keys.key(m), "agent:main:slack:channel:c20");
}

#[test]
fn kinds_of_conversations() {
    let m = message("1.000001", "hi", |_| {});
    assert_eq!(
        convert("", &m, place("group")).unwrap().message.chat_kind,
        ChatKind::Group
    );
    assert_eq!(
        convert("", &m, place("mpim")).unwrap().message.chat_kind,
        ChatKind::Group
    );
    let dm = convert("", &m, place("im")).unwrap();
    assert_eq!(dm.message.chat_kind, ChatKind::Direct);
    assert_eq!(dm.rules.require_mention, None, "DMs follow dm_policy");
    assert_eq!(type_from_id("D1"), "im");
    assert_eq!(type_from_id("G1"), "group");
    assert_eq!(type_from_id("C1"), "channel");
}

#[test]
fn threads_are_their_own_sessions_and_their_first_message_is_not() {
    let reply = message("1.000002", "in thread", |m| {
        m["thread_ts"] = json!("1.000001")
    });
    let c = convert("", &reply, place("channel")).unwrap();
    assert_eq!(c.message.thread_id.as_deref(), Some("1.000001"));
    assert_eq!(c.message.reply_to.as_deref(), Some("1.000001"));
    let keys = crate::inbound::SessionKeys::for_agent("main");
    assert_eq!(
        keys.key(&c.message),
        "agent:main:slack:channel:c20:thread:1.000001"
    );
    assert!(!c.message.mentioned_bot);
    let mut in_bot_thread = place("channel");
    in_bot_thread.bot_thread = true;
    assert!(
        convert("", &reply, in_bot_thread)
            .unwrap()
            .message
            .mentioned_bot
    );
    let under_bot = message("1.000003", "x", |m| {
        m["thread_ts"] = json!("1.000001");
        m["parent_user_id"] = json!(BOT);
    });
    assert!(
        convert("", &under_bot, place("channel"))
            .unwrap()
            .message
            .mentioned_bot
    );
    let root = message("1.000001", "root", |m| m["thread_ts"] = json!("1.000001"));
    let c = convert("", &root, in_bot_thread).unwrap();
    assert_eq!(c.message.thread_id, None);
    assert!(!c.message.mentioned_bot);
}

#[test]
fn mentions_of_the_bot_and_app_mentions_address_it() {
    let m = message("1.1", "<@UBOT> hi <@U7|bob> <@UBOT>", |_| {});
    let c = convert("", &m, place("channel")).unwrap();
    assert!(c.message.mentioned_bot);
    assert_eq!(c.message.mentions, vec!["UBOT", "U7"]);
    let other = message("1.2", "<@U7> hi", |_| {});
    assert!(
        !convert("", &other, place("channel"))
            .unwrap()
            .message
            .mentioned_bot
    );
    let mut p = place("channel");
    p.app_mention = true;
    assert!(convert("", &other, p).unwrap().message.mentioned_bot);
    assert!(mentions("<@ broken <@> <@U1").is_empty());
}

#[test]
fn own_and_other_bots() {
    let own = message("1.1", "echo", |m| m["user"] = json!(BOT));
    assert_eq!(convert("", &own, place("channel")), Err(Skip::Own));
    let own_bot_id = message("1.2", "echo", |m| {
        m["user"] = Value::Null;
        m["bot_id"] = json!("BBOT");
        m["subtype"] = json!("bot_message");
    });
    assert_eq!(convert("", &own_bot_id, place("channel")), Err(Skip::Own));
    let other = message("1.3", "beep", |m| {
        m["user"] = Value::Null;
        m["bot_id"] = json!("B9");
        m["username"] = json!("otherbot");
        m["user_profile"] = Value::Null;
        m["subtype"] = json!("bot_message");
    });
    let c = convert("allow_bots = \"mentions\"", &other, place("channel")).unwrap();
    assert!(c.message.sender.is_bot);
    assert_eq!(
        (c.message.sender.id.as_str(), c.message.sender.name.as_str()),
        ("B9", "otherbot")
    );
    assert_eq!(c.rules.allow_bots, Some(AllowBots::Mentions));
}

#[test]
fn subtypes_edits_system_events_and_commands() {
    let join = message("1.1", "<@U1> has joined the channel", |m| {
        m["subtype"] = json!("channel_join")
    });
    let c = convert("", &join, place("channel")).unwrap();
    assert_eq!(c.message.kind, MessageKind::SystemEvent);
    assert_eq!(c.message.text, "<@U1> has joined the channel");
    let pin = message("1.2", "", |m| m["subtype"] = json!("pinned_item"));
    assert_eq!(
        convert("", &pin, place("channel")).unwrap().message.text,
        "Ann Lee pinned a message"
    );
    for edit in ["message_changed", "message_deleted", "message_replied"] {
        let m = message("1.3", "x", |m| m["subtype"] = json!(edit));
        assert_eq!(convert("", &m, place("channel")), Err(Skip::Edit), "{edit}");
    }
    let odd = message("1.4", "x", |m| m["subtype"] = json!("reminder_add"));
    assert_eq!(convert("", &odd, place("channel")), Err(Skip::Type));
    let no_ts = message("", "x", |_| {});
    assert_eq!(convert("", &no_ts, place("channel")), Err(Skip::Type));
    let command = message("1.5", "/help me", |_| {});
    assert_eq!(
        convert("", &command, place("channel"))
            .unwrap()
            .message
            .kind,
        MessageKind::Command
    );
    let addressed = message("1.7", "<@UBOT>  /help", |_| {});
    assert_eq!(
        convert("", &addressed, place("channel"))
            .unwrap()
            .message
            .kind,
        MessageKind::Command
    );
    let path = message("1.6", "/ not a command", |_| {});
    assert_eq!(
        convert("", &path, place("channel")).unwrap().message.kind,
        MessageKind::Message
    );
}

#[test]
fn allowlists_and_system_prompts_per_conversation() {
    let extra = "users = [\"U2\"]\n[channels.slack.channels.C20]\nsystem_prompt = \"Be brief.\"\nrequire_mention = false\n";
    let m = message("1.1", "hi", |_| {});
    assert_eq!(convert(extra, &m, place("channel")), Err(Skip::NotAllowed));
    let join = message("1.2", "", |m| m["subtype"] = json!("channel_join"));
    assert!(
        convert(extra, &join, place("channel")).is_ok(),
        "system events pass"
    );
    assert!(
        convert(extra, &m, place("im")).is_ok(),
        "DMs follow dm_policy, not the list"
    );
    let by_u2 = message("1.3", "hi", |m| m["user"] = json!("U2"));
    let c = convert(extra, &by_u2, place("channel")).unwrap();
    assert_eq!(c.system_prompt.as_deref(), Some("Be brief."));
    assert_eq!(c.rules.require_mention, Some(false));
}

#[test]
fn files_are_attachments() {
    let m = message("1.1", "see", |m| {
        m["subtype"] = json!("file_share");
        m["files"] = json!([{"name": "a.png", "mimetype": "image/png", "size": 10,
                             "url_private": "https://files.slack.com/a.png"}]);
    });
    let c = convert("", &m, place("channel")).unwrap();
    assert_eq!(c.message.attachments.len(), 1);
    assert_eq!(c.message.attachments[0].kind, "image/png");
    assert_eq!(
        c.message.attachments[0].url.as_deref(),
        Some("https://files.slack.com/a.png")
    );
}
