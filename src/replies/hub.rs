//! The reply hub: every reply goes to the broadcast stream (`/v1/events`, library
//! subscribers) and to whoever waits for the answer to one particular message (the
//! OpenAI-compatible endpoint). While a turn streams, its text deltas go the same ways (see
//! [`ReplyHub::delta_fanout`]): bounded everywhere, a slow consumer loses deltas, never the
//! final reply, and a turn nobody watches does not stream at all. On a cluster node the
//! deltas also go to the other nodes ([`ReplyHub::export_deltas`]), and theirs come in
//! ([`ReplyHub::publish_remote_delta`]) as their replies do ([`ReplyHub::publish_remote`]).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, mpsc, oneshot};

use super::router::ChannelRouter;
use crate::inbound::{ChatKind, InboundMessage};
use crate::model::ToolCall;
use crate::store::InboxItem;

/// One reply of the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    /// The session it belongs to.
    pub session_key: String,
    /// The text.
    pub text: String,
    /// The message ids it answers (several when queued messages were answered together).
    pub in_reply_to: Vec<String>,
    /// The transcript sequence of the reply entry.
    pub seq: u64,
    /// True when the turn failed and this is an error notice.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub error: bool,
    /// Where the reply goes back to on its platform.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<ReplyRoute>,
    /// Calls of client-side tools (tools the request offered): the turn waits for their
    /// results, which the client sends with its next request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Token counts of the answer (the model's report, else ours); none for an error notice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ReplyUsage>,
    /// Why the model stopped (`stop`, `length`, `tool_calls`), as it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// The model that answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// What failed, when `error` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ReplyErrorKind>,
}

/// Token counts of one answer, in the OpenAI `usage` shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyUsage {
    /// Tokens of the prompt.
    pub prompt_tokens: u32,
    /// Tokens of the answer.
    pub completion_tokens: u32,
    /// Their sum.
    pub total_tokens: u32,
}

impl ReplyUsage {
    /// The usage of a prompt and an answer of these sizes.
    pub fn new(prompt_tokens: u32, completion_tokens: u32) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens.saturating_add(completion_tokens),
        }
    }
}

/// Why a turn ended without an answer: the HTTP status a waiting client gets depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplyErrorKind {
    /// The model failed (transport, an error answer, an unreadable answer): 502.
    Model,
    /// The model did not answer in time: 504.
    Timeout,
    /// Something of ours failed (storage, a panic): 500.
    Internal,
}

/// A piece of a reply's text while the turn's model call streams it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Delta {
    /// The session it belongs to.
    pub session_key: String,
    /// The message ids the turn answers.
    pub in_reply_to: Vec<String>,
    /// 1, 2, 3… within the turn: a gap means this consumer lost deltas.
    pub seq: u64,
    /// The new text.
    pub text: String,
    /// Model call of the turn this text belongs to (a tool round starts a new one, whose text
    /// does not continue the previous one's).
    #[serde(skip)]
    pub round: u32,
}

/// Most deltas `/v1/events` subscribers may lag behind before they miss some.
pub(crate) const DELTA_STREAM_BUFFER: usize = 256;

/// Most deltas queued for one waiting request (a streaming OpenAI client) before it misses
/// some; it still gets the whole text with the final reply.
pub(crate) const DELTA_WAITER_BUFFER: usize = 64;

/// Most deltas queued on a cluster node for the other nodes before new ones are dropped
/// (counted); a waiter elsewhere still gets the whole text with the final reply.
pub(crate) const DELTA_EXPORT_BUFFER: usize = 1_024;

/// Most final replies queued on a cluster node for the nodes that do not keep their
/// partitions before new ones are dropped (counted); a waiter there then waits out its
/// timeout, and the reply is stored and readable.
pub(crate) const REPLY_EXPORT_BUFFER: usize = 4_096;

/// Most message ids at once whose streaming waiter is on another cluster node. Past it a
/// turn does not stream for such a waiter (it gets the whole reply at the end). An id goes
/// when its reply is published here, which every node does for every reply.
pub(crate) const MAX_REMOTE_WATCHED: usize = 4_096;

/// Where a reply goes back to: the chat of the newest message it answers. Channels that push
/// replies to a platform (Telegram, callbacks) read it; the channel router picks the channel by
/// `channel`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyRoute {
    /// The `channel` of the message answered (e.g. `telegram`).
    pub channel: String,
    /// Its account id.
    pub account_id: String,
    /// Its chat kind.
    pub chat_kind: ChatKind,
    /// Its chat id.
    pub chat_id: String,
    /// Its thread id, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    /// Its platform message id (a platform reply quotes it).
    pub message_id: String,
}

impl ReplyRoute {
    /// The route of a turn over `batch`: the newest message's chat.
    pub fn of(batch: &[InboxItem]) -> Option<Self> {
        Some(Self::of_message(&batch.last()?.record.message))
    }

    /// The route back to `m`'s chat.
    pub fn of_message(m: &InboundMessage) -> Self {
        Self {
            channel: m.channel.clone(),
            account_id: m.account_id.clone(),
            chat_kind: m.chat_kind,
            chat_id: m.chat_id.clone(),
            thread_id: m.thread_id.clone(),
            message_id: m.message_id.clone(),
        }
    }
}

/// One waiter of a message id: its token and where its reply goes.
type Waiting = (u64, oneshot::Sender<Arc<Reply>>);

/// One streaming waiter of a message id: its token and where its deltas go.
type DeltaWaiting = (u64, mpsc::Sender<Arc<Delta>>);

/// Fan-out of replies.
pub(crate) struct ReplyHub {
    stream: broadcast::Sender<Arc<Reply>>,
    /// Waiters per message id: a retried request waits beside the original one.
    waiters: DashMap<String, Vec<Waiting>>,
    /// Tells the waiters of one message id apart (a dropped one removes only itself).
    next_waiter: AtomicU64,
    /// Deltas for every subscriber (`/v1/events`), of turns that stream.
    delta_stream: broadcast::Sender<Arc<Delta>>,
    /// Subscribers that want every turn to stream (`/v1/events?deltas=true`).
    delta_watchers: AtomicUsize,
    /// Deltas for the request waiting on one message id.
    delta_waiters: DashMap<String, Vec<DeltaWaiting>>,
    /// Message ids a streaming request on another cluster node waits for (at most
    /// [`MAX_REMOTE_WATCHED`]): their turns stream here as if watched.
    remote_watched: DashMap<String, ()>,
    /// A cluster node's deltas on their way to the other nodes (at most
    /// [`DELTA_EXPORT_BUFFER`]); unset on a single node.
    exported: OnceLock<mpsc::Sender<Arc<Delta>>>,
    /// A cluster node's final replies on their way to the other nodes (at most
    /// [`REPLY_EXPORT_BUFFER`]); unset on a single node.
    exported_replies: OnceLock<mpsc::Sender<Arc<Reply>>>,
    router: ChannelRouter,
}

/// Dropping the guard stops waiting (e.g. when the HTTP client went away), so the waiter map
/// holds only live requests.
pub struct ReplyWaiter<'a> {
    hub: &'a ReplyHub,
    message_id: String,
    token: u64,
    rx: oneshot::Receiver<Arc<Reply>>,
    /// The deltas, for a waiter that asked for them.
    deltas: Option<mpsc::Receiver<Arc<Delta>>>,
}

/// What a streaming waiter hears next.
#[derive(Debug)]
pub enum Heard {
    /// A piece of the text, while the turn runs.
    Delta(Arc<Delta>),
    /// The final reply.
    Reply(Arc<Reply>),
}

impl ReplyWaiter<'_> {
    /// Waits for the reply.
    pub async fn recv(&mut self) -> Option<Arc<Reply>> {
        (&mut self.rx).await.ok()
    }

    /// Waits for the next delta or the final reply (deltas queued before the reply come
    /// first). `None`: the hub closed.
    pub async fn next(&mut self) -> Option<Heard> {
        let Some(deltas) = &mut self.deltas else {
            return (&mut self.rx).await.ok().map(Heard::Reply);
        };
        tokio::select! {
            biased;
            Some(delta) = deltas.recv() => Some(Heard::Delta(delta)),
            // Deltas are queued before their reply is published: biased, they come first.
            reply = &mut self.rx => reply.ok().map(Heard::Reply),
        }
    }
}

impl Drop for ReplyWaiter<'_> {
    fn drop(&mut self) {
        let token = self.token;
        self.hub
            .waiters
            .remove_if_mut(&self.message_id, |_, waiting| {
                waiting.retain(|(t, _)| *t != token);
                waiting.is_empty()
            });
        if self.deltas.is_some() {
            self.hub
                .delta_waiters
                .remove_if_mut(&self.message_id, |_, waiting| {
                    waiting.retain(|(t, _)| *t != token);
                    waiting.is_empty()
                });
        }
    }
}

/// Held by a subscriber that wants every turn to stream; see [`ReplyHub::watch_deltas`].
pub struct DeltaWatch(Arc<ReplyHub>);

impl Drop for DeltaWatch {
    fn drop(&mut self) {
        self.0.delta_watchers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The deltas of one model call sequence (one turn) on their way to whoever watches; made by
/// [`ReplyHub::delta_fanout`] only when someone does.
pub(crate) struct DeltaFanout<'a> {
    hub: &'a ReplyHub,
    session_key: String,
    in_reply_to: Vec<String>,
    route: Option<ReplyRoute>,
    seq: u64,
    round: u32,
}

impl DeltaFanout<'_> {
    /// Sends `text` on; never waits (full queues drop it).
    pub(crate) fn send(&mut self, text: String) {
        if text.is_empty() {
            return;
        }
        self.seq += 1;
        let delta = Arc::new(Delta {
            session_key: self.session_key.clone(),
            in_reply_to: self.in_reply_to.clone(),
            seq: self.seq,
            text,
            round: self.round,
        });
        for id in &self.in_reply_to {
            if let Some(waiting) = self.hub.delta_waiters.get(id) {
                for (_, tx) in waiting.iter() {
                    // Full: this waiter loses the delta and sees the gap in `seq`.
                    let _ = tx.try_send(Arc::clone(&delta));
                }
            }
        }
        self.hub.router.route_delta(self.route.as_ref(), &delta);
        if let Some(exported) = self.hub.exported.get() {
            // Full: the other nodes' waiters lose it (and see the gap in `seq`).
            if exported.try_send(Arc::clone(&delta)).is_err() {
                crate::metrics::cluster_delta_dropped();
            }
        }
        let _ = self.hub.delta_stream.send(delta);
    }

    /// The next model call starts (after a tool round): its text starts afresh.
    pub(crate) fn next_round(&mut self) {
        self.round += 1;
    }
}

impl ReplyHub {
    /// A hub whose subscribers each buffer up to `buffer` replies.
    pub(crate) fn new(buffer: usize) -> Self {
        let (stream, _) = broadcast::channel(buffer.max(1));
        let (delta_stream, _) = broadcast::channel(DELTA_STREAM_BUFFER);
        Self {
            stream,
            waiters: DashMap::new(),
            next_waiter: AtomicU64::new(0),
            delta_stream,
            delta_watchers: AtomicUsize::new(0),
            delta_waiters: DashMap::new(),
            remote_watched: DashMap::new(),
            exported: OnceLock::new(),
            exported_replies: OnceLock::new(),
            router: ChannelRouter::default(),
        }
    }

    /// Subscribes to the deltas of every turn that streams from now on (a subscriber more
    /// than [`DELTA_STREAM_BUFFER`] behind misses some; replies are unaffected). A turn
    /// streams when a streaming request or channel waits for it, or while a [`DeltaWatch`]
    /// is held.
    pub(crate) fn subscribe_deltas(&self) -> broadcast::Receiver<Arc<Delta>> {
        self.delta_stream.subscribe()
    }

    /// Makes every turn stream while the guard lives (a subscriber asked for all deltas).
    /// Plain subscribers do not: a dashboard watching replies must not make every turn pay
    /// for streaming.
    pub(crate) fn watch_deltas(self: &Arc<Self>) -> DeltaWatch {
        self.delta_watchers.fetch_add(1, Ordering::Relaxed);
        DeltaWatch(Arc::clone(self))
    }

    /// Like [`ReplyHub::wait_for`], also hearing the reply's deltas while it streams.
    pub(crate) fn wait_streaming(&self, message_id: &str) -> ReplyWaiter<'_> {
        let mut waiter = self.wait_for(message_id);
        let (tx, rx) = mpsc::channel(DELTA_WAITER_BUFFER);
        self.delta_waiters
            .entry(message_id.to_string())
            .or_default()
            .push((waiter.token, tx));
        waiter.deltas = Some(rx);
        waiter
    }

    /// A fan-out for the deltas of a turn answering `batch`, or `None` when nobody watches
    /// them (no [`DeltaWatch`], no streaming waiter of these messages, no channel
    /// taking deltas for the batch's platform): then the turn calls the model without
    /// streaming, and this check allocates nothing.
    pub(crate) fn delta_fanout(
        &self,
        session_key: &str,
        batch: &[InboxItem],
    ) -> Option<DeltaFanout<'_>> {
        let watched = self.delta_watchers.load(Ordering::Relaxed) > 0
            || batch.iter().any(|i| {
                let id = &i.record.message.message_id;
                self.delta_waiters.contains_key(id) || self.remote_watched.contains_key(id)
            })
            || batch
                .last()
                .is_some_and(|i| self.router.wants_deltas(&i.record.message.channel));
        watched.then(|| DeltaFanout {
            hub: self,
            session_key: session_key.to_string(),
            in_reply_to: batch
                .iter()
                .map(|i| i.record.message.message_id.clone())
                .collect(),
            route: ReplyRoute::of(batch),
            seq: 0,
            round: 0,
        })
    }

    /// Whether a streaming request here waits for the reply to `message_id` (a cluster node
    /// tells the owner, whose turn then streams).
    pub(crate) fn streams_to(&self, message_id: &str) -> bool {
        self.delta_waiters.contains_key(message_id)
    }

    /// Makes the turn answering `message_id` stream here: a streaming request on another
    /// cluster node waits for it. Ignored past [`MAX_REMOTE_WATCHED`] ids.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn watch_remote(&self, message_id: &str) {
        if self.remote_watched.len() < MAX_REMOTE_WATCHED {
            self.remote_watched.insert(message_id.to_string(), ());
        }
    }

    /// The deltas of this node's turns, for the other cluster nodes, from now on (every
    /// delta any fan-out sends; at most [`DELTA_EXPORT_BUFFER`] queued, the rest dropped and
    /// counted). `None` if taken before.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn export_deltas(&self) -> Option<mpsc::Receiver<Arc<Delta>>> {
        let (tx, rx) = mpsc::channel(DELTA_EXPORT_BUFFER);
        self.exported.set(tx).ok().map(|()| rx)
    }

    /// The final replies of this node's turns, for the other cluster nodes, from now on (at
    /// most [`REPLY_EXPORT_BUFFER`] queued, the rest dropped and counted). `None` if taken
    /// before.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn export_replies(&self) -> Option<mpsc::Receiver<Arc<Reply>>> {
        let (tx, rx) = mpsc::channel(REPLY_EXPORT_BUFFER);
        self.exported_replies.set(tx).ok().map(|()| rx)
    }

    /// Hands a delta of another cluster node's turn to this node's streaming waiters and
    /// delta subscribers (never to platform channels: the owner streams to those). Like a
    /// local delta it never waits; once the reply is published here its waiters are gone,
    /// so a late delta reaches none of them.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn publish_remote_delta(&self, delta: Delta) {
        let delta = Arc::new(delta);
        for id in &delta.in_reply_to {
            if let Some(waiting) = self.delta_waiters.get(id) {
                for (_, tx) in waiting.iter() {
                    let _ = tx.try_send(Arc::clone(&delta));
                }
            }
        }
        let _ = self.delta_stream.send(delta);
    }

    /// Subscribes to every reply from now on. A subscriber more than the buffer behind misses
    /// replies (they stay readable in the transcript).
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<Reply>> {
        self.stream.subscribe()
    }

    /// Registers interest in the reply to `message_id`; register before submitting.
    pub(crate) fn wait_for(&self, message_id: &str) -> ReplyWaiter<'_> {
        let (tx, rx) = oneshot::channel();
        let token = self.next_waiter.fetch_add(1, Ordering::Relaxed);
        self.waiters
            .entry(message_id.to_string())
            .or_default()
            .push((token, tx));
        ReplyWaiter {
            hub: self,
            message_id: message_id.to_string(),
            token,
            rx,
            deltas: None,
        }
    }

    /// Stops every pending waiter (they see `None`); used at shutdown.
    pub(crate) fn close(&self) {
        self.waiters.clear();
        self.delta_waiters.clear();
        self.router.clear();
    }

    /// The channels replies are pushed to.
    pub(crate) fn router(&self) -> &ChannelRouter {
        &self.router
    }

    /// Publishes a reply.
    pub(crate) fn publish(&self, reply: Reply) {
        self.publish_to(reply, true);
    }

    /// Publishes a reply another cluster node made: its waiters and the stream hear it, the
    /// platform channels do not (the node that made it delivered it there).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn publish_remote(&self, reply: Reply) {
        self.publish_to(reply, false);
    }

    fn publish_to(&self, reply: Reply, route: bool) {
        let reply = Arc::new(reply);
        for id in &reply.in_reply_to {
            if let Some((_, waiting)) = self.waiters.remove(id) {
                for (_, tx) in waiting {
                    let _ = tx.send(Arc::clone(&reply));
                }
            }
            self.delta_waiters.remove(id);
            self.remote_watched.remove(id);
        }
        if route {
            self.router.route(&reply);
            if let Some(exported) = self.exported_replies.get() {
                if exported.try_send(Arc::clone(&reply)).is_err() {
                    crate::metrics::cluster_reply_dropped();
                }
            }
        }
        let _ = self.stream.send(reply);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::InboxRecord;

    fn item(message_id: &str) -> InboxItem {
        let mut record = InboxRecord::direct_for_test(message_id, "hi");
        record.message.channel = "openai".into();
        record.message.mentioned_bot = true;
        InboxItem {
            seq: 1,
            record: Arc::new(record),
        }
    }

    fn reply(message_id: &str, text: &str) -> Reply {
        Reply {
            session_key: "k".into(),
            text: text.into(),
            in_reply_to: vec![message_id.into()],
            seq: 2,
            error: false,
            route: None,
            tool_calls: Vec::new(),
            usage: None,
            finish_reason: None,
            model: None,
            error_kind: None,
        }
    }

    #[test]
    fn nobody_watching_means_no_fanout() {
        let hub = Arc::new(ReplyHub::new(8));
        let _plain = hub.subscribe_deltas();
        assert!(hub.delta_fanout("k", &[item("m1")]).is_none());
        let _other = hub.wait_streaming("m2");
        assert!(hub.delta_fanout("k", &[item("m1")]).is_none());
        assert!(hub.delta_fanout("k", &[item("m2")]).is_some());
        let watch = hub.watch_deltas();
        assert!(hub.delta_fanout("k", &[item("m1")]).is_some());
        drop(watch);
        assert!(hub.delta_fanout("k", &[item("m1")]).is_none());
    }

    #[tokio::test]
    async fn a_slow_waiter_loses_deltas_but_never_the_reply() {
        let hub = Arc::new(ReplyHub::new(8));
        let mut plain = hub.subscribe_deltas();
        let mut waiter = hub.wait_streaming("m1");
        let mut fanout = hub
            .delta_fanout("k", &[item("m1")])
            .expect("a waiter watches");
        // Nobody reads while the turn sends more than either buffer holds: it never waits.
        let sent = DELTA_WAITER_BUFFER.max(DELTA_STREAM_BUFFER) + 10;
        for i in 0..sent {
            fanout.send(format!("{i} "));
        }
        drop(fanout);
        hub.publish(reply("m1", "the whole text"));
        let mut deltas = Vec::new();
        let final_reply = loop {
            match waiter.next().await.expect("the hub is open") {
                Heard::Delta(d) => deltas.push(d.seq),
                Heard::Reply(r) => break r,
            }
        };
        assert_eq!(final_reply.text, "the whole text");
        assert_eq!(
            deltas.len(),
            DELTA_WAITER_BUFFER,
            "the buffer's worth, in order"
        );
        assert!(deltas.windows(2).all(|w| w[0] + 1 == w[1]), "{deltas:?}");
        // The broadcast subscriber lagged: it hears that, then the newest deltas.
        assert!(matches!(
            plain.recv().await,
            Err(broadcast::error::RecvError::Lagged(_))
        ));
        drop(waiter);
        assert!(hub.delta_waiters.is_empty() && hub.waiters.is_empty());
    }

    #[tokio::test]
    async fn every_waiter_of_a_message_gets_its_reply() {
        let hub = ReplyHub::new(4);
        let mut original = hub.wait_for("m1");
        let mut retry = hub.wait_for("m1");
        // A third waiter that gave up must not take the others with it.
        drop(hub.wait_for("m1"));
        hub.publish(reply("m1", "answer to m1"));
        assert_eq!(
            original.recv().await.map(|r| r.text.clone()).as_deref(),
            Some("answer to m1")
        );
        assert_eq!(
            retry.recv().await.map(|r| r.text.clone()).as_deref(),
            Some("answer to m1")
        );
        drop((original, retry));
        assert!(hub.waiters.is_empty(), "no waiter left behind");
    }

    #[test]
    fn a_waiter_on_another_node_makes_the_turn_stream_until_its_reply() {
        let hub = ReplyHub::new(4);
        assert!(hub.delta_fanout("k", &[item("m1")]).is_none());
        hub.watch_remote("m1");
        assert!(hub.delta_fanout("k", &[item("m1")]).is_some());
        // Its reply, published here (by the owner's turn or the follower), ends the watch.
        hub.publish_remote(reply("m1", "done"));
        assert!(hub.delta_fanout("k", &[item("m1")]).is_none());
        for i in 0..MAX_REMOTE_WATCHED + 5 {
            hub.watch_remote(&format!("w{i}"));
        }
        assert_eq!(hub.remote_watched.len(), MAX_REMOTE_WATCHED, "bounded");
    }

    #[tokio::test]
    async fn deltas_go_to_other_nodes_without_waiting_and_theirs_reach_waiters_here() {
        let hub = ReplyHub::new(4);
        let mut exported = hub.export_deltas().expect("the first export");
        assert!(hub.export_deltas().is_none(), "one export");
        let _waiter = hub.wait_streaming("m1");
        let mut fanout = hub.delta_fanout("k", &[item("m1")]).expect("watched");
        // Nobody takes the exported deltas while the turn sends more than their queue holds.
        for i in 0..DELTA_EXPORT_BUFFER + 10 {
            fanout.send(format!("{i} "));
        }
        drop(fanout);
        let mut queued = 0;
        while exported.try_recv().is_ok() {
            queued += 1;
        }
        assert_eq!(
            queued, DELTA_EXPORT_BUFFER,
            "the queue's worth, the rest dropped"
        );

        let mut remote = hub.wait_streaming("r1");
        let mut plain = hub.subscribe_deltas();
        hub.publish_remote_delta(Delta {
            session_key: "k2".into(),
            in_reply_to: vec!["r1".into()],
            seq: 1,
            text: "Hel".into(),
            round: 0,
        });
        match remote.next().await {
            Some(Heard::Delta(d)) => assert_eq!(d.text, "Hel"),
            other => panic!("expected a delta, got {other:?}"),
        }
        assert_eq!(plain.recv().await.map(|d| d.seq).ok(), Some(1));
        assert!(
            exported.try_recv().is_err(),
            "another node's delta is not sent back"
        );
    }
}
