//! Streaming previews, for every platform that can edit a message (Telegram, Discord, Slack):
//! while a reply streams, the chat shows it as one message that grows. The first delta sends a
//! message with the text so far; later deltas edit it, at most once per `edit_interval_ms`
//! (platforms limit edits) and only while the platform says there is room; the final reply
//! edits it a last time (each channel's `deliver`, through [`Previews::finish`]).
//!
//! Deltas arrive on the turn's task and must not wait: [`Previews`] only appends the text to
//! the preview's draft, a `watch` channel (a queue of one that keeps the newest text, so a slow
//! API skips intermediate states, never the end). One task per preview does the network calls.
//! Previews are bounded by [`MAX_PREVIEWS`] per channel (past it, replies are final-only) and
//! by [`PREVIEW_MAX_AGE`].

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::replies::{Delta, ReplyRoute};
use crate::runtime::DeltaTaker;

/// Most replies one channel shows as previews at once; the replies past it are sent only when
/// final.
pub(crate) const MAX_PREVIEWS: usize = 256;

/// How long a preview lives without its final reply (a turn that never ends); then it is
/// forgotten and a late final reply is sent as a new message.
pub(crate) const PREVIEW_MAX_AGE: Duration = Duration::from_secs(15 * 60);

/// How long the final reply waits for its preview's send or edit in flight (one API call of
/// at most `call_timeout`) beyond that call's timeout, before it gives up on the preview.
const PREVIEW_SETTLE_MARGIN: Duration = Duration::from_secs(5);

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

/// How a platform measures a message's length, and its most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextLimit {
    /// At most this many UTF-16 code units (Telegram).
    Utf16(usize),
    /// At most this many characters (Discord, Slack).
    Chars(usize),
}

impl TextLimit {
    fn most(self) -> usize {
        match self {
            TextLimit::Utf16(n) | TextLimit::Chars(n) => n,
        }
    }

    fn cost(self, c: char) -> usize {
        match self {
            TextLimit::Utf16(_) => c.len_utf16(),
            TextLimit::Chars(_) => 1,
        }
    }
}

/// The text of a preview so far, cut at one message's length (the rest only matters for the
/// final reply, which is chunked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Draft {
    /// The text.
    pub text: String,
    limit: TextLimit,
    used: usize,
    round: u32,
}

impl Draft {
    /// An empty draft of at most one message under `limit`.
    pub(crate) fn new(limit: TextLimit) -> Self {
        Self {
            text: String::new(),
            limit,
            used: 0,
            round: 0,
        }
    }

    /// Appends `piece` of model call `round`; a new round (after a tool call) starts afresh.
    pub(crate) fn push(&mut self, round: u32, piece: &str) {
        if round != self.round {
            *self = Draft {
                round,
                ..Draft::new(self.limit)
            };
        }
        for c in piece.chars() {
            let cost = self.limit.cost(c);
            if self.used + cost > self.limit.most() {
                break;
            }
            self.used += cost;
            self.text.push(c);
        }
    }
}

/// Why a preview call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum PreviewError {
    /// The platform asked to wait (429); the next edit waits at least this long.
    #[error("rate limited")]
    RateLimited(Option<Duration>),
    /// Anything else; the edit is skipped (the final reply makes up for it).
    #[error("{0}")]
    Failed(String),
}

/// The calls a preview makes on one platform (a trait so the loop is tested without a
/// network).
pub(crate) trait PreviewApi: Send + Sync + 'static {
    /// The platform's id of a sent message.
    type Id: Clone + Send + Sync + std::fmt::Debug + 'static;

    /// Sends the first preview; returns its message id.
    fn send(&self, text: &str) -> impl Future<Output = Result<Self::Id, PreviewError>> + Send;

    /// Edits the preview `id` to `text`.
    fn edit(
        &self,
        id: &Self::Id,
        text: &str,
    ) -> impl Future<Output = Result<(), PreviewError>> + Send;

    /// Whether the platform's rate limit leaves room for an edit of `id` now (Discord reads
    /// its route's bucket); when not, this edit is skipped and the next delta tries again.
    fn has_room(&self, _id: &Self::Id) -> impl Future<Output = bool> + Send {
        std::future::ready(true)
    }
}

/// Shows `draft` as it grows until its sender is dropped (the final reply came) or `until`:
/// sends it first, then edits it at most once per `interval` to its newest text. Returns the
/// preview's message id, if the first send succeeded. Edit failures are skipped (the final
/// reply makes up for them).
pub(crate) async fn show<A: PreviewApi>(
    api: &A,
    mut draft: watch::Receiver<Draft>,
    interval: Duration,
    until: Instant,
) -> Option<A::Id> {
    let first = draft.borrow_and_update().text.clone();
    let id = match api.send(&first).await {
        Ok(id) => id,
        Err(error) => {
            tracing::debug!(%error, "preview not sent; the reply comes when final");
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
            _ = closed_or_never(&draft) => true,
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
        if !api.has_room(&id).await {
            tracing::debug!("no room in the edit rate limit; this preview edit is skipped");
            continue;
        }
        match api.edit(&id, &text).await {
            Ok(()) => shown = text,
            Err(PreviewError::RateLimited(wait)) => {
                throttle.sent(now + wait.unwrap_or(interval));
            }
            Err(error) => tracing::debug!(%error, "preview edit failed; skipped"),
        }
    }
}

/// Resolves when `draft`'s sender is dropped; pending otherwise. `changed` on a clone marks
/// nothing seen on `draft`, so the newest text stays to be read after the wait.
async fn closed_or_never(draft: &watch::Receiver<Draft>) {
    let mut probe = draft.clone();
    while probe.changed().await.is_ok() {}
}

/// One preview in progress.
struct Entry<Id> {
    draft: watch::Sender<Draft>,
    task: JoinHandle<Option<Id>>,
    /// The message ids the reply answers.
    in_reply_to: Vec<String>,
}

/// Whether a new reply answering `new` takes over the preview of a reply of the same session
/// answering `old`: when it answers all of those messages too (an interrupted turn, whose
/// messages the next turn answers with the new ones), so no stale preview stays behind.
fn takes_over(old: &[String], new: &[String]) -> bool {
    old.iter().all(|id| new.contains(id))
}

/// The key of the reply a delta or reply belongs to.
pub(crate) fn key(session_key: &str, in_reply_to: &[String]) -> String {
    format!("{session_key}\n{}", in_reply_to.join("\n"))
}

/// Where a reply's preview goes: the platform call target for a route, or `None` when the
/// route cannot take one (not this platform's id).
pub(crate) type TargetOf<A> = Box<dyn Fn(&ReplyRoute) -> Option<A> + Send + Sync>;

/// How a channel's previews behave.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PreviewSettings {
    /// Least time between two edits of one preview.
    pub interval: Duration,
    /// One message's length on the platform.
    pub limit: TextLimit,
    /// The longest one platform call may take (the final reply waits that long, and a little
    /// more, for a call in flight).
    pub call_timeout: Duration,
}

/// The previews in progress of one channel (one bot account).
pub(crate) struct Previews<A: PreviewApi> {
    account_id: String,
    settings: PreviewSettings,
    target: TargetOf<A>,
    entries: Mutex<HashMap<String, Entry<A::Id>>>,
}

impl<A: PreviewApi> std::fmt::Debug for Previews<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Previews({})", self.len())
    }
}

impl<A: PreviewApi> Previews<A> {
    /// Previews of replies of `account_id`, sent to what `target` makes of their route.
    pub(crate) fn new(account_id: String, settings: PreviewSettings, target: TargetOf<A>) -> Self {
        Self {
            account_id,
            settings,
            target,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// Ends the preview of the reply answering `in_reply_to` in `session_key`: waits for its
    /// call in flight and returns its message id, if it was sent. None when there was no
    /// preview.
    pub(crate) async fn finish(&self, session_key: &str, in_reply_to: &[String]) -> Option<A::Id> {
        let entry = self
            .entries
            .lock()
            .ok()?
            .remove(&key(session_key, in_reply_to))?;
        drop(entry.draft);
        let settle = self.settings.call_timeout + PREVIEW_SETTLE_MARGIN;
        match tokio::time::timeout(settle, entry.task).await {
            Ok(Ok(id)) => id,
            _ => None,
        }
    }

    /// How many previews are in progress.
    pub(crate) fn len(&self) -> usize {
        self.entries.lock().map_or(0, |e| e.len())
    }

    /// Forgets the preview whose draft `draft` reads (its key may have changed by a take-over).
    fn forget(&self, draft: &watch::Receiver<Draft>) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.retain(|_, e| !e.draft.subscribe().same_channel(draft));
        }
    }
}

impl<A: PreviewApi> DeltaTaker for Arc<Previews<A>> {
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
            tracing::debug!("too many previews; this reply is sent when final");
            return;
        }
        let mut draft = Draft::new(self.settings.limit);
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
        let Some(target) = (self.target)(route) else {
            return;
        };
        let (tx, rx) = watch::channel(draft);
        // Weak: a preview task must not keep its channel's previews (and so its own draft's
        // sender) alive once the channel is gone; then the draft closes and the task ends.
        let previews = Arc::downgrade(self);
        let interval = self.settings.interval;
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
mod tests;
