//! Preflight's vocabulary: why a message is not a turn ([`DropReason`]) and why the runtime
//! did not accept it ([`Refusal`]). It lives here, beside preflight, so admission and the
//! channels share it without importing the runtime.

use serde::Serialize;

/// Why preflight decided a message is not a turn. Each decision is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// Seen before (redelivery).
    Duplicate,
    /// Sent by a bot (or by this bot).
    Bot,
    /// Not allowed by `dm_policy` / `group_policy`.
    Policy,
    /// A group message that does not address the bot.
    NoMention,
    /// Addresses someone else (`ignore_other_mentions`).
    OtherMention,
    /// A platform event, queued for the next turn instead.
    SystemEvent,
    /// A command (`kind = "command"`): not chat, never answered as a turn.
    Command,
}

impl DropReason {
    /// Whether a message dropped for this reason may leave a record: group chatter stays in
    /// its chat's record, a system event in its session's queue.
    pub fn keeps_record(self) -> bool {
        matches!(
            self,
            DropReason::NoMention | DropReason::OtherMention | DropReason::SystemEvent
        )
    }
}

impl Refusal {
    /// The reason label counted in `turnstile_inbound_dropped_total`.
    pub fn metric_reason(&self) -> &'static str {
        match self {
            Refusal::Dropped(reason) => reason.as_str(),
            Refusal::Overloaded(_) => "overloaded",
            Refusal::ShuttingDown => "shutting_down",
            Refusal::Storage(_) => "storage",
            Refusal::Unavailable(_) => "unavailable",
            Refusal::InsufficientStorage(_) => "insufficient_storage",
            Refusal::OverQuota(_) => "quota",
        }
    }
}

impl DropReason {
    /// The name used in API answers and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Duplicate => "duplicate",
            DropReason::Bot => "bot",
            DropReason::Policy => "policy",
            DropReason::NoMention => "no_mention",
            DropReason::OtherMention => "other_mention",
            DropReason::SystemEvent => "system_event",
            DropReason::Command => "command",
        }
    }
}

/// A message refused over a `[[quotas]]` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaRefusal {
    /// The session it was for.
    pub session_key: String,
    /// What was counted: `sender:<channel>:<id>`, `chat:…`, `account:…` or `agent:<id>`.
    pub subject: String,
    /// The limit it is over: `messages` or `tokens`.
    pub limit: &'static str,
    /// The rule's notice, when this refusal is the first of its window and the rule sends
    /// one (the runtime delivers it as a reply).
    pub notice: Option<std::sync::Arc<str>>,
}

/// Why the runtime did not accept a message. Nothing was stored for it as a turn.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Over a quota: not queued (answered like a drop on the webhook, `429 quota_exceeded`
    /// on the OpenAI endpoint).
    #[error("over the {} quota of {}", .0.limit, .0.subject)]
    OverQuota(Box<QuotaRefusal>),
    /// Preflight decided it is not a turn (not an error: answered with 200).
    #[error("dropped: {}", .0.as_str())]
    Dropped(DropReason),
    /// Too much is queued; retry later.
    #[error("over capacity: {0}")]
    Overloaded(String),
    /// The runtime is shutting down.
    #[error("shutting down")]
    ShuttingDown,
    /// The inbox write failed.
    #[error("storage: {0}")]
    Storage(String),
    /// The data dir is at its disk budget and nothing can be evicted yet; retry later.
    #[error("insufficient storage: {0}")]
    InsufficientStorage(String),
    /// In a cluster: the replicated inbox did not acknowledge the message (no quorum, no
    /// connection); retry later.
    #[error("unavailable: {0}")]
    Unavailable(String),
}
