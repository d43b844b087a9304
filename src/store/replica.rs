//! What a cluster node keeps of its partitions' changelogs beside the sessions: per partition
//! the changelog position applied here (`channel_state`, under `cluster NUL applied.<p>`), per
//! answered message a mark (`dedupe`, under [`ANSWERED_PREFIX`], pruned with the dedupe keys
//! once expired). Both are written in the transaction of the turn they belong to
//! ([`super::ReplicaMarks`]). A single node writes neither.

use super::{channel_state, decode, Store};
use crate::error::StoreError;

/// The `channel_state` "channel" the applied positions are kept under.
const STATE_CHANNEL: &str = "cluster";

/// Prefix of an answered mark's key in the `dedupe` tree. Preflight's dedupe keys start with
/// the agent id, which cannot contain a NUL, so the two never meet.
pub(crate) const ANSWERED_PREFIX: &str = "\0cluster-answered\0";

/// The `dedupe` key of the mark "`message_id` of `session_key` is answered".
pub(super) fn answered_key(session_key: &str, message_id: &str) -> String {
    format!("{ANSWERED_PREFIX}{session_key}\0{message_id}")
}

fn applied_state_key(partition: u32) -> String {
    format!("applied.{partition}")
}

/// The `channel_state` write recording `log_seq` as applied for `partition`.
pub(super) fn applied_write(partition: u32, log_seq: u64) -> (Vec<u8>, Vec<u8>) {
    (
        channel_state::state_key(STATE_CHANNEL, &applied_state_key(partition)),
        log_seq.to_be_bytes().to_vec(),
    )
}

impl Store {
    /// The highest changelog sequence applied here for `partition` (0: none).
    pub fn replica_applied(&self, partition: u32) -> Result<u64, StoreError> {
        let Some(bytes) = self.channel_state(STATE_CHANNEL, &applied_state_key(partition))? else {
            return Ok(0);
        };
        let array: [u8; 8] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| StoreError::Decode {
                tree: "channel_state",
                reason: format!(
                    "a cluster changelog position of {} bytes, expected 8",
                    bytes.len()
                ),
            })?;
        Ok(u64::from_be_bytes(array))
    }

    /// Records `log_seq` as applied here for `partition` (a changelog record that is no turn:
    /// a turn writes its position in its own transaction). Not flushed: a crash applies the
    /// record again.
    pub fn set_replica_applied(&self, partition: u32, log_seq: u64) -> Result<(), StoreError> {
        let (key, value) = applied_write(partition, log_seq);
        let _write = self.write_gate();
        self.inner()
            .channel_state
            .insert(key, value)
            .map_err(StoreError::sled("writing a cluster changelog position"))?;
        Ok(())
    }

    /// Whether a turn applied here answered `message_id` of `session_key` (and the mark has
    /// not expired at `now_ms`).
    pub fn replica_answered(
        &self,
        session_key: &str,
        message_id: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let Some(bytes) = self
            .inner()
            .dedupe
            .get(answered_key(session_key, message_id).as_bytes())
            .map_err(StoreError::sled("reading answered marks"))?
        else {
            return Ok(false);
        };
        let expires: u64 = decode("dedupe", &bytes)?;
        Ok(expires > now_ms)
    }

    /// Whether `session_key`'s inbox holds a message `message_id` (looking at its first
    /// `limit` entries, the queue cap): a cluster node taking a partition back may still hold
    /// a message of its earlier tenure, unanswered, which the replicated inbox delivers again.
    pub fn inbox_holds(
        &self,
        session_key: &str,
        message_id: &str,
        limit: usize,
    ) -> Result<bool, StoreError> {
        Ok(self
            .pending(session_key, 0, limit)?
            .iter()
            .any(|item| item.record.message.message_id == message_id))
    }

    /// Removes every unconsumed inbox entry; returns how many. A cluster node starts with
    /// this: its inbox only mirrors what it took from the partitions' replicated inboxes, which
    /// keep every unanswered message for whichever node owns the partition next.
    pub fn clear_inbox(&self) -> Result<usize, StoreError> {
        let _write = self.write_gate();
        let inner = self.inner();
        let mut removed = 0usize;
        let mut freed = 0u64;
        for kv in inner.inbox.iter() {
            let (k, v) = kv.map_err(StoreError::sled("scanning the inbox"))?;
            inner
                .inbox
                .remove(&k)
                .map_err(|e| self.write_failed(StoreError::sled("clearing the inbox")(e)))?;
            removed += 1;
            freed += (k.len() + v.len()) as u64;
        }
        self.shared
            .queued
            .store(0, std::sync::atomic::Ordering::Relaxed);
        self.shared.meter.sub(freed);
        self.shared.meter.set_pending(0);
        Ok(removed)
    }
}
