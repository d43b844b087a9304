//! Reads, exports and deletes of a session wherever it is, hot (in sled) or cold (in its
//! segment), without thawing it. A thaw writes the session's whole transcript back into sled:
//! a read that thawed would write while the disk is full, and the janitor would freeze the
//! session again — churn that a client looping over reads of cold sessions could keep up.
//! Only what must change a session or needs it in sled (a message, a compaction, the context
//! dump's assembly) thaws it, and only within the disk budget ([`Store::thaw_within_budget`]).

use super::cold::{path_of, read_segment, Entries};
use super::{SessionRecord, Store, TranscriptEntry};
use crate::error::StoreError;

/// A session's record and a page of its transcript (`(seq, entry)`, in order).
pub type SessionPage = (SessionRecord, Vec<(u64, TranscriptEntry)>);

impl Store {
    /// Session `key`'s record, from sled or else from its cold segment.
    pub fn find_session(&self, key: &str) -> Result<Option<SessionRecord>, StoreError> {
        // The cold lock: no freeze or thaw of `key` between the two lookups.
        let _cold = self.shared.cold_locks.lock(key);
        if let Some(record) = self.session(key)? {
            return Ok(Some(record));
        }
        Ok(self
            .read_cold(key, Entries::None)?
            .map(|(record, _)| record))
    }

    /// Session `key`'s record and a page of its transcript (entries with `seq > after`, at
    /// most `limit`), from sled or else from its cold segment.
    pub fn find_transcript(
        &self,
        key: &str,
        after: u64,
        limit: usize,
    ) -> Result<Option<SessionPage>, StoreError> {
        let _cold = self.shared.cold_locks.lock(key);
        if let Some(record) = self.session(key)? {
            let page = self.transcript(record.id, after, limit)?;
            return Ok(Some((record, page)));
        }
        self.read_cold(key, Entries::After { after, limit })
    }

    /// Thaws session `key` if it is cold, unless the disk is full: then
    /// [`StoreError::CannotWrite`] (507), and nothing is written. Not cold: nothing to do.
    pub fn thaw_within_budget(&self, key: &str) -> Result<bool, StoreError> {
        if !self.is_cold(key) {
            return Ok(false);
        }
        if let Some(reason) = self.disk_full() {
            return Err(StoreError::CannotWrite { reason });
        }
        self.thaw_session(key)
    }

    /// Whether a segment file exists for `key`'s hash (one `stat`, none while the cold tier
    /// is known to be empty). It may hold another key: the thaw checks.
    fn is_cold(&self, key: &str) -> bool {
        self.cold_used() && path_of(self.data_dir(), key).exists()
    }

    /// Removes session `key`'s segment, durably (the directory is synced: a deleted session
    /// must not come back after a crash), and returns its record; `None` if `key` is not cold.
    pub(super) fn take_cold(&self, key: &str) -> Result<Option<SessionRecord>, StoreError> {
        let _cold = self.shared.cold_locks.lock(key);
        let Some((record, _)) = self.read_cold(key, Entries::None)? else {
            return Ok(None);
        };
        let path = path_of(self.data_dir(), key);
        self.remove_segment(&path)?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(StoreError::file("sync", dir))?;
        }
        Ok(Some(record))
    }

    /// `key`'s cold segment, read in place; `None` when there is none for `key` (also when
    /// the janitor deleted it a moment ago: then the session is gone).
    pub(super) fn read_cold(
        &self,
        key: &str,
        which: Entries,
    ) -> Result<Option<SessionPage>, StoreError> {
        if !self.cold_used() {
            return Ok(None);
        }
        match read_segment(&path_of(self.data_dir(), key), which) {
            Ok((header, entries)) if header.session_key == key => {
                Ok(Some((header.record, entries)))
            }
            Ok(_) => Ok(None),
            Err(StoreError::File { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
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

    fn segments(dir: &Path) -> usize {
        super::super::cold::list(dir).unwrap().len()
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
            .expect("a cold session is found");
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
        assert_eq!(segments(dir.path()), 1);
        assert_eq!(store.live_bytes(), live, "nothing written");
        assert_eq!(store.find_session("hot").unwrap().unwrap().entries, 2);
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
        assert_eq!(segments(dir.path()), 1);
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
        assert_eq!(segments(dir.path()), 1);
        assert!(
            !store.thaw_within_budget("hot").unwrap(),
            "a hot session needs no room"
        );

        measured(&store, 1);
        assert!(store.thaw_within_budget("a").unwrap());
        assert_eq!(store.session("a").unwrap().unwrap().entries, 6);
        assert_eq!(segments(dir.path()), 0);
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
        assert_eq!(segments(dir.path()), 0);
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
