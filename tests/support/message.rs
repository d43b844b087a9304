//! Inbound messages as JSON (SPEC §9a), built field by field.

use serde_json::{json, Value};

/// An InboundMessage as JSON (SPEC §9a), built field by field.
#[derive(Debug, Clone)]
pub struct Msg(Value);

impl Msg {
    /// A Telegram group message that mentions the bot: it is answered, and its session is
    /// `agent:main:telegram:group:<chat_id>` (see [`group_key`]).
    pub fn group(chat_id: &str, message_id: &str, text: &str) -> Self {
        Self(json!({
            "channel": "telegram",
            "account_id": "default",
            "chat_kind": "group",
            "chat_id": chat_id,
            "thread_id": null,
            "message_id": message_id,
            "sender": {"id": "111", "name": "Alice", "is_bot": false},
            "text": text,
            "mentioned_bot": true,
            "reply_to": null,
            "timestamp_ms": 0,
        }))
    }

    /// Sets a top-level field.
    pub fn with(mut self, field: &str, value: Value) -> Self {
        self.0[field] = value;
        self
    }

    /// Removes a top-level field.
    pub fn without(mut self, field: &str) -> Self {
        self.0
            .as_object_mut()
            .expect("a message is an object")
            .remove(field);
        self
    }

    /// The JSON body.
    pub fn json(&self) -> &Value {
        &self.0
    }
}

/// The session key of [`Msg::group`] messages in `chat_id`.
pub fn group_key(chat_id: &str) -> String {
    format!("agent:main:telegram:group:{chat_id}").to_lowercase()
}

/// A group message on the `test` channel that addresses the bot, so it becomes a turn in
/// session [`session_key`]`(chat)`; stamped now.
pub fn message(chat: &str, id: &str, text: &str) -> Value {
    json!({
        "channel": "test",
        "chat_kind": "group",
        "chat_id": chat,
        "message_id": id,
        "sender": {"id": "u1", "name": "User", "is_bot": false},
        "text": text,
        "mentioned_bot": true,
        "timestamp_ms": now_ms(),
    })
}

/// The session key of [`message`]s in `chat`.
pub fn session_key(chat: &str) -> String {
    format!("agent:main:test:group:{chat}")
}

/// Milliseconds since the Unix epoch: the library's one clock.
pub use turnstile::clock::now_ms;

/// An InboundMessage JSON for `POST /v1/messages`.
pub fn channel_message(channel: &str, chat_id: &str, id: &str, text: &str) -> Value {
    json!({
        "channel": channel, "chat_kind": "group", "chat_id": chat_id, "message_id": id,
        "sender": {"id": "u1", "name": "User"}, "text": text, "mentioned_bot": true
    })
}
