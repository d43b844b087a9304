//! What Slack sends, read leniently (every field optional, unknown ones ignored): a Socket
//! Mode frame, the Events API callback inside it (or POSTed in `http` mode), a message (live
//! or read back from the history), a slash command.

use serde::Deserialize;
use serde_json::Value;

/// A Socket Mode frame: `hello`, `disconnect`, or an envelope (`events_api`,
/// `slash_commands`, `interactive`) to acknowledge with its `envelope_id`.
#[derive(Debug, Deserialize)]
pub(crate) struct Frame {
    /// The frame type.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// An envelope's id, acknowledged at once.
    #[serde(default)]
    pub envelope_id: Option<String>,
    /// An envelope's payload.
    #[serde(default)]
    pub payload: Option<Value>,
    /// A `disconnect`'s reason (`warning`, `refresh_requested`, `link_disabled`).
    #[serde(default)]
    pub reason: Option<String>,
    /// How often Slack delivered this envelope before (0 the first time).
    #[serde(default)]
    pub retry_attempt: Option<u32>,
}

/// The `disconnect` reason that means Socket Mode was turned off for the app: stop, with it.
pub(crate) const LINK_DISABLED: &str = "link_disabled";

/// An Events API callback (`event_callback`, or `url_verification` in `http` mode).
#[derive(Debug, Deserialize)]
pub(crate) struct Callback {
    /// `event_callback` or `url_verification`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The event's id, the same on every redelivery.
    #[serde(default)]
    pub event_id: Option<String>,
    /// The workspace.
    #[serde(default)]
    pub team_id: Option<String>,
    /// The event.
    #[serde(default)]
    pub event: Option<Value>,
    /// `url_verification`'s challenge, echoed back.
    #[serde(default)]
    pub challenge: Option<String>,
}

/// A user's profile as a message carries it.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Profile {
    /// The display name (may be empty).
    #[serde(default)]
    pub display_name: Option<String>,
    /// The real name.
    #[serde(default)]
    pub real_name: Option<String>,
}

/// A file shared in a message.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct File {
    /// Its name.
    #[serde(default)]
    pub name: Option<String>,
    /// Its MIME type.
    #[serde(default)]
    pub mimetype: Option<String>,
    /// Its size in bytes.
    #[serde(default)]
    pub size: Option<u64>,
    /// Where it can be read (with the bot token).
    #[serde(default)]
    pub url_private: Option<String>,
}

/// A message: a `message` or `app_mention` event (its `type` read by the caller), or an entry
/// of a history read.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct SlackMessage {
    /// `channel_join`, `message_changed`, `bot_message`… ; none for a plain message.
    #[serde(default)]
    pub subtype: Option<String>,
    /// The conversation (not in history reads: the caller knows it).
    #[serde(default)]
    pub channel: Option<String>,
    /// `channel`, `group`, `mpim` or `im` (`message` events only).
    #[serde(default)]
    pub channel_type: Option<String>,
    /// The author.
    #[serde(default)]
    pub user: Option<String>,
    /// Set on messages posted by a bot (the app's own included).
    #[serde(default)]
    pub bot_id: Option<String>,
    /// A bot message's name.
    #[serde(default)]
    pub username: Option<String>,
    /// The author's profile.
    #[serde(default)]
    pub user_profile: Option<Profile>,
    /// The text, in Slack's markup (`<@U…>`, `&lt;`…).
    #[serde(default)]
    pub text: Option<String>,
    /// The message's id within the conversation, and its time.
    #[serde(default)]
    pub ts: String,
    /// The thread's first message, when the message is in a thread (equal to `ts` on that
    /// first message itself).
    #[serde(default)]
    pub thread_ts: Option<String>,
    /// The author of the thread's first message.
    #[serde(default)]
    pub parent_user_id: Option<String>,
    /// The author's workspace.
    #[serde(default)]
    pub team: Option<String>,
    /// Shared files.
    #[serde(default)]
    pub files: Vec<File>,
}

impl SlackMessage {
    /// The thread this message is a reply in: its `thread_ts`, unless it is the thread's
    /// first message (which belongs to its conversation).
    pub(crate) fn thread(&self) -> Option<&str> {
        self.thread_ts
            .as_deref()
            .filter(|t| !t.is_empty() && *t != self.ts)
    }
}

/// A slash command (Socket Mode `slash_commands`, the payload's fields used).
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct SlashCommand {
    /// `/ask`.
    #[serde(default)]
    pub command: String,
    /// What followed it.
    #[serde(default)]
    pub text: String,
    /// Who typed it.
    #[serde(default)]
    pub user_id: String,
    /// Their name.
    #[serde(default)]
    pub user_name: Option<String>,
    /// Where.
    #[serde(default)]
    pub channel_id: String,
    /// Unique per invocation.
    #[serde(default)]
    pub trigger_id: String,
    /// The workspace.
    #[serde(default)]
    pub team_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_callbacks_and_messages_read_with_unknown_fields() {
        let f: Frame = serde_json::from_str(
            r#"{"envelope_id":"e1","type":"events_api","accepts_response_payload":false,
                "retry_attempt":1,"retry_reason":"timeout",
                "payload":{"type":"event_callback","event_id":"Ev1","team_id":"T1",
                  "event":{"type":"message","channel":"C1","channel_type":"channel","user":"U1",
                           "text":"hi","ts":"1.000002","thread_ts":"1.000001","blocks":[]}}}"#,
        )
        .unwrap();
        assert_eq!(
            (f.kind.as_str(), f.envelope_id.as_deref()),
            ("events_api", Some("e1"))
        );
        assert_eq!(f.retry_attempt, Some(1));
        let cb: Callback = serde_json::from_value(f.payload.unwrap()).unwrap();
        assert_eq!(cb.event_id.as_deref(), Some("Ev1"));
        let m: SlackMessage = serde_json::from_value(cb.event.unwrap()).unwrap();
        assert_eq!(m.thread(), Some("1.000001"));
        let root = SlackMessage {
            ts: "1.5".into(),
            thread_ts: Some("1.5".into()),
            ..SlackMessage::default()
        };
        assert_eq!(root.thread(), None, "a thread's first message is not in it");
        let hello: Frame =
            serde_json::from_str(r#"{"type":"hello","num_connections":1,"debug_info":{}}"#)
                .unwrap();
        assert_eq!(hello.kind, "hello");
        let bye: Frame =
            serde_json::from_str(r#"{"type":"disconnect","reason":"refresh_requested"}"#).unwrap();
        assert_eq!(bye.reason.as_deref(), Some("refresh_requested"));
    }
}
