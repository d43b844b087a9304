//! The audit log: admin actions and refused authentications, oldest first, in the `audit`
//! tree under each record's id (big-endian, increasing across generations). At most
//! [`MAX_AUDIT_RECORDS`]: appending past it removes the oldest, so a flood of refused keys
//! costs a bounded amount of disk. Records are written without a flush of their own; the next
//! group commit or periodic flush makes them durable.

use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use super::Store;
use crate::error::StoreError;

/// The tree's name.
pub(super) const TREE: &str = "audit";

/// Most records kept.
pub(crate) const MAX_AUDIT_RECORDS: usize = 50_000;

/// Most records one read returns.
pub(crate) const MAX_AUDIT_PAGE: usize = 1_000;

/// One audited event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AuditRecord {
    /// Its place in the log (set when appended; ids increase).
    #[serde(default)]
    pub(crate) id: u64,
    /// When, in ms since the Unix epoch.
    pub(crate) at_ms: u64,
    /// What was done, e.g. `session.delete`, `session.compact`, `server.drain`,
    /// `auth.refused`.
    pub(crate) action: String,
    /// What it was done to (a session key), when anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) target: Option<String>,
    /// The HTTP status the action was answered with.
    pub(crate) status: u16,
    /// The fingerprint of the API key the request carried (`sha256:` and 12 hex digits of
    /// its hash), never the key; `None` when it carried none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) key_fingerprint: Option<String>,
    /// The client's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) client: Option<String>,
}

impl Store {
    /// Appends `record` (its `id` is assigned) and drops the oldest records past
    /// [`MAX_AUDIT_RECORDS`]. Returns the id.
    pub(crate) fn append_audit(&self, record: &AuditRecord) -> Result<u64, StoreError> {
        self.append_audit_within(record, MAX_AUDIT_RECORDS)
    }

    pub(super) fn append_audit_within(
        &self,
        record: &AuditRecord,
        max: usize,
    ) -> Result<u64, StoreError> {
        let _write = self.write_gate();
        let inner = self.inner();
        let id = inner.next_id()?;
        let value = serde_json::to_vec(&AuditRecord {
            id,
            ..record.clone()
        })
        .map_err(|e| StoreError::Invariant(leak_free(e)))?;
        inner
            .audit
            .insert(id.to_be_bytes(), value)
            .map_err(StoreError::sled("writing an audit record"))?;
        let len = inner.audit_len.fetch_add(1, Ordering::SeqCst) + 1;
        for _ in max..len {
            match inner
                .audit
                .pop_min()
                .map_err(StoreError::sled("dropping the oldest audit record"))?
            {
                Some(_) => {
                    inner.audit_len.fetch_sub(1, Ordering::SeqCst);
                }
                None => break,
            }
        }
        Ok(id)
    }

    /// Up to `limit` (at most [`MAX_AUDIT_PAGE`]) records with ids above `after` (all when
    /// `None`: ids start at 0), oldest first. A record that does not decode is skipped.
    pub(crate) fn audit_page(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let inner = self.inner();
        let start = after.map_or(0, |a| a.saturating_add(1)).to_be_bytes();
        let mut out = Vec::new();
        for item in inner.audit.range(start..).take(limit.min(MAX_AUDIT_PAGE)) {
            let (_, value) = item.map_err(StoreError::sled("reading the audit log"))?;
            if let Ok(record) = serde_json::from_slice::<AuditRecord>(&value) {
                out.push(record);
            }
        }
        Ok(out)
    }
}

impl Store {
    /// The newest `n` (at most [`MAX_AUDIT_PAGE`]) records, oldest first.
    pub(crate) fn audit_tail(&self, n: usize) -> Result<Vec<AuditRecord>, StoreError> {
        let inner = self.inner();
        let mut out = Vec::new();
        for item in inner.audit.iter().rev().take(n.min(MAX_AUDIT_PAGE)) {
            let (_, value) = item.map_err(StoreError::sled("reading the audit log"))?;
            if let Ok(record) = serde_json::from_slice::<AuditRecord>(&value) {
                out.push(record);
            }
        }
        out.reverse();
        Ok(out)
    }
}

/// The invariant message for a record that cannot be encoded (it always can: plain strings
/// and numbers).
fn leak_free(_: serde_json::Error) -> &'static str {
    "an audit record could not be encoded"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StorageConfig;

    fn record(action: &str) -> AuditRecord {
        AuditRecord {
            id: 0,
            at_ms: 1,
            action: action.into(),
            target: Some("agent:main:x".into()),
            status: 200,
            key_fingerprint: None,
            client: Some("127.0.0.1:1".into()),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn records_page_in_order_and_the_oldest_go_past_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StorageConfig {
            data_dir: dir.path().into(),
            ..StorageConfig::default()
        })
        .unwrap();
        for i in 0..10 {
            store
                .append_audit_within(&record(&format!("a{i}")), 4)
                .unwrap();
        }
        let all = store.audit_page(None, 100).unwrap();
        let actions: Vec<&str> = all.iter().map(|r| r.action.as_str()).collect();
        assert_eq!(actions, ["a6", "a7", "a8", "a9"]);
        assert!(all.windows(2).all(|w| w[0].id < w[1].id));
        let rest = store.audit_page(Some(all[1].id), 100).unwrap();
        assert_eq!(rest.len(), 2);
        assert_eq!(rest[0].action, "a8");
        let tail: Vec<String> = store
            .audit_tail(2)
            .unwrap()
            .into_iter()
            .map(|r| r.action)
            .collect();
        assert_eq!(tail, ["a8", "a9"]);
        store.close().await.unwrap();
        drop(store);

        // Reopened: the count is taken again, so the bound still holds.
        let store = Store::open(&StorageConfig {
            data_dir: dir.path().into(),
            ..StorageConfig::default()
        })
        .unwrap();
        store.append_audit_within(&record("b"), 4).unwrap();
        let actions: Vec<String> = store
            .audit_page(None, 100)
            .unwrap()
            .into_iter()
            .map(|r| r.action)
            .collect();
        assert_eq!(actions, ["a7", "a8", "a9", "b"]);
        store.close().await.unwrap();
    }
}
