//! Reads, exports, deletes and the listing of sessions wherever they are, hot (in sled) or
//! cold (a frame in a pack, named by the index), without thawing them. A thaw writes the
//! session's whole transcript back into sled: a read that thawed would write while the disk
//! is full, and the janitor would freeze the session again — churn that a client looping
//! over reads of cold sessions could keep up. Only what must change a session or needs it in
//! sled (a turn, a compaction, the context dump's assembly) thaws it, and only within the
//! disk budget ([`Store::thaw_within_budget`]) unless a message already accepted waits on it.

use sled::transaction::{TransactionError, Transactional};

use super::cold::Entries;
use super::cold_index;
use super::{SessionRecord, Store, TranscriptEntry};
use crate::error::StoreError;

/// A session's record and a page of its transcript (`(seq, entry)`, in order).
pub(crate) type SessionPage = (SessionRecord, Vec<(u64, TranscriptEntry)>);

/// A session as the listing and a lookup find it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundSession {
    /// Its key.
    pub session_key: String,
    /// Its record (a cold session's as it was frozen).
    pub record: SessionRecord,
    /// Whether it is in the cold tier (its next turn thaws it).
    pub cold: bool,
}

impl Store {
    /// Session `key`'s record, from sled or else from the cold index.
    pub fn find_session(&self, key: &str) -> Result<Option<FoundSession>, StoreError> {
        let found = |record, cold| FoundSession {
            session_key: key.to_string(),
            record,
            cold,
        };
        // The cold lock: no freeze or thaw of `key` between the two lookups.
        let _cold = self.shared.cold_locks.lock(key);
        if let Some(record) = self.session(key)? {
            return Ok(Some(found(record, false)));
        }
        if self.cold_used() {
            if let Some(entry) = cold_index::get(&self.inner().cold, key)? {
                return Ok(Some(found(entry.record, true)));
            }
        }
        Ok(self
            .read_cold_locked(key, Entries::None)?
            .map(|(record, _)| found(record, true)))
    }

    /// Session `key`'s record and a page of its transcript (entries with `seq > after`, at
    /// most `limit`), from sled or else from its cold frame.
    pub fn find_transcript(
        &self,
        key: &str,
        after: u64,
        limit: usize,
    ) -> Result<Option<SessionPage>, StoreError> {
        let located = {
            let _cold = self.shared.cold_locks.lock(key);
            if let Some(record) = self.session(key)? {
                let page = self.transcript(record.id, after, limit)?;
                return Ok(Some((record, page)));
            }
            self.locate_cold(key)?
        };
        self.read_located(key, located, Entries::After { after, limit })
    }

    /// Sessions in key order after `after`, at most `limit`, hot and cold: the sessions tree
    /// and the cold index are read side by side, each only as far as the page reaches. A
    /// session in both (a stale cold copy: sled wins) is listed once, hot. Sessions still in
    /// old-layout files are listed once the janitor has moved them into packs.
    pub fn list_all_sessions(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<FoundSession>, StoreError> {
        let hot = self.list_sessions(after, limit)?;
        let inner = self.inner();
        let mut cold = Vec::new();
        if self.cold_used() {
            for item in cold_index::sessions_after(&inner.cold, after).take(limit) {
                cold.push(item?);
            }
        }
        let mut hot = hot.into_iter().peekable();
        let mut cold = cold.into_iter().peekable();
        let mut out = Vec::with_capacity(limit.min(hot.len() + cold.len()));
        while out.len() < limit {
            let order = match (hot.peek(), cold.peek()) {
                (Some((h, _)), Some((c, _))) => h.cmp(c),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => break,
            };
            if order == std::cmp::Ordering::Equal {
                // A stale cold copy: sled wins.
                cold.next();
            }
            let take_hot = order != std::cmp::Ordering::Greater;
            let next = if take_hot {
                hot.next().map(|(k, r)| (k, r, false))
            } else {
                cold.next().map(|(k, e)| (k, e.record, true))
            };
            let Some((session_key, record, cold)) = next else {
                break;
            };
            out.push(FoundSession {
                session_key,
                record,
                cold,
            });
        }
        Ok(out)
    }

    /// Thaws session `key` if it is cold, unless the disk is full: then
    /// [`StoreError::CannotWrite`] (507), and nothing is written. Not cold: nothing to do.
    pub fn thaw_within_budget(&self, key: &str) -> Result<bool, StoreError> {
        if !self.may_be_cold(key) {
            return Ok(false);
        }
        if let Some(reason) = self.disk_full() {
            return Err(StoreError::CannotWrite { reason });
        }
        self.thaw_session(key)
    }

    /// Removes session `key`'s cold copy — its index entry (durable with the next flush) or
    /// its old-layout file (durably: the directory is synced, a deleted session must not
    /// come back after a crash) — and returns its record; `None` if `key` is not cold.
    pub(super) fn take_cold(&self, key: &str) -> Result<Option<SessionRecord>, StoreError> {
        if !self.cold_used() {
            return Ok(None);
        }
        let _cold = self.shared.cold_locks.lock(key);
        let removed = {
            let _write = self.write_gate();
            let inner = self.inner();
            let removed: Result<_, TransactionError<StoreError>> =
                (&inner.cold,).transaction(|(cold,)| cold_index::tx_remove(cold, key));
            removed.map_err(|e| match e {
                TransactionError::Abort(e) => e,
                TransactionError::Storage(source) => StoreError::Sled {
                    context: "deleting a cold session",
                    source,
                },
            })?
        };
        let legacy = self.read_cold_locked(key, Entries::None)?;
        if legacy.is_some() {
            self.remove_legacy(&super::cold_legacy::path_of(self.data_dir(), key))?;
            super::cold_legacy::sync_dir(self.data_dir())?;
        }
        Ok(removed
            .map(|e| e.record)
            .or(legacy.map(|(record, _)| record)))
    }

    /// `key`'s cold copy, read in place; `None` when there is none for `key` (also when the
    /// janitor deleted it a moment ago: then the session is gone).
    pub(super) fn read_cold(
        &self,
        key: &str,
        which: Entries,
    ) -> Result<Option<SessionPage>, StoreError> {
        let located = {
            let _cold = self.shared.cold_locks.lock(key);
            self.locate_cold(key)?
        };
        self.read_located(key, located, which)
    }

    /// [`Store::read_cold`] with the session's cold lock held by the caller.
    fn read_cold_locked(
        &self,
        key: &str,
        which: Entries,
    ) -> Result<Option<SessionPage>, StoreError> {
        let located = self.locate_cold(key)?;
        self.read_located(key, located, which)
    }

    fn read_located(
        &self,
        key: &str,
        located: Option<super::cold::Located>,
        which: Entries,
    ) -> Result<Option<SessionPage>, StoreError> {
        let Some(located) = located else {
            return Ok(None);
        };
        match located.open(key, self.data_dir())? {
            Some(segment) => {
                let (header, entries) = segment.entries(which)?;
                Ok(Some((header.record, entries)))
            }
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::{Durability, StorageConfig};
    use crate::error::StoreError;
    use crate::store::tests::entry;
    use crate::store::{EntryKind, Store, TurnCommit};

    const BUDGET: u64 = 64 << 20;

    fn open(dir: &Path) -> Store {
        Store::open(&StorageConfig {
            data_dir: dir.to_path_buf(),
            cache_capacity_bytes: 1 << 20,
            durability: Durability::Batched,
            prune_after_days: 0,
            max_disk_bytes: BUDGET,
            ..StorageConfig::default()
        })
        .unwrap()
    }

    fn turns(store: &Store, key: &str, n: u64) {
        for t in 0..n {
            store
                .commit_turn(&TurnCommit {
                    session_key: key.to_string(),
                    entries: vec![
                        entry(EntryKind::User, &format!("question {t}")),
                        entry(EntryKind::Assistant, &format!("answer {t}")),
                    ],
                    consumed: vec![],
                    now_ms: 1_000 + t,
                    channel_messages: vec![],
                    replica: None,
                })
                .unwrap();
        }
    }

    fn freeze(store: &Store, key: &str) {
        let updated = store.session(key).unwrap().unwrap().updated_at_ms;
        store.freeze_session(key, updated).unwrap().expect("frozen");
    }

    /// Sessions the cold index names.
    fn cold_sessions(store: &Store) -> usize {
        store
            .list_all_sessions(None, 1_000)
            .unwrap()
            .iter()
            .filter(|f| f.cold)
            .count()
    }

    /// The janitor's measurement says the data dir fills its budget (or is nearly empty).
    fn measured(store: &Store, disk_bytes: u64) {
        let meter = &store.shared.meter;
        meter.set_measured(disk_bytes, meter.measure_begins());
    }

    #[tokio::test]
    async fn a_cold_session_is_read_from_its_segment_without_a_thaw() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        turns(&store, "a", 5);
        turns(&store, "hot", 1);
        let record = store.session("a").unwrap().unwrap();
        let whole = store.transcript(record.id, 0, usize::MAX).unwrap();
        freeze(&store, "a");
        let live = store.live_bytes();

        let found = store
            .find_session("a")
            .unwrap()
            .expect("a cold session is found")
            .record;
        assert_eq!(
            (found.entries, found.updated_at_ms),
            (10, record.updated_at_ms)
        );
        let (_, all) = store.find_transcript("a", 0, usize::MAX).unwrap().unwrap();
        assert_eq!(all, whole);
        let (_, page) = store.find_transcript("a", whole[2].0, 4).unwrap().unwrap();
        assert_eq!(page, whole[3..7]);
        let (_, past_the_end) = store.find_transcript("a", u64::MAX, 4).unwrap().unwrap();
        assert!(past_the_end.is_empty());

        assert!(store.session("a").unwrap().is_none(), "still cold");
        assert_eq!(cold_sessions(&store), 1);
        assert_eq!(store.live_bytes(), live, "nothing written");
        assert_eq!(
            store.find_session("hot").unwrap().unwrap().record.entries,
            2
        );
        assert!(store.find_session("never").unwrap().is_none());
        assert!(store.find_transcript("never", 0, 10).unwrap().is_none());
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_cold_session_is_exported_from_its_segment() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        turns(&store, "a", 2);
        let mut hot = Vec::new();
        assert_eq!(store.export_session("a", &mut hot).unwrap(), Some(4));
        freeze(&store, "a");
        let mut cold = Vec::new();
        assert_eq!(store.export_session("a", &mut cold).unwrap(), Some(4));
        assert_eq!(String::from_utf8(cold), String::from_utf8(hot));
        assert!(store.session("a").unwrap().is_none(), "still cold");
        assert_eq!(cold_sessions(&store), 1);
        assert_eq!(
            store.export_session("never", &mut Vec::new()).unwrap(),
            None
        );
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn with_the_disk_full_a_cold_session_stays_cold() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        turns(&store, "a", 3);
        turns(&store, "hot", 1);
        freeze(&store, "a");
        measured(&store, BUDGET);
        assert!(store.disk_full().is_some());

        let refused = store.thaw_within_budget("a").unwrap_err();
        assert!(
            matches!(refused, StoreError::CannotWrite { .. }),
            "{refused}"
        );
        assert!(store.session("a").unwrap().is_none());
        assert_eq!(cold_sessions(&store), 1);
        assert!(
            !store.thaw_within_budget("hot").unwrap(),
            "a hot session needs no room"
        );

        measured(&store, 1);
        assert!(store.thaw_within_budget("a").unwrap());
        assert_eq!(store.session("a").unwrap().unwrap().entries, 6);
        assert_eq!(cold_sessions(&store), 0);
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_cold_session_is_deleted_without_a_thaw_and_stays_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        turns(&store, "a", 3);
        freeze(&store, "a");
        // Every commit takes one id (a new session keeps it): the id before the delete.
        turns(&store, "before", 1);
        let id = store.session("before").unwrap().unwrap().id;

        let gone = store.delete_session("a").unwrap().expect("deleted");
        assert_eq!((gone.entries, gone.pending), (6, 0));
        assert_eq!(cold_sessions(&store), 0);
        assert!(store.find_session("a").unwrap().is_none());
        // A thaw would have taken the next id.
        turns(&store, "b", 1);
        assert_eq!(store.session("b").unwrap().unwrap().id, id + 1);
        assert!(store.delete_session("a").unwrap().is_none());
        store.close().await.unwrap();
        drop(store);

        let store = open(dir.path());
        assert!(store.find_session("a").unwrap().is_none());
        assert!(!store.thaw_session("a").unwrap());
        store.close().await.unwrap();
    }
}
