//! The reply hub: every reply goes to the broadcast stream (`/v1/events`, library
//! subscribers) and to whoever waits for the answer to one particular message (the
//! OpenAI-compatible endpoint).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use serde::Serialize;
use tokio::sync::{broadcast, oneshot};

use super::router::ChannelRouter;
use crate::inbound::ChatKind;
use crate::model::ToolCall;
use crate::store::InboxItem;

/// One reply of the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub error: bool,
    /// Where the reply goes back to on its platform.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<ReplyRoute>,
    /// Calls of client-side tools (tools the request offered): the turn waits for their
    /// results, which the client sends with its next request.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

/// Where a reply goes back to: the chat of the newest message it answers. Channels that push
/// replies to a platform (Telegram, callbacks) read it; the channel router picks the channel by
/// `channel`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    /// Its platform message id (a platform reply quotes it).
    pub message_id: String,
}

impl ReplyRoute {
    /// The route of a turn over `batch`: the newest message's chat.
    pub fn of(batch: &[InboxItem]) -> Option<Self> {
        let m = &batch.last()?.record.message;
        Some(Self {
            channel: m.channel.clone(),
            account_id: m.account_id.clone(),
            chat_kind: m.chat_kind,
            chat_id: m.chat_id.clone(),
            thread_id: m.thread_id.clone(),
            message_id: m.message_id.clone(),
        })
    }
}

/// One waiter of a message id: its token and where its reply goes.
type Waiting = (u64, oneshot::Sender<Arc<Reply>>);

/// Fan-out of replies.
pub struct ReplyHub {
    stream: broadcast::Sender<Arc<Reply>>,
    /// Waiters per message id: a retried request waits beside the original one.
    waiters: DashMap<String, Vec<Waiting>>,
    /// Tells the waiters of one message id apart (a dropped one removes only itself).
    next_waiter: AtomicU64,
    router: ChannelRouter,
}

/// Dropping the guard stops waiting (e.g. when the HTTP client went away), so the waiter map
/// holds only live requests.
pub struct ReplyWaiter<'a> {
    hub: &'a ReplyHub,
    message_id: String,
    token: u64,
    rx: oneshot::Receiver<Arc<Reply>>,
}

impl ReplyWaiter<'_> {
    /// Waits for the reply.
    pub async fn recv(&mut self) -> Option<Arc<Reply>> {
        (&mut self.rx).await.ok()
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
    }
}

impl ReplyHub {
    /// A hub whose subscribers each buffer up to `buffer` replies.
    pub fn new(buffer: usize) -> Self {
        let (stream, _) = broadcast::channel(buffer.max(1));
        Self {
            stream,
            waiters: DashMap::new(),
            next_waiter: AtomicU64::new(0),
            router: ChannelRouter::default(),
        }
    }

    /// Subscribes to every reply from now on. A subscriber more than the buffer behind misses
    /// replies (they stay readable in the transcript).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Reply>> {
        self.stream.subscribe()
    }

    /// Registers interest in the reply to `message_id`; register before submitting.
    pub fn wait_for(&self, message_id: &str) -> ReplyWaiter<'_> {
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
        }
    }

    /// Stops every pending waiter (they see `None`); used at shutdown.
    pub fn close(&self) {
        self.waiters.clear();
        self.router.clear();
    }

    /// The channels replies are pushed to.
    pub fn router(&self) -> &ChannelRouter {
        &self.router
    }

    /// Publishes a reply.
    pub fn publish(&self, reply: Reply) {
        let reply = Arc::new(reply);
        for id in &reply.in_reply_to {
            if let Some((_, waiting)) = self.waiters.remove(id) {
                for (_, tx) in waiting {
                    let _ = tx.send(Arc::clone(&reply));
                }
            }
        }
        self.router.route(&reply);
        let _ = self.stream.send(reply);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply_to(id: &str) -> Reply {
        Reply {
            session_key: "k".into(),
            text: format!("answer to {id}"),
            in_reply_to: vec![id.into()],
            seq: 1,
            error: false,
            route: None,
            tool_calls: Vec::new(),
        }
    }

    #[tokio::test]
    async fn every_waiter_of_a_message_gets_its_reply() {
        let hub = ReplyHub::new(4);
        let mut original = hub.wait_for("m1");
        let mut retry = hub.wait_for("m1");
        // A third waiter that gave up must not take the others with it.
        drop(hub.wait_for("m1"));
        hub.publish(reply_to("m1"));
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
}
