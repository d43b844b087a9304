//! The runtime's side of thread starters: a channel keeps the message a thread session
//! started from (read once from the platform), and the next assembly shows it.

use super::Runtime;
use crate::error::Error;
use crate::inbound::normalize_session_key;
use crate::store::ThreadStarter;

impl Runtime {
    /// Whether the thread session `key` has its starter kept. A read error counts as not
    /// kept (the caller may then read the platform again; the write is idempotent).
    pub(crate) fn has_thread_starter(&self, key: &str) -> bool {
        let key = normalize_session_key(key);
        match self.inner.store.thread_starter(&key) {
            Ok(found) => found.is_some(),
            Err(error) => {
                tracing::warn!(%error, "cannot read a thread starter");
                false
            }
        }
    }

    /// Keeps `starter` for the thread session `key`, durably (a restart does not read the
    /// platform again); the next assembly of the session shows it. While the disk is full:
    /// `InsufficientStorage` and nothing written.
    pub(crate) async fn set_thread_starter(
        &self,
        key: &str,
        starter: &ThreadStarter,
    ) -> Result<(), Error> {
        self.keep_beside_session(key, |store, key| {
            store.set_thread_starter(key, starter).map(Some)
        })
        .await
    }
}
