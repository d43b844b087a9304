//! Channels: the transports (HTTP webhook, OpenAI-compatible API, Telegram, CLI…) that feed
//! the supervisor and, where the platform needs it, deliver replies back.
//!
//! A channel is an actor built from a [`Channel`] implementation that only delivers replies.
//! Inbound events do not pass through it: [`ChannelHandle::submit`] calls the supervisor
//! directly, so deliveries waiting for a slot (a slow platform) never hold up submissions.

use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::future::Future;
use std::sync::Arc;
use tokio::sync::Semaphore;

use crate::backend::Backend;
use crate::handle::{ActorsError, SupervisorHandle};
use crate::messages::SubmitReply;

/// What a transport must provide to become a channel actor.
pub trait Channel: Send + Sync + 'static {
    /// The replies this channel delivers.
    type Reply: Send + 'static;

    /// The channel's name, as it appears in inbound events (e.g. `webhook`, `telegram`).
    fn name(&self) -> &str;

    /// Delivers one reply to the platform. Called on a task of its own; implementations
    /// retry with their own bounded back-off and must not lose the reply from the runtime's
    /// point of view (it stays readable through the API).
    fn deliver(&self, reply: Self::Reply) -> impl Future<Output = ()> + Send;
}

/// Messages to a channel actor.
pub enum ChannelMsg<R> {
    /// A reply for this channel to deliver.
    Deliver(R),
}

/// How many deliveries one channel runs at once; past it the channel actor waits for a slot,
/// so replies wait in its mailbox instead of spawning tasks without bound. Only deliveries
/// wait: submissions do not go through the channel actor.
pub const MAX_INFLIGHT_DELIVERIES: usize = 64;

/// The actor wrapping a [`Channel`]: it delivers replies, at most
/// [`MAX_INFLIGHT_DELIVERIES`] at once.
pub struct ChannelActor<C: Channel> {
    channel: Arc<C>,
    deliveries: Arc<Semaphore>,
}

/// A cheap-clone handle to a running channel: submissions go to the supervisor, replies to
/// the channel actor.
pub struct ChannelHandle<B: Backend, C: Channel> {
    actor: ActorRef<ChannelMsg<C::Reply>>,
    supervisor: SupervisorHandle<B>,
}

impl<B: Backend, C: Channel> Clone for ChannelHandle<B, C> {
    fn clone(&self) -> Self {
        Self {
            actor: self.actor.clone(),
            supervisor: self.supervisor.clone(),
        }
    }
}

impl<B: Backend, C: Channel> ChannelHandle<B, C> {
    /// Starts a channel actor feeding `supervisor`, linked to it.
    pub async fn start(
        channel: Arc<C>,
        supervisor: &SupervisorHandle<B>,
    ) -> Result<Self, ActorsError> {
        let actor = ChannelActor {
            channel,
            deliveries: Arc::new(Semaphore::new(MAX_INFLIGHT_DELIVERIES)),
        };
        let (actor, _) = Actor::spawn_linked(None, actor, (), supervisor.actor_ref().get_cell())
            .await
            .map_err(|e| ActorsError::Spawn(e.to_string()))?;
        Ok(Self {
            actor,
            supervisor: supervisor.clone(),
        })
    }

    /// Submits an event through this channel and waits for the supervisor's decision. The
    /// event goes straight to the supervisor (not through the channel actor).
    pub async fn submit(&self, event: B::Event) -> Result<SubmitReply<B>, ActorsError> {
        self.supervisor.submit(event).await
    }

    /// Hands a reply to the channel for delivery.
    pub fn deliver(&self, reply: C::Reply) -> Result<(), ActorsError> {
        self.actor
            .send_message(ChannelMsg::Deliver(reply))
            .map_err(|e| ActorsError::Unavailable(e.to_string()))
    }
}

impl<C: Channel> Actor for ChannelActor<C> {
    type Msg = ChannelMsg<C::Reply>;
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        _args: (),
    ) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        _state: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ChannelMsg::Deliver(reply) => {
                // Waiting here holds up only later deliveries of this channel (back-pressure
                // on its mailbox); nothing else is sent to this actor.
                let permit = Arc::clone(&self.deliveries).acquire_owned().await?;
                let channel = Arc::clone(&self.channel);
                tokio::spawn(async move {
                    channel.deliver(reply).await;
                    drop(permit);
                });
            }
        }
        Ok(())
    }
}
