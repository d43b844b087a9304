//! The admission stage, run by the supervisor for every submitted message: derive its session
//! key, check the disk budget, let preflight decide, check the queue cap, write the message to
//! the durable inbox, and name the lane it goes to (the session key).
//!
//! A cold session is not thawed here: that reads and writes its whole transcript, which would
//! hold the supervisor (every other session's admission) for as long. The message goes to the
//! inbox like any other; the turn that answers it thaws the session first, on a blocking
//! thread (`TurnBackend::run_turn`). Order holds because the inbox, not the transcript, orders
//! messages: the inbox entry is written under the session's cold lock, so the session is
//! either still hot (a freeze sees the entry and keeps it) or already cold; every message
//! admitted while its thaw runs waits in the inbox behind the lane's running turn, and the
//! lane's turns are one at a time, so each reads the thawed transcript and commits after it.

use std::sync::Arc;

use turnstile_actors::{DropPolicy, QueueItem, QueueMode, QueuePolicy, SessionKey};

use crate::agents::AgentDirectory;
use crate::clock::now_ms;
use crate::config::{Config, DropSetting, QueueConfig, QueueModeSetting};
use crate::context::chatter_before;
use crate::error::StoreError;
use crate::inbound::preflight::{event_of, history_line, Verdict};
use crate::inbound::{
    chat_record_channel, normalize_session_key, DropReason, IdOrigin, InboundEvent, InboundMessage,
    Preflight, QuotaRefusal, Refusal,
};
use crate::quotas::Quotas;
use crate::store::{ChannelMessage, DedupeMark, InboxItem, InboxRecord, Store};

impl QueueItem for InboxItem {
    fn seq(&self) -> u64 {
        self.seq
    }
}

/// What the supervisor answers for an accepted message.
#[derive(Debug)]
pub(crate) struct Accepted {
    /// The session the message was routed to.
    pub session_key: SessionKey,
    /// The group-commit ticket to wait on before acknowledging.
    pub ticket: u64,
}

/// What admission needs: the store, the config, the agents (session keys) and preflight.
pub(crate) struct Admitter {
    store: Store,
    config: Arc<Config>,
    /// The agents and bindings: which agent, so which session key, a message goes to.
    agents: Arc<AgentDirectory>,
    /// Preflight from `[preflight]`; shared with the `Runtime` handle (stats, bot messages).
    preflight: Arc<Preflight>,
    /// `[[quotas]]`; shared with the delivery stage (tokens) and the admin API.
    quotas: Arc<Quotas>,
}

impl Admitter {
    /// Admits into `store`, routing with `agents` and checking with `preflight`.
    pub(crate) fn new(
        store: Store,
        config: Arc<Config>,
        agents: Arc<AgentDirectory>,
        preflight: Arc<Preflight>,
        quotas: Arc<Quotas>,
    ) -> Self {
        Self {
            store,
            config,
            agents,
            preflight,
            quotas,
        }
    }

    /// The chat-record entry of `msg` for the agent of `key` (its record is kept per agent).
    fn chat_message(&self, key: &str, msg: &InboundMessage, addressed: bool) -> ChannelMessage {
        let mut m = ChannelMessage::of(msg, addressed);
        let scope = self.agents.chat_scope(self.agents.agent_of_key(key));
        if let std::borrow::Cow::Owned(scoped) = chat_record_channel(&msg.channel, scope) {
            m.channel = scoped;
        }
        m
    }

    /// Keeps what a dropped message leaves behind: group chatter in its chat's record, a
    /// system event in its session's queue. Both are durable with the next group commit.
    fn keep_dropped(
        &self,
        key: &str,
        msg: &InboundMessage,
        explicit: bool,
        reason: DropReason,
    ) -> Result<(), StoreError> {
        let store = &self.store;
        if Preflight::keeps_chatter(msg, explicit, reason) {
            store.record_chat_message(key, self.chat_message(key, msg, false))?;
        } else if reason == DropReason::SystemEvent {
            let max = self.config.preflight.max_system_events;
            if max == 0 {
                return Ok(());
            }
            let (_, queued) = store.queued_system_events(key, max)?;
            if let Some(event) = event_of(msg, queued.last()) {
                store.queue_system_event(key, &event, max)?;
            }
        }
        Ok(())
    }

    /// The queue policy of `item`'s channel.
    pub(crate) fn queue_policy(&self, item: &InboxItem) -> QueuePolicy {
        queue_policy(&self.config.queue, &item.record.message.channel)
    }

    /// Admits `event`: on success it is in the durable inbox (durable once `Accepted::ticket`
    /// commits) and goes to the lane of the returned key.
    pub(crate) fn admit(
        &self,
        event: InboundEvent,
    ) -> Result<(SessionKey, InboxItem, Accepted), Refusal> {
        let store = &self.store;
        let explicit = event.session_key.is_some();
        let key: SessionKey = match &event.session_key {
            Some(explicit) => normalize_session_key(explicit),
            None => self.agents.session_key(&event.message, &event.route).0,
        }
        .into();
        let now = now_ms();
        // A write that failed for want of space is a 507 with Retry-After, never a 500: a client
        // that takes 500 as final would drop the message.
        let storage = |e: crate::error::StoreError| match store.classify_failure(e) {
            crate::error::StoreError::CannotWrite { reason } => {
                Refusal::InsufficientStorage(reason)
            }
            other => Refusal::Storage(other.to_string()),
        };
        // The disk budget holds here, not only in the janitor: past it nothing new is written
        // (the check wakes the janitor, so the refusal lasts until a pass frees space). A
        // refused message changes nothing, and a cold session stays cold.
        if let Some(reason) = store.disk_full() {
            return Err(Refusal::InsufficientStorage(reason));
        }
        let mut admission = match self
            .preflight
            .decide_with(
                &event.message,
                explicit,
                now,
                store,
                event.id_origin,
                &event.rules,
            )
            .map_err(storage)?
        {
            Verdict::Accept(admission) => admission,
            Verdict::Drop(reason) => {
                self.keep_dropped(&key, &event.message, explicit, reason)
                    .map_err(storage)?;
                return Err(Refusal::Dropped(reason));
            }
        };
        // Over a quota: never queued (a message preflight dropped above was not counted).
        if !self.quotas.is_empty() {
            if let Err(over) = self
                .quotas
                .check(&event.message, &key, now)
                .map_err(storage)?
            {
                return Err(Refusal::OverQuota(Box::new(QuotaRefusal {
                    session_key: key.to_string(),
                    subject: over.subject,
                    limit: over.limit,
                    notice: over.notice,
                })));
            }
        }
        let cap = self.config.storage.max_queued_messages;
        if store.queued() >= cap {
            return Err(Refusal::Overloaded(format!(
                "{cap} messages are already queued"
            )));
        }
        let msg = &event.message;
        let p = &self.config.preflight;
        if admission.takes_history {
            let scope = self.agents.chat_scope(self.agents.agent_of_key(&key));
            admission.group_history = chatter_before(
                store,
                &chat_record_channel(&msg.channel, scope),
                &msg.chat_id,
                msg.thread_id.as_deref(),
                None,
                p.history_limit,
            )
            .map_err(storage)?
            .iter()
            .map(history_line)
            .collect();
        }
        let (event_keys, events) = store
            .queued_system_events(&key, p.max_system_events)
            .map_err(storage)?;
        admission.system_events = events;
        // The message joins its chat's record before its inbox entry: it is the cut after
        // which later chatter is pending again.
        if msg.joins_chat_record() {
            store
                .record_chat_message(&key, self.chat_message(&key, msg, true))
                .map_err(storage)?;
        }
        let record = InboxRecord {
            message: event.message,
            accepted_at_ms: now,
            system_events: std::mem::take(&mut admission.system_events),
            group_history: std::mem::take(&mut admission.group_history),
        };
        // Only an id that may come back after a restart is remembered durably.
        let mark = match (&admission.dedupe_key, event.id_origin) {
            (Some(dedupe_key), IdOrigin::Given) if self.preflight.dedupes() => Some(DedupeMark {
                key: dedupe_key,
                expires_at_ms: admission.dedupe_expires_at_ms,
                now_ms: now,
            }),
            _ => None,
        };
        let (item, ticket) = store.enqueue_deduped(&key, record, mark).map_err(storage)?;
        self.preflight.confirm(&admission, now);
        if !self.quotas.is_empty() {
            // Queued: it counts. A failed count is logged, not a refusal (it is in the inbox).
            if let Err(e) = self.quotas.take(&item.record.message, &key, now) {
                tracing::warn!(session_key = %key, error = %e, "could not count a message's quota");
            }
        }
        // After the inbox entry that carries them: a crash in between shows them twice, never
        // loses them.
        if let Err(e) = store.remove_system_events(event_keys) {
            tracing::warn!(session_key = %key, error = %e, "could not remove handed-over system events");
        }
        let accepted = Accepted {
            session_key: key.clone(),
            ticket,
        };
        Ok((key, item, accepted))
    }
}

/// The queue policy for messages of `channel`: `[queue]` with `[queue.by_channel.<channel>]`
/// applied on top.
pub(crate) fn queue_policy(config: &QueueConfig, channel: &str) -> QueuePolicy {
    let o = config.by_channel.get(channel);
    let mode = o.and_then(|o| o.mode).unwrap_or(config.mode);
    let drop = o.and_then(|o| o.drop).unwrap_or(config.drop);
    QueuePolicy {
        mode: match mode {
            QueueModeSetting::Collect => QueueMode::Collect,
            QueueModeSetting::Followup => QueueMode::Followup,
            QueueModeSetting::Steer => QueueMode::Steer,
            QueueModeSetting::Interrupt => QueueMode::Interrupt,
        },
        debounce: std::time::Duration::from_millis(
            o.and_then(|o| o.debounce_ms).unwrap_or(config.debounce_ms),
        ),
        cap: o.and_then(|o| o.cap).unwrap_or(config.cap),
        drop: match drop {
            DropSetting::Summarize => DropPolicy::Summarize,
            DropSetting::Oldest => DropPolicy::Oldest,
            DropSetting::Newest => DropPolicy::Newest,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn per_channel_overrides_apply_on_top() {
        let config = Config::parse(
            "[queue]\nmode = \"followup\"\ncap = 5\n[queue.by_channel.telegram]\nmode = \"interrupt\"\ndebounce_ms = 0\n",
        )
        .unwrap();
        let web = queue_policy(&config.queue, "webhook");
        assert_eq!(
            (web.mode, web.cap, web.debounce.as_millis()),
            (QueueMode::Followup, 5, 500)
        );
        let tg = queue_policy(&config.queue, "telegram");
        assert_eq!(
            (tg.mode, tg.cap, tg.debounce.as_millis()),
            (QueueMode::Interrupt, 5, 0)
        );
        assert_eq!(
            queue_policy(&Config::default().queue, "x"),
            QueuePolicy::default()
        );
    }
}
