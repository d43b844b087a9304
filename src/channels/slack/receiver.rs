//! The receiver: one task that takes what the socket task (or the HTTP Events route) hands
//! over, in order, and submits it through the channel port. Sequencing only; the rules are
//! in `convert.rs`, the durable cursors in `state.rs`.
//!
//! - Dedupe before anything: an envelope id, an event id, and a message (conversation and
//!   `ts`: the same message comes as `message` and `app_mention`, live and caught up) are
//!   each handled once; the last [`MAX_SEEN`] are remembered. Preflight's durable dedupe is
//!   behind it, for what a restart forgets.
//! - `Connected` (a `hello`, or the start in `http` mode) triggers a **catch-up**: each
//!   conversation and active thread with a cursor is read back since its newest handled
//!   message (`conversations.history`, `conversations.replies`, page after page through
//!   `next_cursor`; bounded per conversation by `catch_up_max_per_conversation` and in
//!   total), oldest first, through the same dedupe and conversion as live messages.
//! - A thread reply's session gets its thread's first message kept as its starter before
//!   the reply is submitted (`starter.rs`, read once, bounded; a failure leaves the turn
//!   without it).
//! - After each handled message the cursors are saved.

use std::num::NonZeroUsize;
use std::time::Duration;

use lru::LruCache;
use serde::Deserialize;
use tokio::sync::mpsc;

use super::api::{ApiError, History, Identity, WebApi};
use super::convert::{self, to_inbound, Place};
use super::events::{Callback, SlackMessage, SlashCommand};
use super::socket::Inbound;
use super::starter::read_starter;
use super::state::{SlackState, Target, CATCH_UP_PAGE_SIZE, MAX_CATCH_UP_TOTAL, STATE_KEY};
use super::{ts, SlackChannel, SLACK};
use crate::channels::retry::pause_unless_stopped;
use crate::channels::thread_starter::Starters;
use crate::config::SlackConfig;
use crate::error::Error;
use crate::inbound::{
    ChatKind, ChatRules, IdOrigin, InboundEvent, InboundMessage, MessageKind, Refusal, RouteHints,
    Sender,
};
use crate::metrics;
use crate::runtime::{ChannelPort, SubmitError};
use crate::secret::Secret;

/// Envelope, event and message ids remembered for dedupe (the least recently seen is
/// forgotten first).
pub(crate) const MAX_SEEN: usize = 10_000;

/// Conversations whose `channel_type` is remembered beyond the cursors.
pub(crate) const MAX_KNOWN_TYPES: usize = 10_000;

/// Tries of one catch-up read that keeps failing before its conversation is left for the
/// next catch-up.
const CATCH_UP_ATTEMPTS: u32 = 5;

/// What one catch-up read of a conversation or thread came to.
enum Read {
    /// Its messages since the cursor, oldest first.
    Messages(Vec<SlackMessage>),
    /// Left for the next catch-up (a page kept failing, or was refused).
    Left,
    /// The runtime is stopping.
    Stopping,
}

/// What happened to one message.
enum Handled {
    /// Accepted into the inbox.
    Accepted,
    /// Dropped or skipped: move the cursor past it.
    Done,
    /// Handled before (a redelivery, or read back after it came live).
    Duplicate,
    /// The runtime is stopping: leave it for the next start (the catch-up reads it again).
    Stopping,
}

/// The receiver task.
pub(crate) struct Receiver {
    pub(crate) port: ChannelPort<SlackChannel>,
    pub(crate) config: SlackConfig,
    pub(crate) api: WebApi,
    pub(crate) bot_token: Secret,
    pub(crate) identity: Identity,
    state: SlackState,
    seen: LruCache<String, ()>,
    types: LruCache<String, String>,
    starters: Starters,
}

fn cache<V>(n: usize) -> LruCache<String, V> {
    LruCache::new(NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN))
}

impl Receiver {
    pub(crate) fn new(
        port: ChannelPort<SlackChannel>,
        config: SlackConfig,
        api: WebApi,
        bot_token: Secret,
        identity: Identity,
    ) -> Self {
        let state = match port.load_state(STATE_KEY) {
            Ok(Some(bytes)) => SlackState::decode(&bytes).unwrap_or_else(|error| {
                tracing::warn!(%error, "stored slack cursors are unreadable; starting afresh");
                SlackState::default()
            }),
            Ok(None) => SlackState::default(),
            Err(error) => {
                tracing::warn!(%error, "cannot read the slack cursors; starting afresh");
                SlackState::default()
            }
        };
        Self {
            port,
            config,
            api,
            bot_token,
            identity,
            state,
            seen: cache(MAX_SEEN),
            types: cache(MAX_KNOWN_TYPES),
            starters: Starters::new(SLACK),
        }
    }

    fn pause(&self, failures: u32) -> Duration {
        crate::backoff::jittered(
            Duration::from_millis(self.config.retry_backoff_ms),
            Duration::from_millis(self.config.max_retry_backoff_ms),
            failures.saturating_sub(1),
        )
    }

    /// True the first time `key` is seen (within the last [`MAX_SEEN`]).
    fn first_time(&mut self, key: String) -> bool {
        self.seen.put(key, ()).is_none()
    }

    async fn save(&self) {
        if let Err(error) = self.port.save_state(STATE_KEY, &self.state.encode()).await {
            tracing::warn!(%error, "cannot store the slack cursors; a restart may catch up again");
        }
    }

    /// Runs until the runtime stops or the senders are gone.
    pub(crate) async fn run(mut self, mut rx: mpsc::Receiver<Inbound>) {
        let mut stop = self.port.stopping();
        loop {
            let item = tokio::select! {
                item = rx.recv() => item,
                _ = stop.wait_for(|s| *s) => None,
            };
            let Some(item) = item else { return };
            let done = match item {
                Inbound::Connected => self.catch_up().await,
                Inbound::Envelope { id, kind, payload } => self.envelope(id, &kind, payload).await,
            };
            if matches!(done, Handled::Stopping) {
                return;
            }
        }
    }

    async fn envelope(
        &mut self,
        id: Option<String>,
        kind: &str,
        payload: serde_json::Value,
    ) -> Handled {
        if let Some(id) = id {
            if !self.first_time(format!("envelope:{id}")) {
                metrics::channel_skipped(SLACK, "duplicate");
                return Handled::Done;
            }
        }
        match kind {
            "events_api" => {
                let Ok(callback) = Callback::deserialize(&payload) else {
                    tracing::warn!("unreadable slack event callback; skipped");
                    return Handled::Done;
                };
                if let Some(event_id) = &callback.event_id {
                    if !self.first_time(format!("event:{event_id}")) {
                        metrics::channel_skipped(SLACK, "duplicate");
                        return Handled::Done;
                    }
                }
                let Some(event) = callback.event else {
                    return Handled::Done;
                };
                let kind = event["type"].as_str().unwrap_or_default().to_string();
                if kind != "message" && kind != "app_mention" {
                    return Handled::Done;
                }
                let Ok(m) = SlackMessage::deserialize(&event) else {
                    tracing::warn!("unreadable slack message event; skipped");
                    return Handled::Done;
                };
                let Some(channel) = m.channel.clone() else {
                    return Handled::Done;
                };
                let channel_type = match &m.channel_type {
                    Some(t) => {
                        self.types.put(channel.clone(), t.clone());
                        t.clone()
                    }
                    None => self.channel_type(&channel).await,
                };
                let team = callback.team_id.or_else(|| self.identity.team_id.clone());
                self.message(
                    &m,
                    &channel,
                    &channel_type,
                    team.as_deref(),
                    kind == "app_mention",
                )
                .await
            }
            "slash_commands" => match SlashCommand::deserialize(&payload) {
                Ok(command) => self.command(command).await,
                Err(_) => Handled::Done,
            },
            _ => {
                // Interactions (buttons, shortcuts) are not chat.
                metrics::channel_skipped(SLACK, "interaction");
                Handled::Done
            }
        }
    }

    /// The `channel_type` of `channel`: remembered, else asked of `conversations.info`
    /// once, else guessed from its id.
    async fn channel_type(&mut self, channel: &str) -> String {
        if let Some(t) = self.state.channel_type(channel) {
            return t.to_string();
        }
        if let Some(t) = self.types.get(channel) {
            return t.clone();
        }
        let t = match self.api.conversation_type(&self.bot_token, channel).await {
            Ok(t) => t,
            Err(error) => {
                tracing::debug!(%error, channel, "slack conversations.info failed; kind guessed from the id");
                convert::type_from_id(channel).to_string()
            }
        };
        self.types.put(channel.to_string(), t.clone());
        t
    }

    /// Converts, submits and records one message (live or caught up).
    async fn message(
        &mut self,
        m: &SlackMessage,
        channel: &str,
        channel_type: &str,
        team: Option<&str>,
        app_mention: bool,
    ) -> Handled {
        if !self.first_time(format!("message:{channel}:{}", m.ts)) {
            metrics::channel_skipped(SLACK, "duplicate");
            return Handled::Duplicate;
        }
        let thread = m.thread().map(str::to_string);
        let place = Place {
            channel,
            channel_type,
            team,
            bot_thread: thread
                .as_deref()
                .is_some_and(|t| self.state.bot_thread(channel, t)),
            app_mention,
        };
        let (done, own) = match to_inbound(m, place, &self.identity, &self.config) {
            Ok(converted) => {
                if let Some(thread) = thread
                    .as_deref()
                    .filter(|_| converted.message.kind == MessageKind::Message)
                {
                    self.keep_starter(&converted, channel, thread).await;
                }
                let done = self
                    .submit(
                        &converted.message,
                        converted.rules,
                        converted.route,
                        converted.system_prompt.as_deref(),
                    )
                    .await;
                (done, false)
            }
            Err(skip) => {
                metrics::channel_skipped(SLACK, skip.as_str());
                (Handled::Done, skip == convert::Skip::Own)
            }
        };
        if matches!(done, Handled::Stopping) {
            // Not handled: a later catch-up reads it again.
            self.seen.pop(&format!("message:{channel}:{}", m.ts));
            return done;
        }
        match &thread {
            Some(t) => {
                self.state.advance_thread(channel, t, &m.ts, own);
            }
            None => {
                self.state.advance(channel, &m.ts, channel_type);
                // The bot answers in a thread under this message: its replies there address
                // the bot, and the thread is caught up from here.
                let answered_in_thread = matches!(done, Handled::Accepted)
                    && self.config.reply_in_thread
                    && convert::chat_kind(channel_type) != ChatKind::Direct;
                if answered_in_thread {
                    self.state.advance_thread(channel, &m.ts, &m.ts, true);
                }
            }
        }
        self.save().await;
        done
    }

    /// Makes sure the session of thread reply `converted` (thread `thread` of `channel`) has
    /// its thread's first message kept as its starter.
    async fn keep_starter(&mut self, converted: &convert::Converted, channel: &str, thread: &str) {
        let runtime = self.port.runtime();
        let key = session_key(
            runtime,
            &converted.message,
            &converted.route,
            converted.rules,
        );
        let read = read_starter(&self.api, &self.bot_token, channel, thread);
        self.starters.ensure(runtime, &key, read).await;
    }

    /// A slash command: not chat. Submitted as a command so preflight counts and skips it.
    async fn command(&mut self, c: SlashCommand) -> Handled {
        if c.channel_id.is_empty() || c.user_id.is_empty() || c.trigger_id.is_empty() {
            return Handled::Done;
        }
        let channel_type = self.channel_type(&c.channel_id).await;
        let message = InboundMessage {
            channel: SLACK.into(),
            account_id: self.config.account_id.clone(),
            chat_kind: convert::chat_kind(&channel_type),
            chat_id: c.channel_id.clone(),
            thread_id: None,
            message_id: format!("command-{}", c.trigger_id),
            sender: Sender {
                id: c.user_id.clone(),
                name: c.user_name.clone().unwrap_or_else(|| c.user_id.clone()),
                is_bot: false,
            },
            text: format!("{} {}", c.command, c.text).trim().to_string(),
            mentions: Vec::new(),
            mentioned_bot: true,
            reply_to: None,
            timestamp_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0)),
            attachments: Vec::new(),
            kind: MessageKind::Command,
        };
        let route = RouteHints {
            guild_id: c.team_id.clone(),
            roles: Vec::new(),
        };
        self.submit(&message, ChatRules::default(), route, None)
            .await
    }

    /// Submits one message, retrying while the runtime cannot take it now.
    async fn submit(
        &self,
        message: &InboundMessage,
        rules: ChatRules,
        route: RouteHints,
        system_prompt: Option<&str>,
    ) -> Handled {
        let runtime = self.port.runtime();
        if let Some(prompt) = system_prompt {
            let key = session_key(runtime, message, &route, rules);
            if let Err(error) = runtime.set_session_instructions(&key, prompt).await {
                tracing::warn!(%error, "cannot store a slack conversation's system prompt");
            }
        }
        let mut stop = self.port.stopping();
        let mut failures = 0u32;
        loop {
            let why = match self
                .port
                .submit_with_rules(message.clone(), route.clone(), rules)
                .await
            {
                Ok(_) => return Handled::Accepted,
                // Over a quota is final too: a retry would only count it again.
                Err(SubmitError::Refused(Refusal::Dropped(_) | Refusal::OverQuota(_))) => {
                    return Handled::Done
                }
                Err(SubmitError::Failed(Error::Inbound(error))) => {
                    tracing::warn!(%error, ts = %message.message_id, "slack message is not a valid inbound message; skipped");
                    return Handled::Done;
                }
                Err(SubmitError::Refused(refusal)) => refusal.to_string(),
                Err(SubmitError::Failed(error)) => error.to_string(),
            };
            failures += 1;
            tracing::warn!(reason = %why, "slack message not accepted now; retrying");
            if !pause_unless_stopped(self.pause(failures), &mut stop).await {
                return Handled::Stopping;
            }
        }
    }

    /// One page of a catch-up read from `cursor`, retried on rate limits and transient
    /// failures.
    async fn page(
        &self,
        target: &Target,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<History, Read> {
        let mut stop = self.port.stopping();
        let mut failures = 0u32;
        loop {
            let page = match &target.thread_ts {
                None => {
                    self.api
                        .history(
                            &self.bot_token,
                            &target.channel,
                            &target.oldest,
                            cursor,
                            limit,
                        )
                        .await
                }
                Some(thread) => {
                    self.api
                        .replies(
                            &self.bot_token,
                            &target.channel,
                            thread,
                            &target.oldest,
                            cursor,
                            limit,
                        )
                        .await
                }
            };
            let error = match page {
                Ok(page) => return Ok(page),
                Err(e) => e,
            };
            failures += 1;
            let pause = match &error {
                ApiError::RateLimited { retry_after } => {
                    self.api.count_wait();
                    retry_after
                        .map(|d| d.min(Duration::from_millis(self.config.max_retry_backoff_ms)))
                        .unwrap_or_else(|| self.pause(failures))
                }
                ApiError::Transient(_) => self.pause(failures),
                ApiError::Final(_) => {
                    tracing::warn!(%error, channel = %target.channel, "slack catch-up read refused; skipped");
                    return Err(Read::Left);
                }
            };
            if failures >= CATCH_UP_ATTEMPTS {
                tracing::warn!(%error, channel = %target.channel, "slack catch-up read failed; left for the next catch-up");
                return Err(Read::Left);
            }
            if !pause_unless_stopped(pause, &mut stop).await {
                return Err(Read::Stopping);
            }
        }
    }

    /// Reads `target` back since its cursor, page after page (`next_cursor`), until the end
    /// or `bound` messages. A page that keeps failing leaves the whole read for the next
    /// catch-up: handling the newer pages without the older would move the cursor past
    /// messages never read.
    async fn read(&self, target: &Target, bound: usize) -> Read {
        let oldest = ts::key(&target.oldest);
        let mut messages: Vec<SlackMessage> = Vec::new();
        let mut cursor: Option<String> = None;
        // Each page brings at least one message but for a misbehaving answer: at most
        // `bound` pages either way.
        for _ in 0..bound {
            let limit = bound.saturating_sub(messages.len()).min(CATCH_UP_PAGE_SIZE);
            let page = match self.page(target, cursor.as_deref(), limit).await {
                Ok(page) => page,
                Err(read) => return read,
            };
            let next = page.next_cursor().map(str::to_string);
            let more = page.has_more || next.is_some();
            gather(&mut messages, page.messages, oldest);
            if messages.len() >= bound && more {
                self.cut_short(target, &mut messages, bound);
                break;
            }
            match next {
                Some(next) if more => cursor = Some(next),
                None if more => {
                    tracing::warn!(channel = %target.channel, "slack catch-up: more messages but no next_cursor; the rest is not read back");
                    break;
                }
                _ => break,
            }
        }
        Read::Messages(messages)
    }

    /// A read that reached `bound` with more left: keeps `bound` messages and says which
    /// are not read back. History pages come newest first, so what was read is the newest
    /// and the older ones are skipped for good (the cursor moves past them once the newest
    /// are handled); thread replies come oldest first, so the newer ones wait for the next
    /// catch-up.
    fn cut_short(&self, target: &Target, messages: &mut Vec<SlackMessage>, bound: usize) {
        let newest_first = target.thread_ts.is_none();
        keep(messages, bound, newest_first);
        match &target.thread_ts {
            None => {
                let first = messages.first().map(|m| m.ts.clone()).unwrap_or_default();
                tracing::warn!(
                    channel = %target.channel,
                    since = %target.oldest,
                    first_read = %first,
                    "slack catch-up: more than {bound} messages since the last one seen; the newest {bound} are read back, the older ones (after `since`, before `first_read`) are skipped"
                );
            }
            Some(thread) => {
                tracing::warn!(
                    channel = %target.channel,
                    thread = %thread,
                    "slack catch-up: more than {bound} replies since the last one seen; the oldest {bound} are read back, the newer ones at the next catch-up"
                );
            }
        }
    }

    /// Reads back what each conversation and active thread received since its cursor.
    async fn catch_up(&mut self) -> Handled {
        let plan = self.state.catch_up_plan();
        if plan.is_empty() {
            metrics::channel_connection(SLACK, "connected", "");
            return Handled::Done;
        }
        metrics::channel_connection(SLACK, "catching_up", "");
        let team = self.identity.team_id.clone();
        let mut total = 0usize;
        for target in plan {
            let room = MAX_CATCH_UP_TOTAL.saturating_sub(total);
            if room == 0 {
                tracing::warn!("slack catch-up reached its bound ({MAX_CATCH_UP_TOTAL} messages); the rest is not read back");
                break;
            }
            let limit = self.config.catch_up_max_per_conversation.min(room);
            let messages = match self.read(&target, limit).await {
                Read::Messages(m) => m,
                Read::Stopping => return Handled::Stopping,
                Read::Left => continue,
            };
            let channel_type = self
                .state
                .channel_type(&target.channel)
                .map(str::to_string)
                .unwrap_or_else(|| convert::type_from_id(&target.channel).to_string());
            let oldest = ts::key(&target.oldest);
            for m in messages.iter().take(limit) {
                if ts::key(&m.ts) <= oldest {
                    continue;
                }
                // History reads carry no thread for replies read through `replies` when
                // Slack leaves it out; the target names it.
                let mut m = m.clone();
                if m.thread_ts.is_none() {
                    m.thread_ts.clone_from(&target.thread_ts);
                }
                match self
                    .message(&m, &target.channel, &channel_type, team.as_deref(), false)
                    .await
                {
                    Handled::Stopping => return Handled::Stopping,
                    Handled::Duplicate => {}
                    Handled::Accepted | Handled::Done => {
                        total += 1;
                        metrics::channel_caught_up(SLACK, 1);
                    }
                }
            }
        }
        metrics::channel_connection(SLACK, "connected", "");
        tracing::info!(messages = total, "slack catch-up done");
        Handled::Done
    }
}

/// The session key `message` goes to.
fn session_key(
    runtime: &crate::runtime::Runtime,
    message: &InboundMessage,
    route: &RouteHints,
    rules: ChatRules,
) -> String {
    runtime.session_key_of(&InboundEvent {
        message: message.clone(),
        session_key: None,
        id_origin: IdOrigin::Given,
        route: route.clone(),
        rules,
    })
}

/// Adds one page to what a read gathered: only messages after the cursor (`oldest`), kept
/// oldest first and each `ts` once (pages may overlap when messages arrive between them).
fn gather(messages: &mut Vec<SlackMessage>, page: Vec<SlackMessage>, oldest: u64) {
    messages.extend(page.into_iter().filter(|m| ts::key(&m.ts) > oldest));
    messages.sort_by_key(|m| ts::key(&m.ts));
    messages.dedup_by(|a, b| a.ts == b.ts);
}

/// Keeps `bound` of the gathered (oldest-first) messages: the newest when the pages came
/// newest first (what was read is the newest; whatever lies before it was never read), else
/// the oldest (the newer stay after the cursor for the next catch-up).
fn keep(messages: &mut Vec<SlackMessage>, bound: usize, newest_first: bool) {
    if newest_first {
        let skip = messages.len().saturating_sub(bound);
        messages.drain(..skip);
    } else {
        messages.truncate(bound);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ts: &[&str]) -> Vec<SlackMessage> {
        ts.iter()
            .map(|t| SlackMessage {
                ts: (*t).to_string(),
                ..SlackMessage::default()
            })
            .collect()
    }

    fn tss(m: &[SlackMessage]) -> Vec<&str> {
        m.iter().map(|m| m.ts.as_str()).collect()
    }

    #[test]
    fn pages_gather_oldest_first_once_each_after_the_cursor() {
        let mut m = Vec::new();
        // History pages: newest first, overlapping by one.
        gather(
            &mut m,
            at(&["5.000000", "4.000000", "3.000000"]),
            ts::key("1.000000"),
        );
        gather(
            &mut m,
            at(&["3.000000", "2.000000", "1.000000"]),
            ts::key("1.000000"),
        );
        assert_eq!(tss(&m), ["2.000000", "3.000000", "4.000000", "5.000000"]);
    }

    #[test]
    fn past_the_bound_history_keeps_the_newest_and_replies_the_oldest() {
        let mut history = at(&["1.0", "2.0", "3.0", "4.0"]);
        keep(&mut history, 3, true);
        assert_eq!(tss(&history), ["2.0", "3.0", "4.0"]);
        let mut replies = at(&["1.0", "2.0", "3.0", "4.0"]);
        keep(&mut replies, 3, false);
        assert_eq!(tss(&replies), ["1.0", "2.0", "3.0"]);
        let mut few = at(&["1.0"]);
        keep(&mut few, 3, true);
        assert_eq!(tss(&few), ["1.0"]);
    }
}
