//! Mention gating (preflight step 4): in groups and channels, is the bot addressed?
//!
//! Explicitly, when the message says so (`mentioned_bot`), lists one of the bot's ids in
//! `mentions`, or matches a mention pattern. Implicitly, when it replies to a message the bot
//! sent in that chat, or is in a thread the bot has answered in. The bot's messages are known
//! from the platform echoing them (a message from one of `bot_user_ids`) and from channels
//! reporting what they delivered (`Preflight::record_bot_message`); the threads from the
//! replies the runtime published (`Preflight::record_reply`).

use std::hash::RandomState;
use std::num::NonZeroUsize;
use std::sync::Arc;

use lru::LruCache;

use super::policy::{IdSet, Rules};
use crate::inbound::session_key::{channel_name, normalize_id};
use crate::inbound::{ChatKind, InboundMessage};

/// Bot message ids remembered for implicit reply mentions, across all chats (least recently
/// seen forgotten first).
pub const MAX_BOT_MESSAGE_IDS: usize = 10_000;
/// Threads the bot answered in, remembered for implicit thread mentions (least recently used
/// forgotten first).
pub const MAX_BOT_THREADS: usize = 10_000;

/// `channel|account|chat`: one chat of one bot account.
pub(super) fn chat_ref(msg: &InboundMessage) -> String {
    chat_ref_of(&msg.channel, &msg.account_id, &msg.chat_id)
}

pub(super) fn chat_ref_of(channel: &str, account: &str, chat_id: &str) -> String {
    format!(
        "{}|{}|{}",
        channel_name(channel),
        normalize_id(account, "default"),
        chat_id.trim()
    )
}

/// The thread of `msg` as a thread the bot can take part in: `None` outside threads, and for
/// Telegram group topics (a topic is a chat of its own, not a conversation the bot joined).
fn thread_ref(msg: &InboundMessage) -> Option<String> {
    let thread = msg.thread_id.as_deref().map(str::trim)?;
    if thread.is_empty()
        || (msg.chat_kind != ChatKind::Direct && channel_name(&msg.channel) == "telegram")
    {
        return None;
    }
    Some(format!("{}|{thread}", chat_ref(msg)))
}

/// Keys seen, least recently used forgotten first. Std's randomly keyed hasher: the ids come
/// from chats.
type Seen = LruCache<Arc<str>, (), RandomState>;

fn seen(capacity: usize) -> Seen {
    LruCache::with_hasher(
        NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN),
        RandomState::new(),
    )
}

/// What the bot said where, for implicit mentions. Bounded by [`MAX_BOT_MESSAGE_IDS`] and
/// [`MAX_BOT_THREADS`].
pub(super) struct BotActivity {
    messages: Seen,
    threads: Seen,
}

impl std::fmt::Debug for BotActivity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BotActivity")
            .field("messages", &self.messages.len())
            .field("threads", &self.threads.len())
            .finish()
    }
}

impl BotActivity {
    pub(super) fn new() -> Self {
        Self {
            messages: seen(MAX_BOT_MESSAGE_IDS),
            threads: seen(MAX_BOT_THREADS),
        }
    }

    /// Remembers that the bot sent `message_id` in chat `chat` (a [`chat_ref`]).
    pub(super) fn bot_message(&mut self, chat: &str, message_id: &str) {
        let key: Arc<str> = Arc::from(format!("{chat}|{}", message_id.trim()));
        self.messages.get_or_insert(key, || ());
    }

    /// Remembers that the bot answered `msg` (in its thread, if it has one).
    pub(super) fn answered(&mut self, msg: &InboundMessage) {
        if let Some(thread) = thread_ref(msg) {
            self.threads.get_or_insert(Arc::from(thread), || ());
        }
    }

    /// True when `msg` replies to a bot message or is in a thread the bot answered in.
    pub(super) fn implicit_mention(&mut self, msg: &InboundMessage) -> bool {
        if let Some(reply_to) = msg.reply_to.as_deref() {
            let key = format!("{}|{}", chat_ref(msg), reply_to.trim());
            if self.messages.get(key.as_str()).is_some() {
                return true;
            }
        }
        match thread_ref(msg) {
            Some(thread) => self.threads.get(thread.as_str()).is_some(),
            None => false,
        }
    }
}

/// True when `msg` explicitly addresses the bot: the `mentioned_bot` flag, one of the bot's
/// ids in `mentions`, or a mention pattern in the text.
pub(super) fn explicit_mention(rules: &Rules, bot_ids: &IdSet, msg: &InboundMessage) -> bool {
    msg.mentioned_bot
        || msg
            .mentions
            .iter()
            .any(|m| bot_ids.contains_sender(&msg.channel, m))
        || rules
            .mention_patterns
            .as_ref()
            .is_some_and(|p| p.is_match(&msg.text))
}

/// True when `msg` mentions anyone who is not the bot.
pub(super) fn mentions_someone_else(bot_ids: &IdSet, msg: &InboundMessage) -> bool {
    msg.mentions
        .iter()
        .any(|m| !m.trim().is_empty() && !bot_ids.contains_sender(&msg.channel, m))
}
