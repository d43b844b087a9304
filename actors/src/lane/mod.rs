//! The session lane: one actor per session key, running at most one turn at a time, in the
//! order the supervisor admitted the items.
//!
//! The policy (queue modes, debounce, the cap, retries, refills, idleness) is [`LaneQueue`], a
//! plain state machine in `queue.rs`; this actor only feeds it events stamped with the time it
//! handles them and carries out the actions it returns. The turn itself is
//! [`Backend::run_turn`], run on a task the lane spawns so the lane's mailbox stays responsive
//! while a turn is in flight; inbox reads ([`Backend::pending`]) also run on a task of their
//! own and come back as [`LaneMsg::Refilled`], so no handler here reads storage (the one
//! await on the backend in a handler is [`Backend::abandon_turn`], so that an abandoned turn's
//! error reply commits before the next turn starts).

mod queue;
#[cfg(test)]
mod queue_tests;

use std::any::Any;
use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef, MessagingErr};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::backend::{
    Backend, QueueMode, SessionKey, TurnBatch, TurnControl, TurnError, TurnFailure,
};
use crate::messages::{DiscardOutcome, LaneMsg, SupervisorMsg, TurnOutcome};
pub(crate) use queue::{Action, Discard, LaneQueue, PolicyOf};

/// The lane actor. Holds only shared, immutable collaborators; per-key state is [`LaneState`].
pub(crate) struct Lane<B: Backend> {
    pub(crate) backend: Arc<B>,
    pub(crate) supervisor: ActorRef<SupervisorMsg<B>>,
}

pub(crate) struct LaneState<B: Backend> {
    key: SessionKey,
    queue: LaneQueue<B::Item>,
    /// The running turn's cancel and steering senders.
    turn: Option<TurnHandle<B::Item>>,
    idle_timer: Timer<B::Item>,
    debounce_timer: Timer<B::Item>,
}

struct TurnHandle<I> {
    cancel: watch::Sender<bool>,
    steer: Option<mpsc::Sender<I>>,
}

/// A pending one-shot message from the lane to itself. The timer's task holds a reference to
/// the lane, which keeps the lane's mailbox allocated until it fires (the idle timer: minutes),
/// so dropping the timer aborts it: a lane stopped by passivation frees its memory at once.
struct Timer<I>(Option<tokio::task::JoinHandle<Result<(), MessagingErr<LaneMsg<I>>>>>);

impl<I: crate::backend::QueueItem> Timer<I> {
    fn idle() -> Self {
        Self(None)
    }

    /// Its message arrived.
    fn fired(&mut self) {
        self.0 = None;
    }

    /// Arms it unless it is already pending; one timer per purpose per lane.
    fn arm(
        &mut self,
        myself: &ActorRef<LaneMsg<I>>,
        after: Duration,
        msg: impl FnOnce() -> LaneMsg<I> + Send + 'static,
    ) {
        if self.0.is_none() {
            self.0 = Some(myself.send_after(after, msg));
        }
    }
}

impl<I> Drop for Timer<I> {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

impl<B: Backend> Actor for Lane<B> {
    type Msg = LaneMsg<B::Item>;
    type State = LaneState<B>;
    type Arguments = SessionKey;

    /// No I/O here: the supervisor awaits this while spawning, so it must not wait on storage.
    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        key: SessionKey,
    ) -> Result<Self::State, ActorProcessingErr> {
        let backend = Arc::clone(&self.backend);
        let policy_of: PolicyOf<B::Item> = Arc::new(move |item| backend.queue_policy(item));
        Ok(LaneState {
            key,
            queue: LaneQueue::new(self.backend.lane_settings(), policy_of, Instant::now()),
            turn: None,
            idle_timer: Timer::idle(),
            debounce_timer: Timer::idle(),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let now = Instant::now();
        let actions = state.queue.started(now);
        self.execute(&myself, state, actions, now).await;
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let now = Instant::now();
        let actions = match msg {
            LaneMsg::Enqueue(item) => state.queue.arrived(item, now),
            LaneMsg::TurnEnded { outcome, ended_at } => {
                state.turn = None;
                if let TurnOutcome::Failed(failure) = &outcome {
                    tracing::warn!(session_key = %state.key, %failure, "turn failed");
                }
                state.queue.turn_ended(outcome, ended_at, now)
            }
            LaneMsg::Refilled(Ok(items)) => state.queue.refilled(items, now),
            // The lane fails; the supervisor starts a new one, which reads the inbox again.
            LaneMsg::Refilled(Err(e)) => return Err(e.into()),
            LaneMsg::DebounceCheck => {
                state.debounce_timer.fired();
                state.queue.debounce_fired(now)
            }
            LaneMsg::IdleCheck => {
                state.idle_timer.fired();
                state.queue.idle_fired(now)
            }
            LaneMsg::PassivateIfIdle => state.queue.passivate_if_idle(),
            LaneMsg::Discard(reply) => {
                let outcome = match state.queue.discard() {
                    Discard::Dropped { .. } => DiscardOutcome::Dropped,
                    Discard::Busy => DiscardOutcome::Busy,
                };
                let _ = reply.send(outcome);
                Vec::new()
            }
            LaneMsg::Drain => state.queue.drain(),
            LaneMsg::Stop => vec![Action::Stop("passivated")],
        };
        self.execute(&myself, state, actions, now).await;
        Ok(())
    }
}

impl<B: Backend> Lane<B> {
    /// Carries out the queue's actions in order (a refused steer may add more); `now` is the
    /// instant the triggering message was handled.
    async fn execute(
        &self,
        myself: &ActorRef<LaneMsg<B::Item>>,
        state: &mut LaneState<B>,
        actions: Vec<Action<B::Item>>,
        now: Instant,
    ) {
        let mut todo = VecDeque::from(actions);
        while let Some(action) = todo.pop_front() {
            match action {
                Action::Start { batch, mode } => {
                    state.turn = Some(self.spawn_turn(myself, &state.key, batch, mode));
                }
                Action::Steer(item) => {
                    let steer = state.turn.as_ref().and_then(|t| t.steer.as_ref());
                    let taken = steer.is_some_and(|tx| tx.try_send(item.clone()).is_ok());
                    if !taken {
                        todo.extend(state.queue.steer_refused(item, now));
                    }
                }
                Action::Cancel => {
                    if let Some(turn) = &state.turn {
                        let _ = turn.cancel.send(true);
                    }
                }
                Action::ArmDebounce(after) => {
                    state
                        .debounce_timer
                        .arm(myself, after, || LaneMsg::DebounceCheck);
                }
                Action::ArmIdle(after) => {
                    state.idle_timer.arm(myself, after, || LaneMsg::IdleCheck)
                }
                Action::Refill { after, limit } => {
                    self.spawn_refill(myself, &state.key, after, limit)
                }
                Action::Abandon(batch, failure) => {
                    // Boxed: rare, and the lane's task is otherwise as large as this call's
                    // state for the whole life of the lane.
                    Box::pin(self.backend.abandon_turn(state.key.clone(), batch, failure)).await;
                }
                Action::AskPassivate { seen_seq } => {
                    let _ = self.supervisor.send_message(SupervisorMsg::LaneIdle {
                        key: state.key.clone(),
                        lane: myself.get_id(),
                        seen_seq,
                    });
                }
                Action::Stop(reason) => {
                    myself.stop(Some(reason.into()));
                    return;
                }
            }
        }
    }

    /// Reads the inbox on a task of its own; the answer comes back as a message.
    fn spawn_refill(
        &self,
        myself: &ActorRef<LaneMsg<B::Item>>,
        key: &SessionKey,
        after: u64,
        limit: usize,
    ) {
        let backend = Arc::clone(&self.backend);
        let key = key.clone();
        let lane = myself.clone();
        tokio::spawn(async move {
            let items = backend.pending(&key, after, limit).await;
            let _ = lane.send_message(LaneMsg::Refilled(items));
        });
    }

    fn spawn_turn(
        &self,
        myself: &ActorRef<LaneMsg<B::Item>>,
        key: &SessionKey,
        batch: TurnBatch<B::Item>,
        mode: QueueMode,
    ) -> TurnHandle<B::Item> {
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let (steer_tx, steer_rx) = if mode == QueueMode::Steer {
            let cap = self.backend.lane_settings().queue_cap.max(1);
            let (tx, rx) = mpsc::channel(cap);
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let control = TurnControl::new(cancel_rx, steer_rx);
        let backend = Arc::clone(&self.backend);
        let key = key.clone();
        let lane = myself.clone();
        // One task runs the turn and reports its end. The end is stamped with no await between
        // the turn's return (its reply is already published) and the stamp: an item the lane
        // sees after that instant arrived after the turn, however late the end message reaches
        // the lane. A panic inside the turn is caught here and becomes a message to the lane
        // instead of killing the lane (a second, observing task per turn cost a spawn and a
        // wake-up for every turn).
        tokio::spawn(async move {
            let turn = AssertUnwindSafe(backend.run_turn(key, batch, control)).catch_unwind();
            let outcome = match turn.await {
                Ok(Ok(report)) => TurnOutcome::Done(report),
                Ok(Err(TurnError::Cancelled)) => TurnOutcome::Cancelled,
                Ok(Err(TurnError::Failed(e))) => TurnOutcome::Failed(TurnFailure::Error(e)),
                Err(payload) => TurnOutcome::Failed(TurnFailure::Panicked(panic_text(&*payload))),
            };
            let ended_at = Instant::now();
            let _ = lane.send_message(LaneMsg::TurnEnded { outcome, ended_at });
        });
        TurnHandle {
            cancel: cancel_tx,
            steer: steer_tx,
        }
    }
}

fn panic_text(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into())
}
