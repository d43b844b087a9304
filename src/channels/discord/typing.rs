//! The typing indicator: shown in a channel from the moment a message there is accepted until
//! the reply is delivered, refreshed every [`TYPING_REFRESH`] (Discord shows it for ~10 s),
//! never longer than [`MAX_TYPING`], in at most [`MAX_TYPING_CHANNELS`] channels at once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::task::AbortHandle;

use super::rest::Rest;

/// How often the indicator is sent again while a turn runs.
pub(crate) const TYPING_REFRESH: Duration = Duration::from_secs(8);

/// Longest a channel shows the indicator for one turn (a turn that never replies does not
/// type forever).
pub(crate) const MAX_TYPING: Duration = Duration::from_secs(120);

/// Channels typing at once; past it, new ones show no indicator.
pub(crate) const MAX_TYPING_CHANNELS: usize = 1_000;

/// The channels showing the indicator now.
#[derive(Debug)]
pub(crate) struct Typing {
    rest: Rest,
    active: Mutex<HashMap<u64, AbortHandle>>,
}

impl Typing {
    pub(crate) fn new(rest: Rest) -> Self {
        Self {
            rest,
            active: Mutex::new(HashMap::new()),
        }
    }

    fn active(&self) -> std::sync::MutexGuard<'_, HashMap<u64, AbortHandle>> {
        self.active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Shows the indicator in `channel` until [`Typing::stop`] (or [`MAX_TYPING`]).
    pub(crate) fn start(&self, channel: u64) {
        let mut active = self.active();
        active.retain(|_, h| !h.is_finished());
        if active.contains_key(&channel) || active.len() >= MAX_TYPING_CHANNELS {
            return;
        }
        let rest = self.rest.clone();
        let task = tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + MAX_TYPING;
            while tokio::time::Instant::now() < deadline {
                if let Err(error) = rest.typing(channel).await {
                    tracing::debug!(%error, channel, "discord typing indicator failed");
                }
                tokio::time::sleep(TYPING_REFRESH).await;
            }
        });
        active.insert(channel, task.abort_handle());
    }

    /// Stops the indicator in `channel` (its reply is being sent).
    pub(crate) fn stop(&self, channel: u64) {
        if let Some(task) = self.active().remove(&channel) {
            task.abort();
        }
    }

    /// Stops every indicator (the runtime is stopping).
    pub(crate) fn stop_all(&self) {
        for (_, task) in self.active().drain() {
            task.abort();
        }
    }
}
