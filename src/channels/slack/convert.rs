//! Slack messages to [`InboundMessage`]s, with the seed's rules:
//!
//! - the app's own messages (its bot user or bot id) are skipped; other bots' go to preflight
//!   under `allow_bots`;
//! - a conversation's kind comes from its `channel_type`: `channel` → a `channel` chat,
//!   `group` (private channel) and `mpim` → a `group` chat, `im` → a `direct` chat keyed by
//!   `dm_scope`;
//! - a reply in a thread (`thread_ts` other than its own `ts`) is its own session, keyed as
//!   OpenClaw keys it: `agent:<agent>:slack:channel:<channel>:thread:<thread_ts>`; the
//!   thread's first message belongs to the conversation;
//! - `users` allowlists of the conversation or the app: anyone else is skipped;
//! - a mention of the bot user (`<@U…>`), an `app_mention` event, or a reply in a thread the
//!   bot started or answered in addresses it; `require_mention` of the conversation goes to
//!   preflight with the message;
//! - `channel_join`, topic, purpose, name, pin and archive subtypes are system events;
//!   `message_changed`, `message_deleted` and `message_replied` are not turns; other subtypes
//!   are skipped; a `/word` text is a command.
//!
//! Plain functions: the receiver feeds them, tests call them directly.

use super::api::Identity;
use super::events::SlackMessage;
use super::{ts, SLACK};
use crate::config::SlackConfig;
use crate::inbound::{
    Attachment, ChatKind, ChatRules, InboundMessage, MessageKind, RouteHints, Sender,
    MAX_ATTACHMENTS,
};

/// Most mentions read from one message's text.
const MAX_TEXT_MENTIONS: usize = 64;

/// Why a message is not submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    /// The app's own message.
    Own,
    /// A sender outside the conversation's `users` allowlist.
    NotAllowed,
    /// An edit, a deletion or a thread-summary update of an earlier message.
    Edit,
    /// A subtype that is neither chat, a command nor a system event worth telling, or a
    /// message without a timestamp.
    Type,
}

impl Skip {
    /// The label counted in `turnstile_channel_skipped_total`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Skip::Own => "own",
            Skip::NotAllowed => "not_allowed",
            Skip::Edit => "edit",
            Skip::Type => "type",
        }
    }
}

/// A message ready to submit: the inbound message, the rules of its conversation, its
/// system prompt and its workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Converted {
    /// The message.
    pub message: InboundMessage,
    /// `require_mention` and `allow_bots` of its conversation.
    pub rules: ChatRules,
    /// The conversation's extra instructions.
    pub system_prompt: Option<String>,
    /// Its workspace (`team`), for `[[bindings]]` by guild.
    pub route: RouteHints,
}

/// Where a message was read and what is known of its place.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place<'a> {
    /// The conversation id.
    pub channel: &'a str,
    /// Its `channel_type` (`channel`, `group`, `mpim`, `im`).
    pub channel_type: &'a str,
    /// The workspace.
    pub team: Option<&'a str>,
    /// The message is in a thread the bot started or answered in.
    pub bot_thread: bool,
    /// The message came as an `app_mention` event.
    pub app_mention: bool,
}

/// The chat kind of a `channel_type`.
pub(crate) fn chat_kind(channel_type: &str) -> ChatKind {
    match channel_type {
        "im" => ChatKind::Direct,
        "group" | "mpim" => ChatKind::Group,
        _ => ChatKind::Channel,
    }
}

/// The `channel_type` a conversation id suggests when nothing says better (`D…` a DM, `G…`
/// a private channel or group DM, `C…` a channel).
pub(crate) fn type_from_id(channel: &str) -> &'static str {
    match channel.as_bytes().first() {
        Some(b'D') => "im",
        Some(b'G') => "group",
        _ => "channel",
    }
}

/// Slack's text with its three escapes undone (`&lt;`, `&gt;`, `&amp;`); mentions and
/// links (`<@U…>`, `<https://…|label>`) stay as Slack wrote them.
pub(crate) fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The user ids mentioned in `text` (`<@U…>` or `<@U…|name>`), in order, at most
/// [`MAX_TEXT_MENTIONS`].
pub(crate) fn mentions(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("<@") {
        rest = &rest[start + 2..];
        let Some(end) = rest.find('>') else { break };
        let inner = &rest[..end];
        let id = inner.split('|').next().unwrap_or_default();
        if !id.is_empty()
            && id.len() <= 32
            && id.bytes().all(|b| b.is_ascii_alphanumeric())
            && !out.iter().any(|m| m == id)
        {
            out.push(id.to_string());
            if out.len() >= MAX_TEXT_MENTIONS {
                break;
            }
        }
        rest = &rest[end..];
    }
    out
}

/// Whether `text` is a typed command (`/help`, `/reset now`): a slash and a letter, after
/// any mentions it starts with (`<@UBOT> /help`).
fn is_command_text(text: &str) -> bool {
    let mut rest = text.trim_start();
    while let Some(after) = rest.strip_prefix("<@") {
        match after.find('>') {
            Some(end) => rest = after[end + 1..].trim_start(),
            None => break,
        }
    }
    let mut chars = rest.chars();
    chars.next() == Some('/') && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
}

/// The system-event text of subtype `subtype` by `who`, or `None` when it is not one worth
/// telling the model. Slack's own text for these reads well ("<@U1> has joined the
/// channel"); a generic line stands in when it is empty.
fn system_text(subtype: &str, who: &str, text: &str) -> Option<String> {
    let generic = match subtype {
        "channel_join" | "group_join" => "joined the conversation",
        "channel_leave" | "group_leave" => "left the conversation",
        "channel_topic" | "group_topic" => "changed the topic",
        "channel_purpose" | "group_purpose" => "changed the purpose",
        "channel_name" | "group_name" => "renamed the conversation",
        "channel_archive" | "group_archive" => "archived the conversation",
        "channel_unarchive" | "group_unarchive" => "unarchived the conversation",
        "pinned_item" => "pinned a message",
        "unpinned_item" => "unpinned a message",
        _ => return None,
    };
    Some(if text.trim().is_empty() {
        format!("{who} {generic}")
    } else {
        text.to_string()
    })
}

pub(crate) fn display_name(m: &SlackMessage) -> String {
    let profile = m.user_profile.as_ref();
    [
        profile.and_then(|p| p.display_name.clone()),
        profile.and_then(|p| p.real_name.clone()),
        m.username.clone(),
        m.user.clone(),
        m.bot_id.clone(),
    ]
    .into_iter()
    .flatten()
    .find(|n| !n.trim().is_empty())
    .unwrap_or_default()
}

fn attachments(m: &SlackMessage) -> Vec<Attachment> {
    m.files
        .iter()
        .take(MAX_ATTACHMENTS)
        .map(|f| Attachment {
            kind: f.mimetype.clone().unwrap_or_else(|| "file".into()),
            name: f.name.clone().unwrap_or_default(),
            size: f.size,
            url: f
                .url_private
                .clone()
                .filter(|u| u.starts_with("https://") || u.starts_with("http://")),
        })
        .collect()
}

/// The message `m`, read in `place`, as the channel submits it.
pub(crate) fn to_inbound(
    m: &SlackMessage,
    place: Place<'_>,
    bot: &Identity,
    config: &SlackConfig,
) -> Result<Converted, Skip> {
    if !ts::valid(&m.ts) {
        return Err(Skip::Type);
    }
    let own = m.user.as_deref() == Some(bot.user_id.as_str())
        || (m.bot_id.is_some() && m.bot_id == bot.bot_id);
    if own {
        return Err(Skip::Own);
    }
    let name = display_name(m);
    let raw = unescape(m.text.as_deref().unwrap_or_default());
    let is_bot = m.bot_id.is_some();
    let (kind, text) = match m.subtype.as_deref() {
        None | Some("thread_broadcast" | "file_share" | "me_message" | "bot_message") => {
            let kind = if is_command_text(&raw) {
                MessageKind::Command
            } else {
                MessageKind::Message
            };
            (kind, raw)
        }
        Some("message_changed" | "message_deleted" | "message_replied") => return Err(Skip::Edit),
        Some(other) => match system_text(other, &name, &raw) {
            Some(text) => (MessageKind::SystemEvent, text),
            None => return Err(Skip::Type),
        },
    };
    let author = m
        .user
        .clone()
        .or_else(|| m.bot_id.clone())
        .unwrap_or_else(|| "unknown".into());
    let chat_kind = chat_kind(place.channel_type);
    let settings = config.resolve(place.channel);
    let (rules, system_prompt) = if chat_kind == ChatKind::Direct {
        (
            ChatRules {
                require_mention: None,
                allow_bots: Some(config.allow_bots),
            },
            None,
        )
    } else {
        if kind != MessageKind::SystemEvent && !settings.allows(&author) {
            return Err(Skip::NotAllowed);
        }
        (
            ChatRules {
                require_mention: Some(settings.require_mention),
                allow_bots: Some(config.allow_bots),
            },
            settings.system_prompt,
        )
    };
    let thread = m.thread().map(str::to_string);
    let mentions = mentions(&text);
    let replies_to_bot =
        thread.is_some() && (place.bot_thread || m.parent_user_id.as_deref() == Some(&bot.user_id));
    let mentioned_bot = place.app_mention || mentions.contains(&bot.user_id) || replies_to_bot;
    let message = InboundMessage {
        channel: SLACK.into(),
        account_id: config.account_id.clone(),
        chat_kind,
        chat_id: place.channel.to_string(),
        thread_id: thread.clone(),
        message_id: m.ts.clone(),
        sender: Sender {
            id: author,
            name,
            is_bot,
        },
        text,
        mentions,
        mentioned_bot,
        reply_to: thread,
        timestamp_ms: ts::millis(&m.ts),
        attachments: attachments(m),
        kind,
    };
    let route = RouteHints {
        guild_id: place.team.or(m.team.as_deref()).map(str::to_string),
        roles: Vec::new(),
    };
    Ok(Converted {
        message,
        rules,
        system_prompt,
        route,
    })
}

#[cfg(test)]
mod tests;
