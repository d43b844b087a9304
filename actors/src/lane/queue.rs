//! The lane's queue policy as a plain state machine: events in (an item arrived, a turn ended,
//! a timer fired, a refill came back), actions out (start a batch, arm a timer, refill from the
//! inbox, ask to passivate, stop). No actor, no task, no clock of its own: every event carries
//! `now`, so the policy is tested directly, on made-up instants.
//!
//! What it guarantees (checked by `queue_tests.rs`, including a property test): items leave in
//! sequence order, none is lost (each is answered, dropped into a batch's `dropped`, or left in
//! the durable inbox with `overflow` set so a refill fetches it), the in-memory queue never
//! holds more than `queue_cap` items, and at most one batch is in flight.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{
    DropPolicy, LaneSettings, QueueItem, QueueMode, QueuePolicy, TurnBatch, TurnFailure,
};
use crate::messages::TurnOutcome;

/// What the lane actor must do, in order.
#[derive(Debug, Clone)]
pub(crate) enum Action<I> {
    /// Run a turn over `batch`. `mode` decides whether the turn gets a steering channel.
    Start {
        /// What the turn answers.
        batch: TurnBatch<I>,
        /// The queue mode the batch was formed under (a retry runs as `Followup`).
        mode: QueueMode,
    },
    /// Hand `item` to the running turn; if it cannot take it, report
    /// [`LaneQueue::steer_refused`].
    Steer(I),
    /// Ask the running turn to stop before committing.
    Cancel,
    /// Send a debounce check after this long (unless one is already pending).
    ArmDebounce(Duration),
    /// Send an idle check after this long (unless one is already pending).
    ArmIdle(Duration),
    /// Read at most `limit` unconsumed items with `seq > after` from the durable inbox, off the
    /// lane's task, and report them with [`LaneQueue::refilled`].
    Refill {
        /// Highest sequence already held.
        after: u64,
        /// Room left in memory.
        limit: usize,
    },
    /// Give up on a batch that failed past its retries.
    Abandon(TurnBatch<I>, TurnFailure),
    /// Ask the supervisor to passivate this lane; it has received nothing newer than `seen_seq`.
    AskPassivate {
        /// Highest sequence received.
        seen_seq: u64,
    },
    /// Stop the lane.
    Stop(&'static str),
}

/// The batch in flight.
#[derive(Debug)]
struct InFlight<I> {
    batch: TurnBatch<I>,
    attempts: u32,
    /// True when the turn was given a steering channel.
    steerable: bool,
    /// Items handed to the turn through steering; those it does not report back are requeued.
    steered: Vec<I>,
}

/// The queue policy of an item (it depends on the item's channel).
pub(crate) type PolicyOf<I> = Arc<dyn Fn(&I) -> QueuePolicy + Send + Sync>;

/// One lane's queue: a bounded in-memory window over the session's durable inbox.
pub(crate) struct LaneQueue<I> {
    /// Items waiting for a turn, oldest first; at most `queue_cap` with `dropped`.
    queue: VecDeque<I>,
    /// Items the queue cap dropped; consumed (and maybe summarised) by the next turn.
    dropped: Vec<I>,
    drop_policy: DropPolicy,
    /// Highest sequence received (routed or refilled); anything at or below is a repeat.
    seen_seq: u64,
    /// Highest sequence ever held in memory; a refill fetches only what comes after it.
    held_upto: u64,
    /// True when items were left in the durable inbox because memory was full (or the lane has
    /// not read the inbox yet).
    overflow: bool,
    /// A refill is in flight; `refill_limit` is the room it was asked to fill.
    refilling: bool,
    refill_limit: usize,
    /// Items routed while a refill was in flight, in arrival order, with when they arrived
    /// (at most `queue_cap`); they join the queue after what the refill brings.
    arrived_while_refilling: Vec<(I, Instant)>,
    /// An item routed during the refill found that buffer full and was left in the inbox
    /// (which the refill may already have read): another refill must follow.
    skipped_while_refilling: bool,
    running: Option<InFlight<I>>,
    /// True when the queued items arrived while a turn was running (they debounce).
    queued_while_busy: bool,
    /// When the first item queued during the running turn arrived. If that is after the turn
    /// ended (the lane learns of the end by message, after the reply was published), nothing
    /// really arrived mid-turn.
    first_busy_arrival: Option<Instant>,
    /// When the last item arrived (debounce) and when anything last happened (idle).
    last_enqueue: Instant,
    last_activity: Instant,
    draining: bool,
    /// The supervisor asked this lane to passivate while it was busy (past `max_live_lanes`).
    passivate_when_idle: bool,
    queue_cap: usize,
    idle_timeout: Duration,
    turn_retries: u32,
    policy_of: PolicyOf<I>,
}

/// What [`LaneQueue::discard`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Discard {
    /// Everything held was dropped; items up to this sequence are gone from memory.
    Dropped {
        /// Highest sequence the lane had received.
        upto: u64,
    },
    /// A turn is running: nothing was dropped.
    Busy,
}

impl<I: QueueItem> LaneQueue<I> {
    /// An empty queue that has not read the inbox yet (`overflow` set: the first
    /// [`Self::started`] asks for a refill).
    pub(crate) fn new(settings: &LaneSettings, policy_of: PolicyOf<I>, now: Instant) -> Self {
        Self {
            queue: VecDeque::new(),
            dropped: Vec::new(),
            drop_policy: DropPolicy::Summarize,
            seen_seq: 0,
            held_upto: 0,
            overflow: true,
            refilling: false,
            refill_limit: 0,
            arrived_while_refilling: Vec::new(),
            skipped_while_refilling: false,
            running: None,
            queued_while_busy: false,
            first_busy_arrival: None,
            last_enqueue: now,
            last_activity: now,
            draining: false,
            passivate_when_idle: false,
            queue_cap: settings.queue_cap,
            idle_timeout: settings.idle_timeout,
            turn_retries: settings.turn_retries,
            policy_of,
        }
    }

    /// True when nothing is running, held or left in the inbox.
    pub(crate) fn is_idle(&self) -> bool {
        self.running.is_none() && self.queue.is_empty() && self.dropped.is_empty() && !self.overflow
    }

    /// True while a batch is in flight.
    #[cfg(test)]
    pub(crate) fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// Items held in memory (queued, dropped, routed during a refill), excluding the batch in
    /// flight.
    pub(crate) fn held(&self) -> usize {
        self.queue.len() + self.dropped.len() + self.arrived_while_refilling.len()
    }

    /// The lane has started: read the inbox.
    pub(crate) fn started(&mut self, now: Instant) -> Vec<Action<I>> {
        let mut out = Vec::new();
        self.advance(now, &mut out);
        out
    }

    /// A durable item for this session arrived (routed by the supervisor).
    pub(crate) fn arrived(&mut self, item: I, now: Instant) -> Vec<Action<I>> {
        let mut out = Vec::new();
        self.enqueue(item, now, &mut out);
        self.advance(now, &mut out);
        out
    }

    /// The running turn could not take a steered item: it waits for a followup instead.
    pub(crate) fn steer_refused(&mut self, item: I, now: Instant) -> Vec<Action<I>> {
        if let Some(running) = self.running.as_mut() {
            running.steered.retain(|i| i.seq() != item.seq());
        }
        let policy = (self.policy_of)(&item);
        self.queue.push_back(item);
        self.sort_queue();
        self.apply_cap(&policy);
        let mut out = Vec::new();
        self.advance(now, &mut out);
        out
    }

    /// The turn in flight ended at `ended_at` (stamped on the turn's task as it returned).
    pub(crate) fn turn_ended(
        &mut self,
        ended: TurnOutcome,
        ended_at: Instant,
        now: Instant,
    ) -> Vec<Action<I>> {
        let mut out = Vec::new();
        self.last_activity = now;
        let Some(mut running) = self.running.take() else {
            self.advance(now, &mut out);
            return out;
        };
        match ended {
            TurnOutcome::Done(report) => {
                let leftover: Vec<I> = std::mem::take(&mut running.steered)
                    .into_iter()
                    .filter(|i| !report.steered.contains(&i.seq()))
                    .collect();
                self.requeue(leftover);
            }
            TurnOutcome::Cancelled => {
                // Interrupted: its items run again together with what interrupted them.
                self.requeue(std::mem::take(&mut running.steered));
                self.requeue(running.batch.items);
                self.dropped.extend(running.batch.dropped);
            }
            TurnOutcome::Failed(failure) => {
                self.requeue(std::mem::take(&mut running.steered));
                if self.draining {
                    // Shutting down: the items stay in the durable inbox for the next start.
                    self.advance(now, &mut out);
                    return out;
                }
                if running.attempts <= self.turn_retries {
                    out.push(Action::Start {
                        batch: running.batch.clone(),
                        mode: QueueMode::Followup,
                    });
                    self.running = Some(InFlight {
                        attempts: running.attempts + 1,
                        steerable: false,
                        ..running
                    });
                    return out;
                }
                out.push(Action::Abandon(running.batch, failure));
            }
        }
        // Items the lane saw "during" the turn, but only after the turn had already ended (its
        // reply was out, the end message still on its way), did not arrive mid-turn: they start
        // at once, like items arriving at an idle lane, instead of waiting out the debounce.
        if self
            .first_busy_arrival
            .take()
            .is_some_and(|t| t >= ended_at)
        {
            self.queued_while_busy = false;
        }
        self.advance(now, &mut out);
        out
    }

    /// The debounce timer fired.
    pub(crate) fn debounce_fired(&mut self, now: Instant) -> Vec<Action<I>> {
        let mut out = Vec::new();
        self.advance(now, &mut out);
        out
    }

    /// The idle timer fired: passivate if nothing happened for the idle timeout.
    pub(crate) fn idle_fired(&mut self, now: Instant) -> Vec<Action<I>> {
        if !self.is_idle() {
            return Vec::new();
        }
        let idle_for = now.saturating_duration_since(self.last_activity);
        if idle_for >= self.idle_timeout {
            vec![self.ask_to_passivate()]
        } else {
            vec![Action::ArmIdle(self.idle_timeout - idle_for)]
        }
    }

    /// The supervisor has too many live lanes: passivate now if idle, else when idle.
    pub(crate) fn passivate_if_idle(&mut self) -> Vec<Action<I>> {
        if self.is_idle() {
            return vec![self.ask_to_passivate()];
        }
        // Busy lanes would otherwise stay live past `max_live_lanes` until their idle timeout.
        self.passivate_when_idle = true;
        Vec::new()
    }

    /// Finish the running turn, start no other, then stop.
    pub(crate) fn drain(&mut self) -> Vec<Action<I>> {
        self.draining = true;
        if self.running.is_none() {
            return vec![Action::Stop("drained")];
        }
        Vec::new()
    }

    /// A refill came back with `items` (oldest first).
    pub(crate) fn refilled(&mut self, items: Vec<I>, now: Instant) -> Vec<Action<I>> {
        let mut out = Vec::new();
        if !self.refilling {
            return out;
        }
        self.refilling = false;
        self.overflow = items.len() >= self.refill_limit || self.skipped_while_refilling;
        self.skipped_while_refilling = false;
        for item in items {
            if item.seq() <= self.held_upto {
                continue;
            }
            self.seen_seq = self.seen_seq.max(item.seq());
            self.held_upto = item.seq();
            self.queue.push_back(item);
        }
        for (item, at) in std::mem::take(&mut self.arrived_while_refilling) {
            // The refill may have read it already.
            if item.seq() > self.held_upto {
                self.hold(item, at, &mut out);
            }
        }
        self.advance(now, &mut out);
        out
    }

    /// The session is being deleted: drop everything held, unless a turn is running (its
    /// commit could land after the delete). The lane stays usable: items arriving later belong
    /// to the new session.
    pub(crate) fn discard(&mut self) -> Discard {
        if self.running.is_some() {
            return Discard::Busy;
        }
        self.queue.clear();
        self.dropped.clear();
        self.arrived_while_refilling.clear();
        self.queued_while_busy = false;
        self.first_busy_arrival = None;
        // A refill in flight may bring deleted items: everything up to `seen_seq` is ignored.
        self.held_upto = self.seen_seq;
        self.overflow = self.refilling;
        Discard::Dropped {
            upto: self.seen_seq,
        }
    }

    fn ask_to_passivate(&self) -> Action<I> {
        Action::AskPassivate {
            seen_seq: self.seen_seq,
        }
    }

    fn enqueue(&mut self, item: I, now: Instant, out: &mut Vec<Action<I>>) {
        self.last_activity = now;
        if item.seq() <= self.seen_seq {
            return;
        }
        self.seen_seq = item.seq();
        if self.refilling {
            if self.arrived_while_refilling.len() < self.queue_cap {
                self.arrived_while_refilling.push((item, now));
            } else {
                self.skipped_while_refilling = true;
            }
            return;
        }
        self.hold(item, now, out);
    }

    /// Takes a new item into memory, or leaves it in the inbox when memory is full.
    fn hold(&mut self, item: I, now: Instant, out: &mut Vec<Action<I>>) {
        if self.overflow || self.held() >= self.queue_cap {
            // The item is durable; it is fetched from the inbox when there is room.
            self.overflow = true;
            return;
        }
        self.held_upto = item.seq();
        let policy = (self.policy_of)(&item);
        let Some(running) = self.running.as_mut() else {
            // Idle lanes start at once; a lane settling a burst (debounce) keeps collecting.
            if self.queued_while_busy {
                self.last_enqueue = now;
            }
            self.queue.push_back(item);
            if self.queued_while_busy {
                self.apply_cap(&policy);
            }
            return;
        };
        self.last_enqueue = now;
        self.queued_while_busy = true;
        self.first_busy_arrival.get_or_insert(now);
        match policy.mode {
            QueueMode::Steer if self.queue.is_empty() && running.steerable => {
                running.steered.push(item.clone());
                out.push(Action::Steer(item));
                return;
            }
            QueueMode::Interrupt => {
                self.queue.push_back(item);
                out.push(Action::Cancel);
            }
            _ => self.queue.push_back(item),
        }
        self.apply_cap(&policy);
    }

    /// Starts the next batch if none is running and the queue has settled, or arms a timer.
    fn advance(&mut self, now: Instant, out: &mut Vec<Action<I>>) {
        if self.running.is_some() {
            return;
        }
        if self.draining {
            out.push(Action::Stop("drained"));
            return;
        }
        if self.queue.is_empty() && self.overflow {
            if !self.refilling {
                let room = self.queue_cap.saturating_sub(self.held());
                if room > 0 {
                    self.refilling = true;
                    self.refill_limit = room;
                    out.push(Action::Refill {
                        after: self.held_upto,
                        limit: room,
                    });
                }
            }
            if self.refilling {
                return;
            }
        }
        let Some(newest) = self.queue.back() else {
            if !self.dropped.is_empty() {
                // Only dropped items are left: a turn still has to consume them.
                let batch = TurnBatch {
                    items: Vec::new(),
                    dropped: std::mem::take(&mut self.dropped),
                    drop_policy: self.drop_policy,
                    queued: true,
                };
                self.start(batch, QueueMode::Followup, out);
            } else if self.passivate_when_idle && self.is_idle() {
                // Asked to passivate while busy: now it can.
                self.passivate_when_idle = false;
                out.push(self.ask_to_passivate());
            } else {
                out.push(Action::ArmIdle(self.idle_timeout));
            }
            return;
        };
        let policy = (self.policy_of)(newest);
        if self.queued_while_busy && policy.mode != QueueMode::Interrupt {
            let quiet = now.saturating_duration_since(self.last_enqueue);
            if quiet < policy.debounce && self.queue.len() < policy.cap {
                out.push(Action::ArmDebounce(policy.debounce - quiet));
                return;
            }
        }
        let take = match policy.mode {
            QueueMode::Collect if !self.queued_while_busy => 1,
            QueueMode::Collect | QueueMode::Interrupt => self.queue.len().min(policy.cap.max(1)),
            QueueMode::Followup | QueueMode::Steer => 1,
        };
        let batch = TurnBatch {
            items: self.queue.drain(..take).collect(),
            dropped: std::mem::take(&mut self.dropped),
            drop_policy: self.drop_policy,
            queued: self.queued_while_busy,
        };
        if self.queue.is_empty() {
            self.queued_while_busy = false;
        } else if !self.queued_while_busy && policy.mode == QueueMode::Collect {
            // Several items found an idle lane at once (read back from the inbox at start, or
            // routed while that read was in flight): the oldest starts alone, as it would had
            // each been routed to a running lane, and the rest wait for its turn like items
            // arriving mid-turn. How a burst is answered then does not depend on how fast the
            // lane started.
            self.queued_while_busy = true;
            self.last_enqueue = now;
        }
        self.start(batch, policy.mode, out);
    }

    fn start(&mut self, batch: TurnBatch<I>, mode: QueueMode, out: &mut Vec<Action<I>>) {
        self.first_busy_arrival = None;
        self.running = Some(InFlight {
            batch: batch.clone(),
            attempts: 1,
            steerable: mode == QueueMode::Steer,
            steered: Vec::new(),
        });
        out.push(Action::Start { batch, mode });
    }

    /// Puts items back into the queue, keeping sequence order.
    fn requeue(&mut self, items: Vec<I>) {
        if items.is_empty() {
            return;
        }
        self.queue.extend(items);
        self.sort_queue();
    }

    fn sort_queue(&mut self) {
        self.queue.make_contiguous().sort_by_key(QueueItem::seq);
    }

    /// Enforces the queue cap after an item was queued during a turn.
    fn apply_cap(&mut self, policy: &QueuePolicy) {
        self.drop_policy = policy.drop;
        while self.queue.len() > policy.cap.max(1) {
            let dropped = match policy.drop {
                DropPolicy::Summarize | DropPolicy::Oldest => self.queue.pop_front(),
                DropPolicy::Newest => self.queue.pop_back(),
            };
            if let Some(item) = dropped {
                self.dropped.push(item);
            }
        }
    }
}
