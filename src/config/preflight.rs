//! `[preflight]`: which inbound messages become turns.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{in_range, MAX_DURATION_MS};
use crate::error::ConfigError;

/// Largest `preflight.dedupe_max_keys`.
pub(crate) const MAX_DEDUPE_KEYS: usize = 10_000_000;

/// Largest `preflight.history_limit`.
pub(crate) const MAX_HISTORY_LIMIT: usize = 10_000;

/// Largest `preflight.history_max_chats`.
pub(crate) const MAX_HISTORY_CHATS: usize = 1_000_000;

/// Largest `preflight.max_system_events`.
pub(crate) const MAX_SYSTEM_EVENTS: usize = 10_000;

/// Whether messages from other bots are answered (`[preflight] allow_bots`): `false`, `true`
/// or `"mentions"`. The bot's own messages are always dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "AllowBotsToml", into = "AllowBotsToml")]
pub enum AllowBots {
    /// Other bots are ignored (default).
    #[default]
    No,
    /// Other bots are treated like people.
    Yes,
    /// Other bots are answered only when they explicitly mention this bot (implicit mentions
    /// do not count, so two bots cannot loop by replying to each other).
    Mentions,
}

/// The TOML shape of [`AllowBots`]: a boolean or the string `"mentions"`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum AllowBotsToml {
    Flag(bool),
    Word(String),
}

/// An `allow_bots` word that is none of `false`, `true` and `"mentions"`.
#[derive(Debug, thiserror::Error)]
#[error("allow_bots: expected false, true or \"mentions\", found {0:?}")]
pub(crate) struct AllowBotsError(String);

impl TryFrom<AllowBotsToml> for AllowBots {
    type Error = AllowBotsError;

    fn try_from(raw: AllowBotsToml) -> Result<Self, AllowBotsError> {
        match raw {
            AllowBotsToml::Flag(false) => Ok(AllowBots::No),
            AllowBotsToml::Flag(true) => Ok(AllowBots::Yes),
            AllowBotsToml::Word(w) => match w.as_str() {
                "false" => Ok(AllowBots::No),
                "true" => Ok(AllowBots::Yes),
                "mentions" => Ok(AllowBots::Mentions),
                other => Err(AllowBotsError(other.to_string())),
            },
        }
    }
}

impl From<AllowBots> for AllowBotsToml {
    fn from(v: AllowBots) -> Self {
        match v {
            AllowBots::No => AllowBotsToml::Flag(false),
            AllowBots::Yes => AllowBotsToml::Flag(true),
            AllowBots::Mentions => AllowBotsToml::Word("mentions".into()),
        }
    }
}

/// Who may talk to the bot in direct messages, or in which groups it answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessPolicy {
    /// Everyone / every group (default).
    #[default]
    Open,
    /// Only the listed senders (`allow_from`) / chats (`group_allow_from`).
    Allowlist,
    /// Nobody / no group.
    Disabled,
}

/// `[preflight]`: the decisions taken before a message becomes a turn (SPEC §2.3). Every
/// message passes, in order: dedupe, bots, policy, (system events), mention gating; each
/// decision is counted by reason.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PreflightConfig {
    /// This bot's own user ids, each `id` (any channel) or `channel:id`. Messages from them are
    /// always dropped (the platform echoing the bot's replies) and remembered as bot messages,
    /// so a reply to one counts as a mention; a mention of one of them mentions the bot.
    /// Default empty.
    pub bot_user_ids: Vec<String>,
    /// In groups and channels, answer only messages that address the bot. Default true.
    pub require_mention: bool,
    /// `false` (default) | `true` | `"mentions"`: whether other bots are answered.
    pub allow_bots: AllowBots,
    /// `open` (default) | `allowlist` (only `allow_from`) | `disabled`: direct messages.
    pub dm_policy: AccessPolicy,
    /// `open` (default) | `allowlist` (only `group_allow_from`) | `disabled`: groups and
    /// channels.
    pub group_policy: AccessPolicy,
    /// Senders allowed under `dm_policy = "allowlist"`: `id` or `channel:id`, `"*"` for all.
    /// Phone numbers on phone channels are compared in E.164. Default empty.
    pub allow_from: Vec<String>,
    /// Chats allowed under `group_policy = "allowlist"`: `chat_id` or `channel:chat_id`, `"*"`
    /// for all. Default empty.
    pub group_allow_from: Vec<String>,
    /// Members who may talk to the bot inside groups and channels (whatever `group_policy`
    /// lets in): sender `id` or `channel:id`, compared like `allow_from`. When non-empty,
    /// messages of anyone else in a group are dropped with reason `policy` (so they become
    /// neither turns nor pending history); platform events are not filtered. Default empty:
    /// every member.
    pub group_member_allow_from: Vec<String>,
    /// Regexes (case-insensitive) that count as mentioning the bot, e.g. `"\\bturnstile\\b"`.
    /// Compiled once at start. Default empty.
    pub mention_patterns: Vec<String>,
    /// In groups, drop messages that mention someone and do not address the bot (reason
    /// `other_mention`). Default false.
    pub ignore_other_mentions: bool,
    /// How long a message id is remembered for dedupe, in ms (in memory and on disk).
    /// Default 1,200,000 (20 min).
    pub dedupe_ttl_ms: u64,
    /// Most message ids remembered in memory (the oldest are forgotten first; older ones are
    /// still found on disk if they were accepted). Default 5,000.
    pub dedupe_max_keys: usize,
    /// Unaddressed group messages kept per chat as pending history (0 keeps none). Default 50.
    pub history_limit: usize,
    /// Chats with pending history kept at once; the least recently used is forgotten first.
    /// Default 1,000.
    pub history_max_chats: usize,
    /// System events queued per session until its next turn (0 keeps none). Default 20.
    pub max_system_events: usize,
    /// `[preflight.channels.<channel>]`: per-channel overrides of `require_mention`,
    /// `allow_bots`, `dm_policy`, `group_policy`, `allow_from`, `group_allow_from`,
    /// `group_member_allow_from`, `mention_patterns`, `ignore_other_mentions`. Default none.
    pub channels: BTreeMap<String, PreflightOverride>,
}

impl Default for PreflightConfig {
    fn default() -> Self {
        Self {
            bot_user_ids: Vec::new(),
            require_mention: true,
            allow_bots: AllowBots::No,
            dm_policy: AccessPolicy::Open,
            group_policy: AccessPolicy::Open,
            allow_from: Vec::new(),
            group_allow_from: Vec::new(),
            group_member_allow_from: Vec::new(),
            mention_patterns: Vec::new(),
            ignore_other_mentions: false,
            dedupe_ttl_ms: 20 * 60 * 1_000,
            dedupe_max_keys: 5_000,
            history_limit: 50,
            history_max_chats: 1_000,
            max_system_events: 20,
            channels: BTreeMap::new(),
        }
    }
}

/// `[preflight.channels.<channel>]`: each key set here replaces the `[preflight]` value for
/// messages of that channel; unset keys inherit it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PreflightOverride {
    /// Overrides `require_mention`.
    pub require_mention: Option<bool>,
    /// Overrides `allow_bots`.
    pub allow_bots: Option<AllowBots>,
    /// Overrides `dm_policy`.
    pub dm_policy: Option<AccessPolicy>,
    /// Overrides `group_policy`.
    pub group_policy: Option<AccessPolicy>,
    /// Overrides `allow_from`.
    pub allow_from: Option<Vec<String>>,
    /// Overrides `group_allow_from`.
    pub group_allow_from: Option<Vec<String>>,
    /// Overrides `group_member_allow_from`.
    pub group_member_allow_from: Option<Vec<String>>,
    /// Overrides `mention_patterns`.
    pub mention_patterns: Option<Vec<String>>,
    /// Overrides `ignore_other_mentions`.
    pub ignore_other_mentions: Option<bool>,
}

impl PreflightConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        in_range(
            "preflight.dedupe_ttl_ms",
            self.dedupe_ttl_ms,
            0..=MAX_DURATION_MS,
        )?;
        in_range(
            "preflight.dedupe_max_keys",
            self.dedupe_max_keys,
            1..=MAX_DEDUPE_KEYS,
        )?;
        in_range(
            "preflight.history_limit",
            self.history_limit,
            0..=MAX_HISTORY_LIMIT,
        )?;
        in_range(
            "preflight.history_max_chats",
            self.history_max_chats,
            1..=MAX_HISTORY_CHATS,
        )?;
        in_range(
            "preflight.max_system_events",
            self.max_system_events,
            0..=MAX_SYSTEM_EVENTS,
        )?;
        crate::inbound::preflight::check_mention_patterns(self)
    }
}
