//! Small durable values channels keep between runs (e.g. Telegram's `getUpdates` offset), in
//! the `channel_state` tree under `channel NUL key`.

use super::Store;
use crate::error::StoreError;

/// The tree's name.
pub(super) const TREE: &str = "channel_state";

pub(super) fn state_key(channel: &str, key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(channel.len() + key.len() + 1);
    k.extend_from_slice(channel.as_bytes());
    k.push(0);
    k.extend_from_slice(key.as_bytes());
    k
}

impl Store {
    fn channel_tree(&self) -> Result<sled::Tree, StoreError> {
        Ok(self.inner().channel_state.clone())
    }

    /// The value `channel` stored under `key`.
    pub fn channel_state(&self, channel: &str, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .channel_tree()?
            .get(state_key(channel, key))
            .map_err(StoreError::sled("reading channel state"))?
            .map(|v| v.to_vec()))
    }

    /// Stores `value` for `channel` under `key` (not yet flushed) and returns the group-commit
    /// ticket to wait on.
    pub fn set_channel_state(
        &self,
        channel: &str,
        key: &str,
        value: &[u8],
    ) -> Result<u64, StoreError> {
        let _write = self.write_gate();
        let inner = self.inner();
        inner
            .channel_state
            .insert(state_key(channel, key), value)
            .map_err(StoreError::sled("writing channel state"))?;
        Ok(inner.commit.ticket())
    }

    /// Removes `channel`'s value under `key` (not yet flushed).
    pub fn delete_channel_state(&self, channel: &str, key: &str) -> Result<(), StoreError> {
        let _write = self.write_gate();
        self.inner()
            .channel_state
            .remove(state_key(channel, key))
            .map_err(StoreError::sled("deleting channel state"))?;
        Ok(())
    }
}
