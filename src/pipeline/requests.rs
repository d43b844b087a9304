//! What an OpenAI-compatible request asks of its turn beyond the message text: sampling
//! parameters, client-side tools, the results of client tools the previous turn called; and
//! the recent requests a retry without an `Idempotency-Key` joins.
//!
//! Both are held in memory only, in [`RecentMap`]s bounded by [`MAX_RECENT_REQUESTS`] and
//! [`RECENT_REQUEST_TTL_MS`]: the HTTP request that carries them waits for its reply, so a
//! turn replayed after a restart has no client left to honour them for (it is answered with
//! the configured defaults; tool results then read as the message text).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::model::{ChatMessage, RequestParams, Role, ToolSpec};

/// Most requests remembered in each map; the oldest is forgotten first.
pub(crate) const MAX_RECENT_REQUESTS: usize = 4_096;

/// How long a request is remembered, in ms: past the longest default reply wait
/// (`[server] reply_timeout_ms`) plus the official clients' retry back-off.
pub(crate) const RECENT_REQUEST_TTL_MS: u64 = 15 * 60 * 1_000;

/// A client tool's result, sent as a `role: "tool"` message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientToolResult {
    /// The call it answers.
    pub call_id: String,
    /// Its text.
    pub content: String,
}

/// What one request asks of its turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RequestExtras {
    /// Forwarded to the model.
    pub params: RequestParams,
    /// Tools the client runs itself; calls of them end the turn with `tool_calls`.
    pub client_tools: Vec<ToolSpec>,
    /// Results of the client tools the previous turn called: they continue that turn.
    pub tool_results: Vec<ClientToolResult>,
}

impl RequestExtras {
    /// True when the request asks nothing beyond its text.
    pub(crate) fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Keys to values, forgotten after `ttl_ms` or when more than `capacity` are held (oldest
/// first). Entries are inserted in time order, so the front of the queue is the oldest.
#[derive(Debug)]
pub(crate) struct RecentMap<V> {
    inner: Mutex<Recent<V>>,
    capacity: usize,
    ttl_ms: u64,
}

#[derive(Debug)]
struct Recent<V> {
    values: HashMap<String, (V, u64)>,
    order: VecDeque<(String, u64)>,
}

impl<V: Clone> RecentMap<V> {
    /// An empty map of at most `capacity` entries, each kept `ttl_ms`.
    pub(crate) fn new(capacity: usize, ttl_ms: u64) -> Self {
        Self {
            inner: Mutex::new(Recent {
                values: HashMap::new(),
                order: VecDeque::new(),
            }),
            capacity: capacity.max(1),
            ttl_ms,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Recent<V>> {
        // A panic while holding the lock left at worst a stale entry: keep going.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers `value` under `key` from `now_ms` on.
    pub(crate) fn insert(&self, key: &str, value: V, now_ms: u64) {
        let mut r = self.lock();
        self.expire_locked(&mut r, now_ms);
        r.values.insert(key.to_string(), (value, now_ms));
        r.order.push_back((key.to_string(), now_ms));
        while r.order.len() > self.capacity {
            if let Some((old, at)) = r.order.pop_front() {
                if r.values.get(&old).is_some_and(|(_, t)| *t == at) {
                    r.values.remove(&old);
                }
            }
        }
    }

    fn expire_locked(&self, r: &mut Recent<V>, now_ms: u64) {
        let expired = |at: &u64| now_ms.saturating_sub(*at) >= self.ttl_ms;
        while r.order.front().is_some_and(|(_, at)| expired(at)) {
            let Some((key, at)) = r.order.pop_front() else {
                break;
            };
            if r.values.get(&key).is_some_and(|(_, t)| *t == at) {
                r.values.remove(&key);
            }
        }
    }

    /// The value under `key`, if remembered and not expired at `now_ms`.
    pub(crate) fn get(&self, key: &str, now_ms: u64) -> Option<V> {
        let mut r = self.lock();
        self.expire_locked(&mut r, now_ms);
        r.values.get(key).map(|(v, _)| v.clone())
    }

    /// How many entries are held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().values.len()
    }
}

/// The requests the OpenAI-compatible endpoint handed to turns, shared by the server and the
/// turn engine.
#[derive(Debug)]
pub(crate) struct Requests {
    /// Message id → what its request asks of the turn.
    extras: RecentMap<Arc<RequestExtras>>,
    /// Session and request fingerprint → message id, for retries without an idempotency key.
    retries: RecentMap<String>,
}

impl Default for Requests {
    fn default() -> Self {
        Self {
            extras: RecentMap::new(MAX_RECENT_REQUESTS, RECENT_REQUEST_TTL_MS),
            retries: RecentMap::new(MAX_RECENT_REQUESTS, RECENT_REQUEST_TTL_MS),
        }
    }
}

impl Requests {
    /// Remembers what the request of `message_id` asks (nothing is kept for a plain one).
    pub(crate) fn set_extras(&self, message_id: &str, extras: RequestExtras, now_ms: u64) {
        if !extras.is_empty() {
            self.extras.insert(message_id, Arc::new(extras), now_ms);
        }
    }

    /// What the request of `message_id` asked, if it is still remembered.
    pub(crate) fn extras(&self, message_id: &str, now_ms: u64) -> Option<Arc<RequestExtras>> {
        self.extras.get(message_id, now_ms)
    }

    /// Remembers that the request with `fingerprint` became `message_id`.
    pub(crate) fn remember_attempt(&self, fingerprint: &str, message_id: &str, now_ms: u64) {
        self.retries
            .insert(fingerprint, message_id.to_string(), now_ms);
    }

    /// The message id of an earlier request with `fingerprint`.
    pub(crate) fn earlier_attempt(&self, fingerprint: &str, now_ms: u64) -> Option<String> {
        self.retries.get(fingerprint, now_ms)
    }
}

/// Puts the client's tool results into `messages` where their calls are: a result replaces
/// the placeholder the context's pairing repair put in for the missing one, or follows its
/// call's run of tool messages. A result whose call is not in context is dropped (the pairing
/// repair before the model call would drop it anyway). Returns how many were placed.
pub(crate) fn place_tool_results(
    messages: &mut Vec<ChatMessage>,
    results: &[ClientToolResult],
) -> usize {
    let mut placed = 0;
    for result in results {
        let id = Some(result.call_id.as_str());
        if let Some(m) = messages
            .iter_mut()
            .rev()
            .find(|m| m.role == Role::Tool && m.tool_call_id.as_deref() == id)
        {
            m.content = result.content.as_str().into();
            placed += 1;
            continue;
        }
        let Some(call) = messages
            .iter()
            .rposition(|m| m.tool_calls.iter().any(|c| Some(c.id.as_str()) == id))
        else {
            continue;
        };
        let mut at = call + 1;
        while messages.get(at).is_some_and(|m| m.role == Role::Tool) {
            at += 1;
        }
        messages.insert(
            at,
            crate::tools::result_message(&result.call_id, &result.content),
        );
        placed += 1;
    }
    placed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCall;
    use crate::tools::{call_message, result_message};

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "lookup".into(),
            arguments: "{}".into(),
        }
    }

    fn result(id: &str, text: &str) -> ClientToolResult {
        ClientToolResult {
            call_id: id.into(),
            content: text.into(),
        }
    }

    #[test]
    fn recent_map_forgets_by_age_and_by_capacity() {
        let map = RecentMap::new(2, 100);
        map.insert("a", 1, 0);
        map.insert("b", 2, 10);
        assert_eq!(map.get("a", 50), Some(1));
        map.insert("c", 3, 60);
        assert_eq!(map.get("a", 60), None, "over capacity: the oldest goes");
        assert_eq!(map.get("b", 60), Some(2));
        assert_eq!(map.get("b", 110), None, "expired");
        assert_eq!(map.get("c", 110), Some(3));
        assert_eq!(map.len(), 1);
        // A key inserted again lives from its newest insertion.
        map.insert("c", 4, 150);
        assert_eq!(map.get("c", 200), Some(4));
    }

    #[test]
    fn plain_requests_are_not_remembered() {
        let requests = Requests::default();
        requests.set_extras("m1", RequestExtras::default(), 0);
        assert!(requests.extras("m1", 0).is_none());
        let mut extras = RequestExtras::default();
        extras.params.seed = Some(3);
        requests.set_extras("m2", extras.clone(), 0);
        assert_eq!(requests.extras("m2", 1).as_deref(), Some(&extras));
        assert!(requests.extras("m2", RECENT_REQUEST_TTL_MS).is_none());
    }

    #[test]
    fn results_replace_placeholders_or_follow_their_call() {
        let mut messages = vec![
            ChatMessage::text(Role::User, "weather?"),
            call_message("", &[call("c1"), call("c2")]),
            result_message("c1", "placeholder"),
            ChatMessage::text(Role::User, "and now?"),
        ];
        let placed = place_tool_results(
            &mut messages,
            &[
                result("c1", "sunny"),
                result("c2", "windy"),
                result("zz", "lost"),
            ],
        );
        assert_eq!(placed, 2);
        let tools: Vec<(&str, &str)> = messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .map(|m| (m.tool_call_id.as_deref().unwrap_or(""), m.content.as_str()))
            .collect();
        assert_eq!(tools, [("c1", "sunny"), ("c2", "windy")]);
        assert_eq!(messages[3].tool_call_id.as_deref(), Some("c2"));
        assert_eq!(messages[4].role, Role::User);
    }
}
