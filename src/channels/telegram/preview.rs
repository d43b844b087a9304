//! Streaming previews: while a reply streams, Telegram shows it as one message that grows.
//! The first delta sends a message with the text so far; later deltas edit it, at most once
//! per `edit_interval_ms` (Telegram limits edits per chat); the final reply edits it a last
//! time (see `TelegramChannel::deliver`).
//!
//! Deltas arrive on the turn's task and must not wait: [`Previews::take`] only appends the
//! text to the preview's draft, a `watch` channel (a queue of one that keeps the newest text,
//! so a slow Bot API skips intermediate states, never the end). One task per preview does the
//! network calls. Previews are bounded by [`MAX_PREVIEWS`] (past it, replies are final-only)
//! and by [`PREVIEW_MAX_AGE`].

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::api::{ApiError, BotApi, CALL_TIMEOUT};
use super::chunk::MAX_MESSAGE_UTF16;
use crate::replies::{Delta, ReplyRoute};
use crate::runtime::DeltaTaker;

/// Most replies shown as previews at once; the replies past it are sent only when final.
pub(crate) const MAX_PREVIEWS: usize = 256;

/// How long a preview lives without its final reply (a turn that never ends); then it is
/// forgotten and a late final reply is sent as a new message.
pub(crate) const PREVIEW_MAX_AGE: Duration = Duration::from_secs(15 * 60);

/// How long the final reply waits for its preview's send or edit in flight (one Bot API call)
/// before it gives up on the preview.
const PREVIEW_SETTLE: Duration = CALL_TIMEOUT.saturating_add(Duration::from_secs(5));

/// When the next edit may go: edits are at least `interval` apart.
#[derive(Debug, Clone)]
pub(crate) struct Throttle {
    interval: Duration,
    last: Option<Instant>,
}

impl Throttle {
    /// A throttle allowing one edit per `interval`.
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: None,
        }
    }

    /// The earliest instant from `now` on when the next edit may go.
    pub(crate) fn next_at(&self, now: Instant) -> Instant {
        self.last
            .map_or(now, |last| (last + self.interval).max(now))
    }

    /// An edit (or the first send) went at `at`; a 429 may set it later, to its `Retry-After`.
    pub(crate) fn sent(&mut self, at: Instant) {
        self.last = Some(at);
    }
}

/// The text of a preview so far, cut at one message's length (the rest only matters for the
/// final reply, which is chunked).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Draft {
    /// The text.
    pub text: String,
    utf16: usize,
    round: u32,
}

impl Draft {
    /// Appends `piece` of model call `round`; a new round (after a tool call) starts afresh.
    pub(crate) fn push(&mut self, round: u32, piece: &str) {
        if round != self.round {
            *self = Draft {
                round,
                ..Draft::default()
            };
        }
        for c in piece.chars() {
            if self.utf16 + c.len_utf16() > MAX_MESSAGE_UTF16 {
                break;
            }
            self.utf16 += c.len_utf16();
            self.text.push(c);
        }
    }
}

/// The two Bot API calls a preview makes (a trait so the loop is tested without a network).
pub(super) trait PreviewApi: Send + Sync + 'static {
    /// Sends the first preview; returns its message id.
    fn send(&self, text: &str) -> impl Future<Output = Result<i64, ApiError>> + Send;
    /// Edits the preview `message_id` to `text`.
    fn edit(
        &self,
        message_id: i64,
        text: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send;
}

/// Where a preview goes: a chat (and topic), quoting the message it answers.
#[derive(Debug, Clone)]
pub(super) struct Target {
    /// The Bot API client.
    pub api: BotApi,
    /// `chat_id` as the Bot API takes it.
    pub chat: Value,
    /// The forum topic, if any.
    pub topic: Option<i64>,
    /// The message answered.
    pub reply_to: Option<i64>,
}

impl PreviewApi for Target {
    async fn send(&self, text: &str) -> Result<i64, ApiError> {
        let body = super::message_body(&self.chat, self.topic, self.reply_to, text);
        Ok(self.api.send_message(&body).await?.message_id)
    }

    async fn edit(&self, message_id: i64, text: &str) -> Result<(), ApiError> {
        let body = json!({"chat_id": self.chat, "message_id": message_id, "text": text});
        self.api.edit_message_text(&body).await
    }
}

/// Shows `draft` as it grows until its sender is dropped (the final reply came) or `until`:
/// sends it first, then edits it at most once per `interval` to its newest text. Returns the
/// preview's message id, if the first send succeeded. Edit failures are skipped (the final
/// reply makes up for them).
pub(super) async fn show<A: PreviewApi>(
    api: &A,
    mut draft: watch::Receiver<Draft>,
    interval: Duration,
    until: Instant,
) -> Option<i64> {
    let first = draft.borrow_and_update().text.clone();
    let id = match api.send(&first).await {
        Ok(id) => id,
        Err(error) => {
            tracing::debug!(%error, "telegram preview not sent; the reply comes when final");
            return None;
        }
    };
    let mut throttle = Throttle::new(interval);
    throttle.sent(Instant::now());
    let mut shown = first;
    loop {
        tokio::select! {
            changed = draft.changed() => if changed.is_err() { return Some(id) },
            _ = tokio::time::sleep_until(until) => return Some(id),
        }
        // Wait out the interval; deltas meanwhile only grow the draft.
        let at = throttle.next_at(Instant::now()).min(until);
        let closed = tokio::select! {
            _ = tokio::time::sleep_until(at) => false,
            _ = draft.closed_or_never() => true,
        };
        if closed || at >= until {
            return Some(id);
        }
        let text = draft.borrow_and_update().text.clone();
        if text == shown {
            continue;
        }
        let now = Instant::now();
        throttle.sent(now);
        match api.edit(id, &text).await {
            Ok(()) => shown = text,
            Err(ApiError::Api {
                retry_after: Some(secs),
                ..
            }) => throttle.sent(now + Duration::from_secs(secs)),
            Err(error) => tracing::debug!(%error, "telegram preview edit failed; skipped"),
        }
    }
}

/// Waiting for a draft's sender to go away.
trait ClosedOrNever {
    /// Resolves when the sender is dropped; pending otherwise.
    fn closed_or_never(&mut self) -> impl Future<Output = ()> + Send;
}

impl ClosedOrNever for watch::Receiver<Draft> {
    async fn closed_or_never(&mut self) {
        // `changed` marks nothing seen, so the newest text stays to be read after the wait.
        let mut probe = self.clone();
        while probe.changed().await.is_ok() {}
    }
}

/// One preview in progress.
struct Entry {
    draft: watch::Sender<Draft>,
    task: JoinHandle<Option<i64>>,
    /// The message ids the reply answers.
    in_reply_to: Vec<String>,
}

/// Whether a new reply answering `new` takes over the preview of a reply of the same session
/// answering `old`: when it answers all of those messages too (an interrupted turn, whose
/// messages the next turn answers with the new ones), so no stale preview stays behind.
fn takes_over(old: &[String], new: &[String]) -> bool {
    old.iter().all(|id| new.contains(id))
}

/// The previews in progress of one Telegram channel.
pub(super) struct Previews {
    api: BotApi,
    account_id: String,
    interval: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

impl std::fmt::Debug for Previews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Previews({})", self.len())
    }
}

/// The key of the reply a delta or reply belongs to.
pub(super) fn key(session_key: &str, in_reply_to: &[String]) -> String {
    format!("{session_key}\n{}", in_reply_to.join("\n"))
}

impl Previews {
    /// Previews through `api` for replies of `account_id`, edited at most once per `interval`.
    pub(super) fn new(api: BotApi, account_id: String, interval: Duration) -> Self {
        Self {
            api,
            account_id,
            interval,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// Ends the preview of the reply `key`: waits for its call in flight and returns its
    /// message id, if it was sent. None when there was no preview.
    pub(super) async fn finish(&self, key: &str) -> Option<i64> {
        let entry = self.entries.lock().ok()?.remove(key)?;
        drop(entry.draft);
        match tokio::time::timeout(PREVIEW_SETTLE, entry.task).await {
            Ok(Ok(id)) => id,
            _ => None,
        }
    }

    /// How many previews are in progress.
    pub(super) fn len(&self) -> usize {
        self.entries.lock().map_or(0, |e| e.len())
    }

    /// Forgets the preview whose draft `draft` reads (its key may have changed by a take-over).
    fn forget(&self, draft: &watch::Receiver<Draft>) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.retain(|_, e| !e.draft.subscribe().same_channel(draft));
        }
    }
}

impl DeltaTaker for Arc<Previews> {
    fn take(&self, route: &ReplyRoute, delta: Arc<Delta>) {
        if route.account_id != self.account_id {
            return;
        }
        let key = key(&delta.session_key, &delta.in_reply_to);
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        if let Some(entry) = entries.get(&key) {
            entry
                .draft
                .send_modify(|d| d.push(delta.round, &delta.text));
            return;
        }
        if entries.len() >= MAX_PREVIEWS {
            tracing::debug!("too many telegram previews; this reply is sent when final");
            return;
        }
        let mut draft = Draft::default();
        draft.push(delta.round, &delta.text);
        if draft.text.is_empty() {
            return;
        }
        let prefix = format!("{}\n", delta.session_key);
        let stale = entries
            .iter()
            .find(|(k, e)| k.starts_with(&prefix) && takes_over(&e.in_reply_to, &delta.in_reply_to))
            .map(|(k, _)| k.clone());
        if let Some(mut entry) = stale.and_then(|k| entries.remove(&k)) {
            entry.draft.send_replace(draft);
            entry.in_reply_to.clone_from(&delta.in_reply_to);
            entries.insert(key, entry);
            return;
        }
        let (chat, topic) = super::split_chat_id(&route.chat_id);
        let target = Target {
            api: self.api.clone(),
            chat: super::chat_value(chat),
            topic: topic.and_then(|t| t.parse().ok()),
            reply_to: route.message_id.parse().ok(),
        };
        let (tx, rx) = watch::channel(draft);
        // Weak: a preview task must not keep its channel's previews (and so its own draft's
        // sender) alive once the channel is gone; then the draft closes and the task ends.
        let previews = Arc::downgrade(self);
        let interval = self.interval;
        let task = tokio::spawn(async move {
            let until = Instant::now() + PREVIEW_MAX_AGE;
            let id = show(&target, rx.clone(), interval, until).await;
            if Instant::now() >= until {
                if let Some(previews) = Weak::upgrade(&previews) {
                    previews.forget(&rx);
                }
            }
            id
        });
        let in_reply_to = delta.in_reply_to.clone();
        entries.insert(
            key,
            Entry {
                draft: tx,
                task,
                in_reply_to,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;

    use tokio::sync::Notify;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_throttle_spaces_edits_by_the_interval() {
        let interval = Duration::from_millis(1_000);
        let mut t = Throttle::new(interval);
        let start = Instant::now();
        assert_eq!(t.next_at(start), start, "the first goes at once");
        t.sent(start);
        tokio::time::advance(Duration::from_millis(300)).await;
        assert_eq!(t.next_at(Instant::now()), start + interval);
        tokio::time::advance(Duration::from_millis(2_000)).await;
        let now = Instant::now();
        assert_eq!(t.next_at(now), now, "past the interval: at once");
        t.sent(now + Duration::from_secs(5));
        assert_eq!(t.next_at(now), now + Duration::from_secs(5) + interval);
    }

    #[test]
    fn a_draft_stops_at_one_message_and_a_new_round_starts_afresh() {
        let mut d = Draft::default();
        d.push(0, "ab");
        d.push(0, "c");
        assert_eq!(d.text, "abc");
        d.push(0, &"x".repeat(MAX_MESSAGE_UTF16));
        assert_eq!(d.text.encode_utf16().count(), MAX_MESSAGE_UTF16);
        d.push(1, "new");
        assert_eq!(d.text, "new");
    }

    #[test]
    fn a_reply_to_all_of_an_interrupted_turns_messages_takes_its_preview_over() {
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(takes_over(&ids(&["1"]), &ids(&["1", "2"])));
        assert!(takes_over(&ids(&["1", "2"]), &ids(&["2", "1"])));
        assert!(!takes_over(&ids(&["1"]), &ids(&["2"])));
        assert!(!takes_over(&ids(&["1", "3"]), &ids(&["1", "2"])));
    }

    /// Records calls and signals each.
    #[derive(Default)]
    struct Fake {
        calls: StdMutex<Vec<String>>,
        sent: Notify,
    }

    impl PreviewApi for Arc<Fake> {
        async fn send(&self, text: &str) -> Result<i64, ApiError> {
            self.calls.lock().unwrap().push(format!("send {text}"));
            self.sent.notify_one();
            Ok(7)
        }
        async fn edit(&self, id: i64, text: &str) -> Result<(), ApiError> {
            self.calls.lock().unwrap().push(format!("edit {id} {text}"));
            self.sent.notify_one();
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn deltas_inside_one_interval_make_one_trailing_edit() {
        let fake = Arc::new(Fake::default());
        let (tx, rx) = watch::channel(Draft::default());
        tx.send_modify(|d| d.push(0, "a"));
        let interval = Duration::from_millis(1_000);
        let until = Instant::now() + Duration::from_secs(60);
        let api = Arc::clone(&fake);
        let task = tokio::spawn(async move { show(&api, rx, interval, until).await });
        fake.sent.notified().await;
        for piece in ["b", "c", "d"] {
            tokio::time::advance(Duration::from_millis(100)).await;
            tx.send_modify(|d| d.push(0, piece));
        }
        tokio::task::yield_now().await;
        assert_eq!(*fake.calls.lock().unwrap(), vec!["send a"], "no edit yet");
        fake.sent.notified().await;
        assert_eq!(*fake.calls.lock().unwrap(), vec!["send a", "edit 7 abcd"]);
        drop(tx);
        assert_eq!(task.await.unwrap(), Some(7));
        assert_eq!(fake.calls.lock().unwrap().len(), 2, "no edit after the end");
    }
}
