//! Telegram updates to [`InboundMessage`]s: chat kinds, forum topics as
//! `<chat_id>:topic:<n>` chat ids (SPEC §2.2), mentions of the bot (explicit `@username`,
//! `text_mention`, `/command@bot`) and implicit ones (a reply to the bot).

use super::api::{Message, MessageEntity, Update, User};
use crate::inbound::{Attachment, ChatKind, InboundMessage, Sender, MAX_ATTACHMENTS};

/// The channel name Telegram messages carry.
pub(crate) const TELEGRAM: &str = "telegram";

/// Who the bot is, for mention detection.
#[derive(Debug, Clone)]
pub(crate) struct BotIdentity {
    /// The bot's user id.
    pub id: i64,
    /// Its username, lowercased, without `@`.
    pub username: String,
}

impl BotIdentity {
    /// From `getMe`.
    pub(crate) fn from_user(me: &User) -> Self {
        Self {
            id: me.id,
            username: me.username.clone().unwrap_or_default().to_lowercase(),
        }
    }
}

/// The chat id the session key uses: forum topics become `<chat_id>:topic:<n>`.
fn chat_id(m: &Message) -> String {
    match (m.is_topic_message, m.message_thread_id) {
        (Some(true), Some(topic)) => format!("{}:topic:{topic}", m.chat.id),
        _ => m.chat.id.to_string(),
    }
}

/// Splits a chat id made by [`chat_id`] back into the Bot API's `chat_id` and
/// `message_thread_id`.
pub(crate) fn split_chat_id(chat_id: &str) -> (&str, Option<&str>) {
    match chat_id.split_once(":topic:") {
        Some((chat, topic)) => (chat, Some(topic)),
        None => (chat_id, None),
    }
}

fn utf16_slice(text: &str, offset: usize, length: usize) -> String {
    let units: Vec<u16> = text.encode_utf16().skip(offset).take(length).collect();
    String::from_utf16_lossy(&units)
}

/// Mentioned ids (usernames lowercased without `@`, or user ids) and whether the bot is
/// among them.
fn mentions(text: &str, entities: &[MessageEntity], bot: &BotIdentity) -> (Vec<String>, bool) {
    let mut out = Vec::new();
    let mut bot_mentioned = false;
    for e in entities {
        match e.kind.as_str() {
            "mention" => {
                let name = utf16_slice(text, e.offset, e.length);
                let name = name.trim_start_matches('@').to_lowercase();
                bot_mentioned |= !bot.username.is_empty() && name == bot.username;
                out.push(name);
            }
            "text_mention" => {
                if let Some(user) = &e.user {
                    bot_mentioned |= user.id == bot.id;
                    out.push(user.id.to_string());
                }
            }
            "bot_command" => {
                let command = utf16_slice(text, e.offset, e.length).to_lowercase();
                if let Some((_, target)) = command.split_once('@') {
                    bot_mentioned |= !bot.username.is_empty() && target == bot.username;
                }
            }
            _ => {}
        }
    }
    (out, bot_mentioned)
}

fn display_name(u: &User) -> String {
    match &u.last_name {
        Some(last) if !last.is_empty() => format!("{} {last}", u.first_name),
        _ if !u.first_name.is_empty() => u.first_name.clone(),
        _ => u.username.clone().unwrap_or_default(),
    }
}

fn attachments(m: &Message) -> Vec<Attachment> {
    let mut out = Vec::new();
    if let Some(d) = &m.document {
        out.push(Attachment {
            kind: d.mime_type.clone().unwrap_or_else(|| "document".into()),
            name: d.file_name.clone().unwrap_or_default(),
            size: d.file_size,
            url: None,
        });
    }
    if !m.photo.is_empty() {
        let size = m
            .photo
            .iter()
            .filter_map(|p| p.get("file_size").and_then(serde_json::Value::as_u64))
            .max();
        out.push(Attachment {
            kind: "image".into(),
            name: String::new(),
            size,
            url: None,
        });
    }
    out.truncate(MAX_ATTACHMENTS);
    out
}

/// The inbound message of an update, or `None` for updates that are not messages with text
/// (service messages such as joins are not turns).
pub(crate) fn to_inbound(
    update: &Update,
    bot: &BotIdentity,
    account_id: &str,
) -> Option<InboundMessage> {
    let m = update.message.as_ref().or(update.channel_post.as_ref())?;
    let (text, entities) = match (&m.text, &m.caption) {
        (Some(t), _) => (t.clone(), &m.entities),
        (None, Some(c)) => (c.clone(), &m.caption_entities),
        (None, None) => return None,
    };
    let chat_kind = match m.chat.kind.as_str() {
        "private" => ChatKind::Direct,
        "channel" => ChatKind::Channel,
        _ => ChatKind::Group,
    };
    let sender = match (&m.from, &m.sender_chat) {
        (Some(u), _) => Sender {
            id: u.id.to_string(),
            name: display_name(u),
            is_bot: u.is_bot,
        },
        (None, Some(c)) => Sender {
            id: c.id.to_string(),
            name: c.title.clone().unwrap_or_default(),
            is_bot: false,
        },
        (None, None) => Sender {
            id: m.chat.id.to_string(),
            name: m.chat.title.clone().unwrap_or_default(),
            is_bot: false,
        },
    };
    let (mentions, mut mentioned_bot) = mentions(&text, entities, bot);
    let reply_to = m.reply_to_message.as_ref().and_then(|r| {
        // In a forum, a message that starts a topic thread "replies" to the topic's creation
        // message; that is not a reply to anyone.
        let topic_root =
            m.is_topic_message == Some(true) && m.message_thread_id == Some(r.message_id);
        if !topic_root {
            mentioned_bot |= r.from.as_ref().is_some_and(|u| u.id == bot.id);
        }
        (!topic_root).then(|| r.message_id.to_string())
    });
    Some(InboundMessage {
        channel: TELEGRAM.into(),
        account_id: account_id.to_string(),
        chat_kind,
        chat_id: chat_id(m),
        thread_id: None,
        message_id: m.message_id.to_string(),
        sender,
        text,
        mentions,
        mentioned_bot,
        reply_to,
        timestamp_ms: u64::try_from(m.date).unwrap_or(0).saturating_mul(1_000),
        attachments: attachments(m),
        kind: crate::inbound::MessageKind::Message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bot() -> BotIdentity {
        BotIdentity {
            id: 999,
            username: "turnbot".into(),
        }
    }

    fn update(message: serde_json::Value) -> Update {
        serde_json::from_value(json!({"update_id": 1, "message": message})).unwrap()
    }

    #[test]
    fn group_mention_topic_and_reply_detection() {
        let u = update(json!({
            "message_id": 7, "date": 1_700_000_000,
            "chat": {"id": -100123, "type": "supergroup", "is_forum": true},
            "is_topic_message": true, "message_thread_id": 5,
            "from": {"id": 1, "is_bot": false, "first_name": "Ann", "last_name": "Lee"},
            "text": "héllo 😀 @TurnBot and @bob",
            "entities": [
                {"type": "mention", "offset": 9, "length": 8},
                {"type": "mention", "offset": 22, "length": 4}
            ]
        }));
        let m = to_inbound(&u, &bot(), "default").unwrap();
        assert_eq!(m.chat_kind, ChatKind::Group);
        assert_eq!(m.chat_id, "-100123:topic:5");
        assert_eq!(split_chat_id(&m.chat_id), ("-100123", Some("5")));
        assert_eq!(m.mentions, vec!["turnbot", "bob"]);
        assert!(m.mentioned_bot);
        assert_eq!(m.sender.name, "Ann Lee");
        assert_eq!(m.timestamp_ms, 1_700_000_000_000);

        let reply = update(json!({
            "message_id": 8, "date": 1, "chat": {"id": -5, "type": "group"},
            "from": {"id": 1, "first_name": "Ann"}, "text": "and you?",
            "reply_to_message": {"message_id": 6, "date": 1, "chat": {"id": -5, "type": "group"},
                                 "from": {"id": 999, "is_bot": true, "first_name": "Bot"}}
        }));
        let m = to_inbound(&reply, &bot(), "default").unwrap();
        assert!(m.mentioned_bot, "a reply to the bot is an implicit mention");
        assert_eq!(m.reply_to.as_deref(), Some("6"));
        assert_eq!(m.chat_id, "-5");

        let other = update(json!({
            "message_id": 9, "date": 1, "chat": {"id": -5, "type": "group"},
            "from": {"id": 1, "first_name": "Ann"}, "text": "/start@otherbot",
            "entities": [{"type": "bot_command", "offset": 0, "length": 15}]
        }));
        assert!(!to_inbound(&other, &bot(), "default").unwrap().mentioned_bot);

        let dm = update(json!({
            "message_id": 1, "date": 1, "chat": {"id": 42, "type": "private"},
            "from": {"id": 42, "first_name": "Ann"}, "new_chat_title": "x"
        }));
        assert!(
            to_inbound(&dm, &bot(), "default").is_none(),
            "no text: not a turn"
        );
    }
}
