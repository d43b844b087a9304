//! Inbound: the normalised message every channel produces, its validation, the session key
//! it belongs to, preflight (which messages become turns) and its vocabulary (`refusal.rs`).

mod message;
pub mod preflight;
mod refusal;
mod sanitize;
pub(crate) mod session_key;

pub(crate) use message::{check_session_key, MAX_ATTACHMENTS, MAX_ID_CHARS, OPENAI_API_CHANNEL};
pub use message::{Attachment, ChatKind, InboundMessage, MessageKind, Sender};
pub use preflight::{Preflight, PreflightStats};
pub use refusal::{DropReason, QuotaRefusal, Refusal};
pub(crate) use sanitize::{sanitize_text, untrusted, untrusted_block, MAX_UNTRUSTED_CHARS};
pub(crate) use session_key::{
    agent_in_key, channel_name, chat_record_channel, identity_links, normalize_agent_id,
    normalize_id, peer_id, user_session_key,
};
pub use session_key::{normalize_session_key, SessionKeys};

/// What a channel submits: a validated message, and optionally the session it must go to
/// (the OpenAI-compatible endpoint names its session explicitly).
#[derive(Debug, Clone)]
pub struct InboundEvent {
    /// The message, already validated.
    pub message: InboundMessage,
    /// An explicit session key; `None` derives it from the message.
    pub session_key: Option<String>,
    /// Where the message id came from: how admission checks it for a duplicate.
    pub id_origin: IdOrigin,
    /// What routes the message to an agent beyond its own fields (guild, roles).
    pub route: RouteHints,
    /// The submitting channel's own rules for this message's chat (its per-guild or
    /// per-channel settings), over `[preflight]`'s.
    pub rules: ChatRules,
}

/// A channel's rules for one chat, set per message over the `[preflight]` (and
/// `[preflight.channels.<channel>]`) ones: a Discord guild channel with `require_mention =
/// false`, say. `None` keeps preflight's. Not carried through a cluster's replicated inbox
/// (there preflight's own rules apply).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChatRules {
    /// Overrides `require_mention`.
    pub require_mention: Option<bool>,
    /// Overrides `allow_bots`.
    pub allow_bots: Option<crate::config::AllowBots>,
}

/// What a channel knows about a message's place that the message does not carry and only
/// agent routing (`[[bindings]]`) reads: the guild (Discord) or team (Slack) it was posted in,
/// and the sender's roles there. Not stored: the session key the route leads to is.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouteHints {
    /// The guild or team id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guild_id: Option<String>,
    /// The sender's role ids in that guild.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
}

impl RouteHints {
    /// No hints.
    pub fn is_empty(&self) -> bool {
        self.guild_id.is_none() && self.roles.is_empty()
    }
}

/// Where a message id came from, which says where a duplicate of it could come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IdOrigin {
    /// From the platform, or derived from a client's idempotency key: it may arrive again at
    /// any time, across restarts too. Checked in memory and durably; remembered in both.
    #[default]
    Given,
    /// Minted by this server for one OpenAI-compatible request whose retries this process can
    /// recognise (an official client's, marked `x-stainless-retry-count`): a retry brings it
    /// again, never after a restart. Checked and remembered in memory only (no durable mark:
    /// two sled writes and a lookup per turn saved).
    Minted,
    /// Minted for one request nobody can present again (a client that does not mark its
    /// retries gets a new id for each): neither checked nor remembered, so it takes no room
    /// from the ids that can come back.
    Unique,
}
