//! `[[quotas]]`: per-sender, per-chat, per-account and per-agent limits on messages and model
//! tokens (see `src/quotas/`).

use serde::{Deserialize, Serialize};

use super::{in_range, invalid};
use crate::error::ConfigError;

/// Most `[[quotas]]` rules: each message is matched against all of them.
pub(crate) const MAX_QUOTA_RULES: usize = 256;
/// Largest `messages_per_minute` and `burst`.
const MAX_MESSAGES_PER_MINUTE: u32 = 1_000_000;
/// Longest `notice`, in characters.
const MAX_NOTICE_CHARS: usize = 2_000;

/// What a rule applies to: exactly one of the four, with an id as in `allow_from` (`id`,
/// `channel:id`) or `"*"` (each sender, chat, account or agent on its own).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuotaMatch {
    /// A sender.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    /// A chat (group, channel or DM chat id).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat: Option<String>,
    /// A channel account (one bot of a channel).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// An agent id (the `agent:<id>:` part of session keys).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

/// What happens to a message over its quota.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OverQuota {
    /// Answered with `notice`, at most once per window (a minute for messages, a day for
    /// tokens); later messages of the window are dropped silently.
    #[default]
    Notice,
    /// Dropped silently.
    Drop,
}

/// One `[[quotas]]` rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaRule {
    /// What it applies to.
    #[serde(rename = "match")]
    pub matches: QuotaMatch,
    /// Messages per minute (a token bucket refilled continuously); none: no message limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages_per_minute: Option<u32>,
    /// Messages that may arrive at once (the bucket's size). Default: `messages_per_minute`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// Model tokens (prompt + completion, as the model reports them) per UTC day; none: no
    /// token limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_day: Option<u64>,
    /// `notice` (default) or `drop`.
    #[serde(default)]
    pub over: OverQuota,
    /// The notice's text.
    #[serde(default = "default_notice")]
    pub notice: String,
}

fn default_notice() -> String {
    "You are sending messages faster than this bot answers them; please try again later.".into()
}

impl QuotaMatch {
    /// The one (kind, id) pair set; an error unless exactly one is.
    pub(crate) fn only(&self) -> Result<(QuotaKind, &str), ConfigError> {
        let set: Vec<(QuotaKind, &str)> = [
            (QuotaKind::Sender, &self.sender),
            (QuotaKind::Chat, &self.chat),
            (QuotaKind::Account, &self.account),
            (QuotaKind::Agent, &self.agent),
        ]
        .into_iter()
        .filter_map(|(kind, id)| id.as_deref().map(|id| (kind, id)))
        .collect();
        match set.as_slice() {
            [one] => Ok(*one),
            _ => Err(invalid(
                "quotas.match",
                "needs exactly one of sender, chat, account, agent",
            )),
        }
    }
}

/// What a rule is keyed by, most specific first (a message's most specific matching rule is
/// the one that applies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum QuotaKind {
    /// The sender.
    Sender,
    /// The chat.
    Chat,
    /// The channel account.
    Account,
    /// The agent.
    Agent,
}

impl QuotaKind {
    /// Its name in subjects and the admin API.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            QuotaKind::Sender => "sender",
            QuotaKind::Chat => "chat",
            QuotaKind::Account => "account",
            QuotaKind::Agent => "agent",
        }
    }
}

/// Checks every rule.
pub(super) fn validate(rules: &[QuotaRule]) -> Result<(), ConfigError> {
    if rules.len() > MAX_QUOTA_RULES {
        return Err(invalid(
            "quotas",
            format!("at most {MAX_QUOTA_RULES} rules (got {})", rules.len()),
        ));
    }
    for rule in rules {
        let (_, id) = rule.matches.only()?;
        if id.trim().is_empty() {
            return Err(invalid(
                "quotas.match",
                "an empty id (use \"*\" for every one)",
            ));
        }
        if rule.messages_per_minute.is_none() && rule.tokens_per_day.is_none() {
            return Err(invalid(
                "quotas",
                "a rule needs messages_per_minute, tokens_per_day or both",
            ));
        }
        if let Some(n) = rule.messages_per_minute {
            in_range("quotas.messages_per_minute", n, 1..=MAX_MESSAGES_PER_MINUTE)?;
        }
        if let Some(n) = rule.burst {
            if rule.messages_per_minute.is_none() {
                return Err(invalid("quotas.burst", "needs messages_per_minute"));
            }
            in_range("quotas.burst", n, 1..=MAX_MESSAGES_PER_MINUTE)?;
        }
        if let Some(n) = rule.tokens_per_day {
            in_range("quotas.tokens_per_day", n, 1..=u64::MAX / 2)?;
        }
        if rule.over == OverQuota::Notice && rule.notice.trim().is_empty() {
            return Err(invalid(
                "quotas.notice",
                "empty (set over = \"drop\" instead)",
            ));
        }
        in_range(
            "quotas.notice (characters)",
            rule.notice.chars().count(),
            0..=MAX_NOTICE_CHARS,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn rules_parse_and_bad_ones_are_refused() {
        let config = Config::parse(
            "[[quotas]]\nmatch = { sender = \"*\" }\nmessages_per_minute = 10\nburst = 3\n\
             [[quotas]]\nmatch = { agent = \"main\" }\ntokens_per_day = 5000\nover = \"drop\"\n",
        )
        .unwrap();
        assert_eq!(config.quotas.len(), 2);
        assert_eq!(config.quotas[0].burst, Some(3));
        for bad in [
            "[[quotas]]\nmatch = { sender = \"a\", chat = \"b\" }\nmessages_per_minute = 1\n",
            "[[quotas]]\nmatch = {}\nmessages_per_minute = 1\n",
            "[[quotas]]\nmatch = { sender = \"a\" }\n",
            "[[quotas]]\nmatch = { sender = \"a\" }\nmessages_per_minute = 0\n",
            "[[quotas]]\nmatch = { sender = \"\" }\nmessages_per_minute = 1\n",
            "[[quotas]]\nmatch = { sender = \"a\" }\ntokens_per_day = 9\nburst = 2\n",
            "[[quotas]]\nmatch = { sender = \"a\" }\nmessages_per_minute = 1\nnotice = \" \"\n",
            "[[quotas]]\nmatch = { peer = \"a\" }\nmessages_per_minute = 1\n",
            "[[quotas]]\nmatch = { sender = \"a\" }\nmessages_per_minute = 1\nover = \"x\"\n",
        ] {
            assert!(Config::parse(bad).is_err(), "{bad}");
        }
    }
}
