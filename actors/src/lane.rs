//! The session lane: one actor per session key, running at most one turn at a time, in the
//! order the supervisor admitted the items.
//!
//! The lane holds state and sequences work; the turn itself is [`Backend::run_turn`], run on a
//! task the lane spawns so the lane's mailbox stays responsive while a turn is in flight
//! (items arriving meanwhile are queued, a drain request is noted).

use std::collections::VecDeque;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::time::Instant;

use crate::backend::{Backend, QueueItem, SessionKey, TurnFailure};
use crate::messages::{LaneMsg, SupervisorMsg};

/// The lane actor. Holds only shared, immutable collaborators; per-key state is [`LaneState`].
pub(crate) struct Lane<B: Backend> {
    pub(crate) backend: Arc<B>,
    pub(crate) supervisor: ActorRef<SupervisorMsg<B>>,
}

pub(crate) struct LaneState<I> {
    key: SessionKey,
    /// Items waiting for a turn, oldest first; at most `queue_cap`.
    queue: VecDeque<I>,
    /// Highest sequence received (routed or recovered); anything at or below is a repeat.
    seen_seq: u64,
    /// Highest sequence ever placed in `queue`; a refill fetches only what comes after it.
    held_upto: u64,
    /// True when items were left in the durable inbox because the queue was full.
    overflow: bool,
    running: Option<Running<I>>,
    draining: bool,
    idle_timer_armed: bool,
    last_activity: Instant,
}

struct Running<I> {
    batch: Vec<I>,
    attempts: u32,
}

impl<B: Backend> Actor for Lane<B> {
    type Msg = LaneMsg<B::Item>;
    type State = LaneState<B::Item>;
    type Arguments = SessionKey;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        key: SessionKey,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut state = LaneState {
            key,
            queue: VecDeque::new(),
            seen_seq: 0,
            held_upto: 0,
            overflow: true,
            running: None,
            draining: false,
            idle_timer_armed: false,
            last_activity: Instant::now(),
        };
        self.refill(&mut state).await?;
        Ok(state)
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        self.advance(&myself, state).await
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            LaneMsg::Enqueue(item) => {
                state.last_activity = Instant::now();
                if item.seq() <= state.seen_seq {
                    return Ok(());
                }
                state.seen_seq = item.seq();
                if state.overflow || state.queue.len() >= self.backend.lane_settings().queue_cap {
                    // The item is durable; it is fetched from the inbox when there is room.
                    state.overflow = true;
                } else {
                    state.held_upto = item.seq();
                    state.queue.push_back(item);
                }
                self.advance(&myself, state).await?;
            }
            LaneMsg::TurnEnded { failure } => {
                state.last_activity = Instant::now();
                self.turn_ended(&myself, state, failure).await?;
                self.advance(&myself, state).await?;
            }
            LaneMsg::IdleCheck => {
                state.idle_timer_armed = false;
                if !state.is_idle() {
                    return Ok(());
                }
                let timeout = self.backend.lane_settings().idle_timeout;
                let idle_for = state.last_activity.elapsed();
                if idle_for >= timeout {
                    let _ = self.supervisor.send_message(SupervisorMsg::LaneIdle {
                        key: state.key.clone(),
                        lane: myself.get_id(),
                        seen_seq: state.seen_seq,
                    });
                } else {
                    arm_idle_timer(&myself, state, timeout - idle_for);
                }
            }
            LaneMsg::Drain => {
                state.draining = true;
                if state.running.is_none() {
                    myself.stop(Some("drained".into()));
                }
            }
            LaneMsg::Stop => myself.stop(Some("passivated".into())),
        }
        Ok(())
    }
}

impl<I: QueueItem> LaneState<I> {
    fn is_idle(&self) -> bool {
        self.running.is_none() && self.queue.is_empty() && !self.overflow
    }
}

impl<B: Backend> Lane<B> {
    /// Pulls items left in the durable inbox (on start, or after an overflow) into the queue.
    async fn refill(&self, state: &mut LaneState<B::Item>) -> Result<(), ActorProcessingErr> {
        let cap = self.backend.lane_settings().queue_cap;
        let room = cap.saturating_sub(state.queue.len());
        if !state.overflow || room == 0 {
            return Ok(());
        }
        let items = self
            .backend
            .pending(&state.key, state.held_upto, room)
            .await?;
        state.overflow = items.len() >= room;
        for item in items {
            state.seen_seq = state.seen_seq.max(item.seq());
            state.held_upto = state.held_upto.max(item.seq());
            state.queue.push_back(item);
        }
        Ok(())
    }

    /// Starts the next turn if none is running, or arms the idle timer if there is nothing to do.
    async fn advance(
        &self,
        myself: &ActorRef<LaneMsg<B::Item>>,
        state: &mut LaneState<B::Item>,
    ) -> Result<(), ActorProcessingErr> {
        if state.running.is_some() {
            return Ok(());
        }
        if state.draining {
            myself.stop(Some("drained".into()));
            return Ok(());
        }
        if state.queue.is_empty() {
            self.refill(state).await?;
        }
        match state.queue.pop_front() {
            Some(item) => {
                let batch = vec![item];
                self.spawn_turn(myself, &state.key, batch.clone());
                state.running = Some(Running { batch, attempts: 1 });
            }
            None if !state.idle_timer_armed => {
                let timeout = self.backend.lane_settings().idle_timeout;
                arm_idle_timer(myself, state, timeout);
            }
            None => {}
        }
        Ok(())
    }

    async fn turn_ended(
        &self,
        myself: &ActorRef<LaneMsg<B::Item>>,
        state: &mut LaneState<B::Item>,
        failure: Option<TurnFailure>,
    ) -> Result<(), ActorProcessingErr> {
        let Some(mut running) = state.running.take() else {
            return Ok(());
        };
        let Some(failure) = failure else {
            return Ok(());
        };
        tracing::warn!(session_key = %state.key, attempt = running.attempts, %failure, "turn failed");
        if state.draining {
            // Shutting down: the items stay in the durable inbox and are replayed on next start.
            return Ok(());
        }
        if running.attempts <= self.backend.lane_settings().turn_retries {
            running.attempts += 1;
            self.spawn_turn(myself, &state.key, running.batch.clone());
            state.running = Some(running);
            return Ok(());
        }
        self.backend
            .abandon_turn(state.key.clone(), running.batch, failure)
            .await;
        Ok(())
    }

    fn spawn_turn(
        &self,
        myself: &ActorRef<LaneMsg<B::Item>>,
        key: &SessionKey,
        batch: Vec<B::Item>,
    ) {
        let backend = Arc::clone(&self.backend);
        let key = key.clone();
        let turn = tokio::spawn(async move { backend.run_turn(key, batch).await });
        let lane = myself.clone();
        // A second task observes the first so a panic inside the turn becomes a message to the
        // lane instead of killing the lane.
        tokio::spawn(async move {
            let failure = match turn.await {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(TurnFailure::Error(e)),
                Err(join) => Some(TurnFailure::Panicked(panic_text(join))),
            };
            let _ = lane.send_message(LaneMsg::TurnEnded { failure });
        });
    }
}

fn arm_idle_timer<I: QueueItem>(
    myself: &ActorRef<LaneMsg<I>>,
    state: &mut LaneState<I>,
    after: std::time::Duration,
) {
    state.idle_timer_armed = true;
    myself.send_after(after, || LaneMsg::IdleCheck);
}

fn panic_text(join: tokio::task::JoinError) -> String {
    if join.is_cancelled() {
        return "turn cancelled".into();
    }
    match join.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic payload".into()),
        Err(_) => "turn task failed".into(),
    }
}
