//! Preflight (SPEC §2.3): which inbound messages become turns. Runs in the supervisor's
//! admission (`TurnBackend::admit`), before anything is written to the inbox.
//!
//! In order, each decision counted by reason ([`Preflight::stats`]):
//! 1. **Dedupe** (`dedupe.rs`): a key seen within `dedupe_ttl_ms` → `duplicate`.
//! 2. **Bots** (`policy.rs`): this bot's own messages (`bot_user_ids`) → `bot`, always; other
//!    bots (`sender.is_bot`) per `allow_bots`.
//! 3. **Policy** (`policy.rs`): `dm_policy` with `allow_from`, `group_policy` with
//!    `group_allow_from` → `policy`.
//! 4. **Commands**: `kind = "command"` → `command` (not chat: never a turn, not history).
//!    **System events** (`system_events.rs`): `kind = "system_event"` → queued (durably, by
//!    the admission) for the session's next turn, answered `system_event`. They skip the other-bot check (a platform
//!    event is not bot chatter) and mention gating (an event never mentions anyone).
//! 5. **Mention gating** (`mentions.rs`), in groups and channels: `ignore_other_mentions` →
//!    `other_mention`; `require_mention` and not addressed → `no_mention`. Both stay in the
//!    chat's durable record (written by the admission): the chat's **pending group history**
//!    (`group_history.rs`).
//! 6. **Accepted**: the session's queued system events and (in groups) the chat's pending
//!    history, both read from the store by the admission, ride along on the inbox record.
//!
//! Messages submitted with an explicit session key (the OpenAI-compatible endpoint, whose
//! authenticated client named its session and addresses the bot by definition) pass only
//! dedupe and system events.
//!
//! Deciding does not consume anything: [`Preflight::confirm`] remembers the dedupe key once the
//! inbox write succeeded, so a failed write is not a duplicate on retry. The two must be called
//! by one admitter at a time, in that order (the supervisor admits one message at a time).
//!
//! All state is bounded: see the constants of each module and the `[preflight]` keys.

mod dedupe;
mod group_history;
mod mentions;
mod policy;
mod system_events;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use serde::Serialize;

pub use dedupe::{dedupe_key, DurableDedupe, MemoryOnly};
pub use group_history::{history_line, MAX_HISTORY_LINE_CHARS};
pub use mentions::{MAX_BOT_MESSAGE_IDS, MAX_BOT_THREADS};
pub use policy::check_mention_patterns;
pub use system_events::{event_of, MAX_SYSTEM_EVENT_CHARS};

use self::dedupe::DedupeCache;
use self::mentions::{chat_ref, chat_ref_of, BotActivity};
use self::policy::{IdKind, IdSet, RuleBook};
use crate::config::Config;
use crate::error::{ConfigError, StoreError};
use crate::inbound::session_key::normalize_id;
use crate::inbound::{ChatKind, ChatRules, DropReason, IdOrigin, InboundMessage, MessageKind};
use crate::store::{HistoryLine, SystemEvent};

/// What preflight decided about a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A turn: write it to the inbox with what the admission carries, then
    /// [`Preflight::confirm`].
    Accept(Admission),
    /// Not a turn.
    Drop(DropReason),
}

/// An accepted message's extras, to store on its inbox record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// The dedupe key, to remember with the inbox entry (durably for an id that may come back
    /// after a restart); `None` for an id nobody can present again ([`IdOrigin::Unique`]).
    pub dedupe_key: Option<String>,
    /// When the dedupe entry expires, ms since the epoch.
    pub dedupe_expires_at_ms: u64,
    /// System events queued for the session since its last turn, oldest first (filled in by
    /// the admission from the store).
    pub system_events: Vec<SystemEvent>,
    /// The chat's pending history (group messages that did not address the bot), oldest first
    /// (filled in by the admission from the chat record).
    pub group_history: Vec<HistoryLine>,
    /// Set for a group or channel message that may carry pending history.
    pub takes_history: bool,
}

/// Preflight decisions so far, by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PreflightStats {
    /// Accepted as turns (confirmed).
    pub accepted: u64,
    /// Dropped as `duplicate`.
    pub duplicate: u64,
    /// Dropped as `bot`.
    pub bot: u64,
    /// Dropped as `policy`.
    pub policy: u64,
    /// Dropped as `no_mention`.
    pub no_mention: u64,
    /// Dropped as `other_mention`.
    pub other_mention: u64,
    /// Queued as `system_event`.
    pub system_event: u64,
    /// Dropped as `command`.
    pub command: u64,
}

impl PreflightStats {
    /// How many were dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        match reason {
            DropReason::Duplicate => self.duplicate,
            DropReason::Bot => self.bot,
            DropReason::Policy => self.policy,
            DropReason::NoMention => self.no_mention,
            DropReason::OtherMention => self.other_mention,
            DropReason::SystemEvent => self.system_event,
            DropReason::Command => self.command,
        }
    }
}

/// One counter per outcome, lock-free so stats can be read while admission runs.
#[derive(Debug, Default)]
struct Counters {
    accepted: AtomicU64,
    duplicate: AtomicU64,
    bot: AtomicU64,
    policy: AtomicU64,
    no_mention: AtomicU64,
    other_mention: AtomicU64,
    system_event: AtomicU64,
    command: AtomicU64,
}

impl Counters {
    fn dropped(&self, reason: DropReason) -> &AtomicU64 {
        match reason {
            DropReason::Duplicate => &self.duplicate,
            DropReason::Bot => &self.bot,
            DropReason::Policy => &self.policy,
            DropReason::NoMention => &self.no_mention,
            DropReason::OtherMention => &self.other_mention,
            DropReason::SystemEvent => &self.system_event,
            DropReason::Command => &self.command,
        }
    }
}

/// The mutable part, behind one mutex. Admission is serial, so it is uncontended; the mutex
/// only makes [`Preflight`] `Sync` for the shared backend and for `record_*` calls from turns.
#[derive(Debug)]
struct State {
    dedupe: DedupeCache,
    activity: BotActivity,
}

/// The policy compiled from `[preflight]`: who may talk to the bot and what addresses it.
/// Swapped whole by a config reload ([`Preflight::set_policy`]).
#[derive(Debug)]
struct Policy {
    rules: RuleBook,
    bot_ids: IdSet,
}

impl Policy {
    fn compile(p: &crate::config::PreflightConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            rules: RuleBook::compile(p)?,
            bot_ids: IdSet::new(&p.bot_user_ids, IdKind::Sender),
        })
    }
}

/// Preflight: the rules compiled from `[preflight]` and their bounded state.
#[derive(Debug)]
pub struct Preflight {
    agent: String,
    /// The policy in force; a message is screened under one snapshot.
    policy: RwLock<Arc<Policy>>,
    dedupe_ttl_ms: u64,
    /// False on a cluster node: there the replicated inbox drops redeliveries (its message-id
    /// window is `dedupe_ttl_ms`) and answered messages carry marks. A node's own marks would
    /// drop a message it once took from a partition it lost, though no node answered it.
    dedupes: bool,
    state: Mutex<State>,
    counters: Counters,
}

/// At most `max` characters of `text` (an ellipsis marks a cut).
pub(crate) fn cap_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((cut, _)) => {
            let mut s = text[..cut].to_string();
            s.push('…');
            s
        }
    }
}

impl Preflight {
    /// Compiles `config.preflight` (for agent `config.session.agent_id`); an invalid mention
    /// pattern is an error.
    pub fn new(config: &Config) -> Result<Self, ConfigError> {
        let p = &config.preflight;
        Ok(Self {
            agent: normalize_id(&config.session.agent_id, "main"),
            policy: RwLock::new(Arc::new(Policy::compile(p)?)),
            dedupe_ttl_ms: p.dedupe_ttl_ms,
            dedupes: config.cluster.is_none(),
            state: Mutex::new(State {
                dedupe: DedupeCache::new(p.dedupe_ttl_ms, p.dedupe_max_keys),
                activity: BotActivity::new(),
            }),
            counters: Counters::default(),
        })
    }

    /// Replaces the policy keys of `[preflight]` (a config reload): who may talk to the bot,
    /// bots, mentions, the per-channel overrides. The dedupe and mention memory stay, and so do
    /// the keys that size them (`dedupe_ttl_ms`, `dedupe_max_keys`: a restart changes those).
    /// An invalid mention pattern changes nothing.
    pub fn set_policy(&self, p: &crate::config::PreflightConfig) -> Result<(), ConfigError> {
        let policy = Arc::new(Policy::compile(p)?);
        *self.policy.write().unwrap_or_else(PoisonError::into_inner) = policy;
        Ok(())
    }

    fn policy(&self) -> Arc<Policy> {
        Arc::clone(&self.policy.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Whether this preflight drops duplicates itself (see the field).
    pub fn dedupes(&self) -> bool {
        self.dedupes
    }

    /// The key a message is deduplicated by.
    pub fn dedupe_key_of(&self, msg: &InboundMessage) -> String {
        dedupe_key(&self.agent, msg)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing in the state can be left half-updated by a panic that matters more than
        // refusing every later message would.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Restores the durable dedupe marks of messages still in `store`'s inbox (see
    /// [`Store::restore_inbox_dedupe`]). Returns how many were missing.
    pub fn restore_durable_marks(&self, store: &crate::store::Store) -> Result<usize, StoreError> {
        store.restore_inbox_dedupe(
            |record| dedupe_key(&self.agent, &record.message),
            self.dedupe_ttl_ms,
        )
    }

    /// Decides about `msg` (validated). `explicit_session` says the submitter named the
    /// session (see the module doc). Where the id came from ([`IdOrigin`]) says where to look
    /// for a duplicate: `durable` is asked when the key is not in memory for a given id only,
    /// and a unique id is not looked up at all. Counts drops; acceptances are counted by
    /// [`Preflight::confirm`].
    pub fn decide(
        &self,
        msg: &InboundMessage,
        explicit_session: bool,
        now_ms: u64,
        durable: &dyn DurableDedupe,
        id_origin: IdOrigin,
    ) -> Result<Verdict, StoreError> {
        self.decide_with(
            msg,
            explicit_session,
            now_ms,
            durable,
            id_origin,
            &ChatRules::default(),
        )
    }

    /// [`Preflight::decide`] under the submitting channel's `chat` rules for this message.
    pub fn decide_with(
        &self,
        msg: &InboundMessage,
        explicit_session: bool,
        now_ms: u64,
        durable: &dyn DurableDedupe,
        id_origin: IdOrigin,
        chat: &ChatRules,
    ) -> Result<Verdict, StoreError> {
        let key = (id_origin != IdOrigin::Unique).then(|| dedupe_key(&self.agent, msg));
        let mut state = self.state();
        // A cluster node looks up no duplicates here (see `Preflight::dedupes`).
        if let Some(key) = key.as_ref().filter(|_| self.dedupes) {
            if state.dedupe.seen(key, now_ms) {
                return Ok(self.dropped(DropReason::Duplicate));
            }
            if id_origin == IdOrigin::Given && durable.seen(key, now_ms)? {
                state.dedupe.insert(key, now_ms);
                return Ok(self.dropped(DropReason::Duplicate));
            }
        }
        match self.screen(&mut state, msg, explicit_session, chat) {
            Err(reason) => {
                if let Some(key) = &key {
                    state.dedupe.insert(key, now_ms);
                }
                Ok(self.dropped(reason))
            }
            Ok(takes_history) => Ok(Verdict::Accept(Admission {
                dedupe_expires_at_ms: now_ms.saturating_add(self.dedupe_ttl_ms),
                dedupe_key: key,
                system_events: Vec::new(),
                group_history: Vec::new(),
                takes_history,
            })),
        }
    }

    /// Steps 2 to 5. `Ok(true)` for an accepted group or channel message (it takes the
    /// chat's pending history).
    fn screen(
        &self,
        state: &mut State,
        msg: &InboundMessage,
        explicit_session: bool,
        chat: &ChatRules,
    ) -> Result<bool, DropReason> {
        if explicit_session {
            return match msg.kind {
                MessageKind::SystemEvent => Err(DropReason::SystemEvent),
                MessageKind::Command => Err(DropReason::Command),
                MessageKind::Message => Ok(false),
            };
        }
        let compiled = self.policy();
        let bot_ids = &compiled.bot_ids;
        if bot_ids.contains_sender(&msg.channel, &msg.sender.id) {
            // The platform echoing the bot's own message: remember it for implicit mentions.
            state.activity.bot_message(&chat_ref(msg), &msg.message_id);
            return Err(DropReason::Bot);
        }
        let rules = compiled.rules.for_channel(&msg.channel);
        if msg.sender.is_bot && msg.kind == MessageKind::Message {
            let explicit = mentions::explicit_mention(rules, bot_ids, msg);
            let allow = chat.allow_bots.unwrap_or(rules.allow_bots);
            if !policy::other_bot_allowed(allow, explicit) {
                return Err(DropReason::Bot);
            }
        }
        if !rules.allows(msg) {
            return Err(DropReason::Policy);
        }
        match msg.kind {
            MessageKind::SystemEvent => return Err(DropReason::SystemEvent),
            // After the bot and policy checks, so a command from someone who may not talk to
            // the bot is counted as that.
            MessageKind::Command => return Err(DropReason::Command),
            MessageKind::Message => {}
        }
        if msg.chat_kind == ChatKind::Direct {
            return Ok(false);
        }
        let addressed =
            mentions::explicit_mention(rules, bot_ids, msg) || state.activity.implicit_mention(msg);
        if !addressed {
            if rules.ignore_other_mentions && mentions::mentions_someone_else(bot_ids, msg) {
                return Err(DropReason::OtherMention);
            }
            if chat.require_mention.unwrap_or(rules.require_mention) {
                return Err(DropReason::NoMention);
            }
        }
        Ok(true)
    }

    fn dropped(&self, reason: DropReason) -> Verdict {
        self.counters
            .dropped(reason)
            .fetch_add(1, Ordering::Relaxed);
        Verdict::Drop(reason)
    }

    /// Records that `admission`'s message was written to the inbox: remembers its dedupe key
    /// and counts it as accepted.
    pub fn confirm(&self, admission: &Admission, now_ms: u64) {
        if let Some(key) = &admission.dedupe_key {
            self.state().dedupe.insert(key, now_ms);
        }
        self.counters.accepted.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether a message dropped as `reason` stays in its chat's record (group chatter: the
    /// pending history of the next message that addresses the bot).
    pub fn keeps_chatter(msg: &InboundMessage, explicit_session: bool, reason: DropReason) -> bool {
        !explicit_session
            && msg.chat_kind != ChatKind::Direct
            && msg.kind == MessageKind::Message
            && matches!(reason, DropReason::NoMention | DropReason::OtherMention)
    }

    /// Records that the bot sent `message_id` in a chat (e.g. a channel reporting the platform
    /// id of a reply it delivered), so a reply to it counts as a mention.
    pub fn record_bot_message(
        &self,
        channel: &str,
        account_id: &str,
        chat_id: &str,
        message_id: &str,
    ) {
        let chat = chat_ref_of(channel, account_id, chat_id);
        self.state().activity.bot_message(&chat, message_id);
    }

    /// Records that the bot answered `msg` (called when its reply is published), so later
    /// messages in the same thread count as addressing the bot.
    pub fn record_reply(&self, msg: &InboundMessage) {
        self.state().activity.answered(msg);
    }

    /// Decisions so far.
    pub fn stats(&self) -> PreflightStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PreflightStats {
            accepted: get(&c.accepted),
            duplicate: get(&c.duplicate),
            bot: get(&c.bot),
            policy: get(&c.policy),
            no_mention: get(&c.no_mention),
            other_mention: get(&c.other_mention),
            system_event: get(&c.system_event),
            command: get(&c.command),
        }
    }

    /// Dedupe keys held in memory (the bounded state).
    pub fn dedupe_keys(&self) -> usize {
        self.state().dedupe.len()
    }
}

#[cfg(test)]
mod tests;
