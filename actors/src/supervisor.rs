//! The supervisor: admits every inbound event, owns the lane registry, and spawns, restarts,
//! passivates and drains session lanes.
//!
//! It is one actor, so admission is serial: the durable inbox sequence it assigns is the order
//! lanes see. `Backend::admit` only starts a durable write; the submitter awaits durability
//! outside the actor, so one slow flush never stalls routing.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use dashmap::DashMap;
use ractor::{
    Actor, ActorId, ActorProcessingErr, ActorRef, MessagingErr, RpcReplyPort, SupervisionEvent,
};

use crate::backend::{Backend, QueueItem, SessionKey};
use crate::lane::Lane;
use crate::messages::{DiscardOutcome, LaneMsg, SupervisorMsg};

/// The live lanes by session key. Only the supervisor writes it; anyone may read it (e.g. to
/// tell whether a session has a live turn before evicting it).
pub struct LaneRegistry<I> {
    lanes: Arc<DashMap<SessionKey, LaneEntry<I>>>,
}

struct LaneEntry<I> {
    lane: ActorRef<LaneMsg<I>>,
    /// Highest item sequence routed to this lane.
    routed_seq: u64,
}

impl<I> Clone for LaneRegistry<I> {
    fn clone(&self) -> Self {
        Self {
            lanes: Arc::clone(&self.lanes),
        }
    }
}

impl<I> Default for LaneRegistry<I> {
    fn default() -> Self {
        Self {
            lanes: Arc::new(DashMap::new()),
        }
    }
}

impl<I> LaneRegistry<I> {
    /// Number of live lanes.
    pub fn len(&self) -> usize {
        self.lanes.len()
    }

    /// True when no lane is live.
    pub fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }

    /// True when `key` has a live lane.
    pub fn is_live(&self, key: &str) -> bool {
        self.lanes.contains_key(key)
    }
}

/// Extra lanes asked to passivate beyond the excess, since some of them may be busy.
const SHED_SLACK: usize = 8;

/// Least-recently-used order of live lanes: a queue of touches in which only each key's
/// newest touch counts. Stale entries are skipped when read and dropped when the queue
/// outgrows [`RECENCY_SLACK`] times the keys, so a touch is O(1) amortised (a message to a
/// live lane touches it; this is on every message's path).
#[derive(Default)]
struct Recency {
    tick: u64,
    queue: VecDeque<(u64, SessionKey)>,
    by_key: HashMap<SessionKey, u64>,
}

/// The touch queue is compacted when longer than this many times the live keys (plus a
/// constant, so tiny sets do not compact on every touch).
const RECENCY_SLACK: usize = 2;

impl Recency {
    fn touch(&mut self, key: &SessionKey) {
        self.tick += 1;
        self.by_key.insert(key.clone(), self.tick);
        self.queue.push_back((self.tick, key.clone()));
        if self.queue.len() > RECENCY_SLACK * self.by_key.len() + 64 {
            let by_key = &self.by_key;
            self.queue.retain(|(t, k)| by_key.get(k) == Some(t));
        }
    }

    fn forget(&mut self, key: &SessionKey) {
        self.by_key.remove(key);
    }

    fn is_current(&self, tick: u64, key: &SessionKey) -> bool {
        self.by_key.get(key) == Some(&tick)
    }

    /// The `n` least recently used keys, oldest first.
    fn oldest(&mut self, n: usize) -> Vec<SessionKey> {
        while let Some((t, k)) = self.queue.front() {
            if self.is_current(*t, k) {
                break;
            }
            self.queue.pop_front();
        }
        self.queue
            .iter()
            .filter(|(t, k)| self.is_current(*t, k))
            .take(n)
            .map(|(_, k)| k.clone())
            .collect()
    }
}

/// The supervisor actor.
pub struct Supervisor<B: Backend> {
    backend: Arc<B>,
    registry: LaneRegistry<B::Item>,
}

impl<B: Backend> Supervisor<B> {
    /// A supervisor driving `backend`, publishing its lanes in `registry`.
    pub fn new(backend: Arc<B>, registry: LaneRegistry<B::Item>) -> Self {
        Self { backend, registry }
    }
}

/// The supervisor's private state.
pub struct SupervisorState {
    keys_by_lane: HashMap<ActorId, SessionKey>,
    /// Recency of use per live lane, for passivating the least recently used first.
    recency: Recency,
    draining: bool,
    drain_waiters: Vec<RpcReplyPort<()>>,
}

impl<B: Backend> Actor for Supervisor<B> {
    type Msg = SupervisorMsg<B>;
    type State = SupervisorState;
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        _args: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(SupervisorState {
            keys_by_lane: HashMap::new(),
            recency: Recency::default(),
            draining: false,
            drain_waiters: Vec::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::Submit(event, reply) => {
                if state.draining {
                    let _ = reply.send(Err(self.backend.refuse_shutting_down()));
                    return Ok(());
                }
                match self.backend.admit(event) {
                    Ok((key, item, accepted)) => {
                        self.route(&myself, state, key, item).await;
                        let _ = reply.send(Ok(accepted));
                    }
                    Err(refused) => {
                        let _ = reply.send(Err(refused));
                    }
                }
            }
            SupervisorMsg::Recover(keys) => {
                for key in keys {
                    if !state.draining && !self.registry.is_live(&key) {
                        self.spawn_lane(&myself, state, key).await;
                    }
                }
            }
            SupervisorMsg::LaneIdle {
                key,
                lane,
                seen_seq,
            } => {
                let passivate = self
                    .registry
                    .lanes
                    .get(&key)
                    .is_some_and(|e| e.lane.get_id() == lane && e.routed_seq <= seen_seq);
                if passivate {
                    if let Some((_, entry)) = self.registry.lanes.remove(&key) {
                        let _ = entry.lane.send_message(LaneMsg::Stop);
                    }
                    state.recency.forget(&key);
                }
            }
            SupervisorMsg::LiveLanes(reply) => {
                let _ = reply.send(self.registry.len());
            }
            SupervisorMsg::Discard { key, reply } => match self.registry.lanes.get(&key) {
                Some(entry) => {
                    if let Err(MessagingErr::SendErr(LaneMsg::Discard(reply))) =
                        entry.lane.send_message(LaneMsg::Discard(reply))
                    {
                        // The lane is stopping: it holds nothing any more.
                        let _ = reply.send(DiscardOutcome::Dropped);
                    }
                }
                None => {
                    let _ = reply.send(DiscardOutcome::Dropped);
                }
            },
            SupervisorMsg::Drain(reply) => {
                state.draining = true;
                state.drain_waiters.push(reply);
                for entry in self.registry.lanes.iter() {
                    let _ = entry.lane.send_message(LaneMsg::Drain);
                }
                self.answer_drain_if_done(state);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorTerminated(cell, _, _) => {
                self.forget_lane(state, cell.get_id());
            }
            SupervisionEvent::ActorFailed(cell, error) => {
                let key = self.forget_lane(state, cell.get_id());
                tracing::error!(session_key = ?key, %error, "session lane failed; restarting it");
                if let (Some(key), false) = (key, state.draining) {
                    // A route that found this lane dead has already started its replacement;
                    // a second lane for the key would run the same items twice, concurrently.
                    if !self.registry.is_live(&key) {
                        // The new lane recovers every unconsumed item from the durable inbox.
                        self.spawn_lane(&myself, state, key).await;
                    }
                }
            }
            _ => {}
        }
        self.answer_drain_if_done(state);
        Ok(())
    }
}

impl<B: Backend> Supervisor<B> {
    async fn route(
        &self,
        myself: &ActorRef<SupervisorMsg<B>>,
        state: &mut SupervisorState,
        key: SessionKey,
        item: B::Item,
    ) {
        let seq = item.seq();
        state.recency.touch(&key);
        if let Some(mut entry) = self.registry.lanes.get_mut(&key) {
            entry.routed_seq = seq;
            if entry
                .lane
                .send_message(LaneMsg::Enqueue(item.clone()))
                .is_ok()
            {
                return;
            }
        }
        // No live lane (or it just died): a new one recovers unconsumed items from the inbox;
        // the item is also sent, so it arrives even if the inbox read missed it (the lane
        // ignores a sequence it already holds).
        self.registry.lanes.remove(&key);
        self.spawn_lane(myself, state, key.clone()).await;
        if let Some(mut entry) = self.registry.lanes.get_mut(&key) {
            entry.routed_seq = seq;
            let _ = entry.lane.send_message(LaneMsg::Enqueue(item));
        }
    }

    async fn spawn_lane(
        &self,
        myself: &ActorRef<SupervisorMsg<B>>,
        state: &mut SupervisorState,
        key: SessionKey,
    ) {
        let lane = Lane {
            backend: Arc::clone(&self.backend),
            supervisor: myself.clone(),
        };
        match Actor::spawn_linked(None, lane, key.clone(), myself.get_cell()).await {
            Ok((lane, _)) => {
                state.keys_by_lane.insert(lane.get_id(), key.clone());
                state.recency.touch(&key);
                self.registry.lanes.insert(
                    key.clone(),
                    LaneEntry {
                        lane,
                        routed_seq: 0,
                    },
                );
                self.shed_lanes(state, &key);
            }
            Err(error) => {
                // What was routed stays in the durable inbox; the next message or start retries.
                tracing::error!(session_key = %key, %error, "could not start session lane");
            }
        }
    }

    fn forget_lane(&self, state: &mut SupervisorState, id: ActorId) -> Option<SessionKey> {
        let key = state.keys_by_lane.remove(&id)?;
        self.registry
            .lanes
            .remove_if(&key, |_, entry| entry.lane.get_id() == id);
        if !self.registry.is_live(&key) {
            state.recency.forget(&key);
        }
        Some(key)
    }

    /// Past `max_live_lanes`, asks the least recently used lanes to passivate: idle ones stop
    /// now, busy ones when their work is done. Asked lanes count as used now, so the next
    /// request asks others.
    fn shed_lanes(&self, state: &mut SupervisorState, just_spawned: &SessionKey) {
        let max = self.backend.lane_settings().max_live_lanes;
        let excess = self.registry.len().saturating_sub(max);
        if excess == 0 {
            return;
        }
        for key in state.recency.oldest(excess + SHED_SLACK) {
            if key == *just_spawned {
                continue;
            }
            if let Some(entry) = self.registry.lanes.get(&key) {
                let _ = entry.lane.send_message(LaneMsg::PassivateIfIdle);
            }
            state.recency.touch(&key);
        }
    }

    fn answer_drain_if_done(&self, state: &mut SupervisorState) {
        if state.draining && self.registry.is_empty() {
            for waiter in state.drain_waiters.drain(..) {
                let _ = waiter.send(());
            }
        }
    }
}

#[cfg(test)]
mod recency_tests {
    use super::*;

    fn key(s: &str) -> SessionKey {
        SessionKey::from(s)
    }

    #[test]
    fn oldest_first_with_only_the_newest_touch_counting() {
        let mut r = Recency::default();
        for k in ["a", "b", "c"] {
            r.touch(&key(k));
        }
        r.touch(&key("a"));
        assert_eq!(r.oldest(2), [key("b"), key("c")]);
        r.forget(&key("b"));
        assert_eq!(r.oldest(5), [key("c"), key("a")]);
        assert!(r.oldest(0).is_empty());
    }

    #[test]
    fn the_touch_queue_stays_bounded_by_the_live_keys() {
        let mut r = Recency::default();
        for i in 0..10_000 {
            r.touch(&key(&format!("k{}", i % 10)));
        }
        assert!(
            r.queue.len() <= RECENCY_SLACK * 10 + 64 + 1,
            "{}",
            r.queue.len()
        );
        assert_eq!(r.oldest(10).len(), 10);
        assert_eq!(r.oldest(1), [key("k0")]);
    }
}
