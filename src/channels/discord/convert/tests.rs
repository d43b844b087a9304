//! The preflight matrix of Discord messages, message by message (the channel's half; the
//! rules it hands on are checked against preflight in `tests/it/discord.rs`).

use serde_json::{json, Value};
use twilight_model::channel::message::Message;

use super::*;
use crate::config::{AllowBots, Config};

const BOT: u64 = 999;
const GUILD: u64 = 10;
const CHANNEL: u64 = 20;

fn config(extra: &str) -> DiscordConfig {
    Config::parse(&format!("[channels.discord]\n{extra}"))
        .unwrap()
        .channels
        .discord
        .unwrap()
}

fn user(id: u64, bot: bool) -> Value {
    json!({"id": id.to_string(), "username": format!("u{id}"), "discriminator": "0",
           "avatar": null, "bot": bot, "global_name": format!("User {id}"),
           "public_flags": 0, "mfa_enabled": false})
}

/// A guild message `id` by user 1 in channel 20 of guild 10; `edit` changes the JSON.
fn message(id: u64, content: &str, edit: impl FnOnce(&mut Value)) -> Message {
    let mut m = json!({
        "id": id.to_string(), "channel_id": CHANNEL.to_string(), "guild_id": GUILD.to_string(),
        "author": user(1, false),
        "member": {"roles": [], "deaf": false, "mute": false, "flags": 0,
                   "joined_at": "2026-01-01T00:00:00.000000+00:00", "nick": null},
        "content": content, "timestamp": "2026-12-06T23:00:00.000000+00:00",
        "edited_timestamp": null, "tts": false, "mention_everyone": false,
        "mentions": [], "mention_roles": [], "attachments": [], "embeds": [],
        "pinned": false, "type": 0
    });
    edit(&mut m);
    serde_json::from_value(m).unwrap()
}

fn ctx() -> Context {
    let mut c = Context::new(BOT);
    c.set_bot_roles(GUILD, vec![77]);
    c
}

fn convert(extra: &str, m: &Message, parent: Option<u64>) -> Result<Converted, Skip> {
    to_inbound(m, parent, &ctx(), &config(extra))
}

#[test]
fn a_guild_message_is_a_channel_chat_with_its_rules() {
    let c = convert("", &message(5, "hello", |_| {}), None).unwrap();
    let m = &c.message;
    assert_eq!(
        (m.channel.as_str(), m.chat_kind),
        ("discord", ChatKind::Channel)
    );
    assert_eq!((m.chat_id.as_str(), m.thread_id.as_deref()), ("20", None));
    assert_eq!((m.message_id.as_str(), m.sender.id.as_str()), ("5", "1"));
    assert_eq!(m.sender.name, "User 1");
    assert_eq!(m.kind, MessageKind::Message);
    assert!(!m.mentioned_bot);
    assert_eq!(m.timestamp_ms, 1_796_598_000_000);
    assert_eq!(
        c.rules,
        ChatRules {
            require_mention: Some(true),
            allow_bots: Some(AllowBots::No)
        }
    );
    let keys = crate::inbound::SessionKeys::for_agent("main");
    assert_eq!(keys.key(m), "agent:main:discord:channel:20");
}

#[test]
fn mentions_of_the_bot_its_role_or_a_reply_to_it_address_it() {
    let by_user = message(5, "<@999> hi", |m| m["mentions"] = json!([user(BOT, true)]));
    let c = convert("", &by_user, None).unwrap();
    assert!(c.message.mentioned_bot);
    assert_eq!(c.message.mentions, vec!["999"]);
    let by_role = message(6, "<@&77> hi", |m| m["mention_roles"] = json!(["77"]));
    assert!(convert("", &by_role, None).unwrap().message.mentioned_bot);
    let other_role = message(7, "<@&78> hi", |m| m["mention_roles"] = json!(["78"]));
    assert!(
        !convert("", &other_role, None)
            .unwrap()
            .message
            .mentioned_bot
    );
    let bot_said = message(4, "earlier", |m| m["author"] = user(BOT, true));
    let reply = message(8, "and?", |m| {
        m["type"] = json!(19);
        m["message_reference"] = json!({"message_id": "4", "channel_id": "20", "type": 0});
        m["referenced_message"] = serde_json::to_value(&bot_said).unwrap();
    });
    let c = convert("", &reply, None).unwrap();
    assert!(c.message.mentioned_bot, "a reply to the bot addresses it");
    assert_eq!(c.message.reply_to.as_deref(), Some("4"));
    let someone = message(3, "x", |_| {});
    let reply_other = message(9, "and?", |m| {
        m["type"] = json!(19);
        m["message_reference"] = json!({"message_id": "3", "channel_id": "20", "type": 0});
        m["referenced_message"] = serde_json::to_value(&someone).unwrap();
    });
    let c = convert("", &reply_other, None).unwrap();
    assert!(!c.message.mentioned_bot);
    assert_eq!(c.message.reply_to.as_deref(), Some("3"));
}

#[test]
fn own_and_other_bots() {
    let own = message(5, "echo", |m| m["author"] = user(BOT, true));
    assert_eq!(convert("", &own, None), Err(Skip::Own));
    let other = message(6, "beep", |m| m["author"] = user(55, true));
    let c = convert("allow_bots = \"mentions\"", &other, None).unwrap();
    assert!(c.message.sender.is_bot);
    assert_eq!(c.rules.allow_bots, Some(AllowBots::Mentions));
}

#[test]
fn threads_are_their_own_sessions_with_the_parents_settings() {
    let extra = "[channels.discord.guilds.10.channels.20]\nrequire_mention = false\nsystem_prompt = \"Be kind.\"";
    let in_thread = message(5, "hi", |m| m["channel_id"] = json!("30"));
    let c = convert(extra, &in_thread, Some(CHANNEL)).unwrap();
    assert_eq!(c.message.chat_id, "20");
    assert_eq!(c.message.thread_id.as_deref(), Some("30"));
    assert_eq!(c.rules.require_mention, Some(false), "the parent's setting");
    assert_eq!(c.system_prompt.as_deref(), Some("Be kind."));
    let keys = crate::inbound::SessionKeys::for_agent("main");
    assert_eq!(
        keys.key(&c.message),
        "agent:main:discord:channel:20:thread:30"
    );
}

#[test]
fn allowlists_of_users_and_roles() {
    let extra = "[channels.discord.guilds.10]\nusers = [\"2\"]\nroles = [\"50\"]";
    assert_eq!(
        convert(extra, &message(5, "hi", |_| {}), None),
        Err(Skip::NotAllowed)
    );
    let with_role = message(6, "hi", |m| m["member"]["roles"] = json!(["50"]));
    assert!(convert(extra, &with_role, None).is_ok());
    let listed = message(7, "hi", |m| m["author"] = user(2, false));
    assert!(convert(extra, &listed, None).is_ok());
    // Another guild has no allowlist.
    let elsewhere = message(8, "hi", |m| m["guild_id"] = json!("11"));
    assert!(convert(extra, &elsewhere, None).is_ok());
}

#[test]
fn direct_messages_commands_system_events_and_attachments() {
    let dm = message(5, "hi", |m| {
        m.as_object_mut().unwrap().remove("guild_id");
        m.as_object_mut().unwrap().remove("member");
    });
    let c = convert("", &dm, None).unwrap();
    assert_eq!(c.message.chat_kind, ChatKind::Direct);
    assert_eq!(c.rules.require_mention, None);

    let typed = convert("", &message(6, "/help me", |_| {}), None).unwrap();
    assert_eq!(typed.message.kind, MessageKind::Command);
    assert_eq!(
        convert("", &message(7, "/ not a command", |_| {}), None)
            .unwrap()
            .message
            .kind,
        MessageKind::Message
    );
    let slash = message(8, "", |m| m["type"] = json!(20));
    assert_eq!(
        convert("", &slash, None).unwrap().message.kind,
        MessageKind::Command
    );

    let join = message(9, "", |m| m["type"] = json!(7));
    let c = convert("", &join, None).unwrap();
    assert_eq!(c.message.kind, MessageKind::SystemEvent);
    assert_eq!(c.message.text, "User 1 joined the server");
    let pin = message(10, "", |m| m["type"] = json!(6));
    assert_eq!(
        convert("", &pin, None).unwrap().message.text,
        "User 1 pinned a message"
    );
    let starter = message(11, "", |m| m["type"] = json!(21));
    assert_eq!(convert("", &starter, None), Err(Skip::Type));

    let file = message(12, "look", |m| {
        m["attachments"] = json!([{"id": "1", "filename": "a.png", "content_type": "image/png",
            "size": 12, "url": "https://cdn.example/a.png", "proxy_url": "https://media.example/a.png"}]);
    });
    let a = &convert("", &file, None).unwrap().message.attachments;
    assert_eq!(a.len(), 1);
    assert_eq!(
        (a[0].kind.as_str(), a[0].name.as_str()),
        ("image/png", "a.png")
    );
    assert_eq!(a[0].url.as_deref(), Some("https://cdn.example/a.png"));
}
