//! `InboundMessage`: one message from any channel, normalised, and its validation.

use serde::{Deserialize, Serialize};

use crate::config::LimitsConfig;
use crate::error::InboundError;

/// Where a message was posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatKind {
    /// A one-to-one conversation with the bot.
    Direct,
    /// A group chat.
    Group,
    /// A broadcast channel.
    Channel,
}

impl ChatKind {
    /// The name used in session keys.
    pub fn as_str(self) -> &'static str {
        match self {
            ChatKind::Direct => "direct",
            ChatKind::Group => "group",
            ChatKind::Channel => "channel",
        }
    }
}

/// The message type: something someone said (chat), a platform event (system), or a
/// command. In JSON, the `kind` field (alias `message_type`) is `message` (alias `chat`),
/// `system_event` (alias `system`) or `command`.
///
/// Stored (bincode) as the variant index: new variants go at the end, never in between.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    /// Something someone said: a candidate for a turn (default).
    #[default]
    #[serde(alias = "chat")]
    Message,
    /// A platform event (a join, a rename, a pin…), with `text` describing it. Never a turn by
    /// itself: preflight queues it for the session's next turn.
    #[serde(alias = "system")]
    SystemEvent,
    /// A command for the bot (a slash or context-menu command, a `/command` text the channel
    /// marks as such): never answered as chat. Preflight drops it as `command` (it is counted,
    /// and stays out of the chat's pending history).
    Command,
}

/// Who sent a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sender {
    /// Platform id of the sender.
    pub id: String,
    /// Display name (untrusted).
    #[serde(default)]
    pub name: String,
    /// True when the sender is a bot.
    #[serde(default)]
    pub is_bot: bool,
}

/// Metadata of an attachment (the content itself is not carried, at most a link to it).
///
/// JSON: `{"kind", "name", "size", "url"}`, all optional. Stored (bincode), `size` and `url`
/// travel together as one [`SizeAndUrl`], which encodes exactly like the `Option<u64>` size of
/// records written before `url` existed: inbox entries queued by an older build still decode,
/// with no migration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attachment {
    /// MIME type or kind, e.g. `image/png`.
    pub kind: String,
    /// File name.
    pub name: String,
    /// Size in bytes, when known.
    pub size: Option<u64>,
    /// Where the content can be fetched, when the channel has a link: an `http(s)` URL of at
    /// most [`MAX_ATTACHMENT_URL_CHARS`] characters (checked by
    /// [`InboundMessage::validated`]). With `[model] vision`, an image's URL is sent to the
    /// model.
    pub url: Option<String>,
}

/// Longest accepted attachment URL, in characters.
pub(crate) const MAX_ATTACHMENT_URL_CHARS: usize = 2_048;

/// The JSON shape of an [`Attachment`].
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AttachmentJson {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<String>,
}

/// The stored shape of an [`Attachment`] (see there).
#[derive(Serialize, Deserialize)]
struct AttachmentStored {
    kind: String,
    name: String,
    tail: SizeAndUrl,
}

/// An attachment's size and URL as stored. The variant index is the first byte: 0 and 1 are
/// what an `Option<u64>` (no size, a size) encodes as, so records without `url` read as before;
/// only an attachment with a URL uses 2 or 3. Do not reorder the variants.
#[derive(Serialize, Deserialize)]
enum SizeAndUrl {
    None,
    Size(u64),
    Url(String),
    SizeUrl(u64, String),
}

impl Serialize for Attachment {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            AttachmentJson {
                kind: self.kind.clone(),
                name: self.name.clone(),
                size: self.size,
                url: self.url.clone(),
            }
            .serialize(serializer)
        } else {
            let tail = match (self.size, self.url.clone()) {
                (None, None) => SizeAndUrl::None,
                (Some(size), None) => SizeAndUrl::Size(size),
                (None, Some(url)) => SizeAndUrl::Url(url),
                (Some(size), Some(url)) => SizeAndUrl::SizeUrl(size, url),
            };
            AttachmentStored {
                kind: self.kind.clone(),
                name: self.name.clone(),
                tail,
            }
            .serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for Attachment {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            let a = AttachmentJson::deserialize(deserializer)?;
            Ok(Self {
                kind: a.kind,
                name: a.name,
                size: a.size,
                url: a.url,
            })
        } else {
            let a = AttachmentStored::deserialize(deserializer)?;
            let (size, url) = match a.tail {
                SizeAndUrl::None => (None, None),
                SizeAndUrl::Size(size) => (Some(size), None),
                SizeAndUrl::Url(url) => (None, Some(url)),
                SizeAndUrl::SizeUrl(size, url) => (Some(size), Some(url)),
            };
            Ok(Self {
                kind: a.kind,
                name: a.name,
                size,
                url,
            })
        }
    }
}

/// Checks an attachment URL: `http(s)`, parseable, without spaces or control characters, at
/// most [`MAX_ATTACHMENT_URL_CHARS`].
fn check_attachment_url(url: &str) -> Result<(), InboundError> {
    const FIELD: &str = "attachments.url";
    check_len(FIELD, url, MAX_ATTACHMENT_URL_CHARS)?;
    if url.chars().any(char::is_control) {
        return Err(InboundError::ControlChar(FIELD));
    }
    // A URL as sent on the wire: no spaces (the parser would quietly percent-encode them).
    let parsed = (!url.chars().any(char::is_whitespace))
        .then(|| reqwest::Url::parse(url).ok())
        .flatten();
    match parsed {
        Some(u) if matches!(u.scheme(), "http" | "https") && u.has_host() => Ok(()),
        _ => Err(InboundError::NotHttpUrl(FIELD)),
    }
}

fn default_account() -> String {
    "default".into()
}

/// A normalised message from any channel (SPEC §2.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InboundMessage {
    /// The platform, e.g. `telegram`.
    pub channel: String,
    /// The bot account on that platform. Default `default`.
    #[serde(default = "default_account")]
    pub account_id: String,
    /// Direct, group or channel.
    pub chat_kind: ChatKind,
    /// The chat's platform id.
    pub chat_id: String,
    /// Thread or topic id, when the message is in one.
    #[serde(default)]
    pub thread_id: Option<String>,
    /// The message's platform id (unique per chat).
    pub message_id: String,
    /// Who sent it.
    pub sender: Sender,
    /// The text.
    pub text: String,
    /// Ids of mentioned users.
    #[serde(default)]
    pub mentions: Vec<String>,
    /// True when the bot was mentioned.
    #[serde(default)]
    pub mentioned_bot: bool,
    /// The id of the message this one replies to.
    #[serde(default)]
    pub reply_to: Option<String>,
    /// When it was sent, ms since the Unix epoch; 0 means "now".
    #[serde(default)]
    pub timestamp_ms: u64,
    /// Attachment metadata.
    #[serde(default)]
    pub attachments: Vec<Attachment>,
    /// `message` (default; alias `chat`), `system_event` (alias `system`) or `command`.
    /// Also accepted as `message_type`.
    #[serde(default, alias = "message_type")]
    pub kind: MessageKind,
}

/// The channel of the OpenAI-compatible endpoint's messages.
pub(crate) const OPENAI_API_CHANNEL: &str = "openai";

/// Longest accepted id (chat, message, sender, thread, channel, account).
pub(crate) const MAX_ID_CHARS: usize = 256;
/// Most attachments on one message.
pub(crate) const MAX_ATTACHMENTS: usize = 32;
/// Most mentions on one message.
pub(crate) const MAX_MENTIONS: usize = 256;

impl InboundMessage {
    /// Whether a later message may read this one back from its chat's record: group and
    /// channel chats (history, recall, compaction) and replies in any chat. An OpenAI API
    /// conversation is a direct chat no message can reply to by id, so its record would be
    /// written and never read (four sled inserts per turn).
    pub fn joins_chat_record(&self) -> bool {
        self.chat_kind != ChatKind::Direct || self.channel != OPENAI_API_CHANNEL
    }

    /// Checks the message against `limits`, fills in a missing timestamp with `now_ms`, and
    /// returns the message ready to be admitted.
    pub fn validated(mut self, limits: &LimitsConfig, now_ms: u64) -> Result<Self, InboundError> {
        check_id("channel", &self.channel)?;
        check_id("account_id", &self.account_id)?;
        check_id("chat_id", &self.chat_id)?;
        check_id("message_id", &self.message_id)?;
        check_id("sender.id", &self.sender.id)?;
        if let Some(thread) = &self.thread_id {
            check_id("thread_id", thread)?;
        }
        if let Some(reply_to) = &self.reply_to {
            check_id("reply_to", reply_to)?;
        }
        check_len("sender.name", &self.sender.name, MAX_ID_CHARS)?;
        let chars = self.text.chars().count();
        if chars > limits.max_inbound_chars {
            return Err(InboundError::TooLong {
                field: "text",
                len: chars,
                max: limits.max_inbound_chars,
            });
        }
        if self.text.contains('\0') {
            return Err(InboundError::ControlChar("text"));
        }
        if self.mentions.len() > MAX_MENTIONS {
            return Err(InboundError::TooLong {
                field: "mentions",
                len: self.mentions.len(),
                max: MAX_MENTIONS,
            });
        }
        if self.attachments.len() > MAX_ATTACHMENTS {
            return Err(InboundError::TooLong {
                field: "attachments",
                len: self.attachments.len(),
                max: MAX_ATTACHMENTS,
            });
        }
        for url in self.attachments.iter().filter_map(|a| a.url.as_deref()) {
            check_attachment_url(url)?;
        }
        if self.timestamp_ms == 0 {
            self.timestamp_ms = now_ms;
        } else if self.timestamp_ms > now_ms.saturating_add(limits.max_future_skew_ms) {
            return Err(InboundError::FutureTimestamp(self.timestamp_ms));
        }
        Ok(self)
    }
}

/// Checks a session key named from outside (the API's `chat_id` of an explicit session, an
/// imported key) as the API checks ids: not empty, at most [`MAX_ID_CHARS`], no control
/// characters.
pub(crate) fn check_session_key(key: &str) -> Result<(), InboundError> {
    check_id("session_key", key)
}

fn check_id(field: &'static str, value: &str) -> Result<(), InboundError> {
    if value.trim().is_empty() {
        return Err(InboundError::Empty(field));
    }
    check_len(field, value, MAX_ID_CHARS)?;
    if value.chars().any(char::is_control) {
        return Err(InboundError::ControlChar(field));
    }
    Ok(())
}

fn check_len(field: &'static str, value: &str, max: usize) -> Result<(), InboundError> {
    let len = value.chars().count();
    if len > max {
        return Err(InboundError::TooLong { field, len, max });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> InboundMessage {
        serde_json::from_str(
            r#"{"channel":"telegram","account_id":"default","chat_kind":"group","chat_id":"-100123",
                "thread_id":null,"message_id":"4242","sender":{"id":"111","name":"Alice","is_bot":false},
                "text":"@bot hello","mentioned_bot":true,"reply_to":null,"timestamp_ms":1764470000000}"#,
        )
        .unwrap()
    }

    fn check(edit: impl FnOnce(&mut InboundMessage), expected: Result<(), InboundError>) {
        let mut m = sample();
        edit(&mut m);
        let got = m
            .validated(&LimitsConfig::default(), 1_764_470_000_000)
            .map(|_| ());
        assert_eq!(got, expected);
    }

    #[test]
    fn only_openai_api_conversations_stay_out_of_the_chat_record() {
        let group = sample();
        assert!(group.joins_chat_record());
        let dm = InboundMessage {
            chat_kind: ChatKind::Direct,
            ..sample()
        };
        assert!(dm.joins_chat_record(), "a DM can be replied to");
        let api = InboundMessage {
            channel: OPENAI_API_CHANNEL.into(),
            ..dm
        };
        assert!(!api.joins_chat_record());
        let api_group = InboundMessage {
            chat_kind: ChatKind::Group,
            ..api
        };
        assert!(api_group.joins_chat_record());
    }

    #[test]
    fn validation_vectors() {
        check(|_| {}, Ok(()));
        check(
            |m| m.message_id.clear(),
            Err(InboundError::Empty("message_id")),
        );
        check(
            |m| m.chat_id = "  ".into(),
            Err(InboundError::Empty("chat_id")),
        );
        check(|m| m.channel.clear(), Err(InboundError::Empty("channel")));
        check(
            |m| m.sender.id.clear(),
            Err(InboundError::Empty("sender.id")),
        );
        check(
            |m| m.thread_id = Some(String::new()),
            Err(InboundError::Empty("thread_id")),
        );
        check(
            |m| m.chat_id = "a\nb".into(),
            Err(InboundError::ControlChar("chat_id")),
        );
        check(
            |m| m.text = "a\0b".into(),
            Err(InboundError::ControlChar("text")),
        );
        check(
            |m| m.text = "x".repeat(32_001),
            Err(InboundError::TooLong {
                field: "text",
                len: 32_001,
                max: 32_000,
            }),
        );
        check(|m| m.text = "é".repeat(32_000), Ok(()));
        check(
            |m| m.timestamp_ms = 1_764_470_000_000 + 301_000,
            Err(InboundError::FutureTimestamp(1_764_470_000_000 + 301_000)),
        );
        check(|m| m.timestamp_ms = 1_764_470_000_000 + 299_000, Ok(()));
    }

    #[test]
    fn missing_timestamp_means_now() {
        let mut m = sample();
        m.timestamp_ms = 0;
        let m = m.validated(&LimitsConfig::default(), 77).unwrap();
        assert_eq!(m.timestamp_ms, 77);
    }

    #[test]
    fn the_message_type_is_read_under_either_name() {
        let parse = |extra: &str| {
            serde_json::from_str::<InboundMessage>(&format!(
                r#"{{"channel":"x","chat_kind":"group","chat_id":"1","message_id":"1",
                    "sender":{{"id":"1"}},"text":"/help"{extra}}}"#
            ))
        };
        assert_eq!(parse("").unwrap().kind, MessageKind::Message);
        for (extra, kind) in [
            (r#","message_type":"command""#, MessageKind::Command),
            (r#","message_type":"chat""#, MessageKind::Message),
            (r#","message_type":"system""#, MessageKind::SystemEvent),
            (r#","kind":"system_event""#, MessageKind::SystemEvent),
            (r#","kind":"command""#, MessageKind::Command),
        ] {
            assert_eq!(parse(extra).unwrap().kind, kind, "{extra}");
        }
        assert!(parse(r#","message_type":"shout""#).is_err());
        // Stored by index: the two older variants keep theirs.
        for (kind, index) in [
            (MessageKind::Message, 0u8),
            (MessageKind::SystemEvent, 1),
            (MessageKind::Command, 2),
        ] {
            assert_eq!(crate::store::encode(&kind).unwrap(), vec![1, index]);
        }
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let r: Result<InboundMessage, _> = serde_json::from_str(
            r#"{"channel":"x","chat_kind":"direct","chat_id":"1","message_id":"1",
                "sender":{"id":"1"},"text":"hi","bogus":1}"#,
        );
        assert!(r.is_err());
    }

    #[test]
    fn attachment_urls_are_checked() {
        let with_url = |url: &str| {
            let url = url.to_string();
            move |m: &mut InboundMessage| {
                m.attachments = vec![Attachment {
                    kind: "image/png".into(),
                    url: Some(url),
                    ..Attachment::default()
                }]
            }
        };
        check(with_url("https://cdn.example.com/a.png"), Ok(()));
        check(with_url("http://10.0.0.1:8080/a.png?x=1"), Ok(()));
        let not_http = Err(InboundError::NotHttpUrl("attachments.url"));
        check(with_url("file:///etc/passwd"), not_http.clone());
        check(with_url("data:image/png;base64,AAAA"), not_http.clone());
        check(with_url("javascript:alert(1)"), not_http.clone());
        check(with_url("https://x.test/a b"), not_http.clone());
        check(
            with_url("https://x.test/\u{7}"),
            Err(InboundError::ControlChar("attachments.url")),
        );
        check(with_url("https://"), not_http);
        let long = format!(
            "https://example.com/{}",
            "a".repeat(MAX_ATTACHMENT_URL_CHARS)
        );
        check(
            with_url(&long),
            Err(InboundError::TooLong {
                field: "attachments.url",
                len: long.chars().count(),
                max: MAX_ATTACHMENT_URL_CHARS,
            }),
        );
        // No URL: nothing to check.
        check(|m| m.attachments = vec![Attachment::default()], Ok(()));
    }

    #[test]
    fn attachments_in_json_and_in_storage() {
        let json =
            r#"{"kind":"image/jpeg","name":"photo.jpg","size":12,"url":"https://x.test/p.jpg"}"#;
        let a: Attachment = serde_json::from_str(json).unwrap();
        assert_eq!(a.url.as_deref(), Some("https://x.test/p.jpg"));
        assert_eq!(serde_json::to_string(&a).unwrap(), json);
        let plain: Attachment = serde_json::from_str(r#"{"kind":"image"}"#).unwrap();
        assert_eq!(
            serde_json::to_value(&plain).unwrap(),
            serde_json::json!({"kind": "image", "name": "", "size": null})
        );
        assert!(serde_json::from_str::<Attachment>(r#"{"kind":"x","bogus":1}"#).is_err());
        for a in [
            a.clone(),
            plain,
            Attachment {
                url: Some("http://y.test".into()),
                ..Attachment::default()
            },
            Attachment {
                size: Some(1 << 40),
                ..Attachment::default()
            },
        ] {
            let bytes = crate::store::encode(&a).unwrap();
            assert_eq!(crate::store::decode::<Attachment>("t", &bytes).unwrap(), a);
        }

        // Written before `url` existed: the same bytes decode, with no URL.
        #[derive(Serialize)]
        struct Before {
            kind: String,
            name: String,
            size: Option<u64>,
        }
        for size in [None, Some(0), Some(300), Some(u64::MAX)] {
            let old = crate::store::encode(&vec![Before {
                kind: "image".into(),
                name: "p.jpg".into(),
                size,
            }])
            .unwrap();
            let now: Vec<Attachment> = crate::store::decode("t", &old).unwrap();
            assert_eq!(
                now,
                vec![Attachment {
                    kind: "image".into(),
                    name: "p.jpg".into(),
                    size,
                    url: None,
                }]
            );
            // And what is written without a URL is byte-identical to before.
            assert_eq!(crate::store::encode(&now).unwrap(), old);
        }
    }
}
