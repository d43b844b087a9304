//! One shard's receive task: it owns the twilight [`Shard`] (a stream: connecting, HELLO,
//! IDENTIFY or RESUME, heartbeats, op 7 and op 9 are twilight's), reads its dispatches in
//! order and submits messages through the channel port. Sequencing only; the rules are in
//! `convert.rs`, the durable cursor in `state.rs`.
//!
//! - Starts from the saved session (RESUME to its `resume_gateway_url`, so a graceful restart
//!   misses nothing); READY means a new session — first start, failed resume (op 9), or a
//!   re-identify — and triggers a **catch-up**: each channel with a cursor is read back over
//!   REST since its newest handled message (bounded per channel and in total), oldest first,
//!   through the same conversion and dedupe as live messages.
//! - After each handled message the cursor and the session's sequence are saved.
//! - A fatal close code (bad token, disallowed intents…) stops the shard with its reason: no
//!   retry loop. A graceful stop closes with a resumable code and saves the session.

use std::time::Duration;

use futures_util::StreamExt;
use serde::Deserialize;
use tokio::time::{sleep_until, Instant};
use twilight_gateway::queue::InMemoryQueue;
use twilight_gateway::{
    CloseFrame, ConfigBuilder, Intents, Message as WsMessage, Session, Shard, ShardId,
};
use twilight_model::channel::message::{Message, MessageType};
use twilight_model::id::Id;

use super::convert::{to_inbound, Context};
use super::events::{self, Envelope};
use super::pluralkit::{as_written, attribute, may_be_proxy, PluralKit, Proxied};
use super::rest::{Rest, RestError};
use super::state::{ShardState, MAX_CATCH_UP_PER_CHANNEL, MAX_CATCH_UP_TOTAL};
use super::typing::Typing;
use super::{DiscordChannel, DISCORD};
use crate::channels::retry::pause_unless_stopped;
use crate::config::DiscordConfig;
use crate::error::Error;
use crate::inbound::{IdOrigin, InboundEvent, MessageKind, Refusal};
use crate::metrics;
use crate::runtime::{ChannelPort, SubmitError};

/// Tries of one catch-up read that keeps failing before its channel is left for the next
/// catch-up.
const CATCH_UP_ATTEMPTS: u32 = 5;

/// The intents the channel asks for: guilds (channels, threads, roles), guild and direct
/// messages with their content, and reactions.
pub(crate) fn intents() -> Intents {
    Intents::GUILDS
        | Intents::GUILD_MESSAGES
        | Intents::DIRECT_MESSAGES
        | Intents::MESSAGE_CONTENT
        | Intents::GUILD_MESSAGE_REACTIONS
        | Intents::DIRECT_MESSAGE_REACTIONS
}

/// One shard's task.
pub(crate) struct ShardTask {
    pub(crate) shard: ShardId,
    pub(crate) config: DiscordConfig,
    pub(crate) token: String,
    pub(crate) gateway_url: String,
    pub(crate) queue: InMemoryQueue,
    pub(crate) rest: Rest,
    pub(crate) port: ChannelPort<DiscordChannel>,
    pub(crate) bot_id: u64,
    pub(crate) typing: std::sync::Arc<Typing>,
    /// PluralKit's API, when `pluralkit` is on (one for all shards: its caches are shared).
    pub(crate) pluralkit: Option<std::sync::Arc<PluralKit>>,
}

/// What happened to one message.
enum Handled {
    /// Accepted, dropped or skipped: move the cursor past it.
    Done,
    /// The runtime is stopping: leave it for the next start (the gateway or a catch-up).
    Stopping,
}

impl ShardTask {
    fn pause(&self, failures: u32) -> Duration {
        crate::backoff::jittered(
            Duration::from_millis(self.config.retry_backoff_ms),
            Duration::from_millis(self.config.max_retry_backoff_ms),
            failures.saturating_sub(1),
        )
    }

    fn load(&self, key: &str) -> ShardState {
        match self.port.load_state(key) {
            Ok(Some(bytes)) => ShardState::decode(&bytes).unwrap_or_else(|error| {
                tracing::warn!(%error, "stored discord shard state is unreadable; starting afresh");
                ShardState::default()
            }),
            Ok(None) => ShardState::default(),
            Err(error) => {
                tracing::warn!(%error, "cannot read the discord shard state; starting afresh");
                ShardState::default()
            }
        }
    }

    async fn save(&self, key: &str, state: &ShardState) {
        if let Err(error) = self.port.save_state(key, &state.encode()).await {
            tracing::warn!(%error, "cannot store the discord shard state; a restart may catch up again");
        }
    }

    /// Runs until the runtime stops or the gateway closes fatally.
    pub(crate) async fn run(self) {
        let key = ShardState::key(self.shard.number());
        let mut state = self.load(&key);
        let mut builder = ConfigBuilder::new(self.token.clone(), intents())
            .proxy_url(self.gateway_url.clone())
            .queue(self.queue.clone());
        if let Some(saved) = &state.session {
            builder = builder.session(Session::new(saved.sequence, saved.id.clone()));
            if let Some(url) = &saved.resume_url {
                builder = builder.resume_url(url.clone());
            }
            metrics::channel_connection(DISCORD, "resuming", "");
        } else {
            metrics::channel_connection(DISCORD, "connecting", "");
        }
        let mut shard = Shard::with_config(self.shard, builder.build());
        let mut ctx = Context::new(self.bot_id);
        if let Handled::Stopping = self.settle_held(&mut ctx, &mut state, &key).await {
            return;
        }
        let mut stop = self.port.stopping();
        let mut fatal: Option<&'static str> = None;
        loop {
            let due = ctx.held.next_due();
            // `Some(None)`: a held message is due.
            let next = tokio::select! {
                n = shard.next() => Some(Some(n)),
                _ = sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => Some(None),
                _ = stop.wait_for(|s| *s) => None,
            };
            if let Some(None) = next {
                if let Handled::Stopping = self.release_due(&mut ctx, &mut state, &key).await {
                    state.session = saved_session(&shard);
                    self.save(&key, &state).await;
                    return;
                }
                continue;
            }
            let next = next.flatten();
            let Some(next) = next else {
                // Resumable close: the next start resumes this session.
                shard.close(CloseFrame::RESUME);
                state.session = saved_session(&shard);
                self.save(&key, &state).await;
                return;
            };
            let text = match next {
                None => break,
                Some(Err(error)) => {
                    tracing::warn!(%error, shard = self.shard.number(), "discord gateway error; twilight reconnects");
                    continue;
                }
                Some(Ok(WsMessage::Close(frame))) => {
                    let code = frame.as_ref().map(|f| f.code);
                    if let Some(reason) = code.and_then(events::fatal_close) {
                        fatal = Some(reason);
                    } else {
                        metrics::channel_reconnect(DISCORD);
                        metrics::channel_connection(DISCORD, "connecting", "");
                        tracing::info!(
                            ?code,
                            shard = self.shard.number(),
                            "discord gateway closed; reconnecting"
                        );
                    }
                    continue;
                }
                Some(Ok(WsMessage::Text(text))) => text,
            };
            let done = self
                .dispatch(&text, &mut shard, &mut ctx, &mut state, &key)
                .await;
            if matches!(done, Handled::Stopping) {
                state.session = saved_session(&shard);
                self.save(&key, &state).await;
                return;
            }
        }
        let reason = fatal.unwrap_or("the gateway connection ended");
        tracing::error!(
            shard = self.shard.number(),
            reason,
            "discord channel stopped; fix the cause and restart"
        );
        metrics::channel_connection(DISCORD, "stopped", reason);
        // The session cannot be resumed; the next start identifies anew and catches up.
        state.session = None;
        self.save(&key, &state).await;
    }

    /// Handles one gateway payload.
    async fn dispatch(
        &self,
        text: &str,
        shard: &mut Shard,
        ctx: &mut Context,
        state: &mut ShardState,
        key: &str,
    ) -> Handled {
        let Ok(envelope) = serde_json::from_str::<Envelope>(text) else {
            tracing::warn!("unreadable discord gateway payload; skipped");
            return Handled::Done;
        };
        let (0, Some(name), Some(data)) = (envelope.op, envelope.t.as_deref(), envelope.d) else {
            return Handled::Done;
        };
        match name {
            "READY" => {
                if let Ok(ready) = events::Ready::deserialize(&data) {
                    ctx.bot_id = ready.user.id;
                }
                state.session = saved_session(shard);
                self.save(key, state).await;
                tracing::info!(
                    shard = self.shard.number(),
                    "discord session ready; catching up"
                );
                let done = self.catch_up(ctx, state, key).await;
                metrics::channel_connection(DISCORD, "connected", "");
                return done;
            }
            "RESUMED" => {
                metrics::channel_resume(DISCORD);
                metrics::channel_connection(DISCORD, "connected", "");
                tracing::info!(shard = self.shard.number(), "discord session resumed");
            }
            "GUILD_CREATE" => {
                if let Ok(g) = events::GuildCreate::deserialize(&data) {
                    for c in g.channels.iter().chain(&g.threads) {
                        ctx.set_channel(c.id, c.thread_parent());
                    }
                    if let Some(me) = g
                        .members
                        .iter()
                        .find(|m| m.user.as_ref().is_some_and(|u| u.id == ctx.bot_id))
                    {
                        ctx.set_bot_roles(g.id, me.roles.clone());
                    }
                }
            }
            "CHANNEL_CREATE" | "THREAD_CREATE" | "THREAD_UPDATE" => {
                if let Ok(c) = events::ChannelRef::deserialize(&data) {
                    ctx.set_channel(c.id, c.thread_parent());
                }
            }
            "THREAD_LIST_SYNC" => {
                if let Ok(sync) = events::ThreadListSync::deserialize(&data) {
                    for c in &sync.threads {
                        ctx.set_channel(c.id, c.thread_parent());
                    }
                }
            }
            "GUILD_MEMBER_UPDATE" => {
                if let Ok(u) = events::MemberUpdate::deserialize(&data) {
                    if u.user.id == ctx.bot_id {
                        ctx.set_bot_roles(u.guild_id, u.roles);
                    }
                }
            }
            "INTERACTION_CREATE" => {
                // Slash and context-menu commands are not chat; registering and answering
                // them is not this channel's job.
                metrics::channel_skipped(DISCORD, "interaction");
            }
            "MESSAGE_CREATE" => match Message::deserialize(&data) {
                Ok(m) => {
                    let done = self.live_message(&m, ctx, state).await;
                    if matches!(done, Handled::Done) {
                        self.advance(state, &m, ctx);
                        state.session = saved_session(shard);
                        self.save(key, state).await;
                    }
                    return done;
                }
                Err(error) => tracing::warn!(%error, "unreadable discord MESSAGE_CREATE; skipped"),
            },
            _ => {}
        }
        Handled::Done
    }

    /// Moves the cursor of `m`'s channel past it.
    fn advance(&self, state: &mut ShardState, m: &Message, ctx: &mut Context) {
        let channel = m.channel_id.get();
        let parent = ctx.channel(channel).flatten();
        state.advance(channel, m.id.get(), m.guild_id.map(|g| g.get()), parent);
    }

    /// The parent of `m`'s channel when it is a thread (asked of REST once when unknown).
    ///
    /// A lookup that fails for now (transport trouble, a timeout, a 5xx, a rate limit) is
    /// tried again with the channel's back-off (`retry_backoff_ms` doubling up to
    /// `max_retry_backoff_ms`) until Discord answers or the runtime stops (`None`: the message
    /// is left for the next start, as when the runtime cannot take it). Handling it before the
    /// answer would take a thread for a plain channel and file its messages under another
    /// session. Only a refusal (the bot may not read the channel) takes it for a channel.
    async fn parent_of(&self, m: &Message, ctx: &mut Context) -> Option<Option<u64>> {
        if m.guild_id.is_none() {
            return Some(None);
        }
        let channel = m.channel_id.get();
        if let Some(known) = ctx.channel(channel) {
            return Some(known);
        }
        let mut stop = self.port.stopping();
        let mut failures = 0u32;
        loop {
            let error = match self.rest.thread_parent(channel).await {
                Ok(parent) => {
                    ctx.set_channel(channel, parent);
                    return Some(parent);
                }
                Err(RestError::Final(error)) => {
                    tracing::warn!(%error, channel, "discord refused to say whether a channel is a thread; taken as a channel");
                    return Some(None);
                }
                Err(error) => error,
            };
            failures += 1;
            let pause = match &error {
                RestError::RateLimited { retry_after } => {
                    self.rest.count_wait();
                    retry_after.unwrap_or_else(|| self.pause(failures))
                }
                _ => self.pause(failures),
            };
            tracing::warn!(%error, channel, failures, "cannot tell yet whether a discord channel is a thread; asking again");
            if !pause_unless_stopped(pause, &mut stop).await {
                return None;
            }
        }
    }

    /// Whether live message `m` waits for its PluralKit proxy: `pluralkit` on with a wait, a
    /// guild chat message of a person (not a webhook, a bot or the bot), whose account has a
    /// PluralKit system.
    async fn holds(&self, m: &Message, ctx: &Context) -> bool {
        let Some(pk) = &self.pluralkit else {
            return false;
        };
        let author = m.author.id.get();
        if self.config.pluralkit_wait_ms == 0
            || m.guild_id.is_none()
            || m.webhook_id.is_some()
            || m.author.bot
            || author == ctx.bot_id
            || !matches!(m.kind, MessageType::Regular | MessageType::Reply)
        {
            return false;
        }
        pk.has_system(author).await
    }

    /// A message from the gateway: held for its PluralKit proxy, or handled now.
    async fn live_message(
        &self,
        m: &Message,
        ctx: &mut Context,
        state: &mut ShardState,
    ) -> Handled {
        if self.holds(m, ctx).await {
            let until = Instant::now() + Duration::from_millis(self.config.pluralkit_wait_ms);
            tracing::debug!(message = m.id.get(), "held for its PluralKit proxy");
            if let Some(oldest) = ctx.held.hold(m.clone(), until, state) {
                if let Handled::Stopping = self.handle(&oldest, ctx, state).await {
                    ctx.held.unreleased(&oldest, state);
                    return Handled::Stopping;
                }
            }
            return Handled::Done;
        }
        if self.pluralkit.is_some() && m.webhook_id.is_none() && !m.author.bot {
            // Not held (no system known, or no wait): should PluralKit still repost it, the
            // repost is the second of the pair and is skipped.
            ctx.held.note_released(m.id.get());
        }
        self.handle(m, ctx, state).await
    }

    /// Submits the held messages whose wait ended.
    async fn release_due(&self, ctx: &mut Context, state: &mut ShardState, key: &str) -> Handled {
        let due = ctx.held.due(Instant::now(), state);
        for (i, m) in due.iter().enumerate() {
            if let Handled::Stopping = self.handle(m, ctx, state).await {
                // Not submitted: settled at the next start.
                for m in &due[i..] {
                    ctx.held.unreleased(m, state);
                }
                return Handled::Stopping;
            }
        }
        self.save(key, state).await;
        Handled::Done
    }

    /// Settles the messages a previous run held (`ShardState::held`): each is read again;
    /// still there → PluralKit did not proxy it, submitted; gone → deleted (proxied: its
    /// repost is read on its own), dropped.
    async fn settle_held(&self, ctx: &mut Context, state: &mut ShardState, key: &str) -> Handled {
        let mut stop = self.port.stopping();
        for h in state.held.clone() {
            let mut failures = 0u32;
            let found = loop {
                match self.rest.message(h.channel, h.id).await {
                    Ok(m) => break Some(m),
                    Err(RestError::Final(_)) => break None,
                    Err(error) => {
                        failures += 1;
                        if failures >= CATCH_UP_ATTEMPTS {
                            tracing::warn!(%error, message = h.id, "cannot read a message held for PluralKit; given up");
                            break None;
                        }
                        if !pause_unless_stopped(self.pause(failures), &mut stop).await {
                            return Handled::Stopping;
                        }
                    }
                }
            };
            if let Some(mut m) = found {
                m.guild_id = h.guild.and_then(Id::new_checked);
                ctx.held.note_released(h.id);
                if let Handled::Stopping = self.handle(&m, ctx, state).await {
                    return Handled::Stopping;
                }
            }
            state.held.retain(|x| x.id != h.id);
            self.save(key, state).await;
        }
        Handled::Done
    }

    /// Who PluralKit says wrote webhook message `m`, when `pluralkit` is on and it knows.
    async fn proxied(&self, m: &Message) -> Option<Proxied> {
        let pk = self.pluralkit.as_ref().filter(|_| may_be_proxy(m))?;
        match pk.message(m.id.get()).await {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!(%error, message = m.id.get(), "PluralKit lookup failed; taken as a webhook message");
                None
            }
        }
    }

    /// Converts and submits one message, retrying while the runtime cannot take it now.
    async fn handle(&self, m: &Message, ctx: &mut Context, state: &mut ShardState) -> Handled {
        let proxied = self.proxied(m).await;
        if let Some(original) = proxied.as_ref().and_then(|p| p.original) {
            if ctx.held.take(original, state) {
                metrics::channel_skipped(DISCORD, "pluralkit_original");
            } else if ctx.held.was_released(original) {
                // Its original's wait ended first and it was answered as the account's.
                metrics::channel_skipped(DISCORD, "duplicate");
                return Handled::Done;
            }
        }
        let written = proxied.as_ref().map(|p| as_written(m, p));
        let Some(parent) = self.parent_of(m, ctx).await else {
            return Handled::Stopping;
        };
        let mut converted =
            match to_inbound(written.as_ref().unwrap_or(m), parent, ctx, &self.config) {
                Ok(c) => c,
                Err(skip) => {
                    metrics::channel_skipped(DISCORD, skip.as_str());
                    return Handled::Done;
                }
            };
        if let Some(p) = &proxied {
            attribute(&mut converted.message, p);
        }
        let runtime = self.port.runtime();
        let thread = converted
            .message
            .thread_id
            .as_deref()
            .and_then(|t| t.parse::<u64>().ok())
            .zip(parent);
        let wants_starter = thread.is_some() && converted.message.kind == MessageKind::Message;
        if converted.system_prompt.is_some() || wants_starter {
            let key = runtime.session_key_of(&InboundEvent {
                message: converted.message.clone(),
                session_key: None,
                id_origin: IdOrigin::Given,
                route: converted.route.clone(),
                rules: converted.rules,
            });
            if let Some(prompt) = &converted.system_prompt {
                if let Err(error) = runtime.set_session_instructions(&key, prompt).await {
                    tracing::warn!(%error, "cannot store a discord channel's system prompt");
                }
            }
            if let (true, Some((thread, parent))) = (wants_starter, thread) {
                let read = super::starter::read_starter(&self.rest, thread, parent, m);
                ctx.starters.ensure(runtime, &key, read).await;
            }
        }
        let target = converted
            .message
            .thread_id
            .as_deref()
            .unwrap_or(&converted.message.chat_id)
            .parse::<u64>()
            .ok();
        let mut stop = self.port.stopping();
        let mut failures = 0u32;
        loop {
            let why = match self
                .port
                .submit_with_rules(
                    converted.message.clone(),
                    converted.route.clone(),
                    converted.rules,
                )
                .await
            {
                Ok(_) => {
                    if let (true, Some(channel)) = (self.config.typing, target) {
                        self.typing.start(channel);
                    }
                    return Handled::Done;
                }
                // Over a quota is final too: a retry would only count it again.
                Err(SubmitError::Refused(Refusal::Dropped(_) | Refusal::OverQuota(_))) => {
                    return Handled::Done
                }
                Err(SubmitError::Failed(Error::Inbound(error))) => {
                    tracing::warn!(%error, message = m.id.get(), "discord message is not a valid inbound message; skipped");
                    return Handled::Done;
                }
                Err(SubmitError::Refused(refusal)) => refusal.to_string(),
                Err(SubmitError::Failed(error)) => error.to_string(),
            };
            failures += 1;
            tracing::warn!(reason = %why, "discord message not accepted now; retrying");
            if !pause_unless_stopped(self.pause(failures), &mut stop).await {
                return Handled::Stopping;
            }
        }
    }

    /// Reads back what each channel with a cursor received since its newest handled message.
    async fn catch_up(&self, ctx: &mut Context, state: &mut ShardState, key: &str) -> Handled {
        let plan = state.catch_up_plan();
        if plan.is_empty() {
            return Handled::Done;
        }
        metrics::channel_connection(DISCORD, "catching_up", "");
        let mut stop = self.port.stopping();
        let mut total = 0usize;
        for (channel, cursor) in plan {
            let room = MAX_CATCH_UP_TOTAL.saturating_sub(total);
            if room == 0 {
                tracing::warn!("discord catch-up reached its bound ({MAX_CATCH_UP_TOTAL} messages); the rest is not read back");
                break;
            }
            let limit = usize::from(MAX_CATCH_UP_PER_CHANNEL).min(room) as u16;
            let mut failures = 0u32;
            let messages = loop {
                match self.rest.messages_after(channel, cursor.last, limit).await {
                    Ok(m) => break Some(m),
                    Err(error) => {
                        failures += 1;
                        let pause = match &error {
                            RestError::RateLimited { retry_after } => {
                                self.rest.count_wait();
                                retry_after.unwrap_or_else(|| self.pause(failures))
                            }
                            RestError::Transient(_) => self.pause(failures),
                            RestError::Final(_) => break None,
                        };
                        if failures >= CATCH_UP_ATTEMPTS {
                            tracing::warn!(%error, channel, "discord catch-up read failed; left for the next catch-up");
                            break None;
                        }
                        if !pause_unless_stopped(pause, &mut stop).await {
                            return Handled::Stopping;
                        }
                    }
                }
            };
            if cursor.parent.is_some() {
                ctx.set_channel(channel, cursor.parent);
            }
            for mut m in messages.unwrap_or_default() {
                // REST reads carry no guild id: the cursor remembers it.
                m.guild_id = cursor.guild.and_then(Id::new_checked);
                if let Handled::Stopping = self.handle(&m, ctx, state).await {
                    return Handled::Stopping;
                }
                self.advance(state, &m, ctx);
                self.save(key, state).await;
                total += 1;
            }
        }
        metrics::channel_caught_up(DISCORD, total as u64);
        tracing::info!(messages = total, "discord catch-up done");
        Handled::Done
    }
}

/// The shard's session as saved.
fn saved_session(shard: &Shard) -> Option<super::state::SavedSession> {
    shard.session().map(|s| super::state::SavedSession {
        id: s.id().to_string(),
        sequence: s.sequence(),
        resume_url: shard.resume_url().map(str::to_string),
    })
}
