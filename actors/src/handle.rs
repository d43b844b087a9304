//! The public face of the actor system: a cheap-clone handle that hides `ActorRef`s.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef};
use tokio::task::JoinHandle;

use crate::backend::{Backend, SessionKey};
use crate::messages::{DiscardOutcome, SubmitReply, SupervisorMsg};
use crate::supervisor::{LaneRegistry, Supervisor};

/// Errors talking to the actor system.
#[derive(Debug, thiserror::Error)]
pub enum ActorsError {
    /// The supervisor could not be started.
    #[error("could not start the supervisor: {0}")]
    Spawn(String),
    /// The supervisor did not answer within the RPC timeout, or is gone.
    #[error("supervisor unavailable: {0}")]
    Unavailable(String),
}

impl<T> From<ractor::MessagingErr<T>> for ActorsError {
    fn from(e: ractor::MessagingErr<T>) -> Self {
        ActorsError::Unavailable(e.to_string())
    }
}

/// A cheap-clone handle to a running supervisor and its lanes.
pub struct SupervisorHandle<B: Backend> {
    actor: ActorRef<SupervisorMsg<B>>,
    registry: LaneRegistry<B::Item>,
    rpc_timeout: Duration,
}

impl<B: Backend> Clone for SupervisorHandle<B> {
    fn clone(&self) -> Self {
        Self {
            actor: self.actor.clone(),
            registry: self.registry.clone(),
            rpc_timeout: self.rpc_timeout,
        }
    }
}

impl<B: Backend> SupervisorHandle<B> {
    /// Starts a supervisor over `backend`. The join handle ends when the supervisor stops.
    pub async fn start(backend: Arc<B>) -> Result<(Self, JoinHandle<()>), ActorsError> {
        let registry = LaneRegistry::default();
        let rpc_timeout = backend.lane_settings().rpc_timeout;
        let supervisor = Supervisor::new(backend, registry.clone());
        let (actor, join) = Actor::spawn(None, supervisor, ())
            .await
            .map_err(|e| ActorsError::Spawn(e.to_string()))?;
        Ok((
            Self {
                actor,
                registry,
                rpc_timeout,
            },
            join,
        ))
    }

    /// Admits an event and routes it; answers once the supervisor has decided (the accepted
    /// value may still carry a durability future for the caller to await).
    pub async fn submit(&self, event: B::Event) -> Result<SubmitReply<B>, ActorsError> {
        let reply = self
            .actor
            .call(
                |port| SupervisorMsg::Submit(event, port),
                Some(self.rpc_timeout),
            )
            .await?;
        unwrap_call(reply)
    }

    pub(crate) fn actor_ref(&self) -> &ActorRef<SupervisorMsg<B>> {
        &self.actor
    }

    /// Starts lanes for sessions with unconsumed inbox items.
    pub fn recover(&self, keys: Vec<SessionKey>) -> Result<(), ActorsError> {
        self.actor
            .send_message(SupervisorMsg::Recover(keys))
            .map_err(|e| ActorsError::Unavailable(e.to_string()))
    }

    /// Makes the lane of `key` drop what it holds in memory, for a session being deleted: call
    /// it before deleting the stored data, and delete only on [`DiscardOutcome::Dropped`]
    /// (with [`DiscardOutcome::Busy`] a turn is running and may still commit).
    pub async fn discard(&self, key: SessionKey) -> Result<DiscardOutcome, ActorsError> {
        let reply = self
            .actor
            .call(
                |reply| SupervisorMsg::Discard { key, reply },
                Some(self.rpc_timeout),
            )
            .await?;
        match reply {
            // The lane stopped before it read the request: it holds nothing.
            ractor::rpc::CallResult::SenderError => Ok(DiscardOutcome::Dropped),
            other => unwrap_call(other),
        }
    }

    /// The live lanes.
    pub fn registry(&self) -> &LaneRegistry<B::Item> {
        &self.registry
    }

    /// Asks every lane to finish its running turn and start no other (queued items stay in
    /// the durable inbox); true once all have, false if `deadline` passed first. The lanes
    /// stay up, so replies of the finishing turns are still delivered.
    pub async fn drain(&self, deadline: Duration) -> bool {
        self.actor
            .call(SupervisorMsg::Drain, Some(deadline))
            .await
            .map(|r| r.is_success())
            .unwrap_or(false)
    }

    /// Stops admitting, waits (at most `deadline`) for running turns to finish, then stops the
    /// supervisor. Returns false if the deadline passed first.
    pub async fn shutdown(&self, deadline: Duration) -> bool {
        let drained = self.drain(deadline).await;
        // Stopping the supervisor stops its lanes; waiting lets their state (and what it
        // holds, like a database handle) be released before the caller goes on.
        let _ = self
            .actor
            .stop_and_wait(Some("shutdown".into()), Some(deadline))
            .await;
        drained
    }
}

pub(crate) fn unwrap_call<T>(reply: ractor::rpc::CallResult<T>) -> Result<T, ActorsError> {
    match reply {
        ractor::rpc::CallResult::Success(r) => Ok(r),
        ractor::rpc::CallResult::Timeout => {
            Err(ActorsError::Unavailable("request timed out".into()))
        }
        ractor::rpc::CallResult::SenderError => {
            Err(ActorsError::Unavailable("request dropped".into()))
        }
    }
}
