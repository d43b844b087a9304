//! The session lane: one actor per session key, running at most one turn at a time, in the
//! order the supervisor admitted the items.
//!
//! The lane holds state and sequences work; the turn itself is [`Backend::run_turn`], run on a
//! task the lane spawns so the lane's mailbox stays responsive while a turn is in flight:
//! items arriving meanwhile are queued, coalesced, handed to the turn (steer) or make it stop
//! (interrupt), per the item's [`QueuePolicy`].

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, MessagingErr};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::backend::{
    Backend, DropPolicy, QueueItem, QueueMode, QueuePolicy, SessionKey, TurnBatch, TurnControl,
    TurnError, TurnFailure,
};
use crate::messages::{LaneMsg, SupervisorMsg, TurnOutcome};

/// The lane actor. Holds only shared, immutable collaborators; per-key state is [`LaneState`].
pub(crate) struct Lane<B: Backend> {
    pub(crate) backend: Arc<B>,
    pub(crate) supervisor: ActorRef<SupervisorMsg<B>>,
}

pub(crate) struct LaneState<I: QueueItem> {
    key: SessionKey,
    /// Items waiting for a turn, oldest first.
    queue: VecDeque<I>,
    /// Items the queue cap dropped; consumed (and maybe summarised) by the next turn.
    dropped: Vec<I>,
    drop_policy: DropPolicy,
    /// Highest sequence received (routed or recovered); anything at or below is a repeat.
    seen_seq: u64,
    /// Highest sequence ever held in memory; a refill fetches only what comes after it.
    held_upto: u64,
    /// True when items were left in the durable inbox because memory was full.
    overflow: bool,
    running: Option<Running<I>>,
    /// True when the queued items arrived while a turn was running.
    queued_while_busy: bool,
    /// When the last item arrived (debounce) and when anything last happened (idle).
    last_enqueue: Instant,
    last_activity: Instant,
    draining: bool,
    idle_timer: Timer<I>,
    debounce_timer: Timer<I>,
    /// The supervisor asked this lane to passivate while it was busy (past `max_live_lanes`).
    passivate_when_idle: bool,
}

/// A pending one-shot message from the lane to itself. The timer's task holds a reference to
/// the lane, which keeps the lane's mailbox allocated until it fires (the idle timer: minutes),
/// so dropping the timer aborts it: a lane stopped by passivation frees its memory at once.
struct Timer<I: QueueItem>(Option<tokio::task::JoinHandle<Result<(), MessagingErr<LaneMsg<I>>>>>);

impl<I: QueueItem> Timer<I> {
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

impl<I: QueueItem> Drop for Timer<I> {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

struct Running<I> {
    batch: TurnBatch<I>,
    attempts: u32,
    cancel: watch::Sender<bool>,
    steer: Option<mpsc::Sender<I>>,
    /// Items handed to the turn through `steer`; those it does not report back are requeued.
    steered: Vec<I>,
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
        let now = Instant::now();
        let mut state = LaneState {
            key,
            queue: VecDeque::new(),
            dropped: Vec::new(),
            drop_policy: DropPolicy::Summarize,
            seen_seq: 0,
            held_upto: 0,
            overflow: true,
            running: None,
            queued_while_busy: false,
            last_enqueue: now,
            last_activity: now,
            draining: false,
            idle_timer: Timer::idle(),
            debounce_timer: Timer::idle(),
            passivate_when_idle: false,
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
                self.enqueue(state, item);
                self.advance(&myself, state).await?;
            }
            LaneMsg::TurnEnded(outcome) => {
                state.last_activity = Instant::now();
                self.turn_ended(&myself, state, outcome).await;
                self.advance(&myself, state).await?;
            }
            LaneMsg::DebounceCheck => {
                state.debounce_timer.fired();
                self.advance(&myself, state).await?;
            }
            LaneMsg::IdleCheck => {
                state.idle_timer.fired();
                if !state.is_idle() {
                    return Ok(());
                }
                let timeout = self.backend.lane_settings().idle_timeout;
                let idle_for = state.last_activity.elapsed();
                if idle_for >= timeout {
                    self.ask_to_passivate(&myself, state);
                } else {
                    state
                        .idle_timer
                        .arm(&myself, timeout - idle_for, || LaneMsg::IdleCheck);
                }
            }
            LaneMsg::PassivateIfIdle => {
                if state.is_idle() {
                    self.ask_to_passivate(&myself, state);
                } else {
                    // Busy lanes would otherwise stay live past `max_live_lanes` until their
                    // idle timeout.
                    state.passivate_when_idle = true;
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
        self.running.is_none() && self.queue.is_empty() && self.dropped.is_empty() && !self.overflow
    }

    fn held(&self) -> usize {
        self.queue.len() + self.dropped.len()
    }

    /// Puts items back at the front of the queue, keeping sequence order.
    fn requeue(&mut self, items: Vec<I>) {
        if items.is_empty() {
            return;
        }
        self.queue.extend(items);
        self.queue.make_contiguous().sort_by_key(QueueItem::seq);
    }
}

impl<B: Backend> Lane<B> {
    fn enqueue(&self, state: &mut LaneState<B::Item>, item: B::Item) {
        let now = Instant::now();
        state.last_activity = now;
        if item.seq() <= state.seen_seq {
            return;
        }
        state.seen_seq = item.seq();
        if state.overflow || state.held() >= self.backend.lane_settings().queue_cap {
            // The item is durable; it is fetched from the inbox when there is room.
            state.overflow = true;
            return;
        }
        state.held_upto = item.seq();
        let policy = self.backend.queue_policy(&item);
        let Some(running) = state.running.as_mut() else {
            // Idle lanes start at once; a lane settling a burst (debounce) keeps collecting.
            if state.queued_while_busy {
                state.last_enqueue = now;
            }
            state.queue.push_back(item);
            if state.queued_while_busy {
                apply_cap(state, &policy);
            }
            return;
        };
        state.last_enqueue = now;
        state.queued_while_busy = true;
        match policy.mode {
            QueueMode::Steer if state.queue.is_empty() => {
                if let Some(steer) = running.steer.as_ref() {
                    if steer.try_send(item.clone()).is_ok() {
                        running.steered.push(item);
                        return;
                    }
                }
                state.queue.push_back(item);
            }
            QueueMode::Interrupt => {
                state.queue.push_back(item);
                let _ = running.cancel.send(true);
            }
            _ => state.queue.push_back(item),
        }
        apply_cap(state, &policy);
    }

    /// Pulls items left in the durable inbox (on start, or after an overflow) into the queue.
    async fn refill(&self, state: &mut LaneState<B::Item>) -> Result<(), ActorProcessingErr> {
        let cap = self.backend.lane_settings().queue_cap;
        let room = cap.saturating_sub(state.held());
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

    /// Starts the next turn if none is running and the queue has settled, or arms a timer.
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
        let Some(newest) = state.queue.back() else {
            if !state.dropped.is_empty() {
                // Only dropped items are left: a turn still has to consume them.
                let batch = TurnBatch {
                    items: Vec::new(),
                    dropped: std::mem::take(&mut state.dropped),
                    drop_policy: state.drop_policy,
                    queued: true,
                };
                self.start(myself, state, batch, QueueMode::Followup);
            } else if state.passivate_when_idle && state.is_idle() {
                // Asked to passivate while busy: now it can.
                state.passivate_when_idle = false;
                self.ask_to_passivate(myself, state);
            } else {
                let timeout = self.backend.lane_settings().idle_timeout;
                state.idle_timer.arm(myself, timeout, || LaneMsg::IdleCheck);
            }
            return Ok(());
        };
        let policy = self.backend.queue_policy(newest);
        if state.queued_while_busy && policy.mode != QueueMode::Interrupt {
            let quiet = state.last_enqueue.elapsed();
            if quiet < policy.debounce && state.queue.len() < policy.cap {
                state
                    .debounce_timer
                    .arm(myself, policy.debounce - quiet, || LaneMsg::DebounceCheck);
                return Ok(());
            }
        }
        let take = match policy.mode {
            QueueMode::Collect | QueueMode::Interrupt => state.queue.len().min(policy.cap.max(1)),
            QueueMode::Followup | QueueMode::Steer => 1,
        };
        let batch = TurnBatch {
            items: state.queue.drain(..take).collect(),
            dropped: std::mem::take(&mut state.dropped),
            drop_policy: state.drop_policy,
            queued: state.queued_while_busy,
        };
        if state.queue.is_empty() {
            state.queued_while_busy = false;
        }
        self.start(myself, state, batch, policy.mode);
        Ok(())
    }

    fn start(
        &self,
        myself: &ActorRef<LaneMsg<B::Item>>,
        state: &mut LaneState<B::Item>,
        batch: TurnBatch<B::Item>,
        mode: QueueMode,
    ) {
        let (cancel, steer) = self.spawn_turn(myself, &state.key, batch.clone(), mode);
        state.running = Some(Running {
            batch,
            attempts: 1,
            cancel,
            steer,
            steered: Vec::new(),
        });
    }

    async fn turn_ended(
        &self,
        myself: &ActorRef<LaneMsg<B::Item>>,
        state: &mut LaneState<B::Item>,
        outcome: TurnOutcome,
    ) {
        let Some(mut running) = state.running.take() else {
            return;
        };
        let failure = match outcome {
            TurnOutcome::Done(report) => {
                let leftover: Vec<B::Item> = std::mem::take(&mut running.steered)
                    .into_iter()
                    .filter(|i| !report.steered.contains(&i.seq()))
                    .collect();
                state.requeue(leftover);
                return;
            }
            TurnOutcome::Cancelled => {
                // Interrupted: its items run again together with what interrupted them.
                state.requeue(std::mem::take(&mut running.steered));
                state.requeue(running.batch.items);
                state.dropped.extend(running.batch.dropped);
                return;
            }
            TurnOutcome::Failed(failure) => failure,
        };
        state.requeue(std::mem::take(&mut running.steered));
        tracing::warn!(session_key = %state.key, attempt = running.attempts, %failure, "turn failed");
        if state.draining {
            // Shutting down: the items stay in the durable inbox and are replayed on next start.
            return;
        }
        if running.attempts <= self.backend.lane_settings().turn_retries {
            let (cancel, steer) = self.spawn_turn(
                myself,
                &state.key,
                running.batch.clone(),
                QueueMode::Followup,
            );
            state.running = Some(Running {
                attempts: running.attempts + 1,
                cancel,
                steer,
                ..running
            });
            return;
        }
        self.backend
            .abandon_turn(state.key.clone(), running.batch, failure)
            .await;
    }

    fn spawn_turn(
        &self,
        myself: &ActorRef<LaneMsg<B::Item>>,
        key: &SessionKey,
        batch: TurnBatch<B::Item>,
        mode: QueueMode,
    ) -> (watch::Sender<bool>, Option<mpsc::Sender<B::Item>>) {
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
        let turn = tokio::spawn(async move { backend.run_turn(key, batch, control).await });
        let lane = myself.clone();
        // A second task observes the first so a panic inside the turn becomes a message to the
        // lane instead of killing the lane.
        tokio::spawn(async move {
            let outcome = match turn.await {
                Ok(Ok(report)) => TurnOutcome::Done(report),
                Ok(Err(TurnError::Cancelled)) => TurnOutcome::Cancelled,
                Ok(Err(TurnError::Failed(e))) => TurnOutcome::Failed(TurnFailure::Error(e)),
                Err(join) => TurnOutcome::Failed(TurnFailure::Panicked(panic_text(join))),
            };
            let _ = lane.send_message(LaneMsg::TurnEnded(outcome));
        });
        (cancel_tx, steer_tx)
    }

    fn ask_to_passivate(&self, myself: &ActorRef<LaneMsg<B::Item>>, state: &LaneState<B::Item>) {
        let _ = self.supervisor.send_message(SupervisorMsg::LaneIdle {
            key: state.key.clone(),
            lane: myself.get_id(),
            seen_seq: state.seen_seq,
        });
    }
}

/// Enforces the queue cap after an item was queued during a turn.
fn apply_cap<I: QueueItem>(state: &mut LaneState<I>, policy: &QueuePolicy) {
    state.drop_policy = policy.drop;
    while state.queue.len() > policy.cap.max(1) {
        let dropped = match policy.drop {
            DropPolicy::Summarize | DropPolicy::Oldest => state.queue.pop_front(),
            DropPolicy::Newest => state.queue.pop_back(),
        };
        if let Some(item) = dropped {
            state.dropped.push(item);
        }
    }
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
