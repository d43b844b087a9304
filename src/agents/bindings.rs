//! `[[bindings]]` compiled: which agent an inbound message goes to.
//!
//! Bindings are tried most specific first, in OpenClaw's tiers (`resolveAgentRoute`), and in
//! config order within a tier; the first whose every given field matches wins, and a message
//! no binding matches goes to the default agent:
//!
//! 1. `thread` — the binding names a thread (`chat_id` + `thread_id`);
//! 2. `peer` — it names a chat (`chat_id`) or a sender (`sender_id`): in a thread, a binding
//!    of its chat matches here (OpenClaw's parent peer);
//! 3. `guild+roles` — a guild and roles, the sender holding at least one;
//! 4. `guild` — a guild (Discord) or team (Slack);
//! 5. `account` — a bot account (`account_id`, not `*`);
//! 6. `channel` — only the channel and/or the chat kind.
//!
//! One difference from OpenClaw, on purpose: a binding without `account_id` matches every
//! account, not only the one called `default` (its users lost routes to that rule:
//! openclaw#39382, #49769).

use crate::config::BindingConfig;
use crate::inbound::{
    channel_name, normalize_agent_id, normalize_id, peer_id, ChatKind, InboundMessage, RouteHints,
};

/// How specific a binding is; lower is tried first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    /// A thread of a chat.
    Thread,
    /// A chat or a sender.
    Peer,
    /// A guild and roles in it.
    GuildRoles,
    /// A guild or team.
    Guild,
    /// A bot account.
    Account,
    /// A channel or chat kind only.
    Channel,
}

impl Tier {
    /// The name `matched_by` reports (OpenClaw's, without its `binding.` prefix).
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Thread => "thread",
            Tier::Peer => "peer",
            Tier::GuildRoles => "guild+roles",
            Tier::Guild => "guild",
            Tier::Account => "account",
            Tier::Channel => "channel",
        }
    }
}

/// One binding, normalised for matching.
#[derive(Debug, Clone)]
struct Binding {
    agent: String,
    tier: Tier,
    channel: Option<String>,
    /// `None`: any account (absent or `*`).
    account: Option<String>,
    chat_kind: Option<ChatKind>,
    /// Lowercased, trimmed.
    chat_id: Option<String>,
    thread_id: Option<String>,
    guild_id: Option<String>,
    /// As [`peer_id`] writes it for the binding's channel (lowercased otherwise).
    sender: Option<String>,
    roles: Vec<String>,
}

/// Where a message went and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The agent.
    pub agent: String,
    /// The tier of the binding that matched, `None` for the default agent.
    pub matched_by: Option<Tier>,
    /// The index of that binding in `[[bindings]]`.
    pub binding: Option<usize>,
}

/// The compiled `[[bindings]]`.
#[derive(Debug, Clone, Default)]
pub struct Bindings {
    /// Sorted by tier, config order within one: (config index, binding).
    list: Vec<(usize, Binding)>,
}

fn lower(s: &str) -> String {
    s.trim().to_lowercase()
}

/// The chat and thread of `msg` as session keys see them: a Telegram forum topic written into
/// the chat id (`<chat>:topic:<n>`) is that chat's thread `n`.
fn chat_and_thread(msg: &InboundMessage) -> (String, Option<String>) {
    let chat = msg.chat_id.trim();
    let thread = msg
        .thread_id
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty());
    if thread.is_none() && channel_name(&msg.channel) == "telegram" {
        if let Some((chat, topic)) = chat.split_once(":topic:") {
            return (lower(chat), Some(lower(topic)));
        }
    }
    (lower(chat), thread.map(lower))
}

impl Bindings {
    /// Compiles validated bindings.
    pub fn new(config: &[BindingConfig]) -> Self {
        let mut list: Vec<(usize, Binding)> = config
            .iter()
            .enumerate()
            .map(|(i, b)| (i, Binding::new(b)))
            .collect();
        list.sort_by_key(|(i, b)| (b.tier, *i));
        Self { list }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The route of `msg` (with `hints`), or `None` when no binding matches.
    pub fn route(&self, msg: &InboundMessage, hints: &RouteHints) -> Option<Route> {
        if self.list.is_empty() {
            return None;
        }
        let facts = Facts::of(msg, hints);
        self.list
            .iter()
            .find(|(_, b)| b.matches(&facts))
            .map(|(i, b)| Route {
                agent: b.agent.clone(),
                matched_by: Some(b.tier),
                binding: Some(*i),
            })
    }
}

/// What bindings look at in a message, normalised once.
struct Facts<'a> {
    channel: String,
    account: String,
    chat_kind: ChatKind,
    chat: String,
    thread: Option<String>,
    sender: String,
    guild: Option<&'a str>,
    roles: &'a [String],
}

impl<'a> Facts<'a> {
    fn of(msg: &InboundMessage, hints: &'a RouteHints) -> Self {
        let channel = channel_name(&msg.channel);
        let (chat, thread) = chat_and_thread(msg);
        Facts {
            sender: peer_id(&channel, &msg.sender.id),
            account: normalize_id(&msg.account_id, "default"),
            channel,
            chat_kind: msg.chat_kind,
            chat,
            thread,
            guild: hints
                .guild_id
                .as_deref()
                .map(str::trim)
                .filter(|g| !g.is_empty()),
            roles: &hints.roles,
        }
    }
}

impl Binding {
    fn new(b: &BindingConfig) -> Self {
        let channel = b.channel.as_deref().map(channel_name);
        let account = b
            .account_id
            .as_deref()
            .map(str::trim)
            .filter(|a| *a != "*")
            .map(|a| normalize_id(a, "default"));
        let sender = b.sender_id.as_deref().map(|s| {
            let s = s.trim();
            match &channel {
                Some(c) => peer_id(c, s),
                // On any channel: a phone number in any spelling still matches.
                None if s.starts_with('+') => peer_id("whatsapp", s),
                None => s.to_lowercase(),
            }
        });
        let roles: Vec<String> = b.roles.iter().map(|r| r.trim().to_string()).collect();
        let guild_id = b.guild_id.as_deref().map(|g| g.trim().to_string());
        let tier = if b.thread_id.is_some() {
            Tier::Thread
        } else if b.chat_id.is_some() || sender.is_some() {
            Tier::Peer
        } else if guild_id.is_some() && !roles.is_empty() {
            Tier::GuildRoles
        } else if guild_id.is_some() {
            Tier::Guild
        } else if account.is_some() {
            Tier::Account
        } else {
            Tier::Channel
        };
        Self {
            agent: normalize_agent_id(&b.agent),
            tier,
            channel,
            account,
            chat_kind: b.chat_kind,
            chat_id: b.chat_id.as_deref().map(lower),
            thread_id: b.thread_id.as_deref().map(lower),
            guild_id,
            sender,
            roles,
        }
    }

    fn matches(&self, m: &Facts<'_>) -> bool {
        let eq = |want: &Option<String>, got: &str| want.as_deref().is_none_or(|w| w == got);
        eq(&self.channel, &m.channel)
            && eq(&self.account, &m.account)
            && self.chat_kind.is_none_or(|k| k == m.chat_kind)
            && eq(&self.chat_id, &m.chat)
            && self
                .thread_id
                .as_deref()
                .is_none_or(|t| m.thread.as_deref() == Some(t))
            && eq(&self.sender, &m.sender)
            && self.guild_id.as_deref().is_none_or(|g| m.guild == Some(g))
            && (self.roles.is_empty()
                || self
                    .roles
                    .iter()
                    .any(|r| m.roles.iter().any(|have| have.trim() == r)))
    }
}
