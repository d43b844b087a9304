//! Quota usage (`src/quotas/`), in the `quotas` tree under each subject (`sender:<channel>:<id>`,
//! `chat:…`, `account:…`, `agent:<id>`), so counts survive a restart. Written without a flush
//! of their own: the next group commit or periodic flush makes them durable. One record per
//! subject that ever matched a rule; a reset (the admin API) removes it.

use super::{decode, encode, Store};
use crate::error::StoreError;
use crate::quotas::QuotaUsage;

/// The tree's name.
pub(super) const TREE: &str = "quotas";

impl Store {
    /// The usage stored for `subject`.
    pub(crate) fn quota_usage(&self, subject: &str) -> Result<Option<QuotaUsage>, StoreError> {
        self.inner()
            .quotas
            .get(subject.as_bytes())
            .map_err(StoreError::sled("reading quota usage"))?
            .map(|bytes| decode("quotas", &bytes))
            .transpose()
    }

    /// Stores `usage` for `subject`.
    pub(crate) fn put_quota_usage(
        &self,
        subject: &str,
        usage: &QuotaUsage,
    ) -> Result<(), StoreError> {
        let bytes = encode(usage)?;
        let _write = self.write_gate();
        self.inner()
            .quotas
            .insert(subject.as_bytes(), bytes)
            .map_err(StoreError::sled("writing quota usage"))?;
        Ok(())
    }

    /// Removes `subject`'s usage; true when there was any.
    pub(crate) fn remove_quota_usage(&self, subject: &str) -> Result<bool, StoreError> {
        let _write = self.write_gate();
        Ok(self
            .inner()
            .quotas
            .remove(subject.as_bytes())
            .map_err(StoreError::sled("resetting quota usage"))?
            .is_some())
    }
}
