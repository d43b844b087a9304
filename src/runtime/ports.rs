//! How channels plug into a runtime: [`Runtime::add_channel`] starts a channel actor, routes
//! its replies to it, and returns a [`ChannelPort`] through which the channel's own tasks
//! (pollers, listeners) submit messages, keep small durable state (offsets) and learn that the
//! runtime is stopping.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use turnstile_actors::{ActorsError, Channel, ChannelHandle};

use super::{Ack, Runtime, SubmitError};
use crate::error::Error;
use crate::inbound::{ChatRules, InboundMessage};
use crate::pipeline::TurnBackend;
use crate::replies::{Delta, Reply, ReplyRoute, ReplySink, Serves};

/// The background tasks of a runtime's channels and the signal that stops them.
pub(crate) struct ChannelTasks {
    stop: watch::Sender<bool>,
    /// One or two per channel; channels are few and configured, so this stays small.
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl ChannelTasks {
    pub(crate) fn new() -> Self {
        Self {
            stop: watch::channel(false).0,
            tasks: Mutex::new(Vec::new()),
        }
    }

    /// Becomes true when the runtime begins to shut down.
    pub(crate) fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Keeps `task` to be stopped (and waited for) at shutdown.
    pub(crate) fn push(&self, task: JoinHandle<()>) {
        match self.tasks.lock() {
            Ok(mut tasks) => {
                tasks.retain(|t| !t.is_finished());
                tasks.push(task);
            }
            Err(_) => task.abort(),
        }
    }

    /// Tells every channel task to stop and waits for them, at most `deadline`; tasks still
    /// running then are aborted.
    pub(crate) async fn stop(&self, deadline: Duration) {
        let _ = self.stop.send(true);
        let tasks = match self.tasks.lock() {
            Ok(mut t) => std::mem::take(&mut *t),
            Err(_) => return,
        };
        let until = tokio::time::Instant::now() + deadline;
        for mut task in tasks {
            if tokio::time::timeout_at(until, &mut task).await.is_err() {
                tracing::warn!("a channel task did not stop in time; aborting it");
                task.abort();
            }
        }
    }
}

/// What a channel that shows replies while they stream (Telegram's edited previews) hands
/// deltas to. Called on the turn's task: it must not wait.
pub trait DeltaTaker: Send + Sync + 'static {
    /// Takes one delta of a reply going back to `route`.
    fn take(&self, route: &ReplyRoute, delta: Arc<Delta>);
}

struct ChannelSink<C: Channel<Reply = Arc<Reply>>> {
    name: String,
    handle: ChannelHandle<TurnBackend, C>,
    deltas: Option<Arc<dyn DeltaTaker>>,
}

impl<C: Channel<Reply = Arc<Reply>>> ReplySink for ChannelSink<C> {
    fn name(&self) -> &str {
        &self.name
    }

    fn deliver(&self, reply: Arc<Reply>) -> Result<(), ActorsError> {
        self.handle.deliver(reply)
    }

    fn wants_deltas(&self) -> bool {
        self.deltas.is_some()
    }

    fn deliver_delta(&self, route: &ReplyRoute, delta: Arc<Delta>) {
        if let Some(deltas) = &self.deltas {
            deltas.take(route, delta);
        }
    }
}

/// A started channel's way into the runtime.
pub struct ChannelPort<C: Channel<Reply = Arc<Reply>>> {
    runtime: Runtime,
    handle: ChannelHandle<TurnBackend, C>,
    name: String,
}

impl<C: Channel<Reply = Arc<Reply>>> Clone for ChannelPort<C> {
    fn clone(&self) -> Self {
        Self {
            runtime: self.runtime.clone(),
            handle: self.handle.clone(),
            name: self.name.clone(),
        }
    }
}

impl<C: Channel<Reply = Arc<Reply>>> ChannelPort<C> {
    /// The channel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The runtime.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Validates and submits a message through this channel; like [`Runtime::submit`].
    pub async fn submit(&self, message: InboundMessage) -> Result<Ack, SubmitError> {
        self.submit_with_rules(message, Default::default(), ChatRules::default())
            .await
    }

    /// [`Self::submit`] under the channel's own `rules` for the message's chat, with what
    /// routes it to an agent beyond its fields (`route`: the guild, the sender's roles).
    pub async fn submit_with_rules(
        &self,
        message: InboundMessage,
        route: crate::inbound::RouteHints,
        rules: ChatRules,
    ) -> Result<Ack, SubmitError> {
        self.runtime
            .submit_routed_through(&self.handle, &self.name, message, None, route, rules)
            .await
    }

    /// Like [`Self::submit`], with what routes the message to an agent beyond its fields (the
    /// guild or team, the sender's roles); see [`Runtime::submit_routed`].
    pub async fn submit_routed(
        &self,
        message: InboundMessage,
        route: crate::inbound::RouteHints,
    ) -> Result<Ack, SubmitError> {
        self.runtime
            .submit_routed_through(
                &self.handle,
                &self.name,
                message,
                None,
                route,
                ChatRules::default(),
            )
            .await
    }

    /// This channel's value stored under `key`, if any.
    pub fn load_state(&self, key: &str) -> Result<Option<Vec<u8>>, Error> {
        let store = &self.runtime.inner.store;
        Ok(store.channel_state(&self.name, key)?)
    }

    /// Stores this channel's `value` under `key` and waits until it is durable.
    pub async fn save_state(&self, key: &str, value: &[u8]) -> Result<(), Error> {
        let store = &self.runtime.inner.store;
        let ticket = store.set_channel_state(&self.name, key, value)?;
        store.commit().wait(ticket).await?;
        Ok(())
    }

    /// Becomes true when the runtime begins to shut down; channel tasks end on it.
    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.runtime.inner.channel_tasks.stop.subscribe()
    }

    /// Runs `task` until it ends; shutdown waits for it (after signalling [`Self::stopping`]).
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.runtime.inner.channel_tasks.push(tokio::spawn(task));
    }
}

impl Runtime {
    /// Installs the Slack channel's HTTP Events API hand-over (once; a second is ignored).
    pub(crate) fn set_slack_events(&self, events: crate::channels::SlackEvents) {
        let _ = self.inner.slack_events.set(Arc::new(events));
    }

    /// The Slack channel's HTTP Events API hand-over, when `[channels.slack]` is in `http`
    /// mode.
    pub fn slack_events(&self) -> Option<Arc<crate::channels::SlackEvents>> {
        self.inner.slack_events.get().cloned()
    }

    /// Starts `channel` as an actor of this runtime and routes to it the replies `serves` names.
    /// Returns the port its tasks submit through.
    pub async fn add_channel<C>(
        &self,
        channel: Arc<C>,
        serves: Serves,
    ) -> Result<ChannelPort<C>, Error>
    where
        C: Channel<Reply = Arc<Reply>>,
    {
        self.add_streaming_channel(channel, serves, None).await
    }

    /// Like [`Runtime::add_channel`]; with `deltas`, the turns the channel serves stream and
    /// their deltas go to `deltas`.
    pub async fn add_streaming_channel<C>(
        &self,
        channel: Arc<C>,
        serves: Serves,
        deltas: Option<Arc<dyn DeltaTaker>>,
    ) -> Result<ChannelPort<C>, Error>
    where
        C: Channel<Reply = Arc<Reply>>,
    {
        let name = channel.name().to_string();
        let handle = ChannelHandle::start(channel, &self.inner.supervisor).await?;
        let sink = ChannelSink {
            name: name.clone(),
            handle: handle.clone(),
            deltas,
        };
        self.inner.replies.router().add(Arc::new(sink), serves)?;
        Ok(ChannelPort {
            runtime: self.clone(),
            handle,
            name,
        })
    }
}
