//! Discord messages to [`InboundMessage`]s, with the seed's rules (`preflightDiscordMessage`):
//!
//! - the bot's own messages are skipped; other bots' go to preflight under `allow_bots`;
//! - a guild message is a `channel` chat (session `agent:<agent>:discord:channel:<id>`); a
//!   thread is its own session (`…:channel:<parent>:thread:<thread>`) and uses its parent
//!   channel's settings unless it has its own; a DM is a `direct` chat keyed by `dm_scope`;
//! - users and roles allowlists of the guild or channel: anyone else is skipped;
//! - a mention of the bot, of a role the bot has, or a reply to the bot addresses it;
//!   `require_mention` of the guild or channel goes to preflight with the message;
//! - `reply_to` from `message_reference`; attachments as attachments (with their URL);
//! - command messages (slash and context-menu results, interactions, a `/word` text) are
//!   `command`; joins, pins, boosts, thread creations and renames are system events; other
//!   message types are skipped.
//!
//! Plain functions over twilight's model: the shard task feeds them, tests call them directly.

use std::collections::HashMap;
use std::num::NonZeroUsize;

use lru::LruCache;
use twilight_model::channel::message::{Message, MessageType};

use super::DISCORD;
use crate::config::DiscordConfig;
use crate::inbound::{
    Attachment, ChatKind, ChatRules, InboundMessage, MessageKind, RouteHints, Sender,
    MAX_ATTACHMENTS,
};

/// Channels whose kind (thread or not, and a thread's parent) is remembered; the least
/// recently used is forgotten first (and asked of the REST API again when it speaks).
pub(crate) const MAX_KNOWN_CHANNELS: usize = 10_000;

/// Guilds whose roles of the bot are remembered.
pub(crate) const MAX_KNOWN_GUILDS: usize = 10_000;

/// What the channel knows of where it is: its own id, its roles per guild, and which
/// channels are threads of which parent. Bounded by [`MAX_KNOWN_CHANNELS`] and
/// [`MAX_KNOWN_GUILDS`].
#[derive(Debug)]
pub(crate) struct Context {
    /// The bot's user id (from READY).
    pub bot_id: u64,
    bot_roles: HashMap<u64, Vec<u64>>,
    /// Channel id → its parent when it is a thread, `None` when it is not.
    channels: LruCache<u64, Option<u64>>,
    /// What is known of each thread's starter message.
    pub starters: crate::channels::thread_starter::Starters,
    /// Messages held for their PluralKit proxy.
    pub held: super::held::Held,
}

impl Context {
    /// A context for the bot `bot_id`, knowing nothing else yet.
    pub(crate) fn new(bot_id: u64) -> Self {
        Self {
            bot_id,
            bot_roles: HashMap::new(),
            channels: LruCache::new(
                NonZeroUsize::new(MAX_KNOWN_CHANNELS).unwrap_or(NonZeroUsize::MIN),
            ),
            starters: crate::channels::thread_starter::Starters::new(super::DISCORD),
            held: super::held::Held::default(),
        }
    }

    /// Remembers the bot's roles in `guild`.
    pub(crate) fn set_bot_roles(&mut self, guild: u64, roles: Vec<u64>) {
        if self.bot_roles.len() >= MAX_KNOWN_GUILDS && !self.bot_roles.contains_key(&guild) {
            return;
        }
        self.bot_roles.insert(guild, roles);
    }

    /// Remembers that `channel` is a thread of `parent` (`Some`) or not a thread (`None`).
    pub(crate) fn set_channel(&mut self, channel: u64, parent: Option<u64>) {
        self.channels.put(channel, parent);
    }

    /// `Some(parent)` for a known thread, `Some(None)` for a known channel, `None` when
    /// unknown.
    pub(crate) fn channel(&mut self, channel: u64) -> Option<Option<u64>> {
        self.channels.get(&channel).copied()
    }

    fn bot_roles(&self, guild: u64) -> &[u64] {
        self.bot_roles.get(&guild).map_or(&[], Vec::as_slice)
    }
}

/// Why a message is not submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    /// The bot's own message.
    Own,
    /// A sender outside the guild's or channel's `users`/`roles` allowlists.
    NotAllowed,
    /// A message type that is neither chat, a command nor a system event worth telling.
    Type,
}

impl Skip {
    /// The label counted in `turnstile_discord_skipped_total`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Skip::Own => "own",
            Skip::NotAllowed => "not_allowed",
            Skip::Type => "type",
        }
    }
}

/// A message ready to submit: the inbound message, the channel's rules for its chat, and the
/// guild's or channel's system prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Converted {
    /// The message.
    pub message: InboundMessage,
    /// `require_mention` and `allow_bots` of its guild channel.
    pub rules: ChatRules,
    /// The guild's or channel's extra instructions.
    pub system_prompt: Option<String>,
    /// Its guild and the sender's roles there, for `[[bindings]]`.
    pub route: RouteHints,
}

/// Whether `text` is a typed command (`/help`, `/reset now`): a slash and a letter.
fn is_command_text(text: &str) -> bool {
    let mut chars = text.trim_start().chars();
    chars.next() == Some('/') && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
}

/// The system-event text of a platform message of type `kind` by `who`, or `None` when the
/// type is not one worth telling the model.
fn system_text(kind: MessageType, who: &str, content: &str) -> Option<String> {
    let text = match kind {
        MessageType::UserJoin => format!("{who} joined the server"),
        MessageType::RecipientAdd => format!("{who} added someone to the conversation"),
        MessageType::RecipientRemove => format!("{who} removed someone from the conversation"),
        MessageType::ChannelMessagePinned => format!("{who} pinned a message"),
        MessageType::GuildBoost
        | MessageType::GuildBoostTier1
        | MessageType::GuildBoostTier2
        | MessageType::GuildBoostTier3 => format!("{who} boosted the server"),
        MessageType::ThreadCreated => format!("{who} started a thread: {content}"),
        MessageType::ChannelNameChange => format!("{who} renamed the channel to {content}"),
        _ => return None,
    };
    Some(text)
}

/// The author's name as the guild shows it: nickname, global name, user name.
pub(crate) fn display_name(m: &Message) -> String {
    m.member
        .as_ref()
        .and_then(|member| member.nick.clone())
        .or_else(|| m.author.global_name.clone())
        .unwrap_or_else(|| m.author.name.clone())
}

fn attachments(m: &Message) -> Vec<Attachment> {
    m.attachments
        .iter()
        .take(MAX_ATTACHMENTS)
        .map(|a| Attachment {
            kind: a.content_type.clone().unwrap_or_else(|| "file".into()),
            name: a.filename.clone(),
            size: Some(a.size),
            url: (a.url.starts_with("https://") || a.url.starts_with("http://"))
                .then(|| a.url.clone()),
        })
        .collect()
}

/// The message `m` (its `guild_id` filled in, as REST reads lack it) as the channel submits
/// it. `parent`: the parent channel when `m.channel_id` is a thread.
pub(crate) fn to_inbound(
    m: &Message,
    parent: Option<u64>,
    ctx: &Context,
    config: &DiscordConfig,
) -> Result<Converted, Skip> {
    let author = m.author.id.get();
    if author == ctx.bot_id {
        return Err(Skip::Own);
    }
    let name = display_name(m);
    let (kind, text) = match m.kind {
        MessageType::Regular | MessageType::Reply => {
            #[allow(deprecated)]
            let interaction = m.interaction_metadata.is_some() || m.interaction.is_some();
            let kind = if interaction || is_command_text(&m.content) {
                MessageKind::Command
            } else {
                MessageKind::Message
            };
            (kind, m.content.clone())
        }
        MessageType::ChatInputCommand | MessageType::ContextMenuCommand => {
            (MessageKind::Command, m.content.clone())
        }
        other => match system_text(other, &name, &m.content) {
            Some(text) => (MessageKind::SystemEvent, text),
            None => return Err(Skip::Type),
        },
    };
    let channel = m.channel_id.get();
    let roles: Vec<u64> = m
        .member
        .as_ref()
        .map(|member| member.roles.iter().map(|r| r.get()).collect())
        .unwrap_or_default();
    let (chat_kind, chat_id, thread_id, rules, system_prompt) = match m.guild_id {
        None => (
            ChatKind::Direct,
            channel,
            None,
            ChatRules {
                require_mention: None,
                allow_bots: Some(config.allow_bots),
            },
            None,
        ),
        Some(guild) => {
            let settings = config.resolve(guild.get(), channel, parent);
            if kind != MessageKind::SystemEvent && !settings.allows(author, &roles) {
                return Err(Skip::NotAllowed);
            }
            let (chat, thread) = match parent {
                Some(p) => (p, Some(channel.to_string())),
                None => (channel, None),
            };
            (
                ChatKind::Channel,
                chat,
                thread,
                ChatRules {
                    require_mention: Some(settings.require_mention),
                    allow_bots: Some(config.allow_bots),
                },
                settings.system_prompt,
            )
        }
    };
    let bot_roles = m.guild_id.map_or(&[][..], |g| ctx.bot_roles(g.get()));
    let replies_to_bot = m
        .referenced_message
        .as_ref()
        .is_some_and(|r| r.author.id.get() == ctx.bot_id);
    let mentioned_bot = m.mentions.iter().any(|u| u.id.get() == ctx.bot_id)
        || m.mention_roles.iter().any(|r| bot_roles.contains(&r.get()))
        || replies_to_bot;
    let message = InboundMessage {
        channel: DISCORD.into(),
        account_id: config.account_id.clone(),
        chat_kind,
        chat_id: chat_id.to_string(),
        thread_id,
        message_id: m.id.get().to_string(),
        sender: Sender {
            id: author.to_string(),
            name,
            is_bot: m.author.bot,
        },
        text,
        mentions: m.mentions.iter().map(|u| u.id.get().to_string()).collect(),
        mentioned_bot,
        reply_to: m
            .reference
            .as_ref()
            .and_then(|r| r.message_id)
            .map(|id| id.get().to_string()),
        timestamp_ms: u64::try_from(m.timestamp.as_micros() / 1_000).unwrap_or(0),
        attachments: attachments(m),
        kind,
    };
    let route = RouteHints {
        guild_id: m.guild_id.map(|g| g.get().to_string()),
        roles: roles.iter().map(u64::to_string).collect(),
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
