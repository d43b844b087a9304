//! The Compactor actor: runs session compactions off the lanes, at most
//! [`CompactorSettings::max_concurrent`] at a time.
//!
//! Requests are deduplicated per session key: a key already queued or running is not queued
//! twice, and every caller waiting on it gets the outcome of the one compaction. The pending
//! set is bounded ([`CompactorSettings::max_pending`]); a request past it is refused at once
//! rather than queued, so nothing here ever blocks a lane. Requests a caller waits for (hard
//! overflow, manual) go ahead of background ones.
//!
//! The work itself is [`CompactionWork::compact`] (sled and the summariser live in the
//! `turnstile` crate), run on its own task so the mailbox stays responsive.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::task::JoinHandle;

use crate::backend::SessionKey;
use crate::error::{BackendError, ErrorKind};
use crate::handle::{unwrap_call, ActorsError};

/// Why a compaction was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionReason {
    /// History passed the soft threshold after a turn; nobody waits.
    Soft,
    /// The model rejected a prompt as too long; the turn waits.
    Overflow,
    /// An operator asked (API or CLI); the caller waits.
    Manual,
    /// A TTL `keep: summary` rule left entries up to `up_to_seq` out of the context; nobody
    /// waits.
    Ttl {
        /// Newest transcript sequence of the span to summarise.
        up_to_seq: u64,
    },
}

impl CompactionReason {
    /// Whether nobody waits for it (it queues behind compactions someone waits for).
    pub fn is_background(self) -> bool {
        matches!(self, CompactionReason::Soft | CompactionReason::Ttl { .. })
    }
}

/// What one compaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompactionOutcome {
    /// History tokens before.
    pub tokens_before: u64,
    /// History tokens after (equal to before when nothing was compacted).
    pub tokens_after: u64,
    /// Entries the summary replaced (0: nothing was compacted).
    pub entries_compacted: u64,
}

/// A compaction's result as callers see it; the error is a readable reason.
pub type CompactionResult = Result<CompactionOutcome, BackendError>;

/// Compacts one session; implemented by the runtime (and by fakes in tests).
pub trait CompactionWork: Send + Sync + 'static {
    /// Compacts the session `key`.
    fn compact(
        &self,
        key: &SessionKey,
        reason: CompactionReason,
    ) -> impl Future<Output = CompactionResult> + Send;
}

/// Bounds of the compactor.
#[derive(Debug, Clone, Copy)]
pub struct CompactorSettings {
    /// Compactions running at once.
    pub max_concurrent: usize,
    /// Sessions queued (not yet running) at most; requests past it are refused.
    pub max_pending: usize,
    /// Longest a caller waits for its compaction.
    pub wait_timeout: Duration,
}

/// Messages the compactor accepts.
pub enum CompactorMsg {
    /// Compact `key`; `reply` (if any) receives the outcome.
    Request {
        /// The session.
        key: SessionKey,
        /// Why.
        reason: CompactionReason,
        /// Where the outcome goes; `None` for fire-and-forget.
        reply: Option<RpcReplyPort<CompactionResult>>,
    },
    /// A compaction finished (sent by the task that ran it).
    Done {
        /// The session.
        key: SessionKey,
        /// What it did.
        result: CompactionResult,
    },
}

/// The actor.
pub struct Compactor<W: CompactionWork> {
    work: Arc<W>,
    settings: CompactorSettings,
}

/// Its state: queued keys in order, and the waiters of queued and running keys.
pub struct CompactorState {
    order: VecDeque<(SessionKey, CompactionReason)>,
    waiters: HashMap<SessionKey, Vec<RpcReplyPort<CompactionResult>>>,
    running: HashMap<SessionKey, Vec<RpcReplyPort<CompactionResult>>>,
}

impl<W: CompactionWork> Compactor<W> {
    fn request(
        &self,
        myself: &ActorRef<CompactorMsg>,
        state: &mut CompactorState,
        key: SessionKey,
        reason: CompactionReason,
        reply: Option<RpcReplyPort<CompactionResult>>,
    ) {
        if let Some(waiters) = state.running.get_mut(&key) {
            waiters.extend(reply);
            return;
        }
        if let Some(waiters) = state.waiters.get_mut(&key) {
            if reply.is_some() && !reason.is_background() {
                // Someone now waits: move the key ahead of background work.
                if let Some(pos) = state.order.iter().position(|(k, _)| *k == key) {
                    if let Some(item) = state.order.remove(pos) {
                        state.order.push_front((item.0, reason));
                    }
                }
            }
            waiters.extend(reply);
            return;
        }
        if state.order.len() >= self.settings.max_pending {
            tracing::warn!(session_key = %key, "compactor queue full; request refused");
            if let Some(port) = reply {
                let _ = port.send(Err(BackendError::new(
                    ErrorKind::Busy,
                    "the compactor is busy; try again later",
                )));
            }
            return;
        }
        if reason.is_background() {
            state.order.push_back((key.clone(), reason));
        } else {
            state.order.push_front((key.clone(), reason));
        }
        state.waiters.insert(key, reply.into_iter().collect());
        self.start_ready(myself, state);
    }

    /// Starts queued compactions while there is room.
    fn start_ready(&self, myself: &ActorRef<CompactorMsg>, state: &mut CompactorState) {
        while state.running.len() < self.settings.max_concurrent.max(1) {
            let Some((key, reason)) = state.order.pop_front() else {
                return;
            };
            let waiters = state.waiters.remove(&key).unwrap_or_default();
            state.running.insert(key.clone(), waiters);
            let work = Arc::clone(&self.work);
            let myself = myself.clone();
            tokio::spawn(async move {
                let task_key = key.clone();
                let task: JoinHandle<CompactionResult> =
                    tokio::spawn(async move { work.compact(&task_key, reason).await });
                let result = task.await.unwrap_or_else(|e| {
                    Err(BackendError::new(
                        ErrorKind::Interrupted,
                        format!("compaction task failed: {e}"),
                    ))
                });
                let _ = myself.cast(CompactorMsg::Done { key, result });
            });
        }
    }
}

impl<W: CompactionWork> Actor for Compactor<W> {
    type Msg = CompactorMsg;
    type State = CompactorState;
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        _args: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(CompactorState {
            order: VecDeque::new(),
            waiters: HashMap::new(),
            running: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            CompactorMsg::Request { key, reason, reply } => {
                self.request(&myself, state, key, reason, reply);
            }
            CompactorMsg::Done { key, result } => {
                if let Err(e) = &result {
                    tracing::warn!(session_key = %key, error = %e, "compaction failed");
                }
                for port in state.running.remove(&key).unwrap_or_default() {
                    let _ = port.send(result.clone());
                }
                self.start_ready(&myself, state);
            }
        }
        Ok(())
    }
}

/// A cheap-clone handle to a running compactor.
pub struct CompactorHandle {
    actor: ActorRef<CompactorMsg>,
    wait_timeout: Duration,
}

impl Clone for CompactorHandle {
    fn clone(&self) -> Self {
        Self {
            actor: self.actor.clone(),
            wait_timeout: self.wait_timeout,
        }
    }
}

impl CompactorHandle {
    /// Starts a compactor over `work`.
    pub async fn start<W: CompactionWork>(
        work: Arc<W>,
        settings: CompactorSettings,
    ) -> Result<(Self, JoinHandle<()>), ActorsError> {
        let (actor, join) = Actor::spawn(None, Compactor { work, settings }, ())
            .await
            .map_err(|e| ActorsError::Spawn(e.to_string()))?;
        Ok((
            Self {
                actor,
                wait_timeout: settings.wait_timeout,
            },
            join,
        ))
    }

    /// Asks for a background compaction of `key` and returns at once.
    pub fn request(&self, key: SessionKey, reason: CompactionReason) {
        let _ = self.actor.cast(CompactorMsg::Request {
            key,
            reason,
            reply: None,
        });
    }

    /// Compacts `key` (or joins the compaction of it already queued or running) and waits
    /// for the outcome, at most the configured wait timeout.
    pub async fn compact(
        &self,
        key: SessionKey,
        reason: CompactionReason,
    ) -> Result<CompactionResult, ActorsError> {
        let reply = self
            .actor
            .call(
                |port| CompactorMsg::Request {
                    key,
                    reason,
                    reply: Some(port),
                },
                Some(self.wait_timeout),
            )
            .await?;
        unwrap_call(reply)
    }

    /// Stops the compactor; running compactions finish on their own tasks, their outcomes
    /// are dropped.
    pub fn stop(&self) {
        self.actor.stop(Some("shutdown".into()));
    }
}
