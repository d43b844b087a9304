//! Bots and policy (preflight steps 2 and 3), and the compiled per-channel rules every step
//! reads.

use std::collections::{HashMap, HashSet};

use regex::{RegexSet, RegexSetBuilder};

use crate::config::{AccessPolicy, AllowBots, PreflightConfig, PreflightOverride};
use crate::error::ConfigError;
use crate::inbound::session_key::{channel_name, normalize_peer_entry, peer_id};
use crate::inbound::{ChatKind, InboundMessage, MessageKind};

/// Largest compiled size of the mention patterns, in bytes (regex's own default is 10 MiB per
/// regex; this keeps a careless pattern from costing much memory).
const MENTION_PATTERNS_SIZE_LIMIT: usize = 4 * 1024 * 1024;

/// A set of ids, each `id` (any channel) or `channel:id`, or everything (`"*"`).
#[derive(Debug, Clone, Default)]
pub(super) struct IdSet {
    any: bool,
    ids: HashSet<String>,
}

/// Whether an [`IdSet`] holds sender ids (phone numbers compared in E.164) or chat ids.
#[derive(Debug, Clone, Copy)]
pub(super) enum IdKind {
    Sender,
    Chat,
}

impl IdSet {
    pub(super) fn new(entries: &[String], kind: IdKind) -> Self {
        let mut set = Self::default();
        for entry in entries {
            let entry = entry.trim();
            if entry == "*" {
                set.any = true;
            } else if !entry.is_empty() {
                set.ids.insert(match kind {
                    IdKind::Sender => normalize_peer_entry(entry),
                    IdKind::Chat => entry.to_lowercase(),
                });
            }
        }
        set
    }

    pub(super) fn is_empty(&self) -> bool {
        !self.any && self.ids.is_empty()
    }

    /// True when `id` of `channel` (already normalised) is in the set.
    fn contains_normalized(&self, channel: &str, id: &str) -> bool {
        self.any
            || self.ids.contains(id)
            || (!self.ids.is_empty() && self.ids.contains(&format!("{channel}:{id}")))
    }

    /// True when sender `id` of `channel` is in the set.
    pub(super) fn contains_sender(&self, channel: &str, id: &str) -> bool {
        if self.is_empty() {
            return false;
        }
        let channel = channel_name(channel);
        self.contains_normalized(&channel, &peer_id(&channel, id))
    }

    /// True when chat `id` of `channel` is in the set.
    pub(super) fn contains_chat(&self, channel: &str, id: &str) -> bool {
        if self.is_empty() {
            return false;
        }
        self.contains_normalized(&channel_name(channel), &id.trim().to_lowercase())
    }
}

/// The rules of one channel, compiled.
#[derive(Debug, Clone)]
pub(super) struct Rules {
    pub(super) require_mention: bool,
    pub(super) allow_bots: AllowBots,
    pub(super) dm_policy: AccessPolicy,
    pub(super) group_policy: AccessPolicy,
    pub(super) allow_from: IdSet,
    pub(super) group_allow_from: IdSet,
    /// Senders who may talk inside groups and channels; empty: everyone.
    pub(super) group_member_allow_from: IdSet,
    pub(super) mention_patterns: Option<RegexSet>,
    pub(super) ignore_other_mentions: bool,
}

/// Compiles one section's mention patterns; `None` when there are none.
fn mention_set(patterns: &[String], section: &str) -> Result<Option<RegexSet>, ConfigError> {
    if patterns.is_empty() {
        return Ok(None);
    }
    RegexSetBuilder::new(patterns)
        .case_insensitive(true)
        .size_limit(MENTION_PATTERNS_SIZE_LIMIT)
        .build()
        .map(Some)
        .map_err(|e| ConfigError::Invalid(format!("{section}.mention_patterns: {e}")))
}

/// Checks that `[preflight]`'s mention patterns, and each channel override's, compile within
/// the size limit. A plain function so that config validation needs no [`super::Preflight`].
pub fn check_mention_patterns(config: &PreflightConfig) -> Result<(), ConfigError> {
    mention_set(&config.mention_patterns, "preflight")?;
    for (name, over) in &config.channels {
        if let Some(patterns) = &over.mention_patterns {
            mention_set(patterns, &format!("preflight.channels.{name}"))?;
        }
    }
    Ok(())
}

impl Rules {
    fn compile(
        base: &PreflightConfig,
        over: &PreflightOverride,
        section: &str,
    ) -> Result<Self, ConfigError> {
        let patterns = over
            .mention_patterns
            .as_ref()
            .unwrap_or(&base.mention_patterns);
        let mention_patterns = mention_set(patterns, section)?;
        Ok(Self {
            require_mention: over.require_mention.unwrap_or(base.require_mention),
            allow_bots: over.allow_bots.unwrap_or(base.allow_bots),
            dm_policy: over.dm_policy.unwrap_or(base.dm_policy),
            group_policy: over.group_policy.unwrap_or(base.group_policy),
            allow_from: IdSet::new(
                over.allow_from.as_ref().unwrap_or(&base.allow_from),
                IdKind::Sender,
            ),
            group_allow_from: IdSet::new(
                over.group_allow_from
                    .as_ref()
                    .unwrap_or(&base.group_allow_from),
                IdKind::Chat,
            ),
            group_member_allow_from: IdSet::new(
                over.group_member_allow_from
                    .as_ref()
                    .unwrap_or(&base.group_member_allow_from),
                IdKind::Sender,
            ),
            mention_patterns,
            ignore_other_mentions: over
                .ignore_other_mentions
                .unwrap_or(base.ignore_other_mentions),
        })
    }

    /// Policy (step 3): may this message's sender (direct) or chat (group, channel) talk to the
    /// bot — and, in a group with a member allowlist, this sender? Platform events pass the
    /// member check: they are context for the members who may talk, not someone talking.
    pub(super) fn allows(&self, msg: &InboundMessage) -> bool {
        match msg.chat_kind {
            ChatKind::Direct => match self.dm_policy {
                AccessPolicy::Open => true,
                AccessPolicy::Disabled => false,
                AccessPolicy::Allowlist => self
                    .allow_from
                    .contains_sender(&msg.channel, &msg.sender.id),
            },
            ChatKind::Group | ChatKind::Channel => {
                let chat = match self.group_policy {
                    AccessPolicy::Open => true,
                    AccessPolicy::Disabled => false,
                    AccessPolicy::Allowlist => self
                        .group_allow_from
                        .contains_chat(&msg.channel, &msg.chat_id),
                };
                chat && (msg.kind == MessageKind::SystemEvent
                    || self.group_member_allow_from.is_empty()
                    || self
                        .group_member_allow_from
                        .contains_sender(&msg.channel, &msg.sender.id))
            }
        }
    }
}

/// The rules of every channel: the `[preflight]` defaults and the compiled overrides.
#[derive(Debug, Clone)]
pub(super) struct RuleBook {
    default: Rules,
    /// Keyed by the normalised channel name.
    channels: HashMap<String, Rules>,
}

impl RuleBook {
    pub(super) fn compile(config: &PreflightConfig) -> Result<Self, ConfigError> {
        let default = Rules::compile(config, &PreflightOverride::default(), "preflight")?;
        let mut channels = HashMap::new();
        for (name, over) in &config.channels {
            let section = format!("preflight.channels.{name}");
            channels.insert(channel_name(name), Rules::compile(config, over, &section)?);
        }
        Ok(Self { default, channels })
    }

    /// The rules for `channel`.
    pub(super) fn for_channel(&self, channel: &str) -> &Rules {
        if self.channels.is_empty() {
            return &self.default;
        }
        self.channels
            .get(&channel_name(channel))
            .unwrap_or(&self.default)
    }
}

/// What the bot step (2) decides about a message from a bot other than this one.
pub(super) fn other_bot_allowed(allow: AllowBots, explicitly_mentioned: bool) -> bool {
    match allow {
        AllowBots::No => false,
        AllowBots::Yes => true,
        AllowBots::Mentions => explicitly_mentioned,
    }
}
