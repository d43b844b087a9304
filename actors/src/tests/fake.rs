//! In-memory fakes: a [`Fake`] backend with a `BTreeMap` inbox and a shared log, and a
//! [`FakeChannel`] that records what it delivers.
//!
//! Behaviour is steered by whitespace-separated directives in an item's text, so a test reads
//! as the list of messages it sends:
//! - `sleep=MS`: the turn sleeps that long before finishing;
//! - `hang-once=MS`: like `sleep`, on the item's first attempt only;
//! - `panic` / `error`: every attempt of the turn panics / returns an error;
//! - `panic-once` / `error-once`: only the first attempt does;
//! - `admit-delay=MS`: `admit` blocks the supervisor's task that long (a stand-in for a slow
//!   durable write; it widens races between routing and lanes dying).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::{
    Backend, BackendError, Channel, ErrorKind, LaneSettings, QueueItem, QueueMode, QueuePolicy,
    SessionKey, TurnBatch, TurnControl, TurnError, TurnFailure, TurnReport,
};

/// One queued message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Item {
    pub(super) key: SessionKey,
    pub(super) seq: u64,
    pub(super) text: String,
}

impl QueueItem for Item {
    fn seq(&self) -> u64 {
        self.seq
    }
}

/// What tests submit.
#[derive(Debug)]
pub(super) enum Event {
    /// A new message for a key.
    Msg { key: String, text: String },
    /// Routes an item that is already in the inbox again, as happens when the same item is
    /// both recovered at start-up and routed.
    Existing { key: String, seq: u64 },
    /// Refused by "preflight".
    Invalid,
}

impl Event {
    pub(super) fn msg(key: &str, text: &str) -> Self {
        Event::Msg {
            key: key.to_string(),
            text: text.to_string(),
        }
    }
}

/// Why the fake refused an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Refusal {
    ShuttingDown,
    Invalid,
    UnknownItem,
}

/// What happened, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Entry {
    Start {
        key: SessionKey,
        seqs: Vec<u64>,
    },
    /// A turn returned (`ok` is false when it returned an error). Panicking turns log no end.
    End {
        key: SessionKey,
        seqs: Vec<u64>,
        ok: bool,
    },
    Abandon {
        key: SessionKey,
        seqs: Vec<u64>,
        failure: TurnFailure,
    },
}

#[derive(Default)]
struct InFlight {
    per_key: HashMap<SessionKey, usize>,
    total: usize,
    max_per_key: usize,
    max_total: usize,
}

/// A started batch: key, answered seqs, dropped seqs, queued flag.
type BatchRecord = (SessionKey, Vec<u64>, Vec<u64>, bool);

/// The in-memory backend.
pub(super) struct Fake {
    settings: LaneSettings,
    /// The queue policy for every item; followup without debounce unless a test says otherwise.
    policy: Mutex<QueuePolicy>,
    next_seq: AtomicU64,
    inbox: Mutex<BTreeMap<(SessionKey, u64), Item>>,
    log: Mutex<Vec<Entry>>,
    in_flight: Mutex<InFlight>,
    attempts: Mutex<HashMap<u64, u32>>,
    /// `(key, after, limit, returned)` for every `pending` call.
    pending_calls: Mutex<Vec<(SessionKey, u64, usize, usize)>>,
    /// Injected `pending` failures still to happen, per key.
    fail_pending: Mutex<HashMap<SessionKey, u32>>,
    /// How long `pending` takes, per key (a slow storage read).
    pending_delay: Mutex<HashMap<SessionKey, Duration>>,
    /// Every batch started: key, answered seqs, dropped seqs, queued flag.
    batches: Mutex<Vec<BatchRecord>>,
    /// Turns that saw their cancellation.
    cancelled: AtomicUsize,
}

impl Fake {
    pub(super) fn new(settings: LaneSettings) -> Self {
        Self {
            settings,
            policy: Mutex::new(QueuePolicy {
                mode: QueueMode::Followup,
                debounce: Duration::ZERO,
                ..QueuePolicy::default()
            }),
            next_seq: AtomicU64::new(1),
            inbox: Mutex::new(BTreeMap::new()),
            log: Mutex::new(Vec::new()),
            in_flight: Mutex::new(InFlight::default()),
            attempts: Mutex::new(HashMap::new()),
            pending_calls: Mutex::new(Vec::new()),
            fail_pending: Mutex::new(HashMap::new()),
            pending_delay: Mutex::new(HashMap::new()),
            batches: Mutex::new(Vec::new()),
            cancelled: AtomicUsize::new(0),
        }
    }

    /// Sets the queue policy for every item.
    pub(super) fn set_policy(&self, policy: QueuePolicy) {
        *self.policy.lock().unwrap() = policy;
    }

    /// The batches started for `key`: (answered seqs, dropped seqs, queued flag), in order.
    pub(super) fn batches(&self, key: &str) -> Vec<(Vec<u64>, Vec<u64>, bool)> {
        self.batches
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, ..)| &**k == key)
            .map(|(_, a, d, q)| (a.clone(), d.clone(), *q))
            .collect()
    }

    /// Writes an item to the inbox without the supervisor, as if left by a previous run.
    pub(super) fn seed(&self, key: &str, text: &str) -> u64 {
        self.write(key.into(), text.to_string())
    }

    /// Makes the next `times` calls of `pending` for `key` fail.
    pub(super) fn fail_pending(&self, key: &str, times: u32) {
        self.fail_pending.lock().unwrap().insert(key.into(), times);
    }

    /// Makes every `pending` call for `key` take `delay`.
    pub(super) fn delay_pending(&self, key: &str, delay: Duration) {
        self.pending_delay.lock().unwrap().insert(key.into(), delay);
    }

    /// Injected `pending` failures for `key` that have not happened yet.
    pub(super) fn pending_failures_left(&self, key: &str) -> u32 {
        self.fail_pending
            .lock()
            .unwrap()
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    fn write(&self, key: SessionKey, text: String) -> u64 {
        // Taking the inbox lock before drawing the sequence keeps "seq order" and "inbox order"
        // the same thing even when `seed` races the supervisor.
        let mut inbox = self.inbox.lock().unwrap();
        let seq = self.next_seq.fetch_add(1, Ordering::SeqCst);
        let item = Item {
            key: key.clone(),
            seq,
            text,
        };
        inbox.insert((key, seq), item);
        seq
    }

    fn consume(&self, batch: &[Item]) {
        let mut inbox = self.inbox.lock().unwrap();
        for item in batch {
            inbox.remove(&(item.key.clone(), item.seq));
        }
    }

    fn push(&self, entry: Entry) {
        self.log.lock().unwrap().push(entry);
    }

    pub(super) fn log(&self) -> Vec<Entry> {
        self.log.lock().unwrap().clone()
    }

    /// Sequences whose turn started for `key`, in start order (a retry appears again).
    pub(super) fn starts(&self, key: &str) -> Vec<u64> {
        self.log()
            .into_iter()
            .filter_map(|e| match e {
                Entry::Start { key: k, seqs } if &*k == key => Some(seqs),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// Sequences whose turn succeeded for `key`, in completion order.
    pub(super) fn completed(&self, key: &str) -> Vec<u64> {
        self.log()
            .into_iter()
            .filter_map(|e| match e {
                Entry::End {
                    key: k,
                    seqs,
                    ok: true,
                } if &*k == key => Some(seqs),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// Number of items whose turn succeeded, over all keys.
    pub(super) fn completed_total(&self) -> usize {
        self.log()
            .iter()
            .map(|e| match e {
                Entry::End { seqs, ok: true, .. } => seqs.len(),
                _ => 0,
            })
            .sum()
    }

    pub(super) fn abandoned(&self, key: &str) -> Vec<(Vec<u64>, TurnFailure)> {
        self.log()
            .into_iter()
            .filter_map(|e| match e {
                Entry::Abandon {
                    key: k,
                    seqs,
                    failure,
                } if &*k == key => Some((seqs, failure)),
                _ => None,
            })
            .collect()
    }

    pub(super) fn abandoned_total(&self) -> usize {
        self.log()
            .iter()
            .filter(|e| matches!(e, Entry::Abandon { .. }))
            .count()
    }

    /// Unconsumed sequences of `key`, oldest first.
    pub(super) fn inbox(&self, key: &str) -> Vec<u64> {
        self.inbox
            .lock()
            .unwrap()
            .keys()
            .filter(|(k, _)| &**k == key)
            .map(|(_, seq)| *seq)
            .collect()
    }

    pub(super) fn inbox_len(&self) -> usize {
        self.inbox.lock().unwrap().len()
    }

    pub(super) fn pending_calls(&self) -> Vec<(SessionKey, u64, usize, usize)> {
        self.pending_calls.lock().unwrap().clone()
    }

    /// Turns that stopped because they were cancelled.
    pub(super) fn cancelled(&self) -> usize {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Highest number of turns of one key that ever ran at once.
    pub(super) fn max_in_flight_per_key(&self) -> usize {
        self.in_flight.lock().unwrap().max_per_key
    }

    /// Highest number of turns, over all keys, that ever ran at once.
    pub(super) fn max_in_flight_total(&self) -> usize {
        self.in_flight.lock().unwrap().max_total
    }

    fn enter(&self, key: &SessionKey) -> InFlightGuard<'_> {
        let mut f = self.in_flight.lock().unwrap();
        let n = f.per_key.entry(key.clone()).or_insert(0);
        *n += 1;
        let n = *n;
        f.total += 1;
        f.max_per_key = f.max_per_key.max(n);
        f.max_total = f.max_total.max(f.total);
        InFlightGuard {
            fake: self,
            key: key.clone(),
        }
    }
}

/// Leaves the in-flight count when the turn ends, even by panicking.
struct InFlightGuard<'a> {
    fake: &'a Fake,
    key: SessionKey,
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        let mut f = self.fake.in_flight.lock().unwrap();
        if let Some(n) = f.per_key.get_mut(&self.key) {
            *n -= 1;
        }
        f.total -= 1;
    }
}

/// The value of `name=VALUE` in `text`, if present.
fn directive(text: &str, name: &str) -> Option<u64> {
    text.split_whitespace()
        .filter_map(|t| t.strip_prefix(name)?.strip_prefix('='))
        .find_map(|v| v.parse().ok())
}

fn has_flag(text: &str, flag: &str) -> bool {
    text.split_whitespace().any(|t| t == flag)
}

impl Backend for Fake {
    type Event = Event;
    type Item = Item;
    type Accepted = u64;
    type Refused = Refusal;

    fn lane_settings(&self) -> &LaneSettings {
        &self.settings
    }

    fn admit(&self, event: Event) -> Result<(SessionKey, Item, u64), Refusal> {
        match event {
            Event::Msg { key, text } => {
                if let Some(ms) = directive(&text, "admit-delay") {
                    std::thread::sleep(Duration::from_millis(ms));
                }
                let key: SessionKey = key.into();
                let seq = self.write(key.clone(), text);
                let item = self.inbox.lock().unwrap()[&(key.clone(), seq)].clone();
                Ok((key, item, seq))
            }
            Event::Existing { key, seq } => {
                let key: SessionKey = key.into();
                let item = self
                    .inbox
                    .lock()
                    .unwrap()
                    .get(&(key.clone(), seq))
                    .cloned()
                    .ok_or(Refusal::UnknownItem)?;
                Ok((key, item, seq))
            }
            Event::Invalid => Err(Refusal::Invalid),
        }
    }

    fn refuse_shutting_down(&self) -> Refusal {
        Refusal::ShuttingDown
    }

    async fn pending(
        &self,
        key: &SessionKey,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Item>, BackendError> {
        let delay = self.pending_delay.lock().unwrap().get(key).copied();
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        {
            let mut fail = self.fail_pending.lock().unwrap();
            if let Some(n) = fail.get_mut(key).filter(|n| **n > 0) {
                *n -= 1;
                return Err(BackendError::new(
                    ErrorKind::Storage,
                    format!("injected pending failure for {key}"),
                ));
            }
        }
        let items: Vec<Item> = self
            .inbox
            .lock()
            .unwrap()
            .range((key.clone(), after.saturating_add(1))..=(key.clone(), u64::MAX))
            .take(limit)
            .map(|(_, item)| item.clone())
            .collect();
        self.pending_calls
            .lock()
            .unwrap()
            .push((key.clone(), after, limit, items.len()));
        Ok(items)
    }

    fn queue_policy(&self, _item: &Item) -> QueuePolicy {
        *self.policy.lock().unwrap()
    }

    async fn run_turn(
        &self,
        key: SessionKey,
        batch: TurnBatch<Item>,
        mut control: TurnControl<Item>,
    ) -> Result<TurnReport, TurnError> {
        self.batches.lock().unwrap().push((
            key.clone(),
            batch.items.iter().map(|i| i.seq).collect(),
            batch.dropped.iter().map(|i| i.seq).collect(),
            batch.queued,
        ));
        let all: Vec<Item> = batch.all_items().cloned().collect();
        let seqs: Vec<u64> = all.iter().map(|i| i.seq).collect();
        self.push(Entry::Start {
            key: key.clone(),
            seqs: seqs.clone(),
        });
        let _guard = self.enter(&key);
        let mut first_attempt = true;
        {
            let mut attempts = self.attempts.lock().unwrap();
            for seq in &seqs {
                let n = attempts.entry(*seq).or_insert(0);
                *n += 1;
                first_attempt &= *n == 1;
            }
        }
        for item in &batch.items {
            let first_try = self.attempts.lock().unwrap().get(&item.seq) == Some(&1);
            let sleep = directive(&item.text, "sleep")
                .or_else(|| directive(&item.text, "hang-once").filter(|_| first_try));
            if let Some(ms) = sleep {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                    _ = control.cancelled() => {
                        self.cancelled.fetch_add(1, Ordering::SeqCst);
                        self.push(Entry::End { key, seqs, ok: false });
                        return Err(TurnError::Cancelled);
                    }
                }
            }
        }
        let wants = |flag: &str| batch.items.iter().any(|i| has_flag(&i.text, flag));
        if wants("panic") || (first_attempt && wants("panic-once")) {
            panic!("boom in turn {seqs:?}");
        }
        if wants("error") || (first_attempt && wants("error-once")) {
            self.push(Entry::End {
                key,
                seqs: seqs.clone(),
                ok: false,
            });
            return Err(TurnError::Failed(format!("error in turn {seqs:?}")));
        }
        // A "tool loop": a turn that asks for it takes in what was steered to it meanwhile.
        let mut report = TurnReport::default();
        let mut consumed = all;
        if wants("steerable") {
            for item in control.take_steered() {
                report.steered.push(item.seq);
                consumed.push(item);
            }
        }
        self.consume(&consumed);
        self.push(Entry::End {
            key,
            seqs: consumed.iter().map(|i| i.seq).collect(),
            ok: true,
        });
        Ok(report)
    }

    async fn abandon_turn(&self, key: SessionKey, batch: TurnBatch<Item>, failure: TurnFailure) {
        let all: Vec<Item> = batch.all_items().cloned().collect();
        self.consume(&all);
        self.push(Entry::Abandon {
            key,
            seqs: all.iter().map(|i| i.seq).collect(),
            failure,
        });
    }
}

/// A channel that records deliveries; with `gated`, each delivery waits for a permit of
/// `gate`, so a test can hold deliveries in flight.
pub(super) struct FakeChannel {
    gated: bool,
    pub(super) gate: Semaphore,
    delivered: Mutex<Vec<String>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

impl FakeChannel {
    pub(super) fn new(gated: bool) -> Self {
        Self {
            gated,
            gate: Semaphore::new(0),
            delivered: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        }
    }

    pub(super) fn delivered(&self) -> Vec<String> {
        self.delivered.lock().unwrap().clone()
    }

    pub(super) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    pub(super) fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }
}

impl Channel for FakeChannel {
    type Reply = String;

    fn name(&self) -> &str {
        "fake"
    }

    async fn deliver(&self, reply: String) {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        if self.gated {
            self.gate
                .acquire()
                .await
                .expect("gate is never closed")
                .forget();
        }
        self.delivered.lock().unwrap().push(reply);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}
