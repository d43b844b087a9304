//! Request-level system instructions of a session: the system/developer messages of its
//! newest OpenAI-compatible request, kept durably in the `channel_state` tree (under the
//! reserved channel [`INSTRUCTIONS_CHANNEL`]) and sent to the model as a system block.

use super::Store;
use crate::error::StoreError;

/// The `channel_state` channel holding instructions; no transport is named like it.
pub(super) const INSTRUCTIONS_CHANNEL: &str = "\u{1}instructions";

impl Store {
    /// The request-level instructions of `session_key`, if any.
    pub fn session_instructions(&self, session_key: &str) -> Result<Option<String>, StoreError> {
        self.channel_state(INSTRUCTIONS_CHANNEL, session_key)?
            .map(|bytes| {
                String::from_utf8(bytes).map_err(|e| StoreError::Decode {
                    tree: "channel_state",
                    reason: format!("session instructions are not UTF-8: {e}"),
                })
            })
            .transpose()
    }

    /// Stores `text` as the instructions of `session_key` unless they are already what is
    /// stored; returns the group-commit ticket of the write, `None` when nothing changed.
    pub fn set_session_instructions(
        &self,
        session_key: &str,
        text: &str,
    ) -> Result<Option<u64>, StoreError> {
        if self.session_instructions(session_key)?.as_deref() == Some(text) {
            return Ok(None);
        }
        self.set_channel_state(INSTRUCTIONS_CHANNEL, session_key, text.as_bytes())
            .map(Some)
    }

    /// Forgets the instructions of `session_key` (with the session).
    pub fn delete_session_instructions(&self, session_key: &str) -> Result<(), StoreError> {
        self.delete_channel_state(INSTRUCTIONS_CHANNEL, session_key)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::StorageConfig;
    use crate::store::Store;

    #[tokio::test]
    async fn instructions_are_kept_updated_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let config = StorageConfig {
            data_dir: dir.path().to_path_buf(),
            ..StorageConfig::default()
        };
        let store = Store::open(&config).unwrap();
        assert_eq!(store.session_instructions("k").unwrap(), None);
        assert!(store
            .set_session_instructions("k", "be brief")
            .unwrap()
            .is_some());
        assert!(
            store
                .set_session_instructions("k", "be brief")
                .unwrap()
                .is_none(),
            "unchanged"
        );
        assert!(store
            .set_session_instructions("k", "be kind")
            .unwrap()
            .is_some());
        assert_eq!(
            store.session_instructions("k").unwrap().as_deref(),
            Some("be kind")
        );
        assert_eq!(store.session_instructions("other").unwrap(), None);
        store.delete_session_instructions("k").unwrap();
        assert_eq!(store.session_instructions("k").unwrap(), None);
    }
}
