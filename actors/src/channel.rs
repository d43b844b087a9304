//! Channels: the transports (HTTP webhook, OpenAI-compatible API, Telegram, CLI…) that feed
//! the supervisor and, where the platform needs it, deliver replies back.
//!
//! A channel is an actor built from a [`Channel`] implementation. Inbound events are forwarded
//! to the supervisor together with the submitter's reply port, so the channel actor never waits
//! on the supervisor and never serialises submissions behind a round trip.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::sync::Semaphore;

use crate::backend::Backend;
use crate::handle::{ActorsError, SupervisorHandle};
use crate::messages::{SubmitReply, SupervisorMsg};

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
pub enum ChannelMsg<B: Backend, R> {
    /// An event from the transport, with the port the supervisor should answer.
    Inbound(B::Event, RpcReplyPort<SubmitReply<B>>),
    /// A reply for this channel to deliver.
    Deliver(R),
}

/// How many deliveries one channel runs at once; past it the channel actor waits, which
/// back-pressures its mailbox instead of spawning without bound.
pub const MAX_INFLIGHT_DELIVERIES: usize = 64;

/// The actor wrapping a [`Channel`].
pub struct ChannelActor<B: Backend, C: Channel> {
    channel: Arc<C>,
    supervisor: ActorRef<SupervisorMsg<B>>,
    deliveries: Arc<Semaphore>,
}

/// A cheap-clone handle to a running channel actor.
pub struct ChannelHandle<B: Backend, C: Channel> {
    actor: ActorRef<ChannelMsg<B, C::Reply>>,
    rpc_timeout: Duration,
}

impl<B: Backend, C: Channel> Clone for ChannelHandle<B, C> {
    fn clone(&self) -> Self {
        Self {
            actor: self.actor.clone(),
            rpc_timeout: self.rpc_timeout,
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
            supervisor: supervisor.actor_ref().clone(),
            deliveries: Arc::new(Semaphore::new(MAX_INFLIGHT_DELIVERIES)),
        };
        let (actor, _) = Actor::spawn_linked(None, actor, (), supervisor.actor_ref().get_cell())
            .await
            .map_err(|e| ActorsError::Spawn(e.to_string()))?;
        Ok(Self {
            actor,
            rpc_timeout: supervisor.rpc_timeout(),
        })
    }

    /// Submits an event through this channel and waits for the supervisor's decision.
    pub async fn submit(&self, event: B::Event) -> Result<SubmitReply<B>, ActorsError> {
        let reply = self
            .actor
            .call(
                |port| ChannelMsg::Inbound(event, port),
                Some(self.rpc_timeout),
            )
            .await?;
        crate::handle::unwrap_call(reply)
    }

    /// Hands a reply to the channel for delivery.
    pub fn deliver(&self, reply: C::Reply) -> Result<(), ActorsError> {
        self.actor
            .send_message(ChannelMsg::Deliver(reply))
            .map_err(|e| ActorsError::Unavailable(e.to_string()))
    }
}

impl<B: Backend, C: Channel> Actor for ChannelActor<B, C> {
    type Msg = ChannelMsg<B, C::Reply>;
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
            ChannelMsg::Inbound(event, reply) => {
                if let Err(e) = self
                    .supervisor
                    .send_message(SupervisorMsg::Submit(event, reply))
                {
                    tracing::error!(channel = self.channel.name(), error = %e, "supervisor gone");
                }
            }
            ChannelMsg::Deliver(reply) => {
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
