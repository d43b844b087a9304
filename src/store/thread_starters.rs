//! The message that started a thread session (the seed's `ThreadStarterBody`): read once by
//! the channel from the platform and kept durably beside the session — in the
//! `channel_state` tree under the reserved channel [`THREAD_STARTERS_CHANNEL`], keyed by
//! session key, like the session's instructions — so a restart does not ask the platform
//! again and a cold session stays cold. The `thread_starter` context source shows it.

use serde::{Deserialize, Serialize};

use super::Store;
use crate::error::StoreError;

/// The `channel_state` channel holding thread starters; no transport is named like it.
pub(super) const THREAD_STARTERS_CHANNEL: &str = "\u{1}thread_starters";

/// Longest starter text kept, in characters (a platform message is shorter; the context
/// source caps what it shows again).
pub const MAX_THREAD_STARTER_CHARS: usize = 4_000;

/// The message a thread started from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadStarter {
    /// Who wrote it (display name).
    pub sender_name: String,
    /// Its text, at most [`MAX_THREAD_STARTER_CHARS`] characters.
    pub text: String,
    /// Its platform message id.
    pub message_id: String,
    /// When it was written, ms since the epoch (0 when unknown).
    #[serde(default)]
    pub timestamp_ms: u64,
}

impl Store {
    /// The starter of the thread session `session_key`, if one was kept. An unreadable value
    /// is an error (the caller logs it and shows none).
    pub fn thread_starter(&self, session_key: &str) -> Result<Option<ThreadStarter>, StoreError> {
        self.channel_state(THREAD_STARTERS_CHANNEL, session_key)?
            .map(|bytes| {
                serde_json::from_slice(&bytes).map_err(|e| StoreError::Decode {
                    tree: "channel_state",
                    reason: format!("thread starter: {e}"),
                })
            })
            .transpose()
    }

    /// Keeps `starter` (its text cut to [`MAX_THREAD_STARTER_CHARS`]) for `session_key`;
    /// returns the group-commit ticket of the write.
    pub fn set_thread_starter(
        &self,
        session_key: &str,
        starter: &ThreadStarter,
    ) -> Result<u64, StoreError> {
        let mut starter = starter.clone();
        if starter.text.chars().count() > MAX_THREAD_STARTER_CHARS {
            starter.text = starter
                .text
                .chars()
                .take(MAX_THREAD_STARTER_CHARS)
                .collect();
        }
        let bytes = serde_json::to_vec(&starter).map_err(|e| StoreError::Decode {
            tree: "channel_state",
            reason: format!("thread starter: {e}"),
        })?;
        self.set_channel_state(THREAD_STARTERS_CHANNEL, session_key, &bytes)
    }

    /// Forgets the starter of `session_key` (with the session).
    pub fn delete_thread_starter(&self, session_key: &str) -> Result<(), StoreError> {
        self.delete_channel_state(THREAD_STARTERS_CHANNEL, session_key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StorageConfig;

    #[tokio::test]
    async fn starters_are_kept_cut_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let config = StorageConfig {
            data_dir: dir.path().to_path_buf(),
            ..StorageConfig::default()
        };
        let store = Store::open(&config).unwrap();
        assert_eq!(store.thread_starter("k").unwrap(), None);
        let starter = ThreadStarter {
            sender_name: "Ann".into(),
            text: "x".repeat(MAX_THREAD_STARTER_CHARS + 10),
            message_id: "30".into(),
            timestamp_ms: 5,
        };
        store.set_thread_starter("k", &starter).unwrap();
        let kept = store.thread_starter("k").unwrap().unwrap();
        assert_eq!(kept.text.chars().count(), MAX_THREAD_STARTER_CHARS);
        assert_eq!(kept.sender_name, "Ann");
        assert_eq!(store.thread_starter("other").unwrap(), None);
        // A record without the optional field still reads.
        store
            .set_channel_state(
                THREAD_STARTERS_CHANNEL,
                "old",
                br#"{"sender_name":"B","text":"t","message_id":"1"}"#,
            )
            .unwrap();
        assert_eq!(
            store.thread_starter("old").unwrap().unwrap().timestamp_ms,
            0
        );
        store.delete_thread_starter("k").unwrap();
        assert_eq!(store.thread_starter("k").unwrap(), None);
    }
}
