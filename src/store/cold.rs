//! The cold tier: sessions the janitor would evict for the disk budget are moved out of sled
//! into one gzip-compressed segment file each, `<data_dir>/cold/<hash of the key>.seg`, and
//! loaded back into sled on the session's next message (`Store::thaw_session`); reads and a
//! delete use the segment in place (`cold_reads.rs`).
//!
//! Why: sled holds a live byte in 2–4 disk bytes and a rewrite needs room for a second copy,
//! so live data in sled is held to a fifth of the budget. A segment holds a transcript in
//! less than its raw size and needs no rewrite, so giving part of the budget
//! (`storage.cold_max_fraction`) to segments keeps several times more transcript text. The
//! segments count in the budget like everything under the data dir; when they pass their
//! share (or the data dir stays over high water) the oldest are deleted — that is eviction.
//!
//! A segment is a gzip stream of frames `[u32 LE length][value]`, each value in the store's
//! codec: first a [`ColdHeader`], then `(seq, TranscriptEntry)` for every entry. It is written
//! under a temporary name, synced and renamed before the session leaves sled, so a crash
//! leaves the session in sled, in a segment, or (between the two) in both — and sled wins.
//! What a cold session loses: its group-chat records (`channel_messages`, context for later
//! turns, deleted as by an eviction) and its place in `GET /v1/sessions` until it is thawed.

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde::{Deserialize, Serialize};
use sled::transaction::{ConflictableTransactionError, TransactionError, Transactional};

use super::evict::{Evicted, TRANSCRIPT_KEY_BYTES};
use super::{by_updated, decode, encode, keys, SessionRecord, Store, TranscriptEntry};
use crate::error::StoreError;

/// The cold tier's directory under the data dir.
pub const COLD_DIR: &str = "cold";

/// Most segment files listed in one janitor pass; bounds the listing's memory.
const MAX_LISTED: usize = 100_000;
/// Transcript entries read (when freezing) or written (when thawing) per batch.
const BATCH: usize = 1_000;
/// Largest frame accepted when reading a segment: a stored value's own limit.
const MAX_FRAME: usize = super::MAX_VALUE_BYTES;

/// The first frame of a segment.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct ColdHeader {
    pub(super) session_key: String,
    pub(super) record: SessionRecord,
}

/// One segment file.
#[derive(Debug, Clone)]
pub(super) struct ColdFile {
    pub(super) path: PathBuf,
    /// Bytes allocated on disk.
    pub(super) disk_bytes: u64,
    modified: SystemTime,
}

/// The segment path for `key`: a stable 64-bit FNV-1a hash, so nothing a user chose is in a
/// file name. Two keys with the same hash cannot both be cold: the second is evicted instead.
pub(super) fn path_of(data_dir: &Path, key: &str) -> PathBuf {
    data_dir
        .join(COLD_DIR)
        .join(format!("{:016x}.seg", fnv1a(key)))
}

/// 64-bit FNV-1a: stable across builds and platforms (segment names are on disk).
fn fnv1a(key: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.as_bytes() {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

fn write_frame(out: &mut impl Write, value: &[u8], path: &Path) -> Result<(), StoreError> {
    let len = u32::try_from(value.len()).map_err(|_| StoreError::Encode("frame too big".into()))?;
    out.write_all(&len.to_le_bytes())
        .and_then(|()| out.write_all(value))
        .map_err(StoreError::file("write", path))
}

/// The next frame, or `None` at a clean end of the stream.
fn read_frame(input: &mut impl Read, path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(StoreError::file("read", path)(e)),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(StoreError::Decode {
            tree: "cold",
            reason: format!("a frame of {len} bytes in {}", path.display()),
        });
    }
    let mut value = vec![0u8; len];
    input
        .read_exact(&mut value)
        .map_err(StoreError::file("read", path))?;
    Ok(Some(value))
}

/// Which of a segment's transcript entries [`read_segment`] returns.
#[derive(Debug, Clone, Copy)]
pub(super) enum Entries {
    /// None: the header only.
    None,
    /// Every entry.
    All,
    /// A page: entries with `seq > after`, at most `limit` of them.
    After { after: u64, limit: usize },
}

/// Reads a segment's header and the transcript entries `which` asks for.
pub(super) fn read_segment(
    path: &Path,
    which: Entries,
) -> Result<(ColdHeader, Vec<(u64, TranscriptEntry)>), StoreError> {
    let file = std::fs::File::open(path).map_err(StoreError::file("open", path))?;
    let mut input = GzDecoder::new(BufReader::new(file));
    let header = read_frame(&mut input, path)?.ok_or_else(|| StoreError::Decode {
        tree: "cold",
        reason: format!("empty segment {}", path.display()),
    })?;
    let header: ColdHeader = decode("cold", &header)?;
    let (after, limit) = match which {
        Entries::None => return Ok((header, Vec::new())),
        Entries::All => (None, usize::MAX),
        Entries::After { after, limit } => (Some(after), limit),
    };
    let mut out = Vec::new();
    while out.len() < limit {
        let Some(frame) = read_frame(&mut input, path)? else {
            break;
        };
        let (seq, entry): (u64, TranscriptEntry) = decode("cold", &frame)?;
        if after.is_none_or(|after| seq > after) {
            out.push((seq, entry));
        }
    }
    Ok((header, out))
}

/// Segment files, oldest first (at most [`MAX_LISTED`]); leftover temporary files of an
/// interrupted freeze are listed too, so they are deleted first.
pub(super) fn list(data_dir: &Path) -> Result<Vec<ColdFile>, StoreError> {
    let dir = data_dir.join(COLD_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::file("list", &dir)(e)),
    };
    let mut out = Vec::new();
    for entry in entries.take(MAX_LISTED) {
        let entry = entry.map_err(StoreError::file("list", &dir))?;
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let temporary = entry.file_name().to_string_lossy().starts_with('.');
        out.push(ColdFile {
            path: entry.path(),
            disk_bytes: super::disk::dir_disk_bytes_of_file(&meta),
            modified: if temporary {
                SystemTime::UNIX_EPOCH
            } else {
                meta.modified().unwrap_or(SystemTime::UNIX_EPOCH)
            },
        });
    }
    out.sort_by_key(|f| f.modified);
    Ok(out)
}

/// Whether the cold tier's directory under `data_dir` holds anything (when it cannot be
/// listed: assumed so).
pub(super) fn may_hold_segments(data_dir: &Path) -> bool {
    match std::fs::read_dir(data_dir.join(COLD_DIR)) {
        Ok(mut entries) => entries.next().is_some(),
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

/// Stripes of [`ColdLocks`]: enough that unrelated sessions rarely wait for each other.
const LOCK_STRIPES: usize = 64;

/// Per-session locks, striped by the key's hash: a freeze holds its session's stripe from the
/// inbox check until the session has left sled, and an inbox write holds it from the thaw
/// until the entry is written. So a message either lands before a freeze starts (which then
/// sees it and keeps the session) or after it ends (and thaws the session first) — never in
/// between, where it would start a fresh session beside the cold one and its history would be
/// lost when the stale segment is replaced.
pub(super) struct ColdLocks([std::sync::Mutex<()>; LOCK_STRIPES]);

impl Default for ColdLocks {
    fn default() -> Self {
        Self(std::array::from_fn(|_| std::sync::Mutex::new(())))
    }
}

impl ColdLocks {
    pub(super) fn lock(&self, key: &str) -> std::sync::MutexGuard<'_, ()> {
        let stripe = (fnv1a(key) % LOCK_STRIPES as u64) as usize;
        // A panic while holding a stripe leaves nothing half-done that the lock guards.
        self.0[stripe]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What a freeze did.
#[derive(Debug)]
pub(super) struct Frozen {
    /// What left sled.
    pub(super) evicted: Evicted,
    /// Bytes the segment file occupies on disk (now counted in the disk estimate).
    pub(super) segment_bytes: u64,
}

impl Store {
    /// Moves session `key` into the cold tier, if it was not updated since
    /// `expected_updated_at` and has no queued messages. Returns what left sled, or `None` if
    /// the session changed or has queued messages (or its hash is taken by another cold
    /// session) and was kept.
    pub(super) fn freeze_session(
        &self,
        key: &str,
        expected_updated_at: u64,
    ) -> Result<Option<Frozen>, StoreError> {
        let _cold = self.shared.cold_locks.lock(key);
        // Under the lock: a message queued since the janitor looked keeps the session hot.
        if !self.pending(key, 0, 1)?.is_empty() {
            return Ok(None);
        }
        let Some(record) = self.session(key)? else {
            return Ok(None);
        };
        if record.updated_at_ms != expected_updated_at {
            return Ok(None);
        }
        let path = path_of(self.data_dir(), key);
        if path.exists() {
            match read_segment(&path, Entries::None) {
                Ok((header, _)) if header.session_key != key => return Ok(None),
                // A stale copy of this session (sled won): replaced below.
                _ => {}
            }
        }
        let segment_bytes = self.write_segment(key, &record, &path)?;
        self.shared.meter.add_file(segment_bytes);
        // A compaction (which does not take the cold lock, nor change `updated_at_ms`) may
        // have replaced entries while they were written: the segment would pair the old
        // record with the new transcript. Kept hot then; the next pass tries again.
        if self.session(key)?.as_ref() != Some(&record) {
            self.remove_segment(&path)?;
            return Ok(None);
        }
        match self.evict_session(key, Some(expected_updated_at))? {
            Some(evicted) => Ok(Some(Frozen {
                evicted,
                segment_bytes,
            })),
            None => {
                self.remove_segment(&path)?;
                Ok(None)
            }
        }
    }

    fn write_segment(
        &self,
        key: &str,
        record: &SessionRecord,
        path: &Path,
    ) -> Result<u64, StoreError> {
        // Before the file exists: from here on admissions look for segments.
        self.shared
            .cold_used
            .store(true, std::sync::atomic::Ordering::Release);
        let dir = self.data_dir().join(COLD_DIR);
        std::fs::create_dir_all(&dir).map_err(StoreError::file("create", &dir))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dir.join(format!(".{name}.tmp"));
        let file = std::fs::File::create(&tmp).map_err(StoreError::file("create", &tmp))?;
        let mut out = GzEncoder::new(BufWriter::new(file), Compression::default());
        let header = ColdHeader {
            session_key: key.to_string(),
            record: record.clone(),
        };
        write_frame(&mut out, &encode(&header)?, &tmp)?;
        let mut after = 0u64;
        loop {
            let page = self.transcript(record.id, after, BATCH)?;
            let Some((last, _)) = page.last() else { break };
            after = *last;
            for entry in &page {
                write_frame(&mut out, &encode(entry)?, &tmp)?;
            }
        }
        let buffered = out.finish().map_err(StoreError::file("compress", &tmp))?;
        let file = buffered
            .into_inner()
            .map_err(|e| StoreError::file("write", &tmp)(e.into_error()))?;
        file.sync_all().map_err(StoreError::file("sync", &tmp))?;
        let bytes = file
            .metadata()
            .map(|m| super::disk::dir_disk_bytes_of_file(&m))
            .map_err(StoreError::file("measure", &tmp))?;
        std::fs::rename(&tmp, path).map_err(StoreError::file("rename", &tmp))?;
        if let Ok(d) = std::fs::File::open(&dir) {
            // The rename is durable before the session leaves sled.
            d.sync_all().map_err(StoreError::file("sync", &dir))?;
        }
        Ok(bytes)
    }

    /// Loads session `key` back from the cold tier into sled if it is cold (and not in sled
    /// already). True when it was thawed. Costs one `stat` when the session is not cold.
    pub fn thaw_session(&self, key: &str) -> Result<bool, StoreError> {
        let _cold = self.shared.cold_locks.lock(key);
        self.thaw_locked(key)
    }

    /// Thaws session `key` for an inbox write and returns its cold lock, to be held until the
    /// entry is written (see [`ColdLocks`]).
    pub(super) fn thaw_for_write(
        &self,
        key: &str,
    ) -> Result<std::sync::MutexGuard<'_, ()>, StoreError> {
        let cold = self.shared.cold_locks.lock(key);
        self.thaw_locked(key)?;
        Ok(cold)
    }

    /// False while the cold tier is known to be empty (see `Shared::cold_used`).
    pub(super) fn cold_used(&self) -> bool {
        self.shared
            .cold_used
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// [`Store::thaw_session`] with the session's cold lock held.
    fn thaw_locked(&self, key: &str) -> Result<bool, StoreError> {
        if !self.cold_used() {
            return Ok(false);
        }
        let path = path_of(self.data_dir(), key);
        if !path.exists() || self.session(key)?.is_some() {
            return Ok(false);
        }
        // None also when the janitor deleted the segment since the check above (it keeps the
        // cold tier within its share, oldest first): the session is gone for good.
        let Some((record, entries)) = self.read_cold(key, Entries::All)? else {
            return Ok(false);
        };
        let thawed = self.restore(key, record, entries)?;
        self.remove_segment(&path)?;
        if thawed {
            tracing::info!(session_key = %key, "thawed a cold session");
        }
        Ok(thawed)
    }

    /// Writes a cold session back under a fresh id with its entries' own sequence numbers:
    /// the transcript first (invisible until the record exists), then the record and index
    /// entry in one transaction; if the key appeared meanwhile, the transcript goes again.
    fn restore(
        &self,
        key: &str,
        mut record: SessionRecord,
        entries: Vec<(u64, TranscriptEntry)>,
    ) -> Result<bool, StoreError> {
        let write = self.write_gate();
        let inner = self.inner();
        let id = inner.next_id()?;
        record.id = id;
        for chunk in entries.chunks(BATCH) {
            let mut batch = sled::Batch::default();
            for (seq, e) in chunk {
                batch.insert(&keys::transcript_key(id, *seq), encode(e)?);
            }
            inner
                .transcript
                .apply_batch(batch)
                .map_err(StoreError::sled("thawing a transcript"))?;
        }
        let encoded = encode(&record)?;
        let updated_at_ms = record.updated_at_ms;
        let written = (&inner.sessions, &inner.by_updated).transaction(|(sessions, index)| {
            if sessions.get(key)?.is_some() {
                return Ok(false);
            }
            sessions.insert(key.as_bytes(), encoded.as_slice())?;
            index.insert(by_updated::key(updated_at_ms, key), &[])?;
            Ok::<_, ConflictableTransactionError<StoreError>>(true)
        });
        let written = match written {
            Ok(w) => w,
            Err(TransactionError::Abort(e)) => return Err(e),
            Err(TransactionError::Storage(source)) => {
                return Err(StoreError::Sled {
                    context: "thawing a session",
                    source,
                })
            }
        };
        drop(write);
        if written {
            self.shared.totals.replace(None, Some(&record));
            self.shared
                .meter
                .add(record.bytes + record.entries * TRANSCRIPT_KEY_BYTES);
        } else {
            self.delete_transcript(id)?;
        }
        Ok(written)
    }
}

impl Store {
    /// Deletes the cold copy of session `key`, if there is one (a deleted or plainly evicted
    /// session must not come back from a stale segment).
    pub(super) fn forget_cold(&self, key: &str) -> Result<(), StoreError> {
        if !self.cold_used() {
            return Ok(());
        }
        let path = path_of(self.data_dir(), key);
        if !path.exists() {
            return Ok(());
        }
        match read_segment(&path, Entries::None) {
            Ok((header, _)) if header.session_key != key => Ok(()),
            _ => self.remove_segment(&path),
        }
    }

    /// The doctor's check of the cold tier: every segment decodes to the end (header and
    /// entries) and is named after its key. A damaged one is reported, never deleted (it may
    /// be the only copy of a session).
    pub(super) fn check_cold(&self, report: &mut super::DoctorReport) -> Result<(), StoreError> {
        for file in list(self.data_dir())? {
            let name = file
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name.starts_with('.') {
                // An interrupted freeze's leftover: the janitor deletes it.
                continue;
            }
            let problem = match read_segment(&file.path, Entries::All) {
                Ok((header, _)) if path_of(self.data_dir(), &header.session_key) != file.path => {
                    Some(format!(
                        "holds session {:?} under another name",
                        header.session_key
                    ))
                }
                Ok(_) => None,
                Err(e) => Some(format!("does not decode: {e}")),
            };
            if let Some(problem) = problem {
                report.cold_damaged += 1;
                report.note("cold", name.as_bytes(), problem);
            }
        }
        Ok(())
    }

    /// Deletes a segment file (the janitor's eviction from the cold tier).
    pub(super) fn delete_segment(&self, file: &ColdFile) -> Result<(), StoreError> {
        self.remove_segment(&file.path)
    }

    /// Deletes a segment file, if it is there, and takes its size off the disk estimate.
    pub(super) fn remove_segment(&self, path: &Path) -> Result<(), StoreError> {
        let bytes = std::fs::symlink_metadata(path)
            .map(|m| super::disk::dir_disk_bytes_of_file(&m))
            .unwrap_or(0);
        match std::fs::remove_file(path) {
            Ok(()) => {
                self.shared.meter.remove_file(bytes);
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::file("delete", path)(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use turnstile_actors::DiskBudget;

    use super::*;
    use crate::config::{Durability, StorageConfig};
    use crate::store::{EntryKind, StoreBudget, TurnCommit};

    fn config(dir: &Path, max_disk_bytes: u64) -> StorageConfig {
        StorageConfig {
            data_dir: dir.to_path_buf(),
            cache_capacity_bytes: 1 << 20,
            durability: Durability::Batched,
            prune_after_days: 0,
            max_disk_bytes,
            ..StorageConfig::default()
        }
    }

    fn turn(store: &Store, key: &str, now_ms: u64, text: &str) {
        let e = |kind| TranscriptEntry {
            kind,
            text: text.into(),
            message_id: Some(format!("m{now_ms}")),
            sender: None,
            timestamp_ms: now_ms,
            tokens: 2,
            tool: None,
            memo: Default::default(),
        };
        store
            .commit_turn(&TurnCommit {
                session_key: key.to_string(),
                entries: vec![e(EntryKind::User), e(EntryKind::Assistant)],
                consumed: vec![],
                now_ms,
                channel_messages: vec![],
                replica: None,
            })
            .unwrap();
    }

    fn whole_transcript(store: &Store, key: &str) -> Vec<(u64, TranscriptEntry)> {
        let record = store.session(key).unwrap().expect("session in sled");
        store.transcript(record.id, 0, usize::MAX).unwrap()
    }

    #[tokio::test]
    async fn a_frozen_session_thaws_with_its_transcript_and_seqs() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&config(dir.path(), 64 << 20)).unwrap();
        for t in 0..3 {
            turn(&store, "a", 1_000 + t, &format!("hello {t}"));
        }
        turn(&store, "b", 2_000, "other");
        let before = whole_transcript(&store, "a");
        let updated = store.session("a").unwrap().unwrap().updated_at_ms;
        let live = store.live_bytes();
        assert!(
            store.freeze_session("a", updated - 1).unwrap().is_none(),
            "changed: kept"
        );
        let frozen = store.freeze_session("a", updated).unwrap().expect("frozen");
        assert_eq!(frozen.evicted.entries_deleted, 6);
        assert!(store.session("a").unwrap().is_none());
        assert_eq!(store.live_bytes(), live - frozen.evicted.bytes);
        assert_eq!(list(dir.path()).unwrap().len(), 1);

        assert!(!store.thaw_session("b").unwrap(), "not cold");
        assert!(store.thaw_session("a").unwrap());
        assert_eq!(whole_transcript(&store, "a"), before);
        assert_eq!(store.session("a").unwrap().unwrap().updated_at_ms, updated);
        assert!(list(dir.path()).unwrap().is_empty(), "the segment is gone");
        assert!(!store.thaw_session("a").unwrap(), "thawed once");
        turn(&store, "a", 5_000, "after");
        assert_eq!(whole_transcript(&store, "a").len(), 8);
        assert!(store
            .doctor(crate::store::Depth::Full, false)
            .unwrap()
            .is_clean());
        store.close().await.unwrap();
    }

    /// Admissions skip the segment lookup while the tier is known empty; a store opened on a
    /// data dir whose tier holds a segment must still look.
    #[tokio::test]
    async fn a_session_frozen_before_a_restart_thaws_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&config(dir.path(), 64 << 20)).unwrap();
        assert!(!store.cold_used(), "nothing frozen yet");
        turn(&store, "a", 1_000, "before the restart");
        let before = whole_transcript(&store, "a");
        store.freeze_session("a", 1_000).unwrap().expect("frozen");
        assert!(store.cold_used());
        store.close().await.unwrap();
        drop(store);

        let store = Store::open(&config(dir.path(), 64 << 20)).unwrap();
        assert!(store.cold_used(), "the segment on disk counts");
        assert!(store.session("a").unwrap().is_none());
        assert!(store.thaw_session("a").unwrap());
        assert_eq!(whole_transcript(&store, "a"), before);
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_deleted_session_does_not_come_back_from_the_cold_tier() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&config(dir.path(), 64 << 20)).unwrap();
        turn(&store, "a", 1_000, "secret");
        store.freeze_session("a", 1_000).unwrap().expect("frozen");
        assert!(
            store.delete_session("a").unwrap().is_some(),
            "a cold session is deleted"
        );
        assert!(list(dir.path()).unwrap().is_empty());
        assert!(!store.thaw_session("a").unwrap());
        assert!(store.session("a").unwrap().is_none());
        store.close().await.unwrap();
    }

    /// The mid-freeze race, both ways round: a message queued before the freeze takes the
    /// session's lock keeps it hot; one queued after it thaws the session before the entry
    /// is written, so the next turn continues the old history.
    #[tokio::test]
    async fn a_message_never_lands_beside_a_frozen_session() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&config(dir.path(), 64 << 20)).unwrap();
        turn(&store, "a", 1_000, "old history");
        let (item, _) = store
            .enqueue("a", crate::store::tests::record("1"))
            .unwrap();
        assert!(
            store.freeze_session("a", 1_000).unwrap().is_none(),
            "a queued message keeps the session in sled"
        );
        assert!(
            list(dir.path()).unwrap().is_empty(),
            "no segment left behind"
        );
        store
            .commit_turn(&TurnCommit {
                session_key: "a".to_string(),
                entries: vec![],
                consumed: vec![item.seq],
                now_ms: 1_001,
                channel_messages: vec![],
                replica: None,
            })
            .unwrap();

        store.freeze_session("a", 1_001).unwrap().expect("frozen");
        store
            .enqueue("a", crate::store::tests::record("2"))
            .unwrap();
        assert!(list(dir.path()).unwrap().is_empty(), "thawed by the write");
        turn(&store, "a", 2_000, "new");
        let texts: Vec<String> = whole_transcript(&store, "a")
            .into_iter()
            .map(|(_, e)| e.text)
            .collect();
        assert_eq!(texts, ["old history", "old history", "new", "new"]);
        store.close().await.unwrap();
    }

    /// Segments count in admission's disk estimate the moment they are written, and come off
    /// it when deleted.
    #[tokio::test]
    async fn segments_are_in_the_disk_estimate() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&config(dir.path(), 64 << 20)).unwrap();
        turn(&store, "a", 1_000, "text");
        let meter = &store.shared.meter;
        let counted = meter.measure_begins();
        meter.set_measured(1 << 20, counted);
        let frozen = store.freeze_session("a", 1_000).unwrap().expect("frozen");
        assert!(frozen.segment_bytes > 0);
        assert_eq!(meter.disk_estimate(), (1 << 20) + frozen.segment_bytes);
        let files = list(dir.path()).unwrap();
        store.delete_segment(&files[0]).unwrap();
        assert_eq!(meter.disk_estimate(), 1 << 20);
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_damaged_segment_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&config(dir.path(), 64 << 20)).unwrap();
        turn(&store, "a", 1_000, "text");
        store.freeze_session("a", 1_000).unwrap().expect("frozen");
        let path = path_of(dir.path(), "a");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.truncate(bytes.len() / 2);
        std::fs::write(&path, &bytes).unwrap();
        assert!(store.thaw_session("a").is_err());
        assert!(path.exists(), "kept for inspection, not deleted");
        let report = store.doctor(crate::store::Depth::Full, false).unwrap();
        assert_eq!(report.cold_damaged, 1, "{report}");
        assert!(!report.is_clean());
        store.close().await.unwrap();
    }

    /// English-like text: words of a fixed pseudo-random vocabulary (4,096 words of 2–9
    /// letters), so compression is neither free (`"x".repeat`) nor impossible (random bytes).
    fn prose(seed: &mut u64, bytes: usize) -> String {
        let mut next = || {
            *seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            *seed >> 33
        };
        let mut out = String::with_capacity(bytes + 16);
        while out.len() < bytes {
            let mut word = next() % 4_096;
            let len = 2 + (word % 8) as usize;
            for _ in 0..len {
                out.push((b'a' + (word % 26) as u8) as char);
                word = word / 26 + 7 * len as u64;
            }
            out.push(if next() % 12 == 0 { '.' } else { ' ' });
        }
        out
    }

    /// Raw transcript text held (hot in sled + cold in segments) after writing `overload` ×
    /// the budget through the janitor's passes, as a fraction of `max_disk_bytes`; and the data
    /// dir's peak. `settings` makes the `[storage]` settings for a data dir.
    async fn usable_ratio(overload: u64, settings: impl Fn(&Path) -> StorageConfig) -> Ratio {
        let dir = tempfile::tempdir().unwrap();
        let cfg = settings(dir.path());
        let budget = cfg.max_disk_bytes;
        let store = Store::open(&cfg).unwrap();
        let janitor = StoreBudget::new(store.clone(), &cfg, Arc::new(|_: &str| false));
        let mut seed = 7u64;
        let mut written = 0u64;
        let mut keys = Vec::new();
        let mut peak = 0u64;
        // Real time, so `prune_after_days` (on in the defaults) does not prune it all.
        let mut t = super::super::dedupe::wall_clock_ms();
        while written < budget * overload {
            let key = format!("s{:06}", keys.len());
            for _ in 0..4 {
                let text = prose(&mut seed, 2_000);
                written += 2 * text.len() as u64;
                t += 1;
                turn(&store, &key, t, &text);
            }
            keys.push(key);
            if keys.len() % 16 == 0 {
                let usage = janitor.usage().unwrap();
                peak = peak.max(usage.disk_bytes);
                janitor.reclaim(&usage, true).unwrap();
                peak = peak.max(crate::store::dir_disk_bytes(dir.path()).unwrap());
            }
        }
        let usage = janitor.usage().unwrap();
        janitor.reclaim(&usage, true).unwrap();
        let disk = crate::store::dir_disk_bytes(dir.path()).unwrap();
        peak = peak.max(disk);
        let mut held = 0u64;
        let mut cold_text = 0u64;
        for key in &keys {
            let text = |entries: Vec<(u64, TranscriptEntry)>| -> u64 {
                entries.iter().map(|(_, e)| e.text.len() as u64).sum()
            };
            if store.session(key).unwrap().is_some() {
                held += text(whole_transcript(&store, key));
            } else {
                let path = path_of(dir.path(), key);
                if path.exists() {
                    let bytes = text(read_segment(&path, Entries::All).unwrap().1);
                    held += bytes;
                    cold_text += bytes;
                }
            }
        }
        let cold_disk: u64 = list(dir.path()).unwrap().iter().map(|f| f.disk_bytes).sum();
        store.close().await.unwrap();
        Ratio {
            held: held as f64 / budget as f64,
            peak: peak as f64 / budget as f64,
            compression: cold_text as f64 / cold_disk.max(1) as f64,
        }
    }

    /// What [`usable_ratio`] measured, as fractions of `max_disk_bytes`.
    #[derive(Debug)]
    struct Ratio {
        held: f64,
        peak: f64,
        /// Raw text per disk byte in the cold tier.
        compression: f64,
    }

    impl std::fmt::Display for Ratio {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(
                f,
                "raw transcript text held {:.0}% of max_disk_bytes, peak data dir {:.0}%, \
                 cold tier {:.1} text bytes per disk byte",
                self.held * 100.0,
                self.peak * 100.0,
                self.compression
            )
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_cold_tier_holds_half_the_budget_in_raw_text() {
        let r = usable_ratio(2, |dir| StorageConfig {
            cold_max_fraction: 0.4,
            ..config(dir, 32 << 20)
        })
        .await;
        println!("cold tier on (0.4): {r}");
        assert!(r.peak <= 1.1, "{r}");
        assert!(r.held >= 0.5, "{r}");
    }

    /// Issue 14's target with nothing configured but the data dir and the budget: every other
    /// `[storage]` setting (durability, cache, pruning, the cold tier's share) is the default.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_default_config_holds_half_the_budget_in_raw_text() {
        let r = usable_ratio(2, |dir| defaults(dir, 32 << 20)).await;
        println!("defaults: {r}");
        assert!(r.peak <= 1.1, "{r}");
        assert!(r.held >= 0.5, "{r}");
    }

    /// The default `[storage]` settings but for the data dir and the budget.
    fn defaults(dir: &Path, max_disk_bytes: u64) -> StorageConfig {
        StorageConfig {
            data_dir: dir.to_path_buf(),
            max_disk_bytes,
            ..StorageConfig::default()
        }
    }

    /// The measurement reported in docs/storage.md: the defaults, and the cold tier off and
    /// at 0.4, 4× the budget (`cargo test --lib store::cold -- --ignored --nocapture`;
    /// `TURNSTILE_BUDGET_MB`).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "measurement"]
    async fn measure_usable_ratio() {
        let mb: u64 = std::env::var("TURNSTILE_BUDGET_MB")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(64);
        let r = usable_ratio(4, |dir| defaults(dir, mb << 20)).await;
        println!(
            "{mb} MiB, defaults (cold_max_fraction = {}): {r}",
            StorageConfig::default().cold_max_fraction
        );
        for fraction in [0.0, 0.4] {
            let r = usable_ratio(4, |dir| StorageConfig {
                cold_max_fraction: fraction,
                ..config(dir, mb << 20)
            })
            .await;
            println!("{mb} MiB, cold_max_fraction = {fraction}: {r}");
        }
    }
}
