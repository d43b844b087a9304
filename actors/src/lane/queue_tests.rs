//! [`LaneQueue`] on its own: events in, actions out, on made-up instants (no actor, no task,
//! no sleep). The property test drives it with random events against a simulated inbox and
//! checks that every admitted item is consumed exactly once and answered in sequence order, with at most
//! one batch in flight and the cap respected.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;

use super::queue::{Action, Discard, LaneQueue, PolicyOf};
use crate::backend::{
    DropPolicy, LaneSettings, QueueItem, QueueMode, QueuePolicy, TurnBatch, TurnFailure, TurnReport,
};
use crate::messages::TurnOutcome;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Item(u64);

impl QueueItem for Item {
    fn seq(&self) -> u64 {
        self.0
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn settings(queue_cap: usize, turn_retries: u32) -> LaneSettings {
    LaneSettings {
        idle_timeout: Duration::from_secs(60),
        queue_cap,
        turn_retries,
        ..LaneSettings::default()
    }
}

fn policy(mode: QueueMode, debounce_ms: u64, cap: usize, drop: DropPolicy) -> QueuePolicy {
    QueuePolicy {
        mode,
        debounce: ms(debounce_ms),
        cap,
        drop,
    }
}

fn fixed(p: QueuePolicy) -> PolicyOf<Item> {
    Arc::new(move |_| p)
}

/// A queue that has read an empty inbox, at `t0`.
fn ready(settings: &LaneSettings, p: QueuePolicy, t0: Instant) -> LaneQueue<Item> {
    let mut q = LaneQueue::new(settings, fixed(p), t0);
    let first = q.started(t0);
    assert!(
        matches!(first[..], [Action::Refill { after: 0, .. }]),
        "{first:?}"
    );
    let idle = q.refilled(Vec::new(), t0);
    assert!(matches!(idle[..], [Action::ArmIdle(_)]), "{idle:?}");
    q
}

fn seqs(items: &[Item]) -> Vec<u64> {
    items.iter().map(|i| i.0).collect()
}

/// The batch of the only `Start` among `actions`, as (answered, dropped, queued).
fn started(actions: &[Action<Item>]) -> Option<(Vec<u64>, Vec<u64>, bool)> {
    let starts: Vec<_> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Start { batch, .. } => Some(batch),
            _ => None,
        })
        .collect();
    assert!(starts.len() <= 1, "two batches at once: {actions:?}");
    starts
        .first()
        .map(|b| (seqs(&b.items), seqs(&b.dropped), b.queued))
}

fn done() -> TurnOutcome {
    TurnOutcome::Done(TurnReport::default())
}

#[test]
fn an_idle_lane_starts_an_arriving_item_at_once() {
    let t0 = Instant::now();
    let p = policy(QueueMode::Collect, 500, 20, DropPolicy::Summarize);
    let mut q = ready(&settings(100, 1), p, t0);
    assert_eq!(
        started(&q.arrived(Item(1), t0)),
        Some((vec![1], vec![], false))
    );
    assert!(q.is_running());
    assert!(
        started(&q.arrived(Item(1), t0)).is_none(),
        "a repeat is ignored"
    );
}

#[test]
fn collect_waits_for_the_debounce_then_runs_what_queued_mid_turn_as_one_batch() {
    let t0 = Instant::now();
    let p = policy(QueueMode::Collect, 500, 20, DropPolicy::Summarize);
    let mut q = ready(&settings(100, 1), p, t0);
    q.arrived(Item(1), t0);
    for (i, seq) in [2, 3, 4].into_iter().enumerate() {
        assert!(q
            .arrived(Item(seq), t0 + ms(10 * (i as u64 + 1)))
            .is_empty());
    }
    // The last one came at t0+30ms; the turn ends at t0+40ms.
    let end = t0 + ms(40);
    let actions = q.turn_ended(done(), end, end);
    assert!(
        matches!(actions[..], [Action::ArmDebounce(d)] if d == ms(490)),
        "{actions:?}"
    );
    assert!(
        started(&q.debounce_fired(t0 + ms(300))).is_none(),
        "still within the debounce"
    );
    assert_eq!(
        started(&q.debounce_fired(t0 + ms(530))),
        Some((vec![2, 3, 4], vec![], true))
    );
}

/// The latency bug: the turn's reply is published before the lane hears that the turn ended,
/// so a client that answers the reply at once gets its message to the lane first. It arrived
/// after the turn ended and must start at once, not wait out the 500 ms debounce. (On the old
/// logic, which took any arrival while `running` was set as mid-turn, this arms the debounce.)
#[test]
fn an_item_that_arrives_after_the_turn_ended_but_before_the_lane_heard_starts_at_once() {
    let t0 = Instant::now();
    let p = policy(QueueMode::Collect, 500, 20, DropPolicy::Summarize);
    let mut q = ready(&settings(100, 1), p, t0);
    q.arrived(Item(1), t0);
    let ended_at = t0 + ms(2);
    // The client read the reply and sent the next message; the end message is still queued.
    assert!(q.arrived(Item(2), ended_at + ms(1)).is_empty());
    let actions = q.turn_ended(done(), ended_at, ended_at + ms(1));
    assert_eq!(
        started(&actions),
        Some((vec![2], vec![], false)),
        "{actions:?}"
    );
}

#[test]
fn an_item_that_arrived_before_the_turn_ended_still_debounces() {
    let t0 = Instant::now();
    let p = policy(QueueMode::Collect, 500, 20, DropPolicy::Summarize);
    let mut q = ready(&settings(100, 1), p, t0);
    q.arrived(Item(1), t0);
    q.arrived(Item(2), t0 + ms(1));
    // A burst that started mid-turn: later items of it debounce too.
    let actions = q.turn_ended(done(), t0 + ms(2), t0 + ms(3));
    assert!(
        matches!(actions[..], [Action::ArmDebounce(_)]),
        "{actions:?}"
    );
    assert!(q
        .arrived(Item(3), t0 + ms(4))
        .iter()
        .all(|a| !matches!(a, Action::Start { .. })));
    assert_eq!(
        started(&q.debounce_fired(t0 + ms(504))),
        Some((vec![2, 3], vec![], true))
    );
}

/// Two messages that reach a lane while it is still reading its inbox (both read back, or one
/// read and one routed) are answered as they would be by a running lane: the oldest at once,
/// the other after it, in a turn of its own. (Taking both into one batch made a group's two
/// quick mentions get one reply or two depending on how fast the lane started.)
#[test]
fn items_found_at_start_run_the_oldest_alone_then_the_rest_collected() {
    let t0 = Instant::now();
    let p = policy(QueueMode::Collect, 500, 20, DropPolicy::Summarize);
    let mut q = LaneQueue::new(&settings(100, 1), fixed(p), t0);
    assert!(matches!(q.started(t0)[..], [Action::Refill { .. }]));
    assert!(
        q.arrived(Item(3), t0 + ms(1)).is_empty(),
        "waits for the read"
    );
    let actions = q.refilled(vec![Item(1), Item(2)], t0 + ms(2));
    assert_eq!(started(&actions), Some((vec![1], vec![], false)));
    let end = t0 + ms(10);
    let actions = q.turn_ended(done(), end, end);
    assert!(
        matches!(actions[..], [Action::ArmDebounce(d)] if d == ms(492)),
        "{actions:?}"
    );
    assert_eq!(
        started(&q.debounce_fired(t0 + ms(502))),
        Some((vec![2, 3], vec![], true))
    );
    assert!(started(&q.turn_ended(done(), t0 + ms(510), t0 + ms(510))).is_none());
    assert_eq!(
        started(&q.arrived(Item(4), t0 + ms(600))),
        Some((vec![4], vec![], false)),
        "an idle lane starts at once again"
    );
}

#[test]
fn followup_runs_one_item_per_turn_in_order() {
    let t0 = Instant::now();
    let p = policy(QueueMode::Followup, 0, 20, DropPolicy::Summarize);
    let mut q = ready(&settings(100, 1), p, t0);
    q.arrived(Item(1), t0);
    q.arrived(Item(2), t0);
    q.arrived(Item(3), t0);
    let mut order = Vec::new();
    for _ in 0..2 {
        let (items, _, _) = started(&q.turn_ended(done(), t0, t0)).expect("next turn");
        order.extend(items);
    }
    assert_eq!(order, [2, 3]);
    assert!(started(&q.turn_ended(done(), t0, t0)).is_none());
    assert!(q.is_idle());
}

#[test]
fn the_cap_drops_per_policy() {
    for (drop, kept, gone) in [
        (DropPolicy::Summarize, vec![5, 6, 7], vec![2, 3, 4]),
        (DropPolicy::Oldest, vec![5, 6, 7], vec![2, 3, 4]),
        (DropPolicy::Newest, vec![2, 3, 4], vec![5, 6, 7]),
    ] {
        let t0 = Instant::now();
        let p = policy(QueueMode::Collect, 0, 3, drop);
        let mut q = ready(&settings(100, 1), p, t0);
        q.arrived(Item(1), t0);
        for seq in 2..=7 {
            q.arrived(Item(seq), t0);
        }
        assert_eq!(
            started(&q.turn_ended(done(), t0 + ms(1), t0 + ms(1))),
            Some((kept, gone, true)),
            "{drop:?}"
        );
    }
}

#[test]
fn past_the_memory_cap_items_stay_in_the_inbox_and_come_back_by_refill() {
    let t0 = Instant::now();
    let p = policy(QueueMode::Followup, 0, 20, DropPolicy::Summarize);
    let mut q = ready(&settings(2, 1), p, t0);
    q.arrived(Item(1), t0);
    for seq in 2..=5 {
        q.arrived(Item(seq), t0);
    }
    assert_eq!(q.held(), 2, "4 and 5 were left in the inbox");
    assert_eq!(
        started(&q.turn_ended(done(), t0, t0)),
        Some((vec![2], vec![], false))
    );
    assert_eq!(
        started(&q.turn_ended(done(), t0, t0)),
        Some((vec![3], vec![], false))
    );
    let actions = q.turn_ended(done(), t0, t0);
    assert!(
        matches!(actions[..], [Action::Refill { after: 3, limit: 2 }]),
        "{actions:?}"
    );
    // An item routed while the refill is in flight waits for it; the read filled the room, so
    // the item goes back to the inbox and a second refill brings it.
    assert!(q.arrived(Item(6), t0).is_empty());
    let actions = q.refilled(vec![Item(4), Item(5)], t0);
    assert_eq!(started(&actions), Some((vec![4], vec![], false)));
    assert_eq!(
        started(&q.turn_ended(done(), t0, t0)),
        Some((vec![5], vec![], false))
    );
    let actions = q.turn_ended(done(), t0, t0);
    assert!(
        matches!(actions[..], [Action::Refill { after: 5, limit: 2 }]),
        "{actions:?}"
    );
    // A refill that read before an item was routed: the routed copy joins after it.
    assert!(q.arrived(Item(7), t0).is_empty());
    let actions = q.refilled(vec![Item(6)], t0);
    assert_eq!(started(&actions), Some((vec![6], vec![], false)));
    assert_eq!(
        started(&q.turn_ended(done(), t0, t0)),
        Some((vec![7], vec![], false))
    );
    assert!(started(&q.turn_ended(done(), t0, t0)).is_none());
    assert!(q.is_idle());
}

#[test]
fn a_failed_turn_is_retried_then_abandoned() {
    let t0 = Instant::now();
    let p = policy(QueueMode::Followup, 0, 20, DropPolicy::Summarize);
    let mut q = ready(&settings(100, 1), p, t0);
    q.arrived(Item(1), t0);
    q.arrived(Item(2), t0);
    let failed = || TurnOutcome::Failed(TurnFailure::Error("x".into()));
    assert_eq!(
        started(&q.turn_ended(failed(), t0, t0)),
        Some((vec![1], vec![], false))
    );
    let actions = q.turn_ended(failed(), t0, t0);
    assert!(
        matches!(&actions[0], Action::Abandon(b, _) if seqs(&b.items) == [1]),
        "{actions:?}"
    );
    assert_eq!(started(&actions), Some((vec![2], vec![], false)));
}

#[test]
fn interrupt_cancels_and_reruns_with_the_newest_in_view() {
    let t0 = Instant::now();
    let p = policy(QueueMode::Interrupt, 0, 20, DropPolicy::Summarize);
    let mut q = ready(&settings(100, 1), p, t0);
    q.arrived(Item(1), t0);
    let actions = q.arrived(Item(2), t0);
    assert!(matches!(actions[..], [Action::Cancel]), "{actions:?}");
    assert_eq!(
        started(&q.turn_ended(TurnOutcome::Cancelled, t0 + ms(1), t0 + ms(1))),
        Some((vec![1, 2], vec![], true))
    );
}

#[test]
fn steered_items_the_turn_did_not_take_run_as_followups() {
    let t0 = Instant::now();
    let p = policy(QueueMode::Steer, 0, 20, DropPolicy::Summarize);
    let mut q = ready(&settings(100, 1), p, t0);
    q.arrived(Item(1), t0);
    assert!(matches!(
        q.arrived(Item(2), t0)[..],
        [Action::Steer(Item(2))]
    ));
    assert!(matches!(
        q.arrived(Item(3), t0)[..],
        [Action::Steer(Item(3))]
    ));
    let report = TurnReport { steered: vec![2] };
    assert_eq!(
        started(&q.turn_ended(TurnOutcome::Done(report), t0 + ms(1), t0 + ms(1))),
        Some((vec![3], vec![], true))
    );
}

#[test]
fn draining_stops_after_the_running_turn_and_starts_nothing() {
    let t0 = Instant::now();
    let p = policy(QueueMode::Followup, 0, 20, DropPolicy::Summarize);
    let mut q = ready(&settings(100, 1), p, t0);
    q.arrived(Item(1), t0);
    q.arrived(Item(2), t0);
    assert!(q.drain().is_empty());
    let actions = q.turn_ended(done(), t0, t0);
    assert!(
        matches!(actions[..], [Action::Stop("drained")]),
        "{actions:?}"
    );
}

#[test]
fn discard_drops_what_is_held_unless_a_turn_runs() {
    let t0 = Instant::now();
    let p = policy(QueueMode::Collect, 500, 20, DropPolicy::Summarize);
    let mut q = ready(&settings(100, 1), p, t0);
    q.arrived(Item(1), t0);
    q.arrived(Item(2), t0);
    assert_eq!(
        q.discard(),
        Discard::Busy,
        "the running turn may still commit"
    );
    q.turn_ended(done(), t0 + ms(1), t0 + ms(1));
    assert_eq!(q.held(), 1, "2 waits for the debounce");
    assert_eq!(q.discard(), Discard::Dropped { upto: 2 });
    assert!(started(&q.debounce_fired(t0 + ms(600))).is_none());
    assert!(q.is_idle());
    // The next item belongs to the new session and starts at once.
    assert_eq!(
        started(&q.arrived(Item(3), t0 + ms(700))),
        Some((vec![3], vec![], false))
    );
}

#[test]
fn idleness_asks_to_passivate_after_the_timeout() {
    let t0 = Instant::now();
    let p = policy(QueueMode::Followup, 0, 20, DropPolicy::Summarize);
    let mut q = ready(&settings(100, 1), p, t0);
    let early = q.idle_fired(t0 + Duration::from_secs(20));
    assert!(
        matches!(early[..], [Action::ArmIdle(d)] if d == Duration::from_secs(40)),
        "{early:?}"
    );
    let late = q.idle_fired(t0 + Duration::from_secs(60));
    assert!(
        matches!(late[..], [Action::AskPassivate { seen_seq: 0 }]),
        "{late:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The property test

/// One step of a random run.
#[derive(Debug, Clone)]
enum Op {
    /// A new item is admitted (durable first, then routed).
    Admit,
    /// An already routed item is routed again (recovery racing a route).
    Repeat(u64),
    /// The running turn ends.
    End(EndKind),
    /// The pending refill reads the inbox now.
    RefillDone,
    /// Time passes; due timers fire.
    Wait(u64),
    /// The session is deleted (its inbox emptied after a successful discard).
    Delete,
}

#[derive(Debug, Clone, Copy)]
enum EndKind {
    /// Done, taking every steered item.
    DoneTakingAll,
    /// Done, taking no steered item.
    DoneTakingNone,
    /// Failed (retried or abandoned).
    Failed,
    /// Cancelled, if a cancel was asked for (else done).
    Cancelled,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => Just(Op::Admit),
        1 => (0u64..20).prop_map(Op::Repeat),
        1 => Just(Op::End(EndKind::DoneTakingAll)),
        2 => Just(Op::End(EndKind::DoneTakingNone)),
        1 => Just(Op::End(EndKind::Failed)),
        1 => Just(Op::End(EndKind::Cancelled)),
        2 => Just(Op::RefillDone),
        2 => (0u64..30).prop_map(Op::Wait),
        1 => Just(Op::Delete),
    ]
}

fn mode() -> impl Strategy<Value = QueueMode> {
    prop_oneof![
        Just(QueueMode::Collect),
        Just(QueueMode::Followup),
        Just(QueueMode::Steer),
        Just(QueueMode::Interrupt),
    ]
}

fn drop_policy() -> impl Strategy<Value = DropPolicy> {
    prop_oneof![
        Just(DropPolicy::Summarize),
        Just(DropPolicy::Oldest),
        Just(DropPolicy::Newest),
    ]
}

/// Executes the queue's actions the way the lane actor does, against a simulated inbox.
struct Driver {
    q: LaneQueue<Item>,
    queue_cap: usize,
    now: Instant,
    next_seq: u64,
    /// Unconsumed items, as the durable inbox holds them.
    inbox: BTreeMap<u64, Item>,
    /// Sequences consumed by committed or abandoned turns, in commit order.
    consumed: Vec<u64>,
    /// Sequences answered (not dropped by the cap, not abandoned), in commit order.
    answered: Vec<u64>,
    /// Sequences deleted with the session.
    deleted: Vec<u64>,
    running: Option<(TurnBatch<Item>, bool)>,
    steered: Vec<Item>,
    cancel_asked: bool,
    refill: Option<(u64, usize)>,
    debounce_at: Option<Instant>,
    idle_at: Option<Instant>,
    stopped: bool,
}

impl Driver {
    fn new(settings: &LaneSettings, p: Arc<Mutex<QueuePolicy>>) -> Self {
        let now = Instant::now();
        let policy_of: PolicyOf<Item> = Arc::new(move |_| *p.lock().unwrap());
        let mut d = Self {
            q: LaneQueue::new(settings, policy_of, now),
            queue_cap: settings.queue_cap,
            now,
            next_seq: 1,
            inbox: BTreeMap::new(),
            consumed: Vec::new(),
            answered: Vec::new(),
            deleted: Vec::new(),
            running: None,
            steered: Vec::new(),
            cancel_asked: false,
            refill: None,
            debounce_at: None,
            idle_at: None,
            stopped: false,
        };
        let actions = d.q.started(now);
        d.execute(actions);
        d
    }

    fn execute(&mut self, actions: Vec<Action<Item>>) {
        let mut todo = std::collections::VecDeque::from(actions);
        while let Some(action) = todo.pop_front() {
            match action {
                Action::Start { batch, mode } => {
                    assert!(
                        self.running.is_none(),
                        "a second batch while one is in flight"
                    );
                    self.running = Some((batch, mode == QueueMode::Steer));
                    self.cancel_asked = false;
                }
                Action::Steer(item) => {
                    let steerable = self.running.as_ref().is_some_and(|(_, s)| *s);
                    if steerable && self.steered.len() < self.queue_cap.max(1) {
                        self.steered.push(item);
                    } else {
                        todo.extend(self.q.steer_refused(item, self.now));
                    }
                }
                Action::Cancel => self.cancel_asked = true,
                Action::ArmDebounce(after) => {
                    self.debounce_at.get_or_insert(self.now + after);
                }
                Action::ArmIdle(after) => {
                    self.idle_at.get_or_insert(self.now + after);
                }
                Action::Refill { after, limit } => {
                    assert!(self.refill.is_none(), "two refills at once");
                    self.refill = Some((after, limit));
                }
                Action::Abandon(batch, _) => self.consume(batch.all_items().map(|i| i.0)),
                Action::AskPassivate { .. } => {}
                Action::Stop(_) => self.stopped = true,
            }
        }
    }

    fn consume(&mut self, seqs: impl Iterator<Item = u64>) {
        for seq in seqs {
            assert!(self.inbox.remove(&seq).is_some(), "{seq} consumed twice");
            self.consumed.push(seq);
        }
    }

    fn step(&mut self, op: Op) {
        let held_before = self.q.held();
        match op {
            Op::Admit => {
                let item = Item(self.next_seq);
                self.next_seq += 1;
                self.inbox.insert(item.0, item.clone());
                let actions = self.q.arrived(item, self.now);
                self.execute(actions);
                assert!(
                    self.q.held() <= held_before.max(self.queue_cap),
                    "an arrival was held past the cap"
                );
            }
            Op::Repeat(back) => {
                let seq = self.next_seq.saturating_sub(1 + back);
                if let Some(item) = self.inbox.get(&seq).cloned() {
                    let actions = self.q.arrived(item, self.now);
                    self.execute(actions);
                }
            }
            Op::End(kind) => self.end(kind),
            Op::RefillDone => self.answer_refill(),
            Op::Wait(ms_) => self.wait(ms(ms_)),
            Op::Delete => {
                if self.q.discard() != Discard::Busy {
                    self.deleted.extend(self.inbox.keys().copied());
                    self.inbox.clear();
                }
            }
        }
        assert!(
            self.q.held() <= 3 * self.queue_cap.max(1),
            "memory unbounded"
        );
    }

    fn end(&mut self, kind: EndKind) {
        let Some((batch, _)) = self.running.take() else {
            return;
        };
        let outcome = match kind {
            EndKind::DoneTakingAll | EndKind::DoneTakingNone => {
                let taken: Vec<Item> = match kind {
                    EndKind::DoneTakingAll => std::mem::take(&mut self.steered),
                    _ => Vec::new(),
                };
                self.steered.clear();
                self.consume(batch.all_items().map(|i| i.0));
                self.consume(taken.iter().map(|i| i.0));
                self.answered
                    .extend(batch.items.iter().chain(&taken).map(|i| i.0));
                TurnOutcome::Done(TurnReport {
                    steered: taken.iter().map(|i| i.0).collect(),
                })
            }
            EndKind::Cancelled if self.cancel_asked => {
                self.steered.clear();
                TurnOutcome::Cancelled
            }
            EndKind::Cancelled => {
                self.steered.clear();
                self.consume(batch.all_items().map(|i| i.0));
                self.answered.extend(batch.items.iter().map(|i| i.0));
                TurnOutcome::Done(TurnReport::default())
            }
            EndKind::Failed => {
                self.steered.clear();
                TurnOutcome::Failed(TurnFailure::Error("injected".into()))
            }
        };
        let actions = self.q.turn_ended(outcome, self.now, self.now);
        self.execute(actions);
    }

    fn answer_refill(&mut self) {
        let Some((after, limit)) = self.refill.take() else {
            return;
        };
        let items: Vec<Item> = self
            .inbox
            .range(after + 1..)
            .take(limit)
            .map(|(_, i)| i.clone())
            .collect();
        let actions = self.q.refilled(items, self.now);
        self.execute(actions);
    }

    fn wait(&mut self, d: Duration) {
        self.now += d;
        if self.debounce_at.is_some_and(|t| t <= self.now) {
            self.debounce_at = None;
            let actions = self.q.debounce_fired(self.now);
            self.execute(actions);
        }
        if self.idle_at.is_some_and(|t| t <= self.now) {
            self.idle_at = None;
            let actions = self.q.idle_fired(self.now);
            self.execute(actions);
        }
    }

    /// Lets everything in flight finish: turns succeed, refills answer, timers fire.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            if self.running.is_some() {
                self.end(EndKind::DoneTakingAll);
            } else if self.refill.is_some() {
                self.answer_refill();
            } else if let Some(at) = self.debounce_at {
                self.wait(at.saturating_duration_since(self.now));
            } else {
                return;
            }
        }
        panic!("the lane never settled");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_item_is_consumed_once_in_order_one_batch_at_a_time(
        queue_cap in 1usize..5,
        turn_retries in 0u32..3,
        mode in mode(),
        debounce_ms in prop_oneof![Just(0u64), Just(10u64), Just(500u64)],
        cap in 1usize..5,
        drop in drop_policy(),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let p = Arc::new(Mutex::new(policy(mode, debounce_ms, cap, drop)));
        let mut d = Driver::new(&settings(queue_cap, turn_retries), p);
        for op in ops {
            d.step(op);
        }
        d.settle();
        prop_assert!(!d.stopped);
        prop_assert!(d.inbox.is_empty(), "left unanswered: {:?}", d.inbox.keys().collect::<Vec<_>>());
        prop_assert!(d.q.is_idle());
        let mut all: Vec<u64> = d.consumed.iter().chain(&d.deleted).copied().collect();
        all.sort_unstable();
        let admitted: Vec<u64> = (1..d.next_seq).collect();
        prop_assert_eq!(all, admitted, "each item consumed or deleted exactly once");
        prop_assert!(
            d.answered.windows(2).all(|w| w[0] < w[1]),
            "answered out of order: {:?}", d.answered
        );
    }
}
