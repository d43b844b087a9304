//! The cold tier: sessions the janitor would evict for the disk budget are moved out of sled
//! into compressed frames of pack files (`cold_pack.rs`: `<data_dir>/cold/pack-<n>.seg`, up
//! to 4,000 sessions a file), named by an index in sled (`cold_index.rs`), and loaded back
//! into sled before the session's next turn reads it (`Store::thaw_session`, called by the
//! turn, never by admission); reads, the listing and a delete use the index and the frame in
//! place (`cold_reads.rs`); the janitor removes and compacts packs and migrates the old
//! one-file-per-session layout (`cold_tidy.rs`, `cold_legacy.rs`).
//!
//! Why: sled holds a live byte in 2–4 disk bytes and a rewrite needs room for a second copy,
//! so live data in sled is held to a fraction of the budget. A frame holds a transcript in
//! less than its raw size and needs no rewrite, so the cold tier keeps several times more
//! transcript text. Frames count in the budget like everything under the data dir; when
//! nothing else brings the data dir under high water the oldest packs are deleted — that is
//! eviction.
//!
//! A frame's segment is a gzip stream of values `[u32 LE length][value]`, each in the
//! store's codec: first a [`ColdHeader`], then `(seq, TranscriptEntry)` for every entry.
//!
//! Crash safety: a frame is appended and synced before one transaction removes the session
//! from sled and names the frame in the index; a thaw writes the transcript under a fresh id
//! (invisible) and then, in one transaction, the record and the index entry's removal. So a
//! crash leaves a session in sled or in a pack — and if a copy is in both (an old layout's
//! file, an index entry from before a crash of sled's tail), sled wins: the cold copy is
//! dropped when next seen. What a cold session loses: its group-chat records
//! (`channel_messages`, context for later turns, deleted as by an eviction).

use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use flate2::read::GzDecoder;
use serde::{Deserialize, Serialize};
use sled::transaction::{TransactionError, Transactional};

use super::cold_index::{self, ColdEntry};
use super::cold_legacy;
use super::cold_pack::{pack_path, FrameLoc, FrameReader, Resume};
use super::evict::{Evicted, TRANSCRIPT_KEY_BYTES};
use super::{by_updated, decode, encode, keys, SessionRecord, Store, TranscriptEntry};
use crate::error::StoreError;

/// The cold tier's directory under the data dir.
pub(crate) const COLD_DIR: &str = "cold";

/// Transcript entries read (when freezing) or written (when thawing) per batch.
const BATCH: usize = 1_000;
/// Largest value accepted when reading a segment: a stored value's own limit.
const MAX_VALUE: usize = super::MAX_VALUE_BYTES;
/// Most cold sessions whose owed thaw admission counts at once (each has a queued message,
/// so `storage.max_queued_messages` usually bounds them first); past it a thaw is written
/// without having been counted, as before the janitor's next measurement.
pub(super) const MAX_OWED_THAWS: usize = 100_000;
/// Times a thaw starts again when its session's frame moved while it read it (a compaction
/// copied it to another pack, the janitor migrated an old-layout file).
const THAW_ATTEMPTS: usize = 3;

/// The first value of a segment.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct ColdHeader {
    pub(super) session_key: String,
    pub(super) record: SessionRecord,
}

/// 64-bit FNV-1a: stable across builds and platforms (old segment names are on disk).
pub(super) fn fnv1a(key: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.as_bytes() {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// Whether the cold tier's directory holds anything (when it cannot be listed: assumed so).
pub(super) fn may_hold_files(data_dir: &Path) -> bool {
    match std::fs::read_dir(data_dir.join(COLD_DIR)) {
        Ok(mut entries) => entries.next().is_some(),
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

fn write_value(out: &mut dyn Write, value: &[u8], origin: &Path) -> Result<(), StoreError> {
    let len = u32::try_from(value.len()).map_err(|_| StoreError::Encode("value too big".into()))?;
    out.write_all(&len.to_le_bytes())
        .and_then(|()| out.write_all(value))
        .map_err(StoreError::file("write", origin))
}

/// The next value, or `None` at a clean end of the stream.
fn read_value(input: &mut impl Read, origin: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(StoreError::file("read", origin)(e)),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_VALUE {
        return Err(StoreError::Decode {
            tree: "cold",
            reason: format!("a value of {len} bytes in {}", origin.display()),
        });
    }
    let mut value = vec![0u8; len];
    input
        .read_exact(&mut value)
        .map_err(StoreError::file("read", origin))?;
    Ok(Some(value))
}

/// Writes session `key`'s segment (uncompressed: the caller compresses) from sled.
pub(super) fn write_segment(
    store: &Store,
    key: &str,
    record: &SessionRecord,
    out: &mut dyn Write,
    origin: &Path,
) -> Result<(), StoreError> {
    let header = ColdHeader {
        session_key: key.to_string(),
        record: record.clone(),
    };
    write_value(out, &encode(&header)?, origin)?;
    let mut after = 0u64;
    loop {
        let page = store.transcript(record.id, after, BATCH)?;
        let Some((last, _)) = page.last() else { break };
        after = *last;
        for entry in &page {
            write_value(out, &encode(entry)?, origin)?;
        }
    }
    Ok(())
}

/// Which of a segment's transcript entries [`Segment::entries`] returns.
#[derive(Debug, Clone, Copy)]
pub(super) enum Entries {
    /// None: the header only.
    None,
    /// Every entry.
    All,
    /// A page: entries with `seq > after`, at most `limit` of them.
    After { after: u64, limit: usize },
}

/// A segment being read: its header is read, its entries follow one by one.
pub(super) struct Segment {
    input: GzDecoder<BufReader<Box<dyn Read + Send>>>,
    origin: PathBuf,
    pub(super) header: ColdHeader,
}

impl Segment {
    /// Reads the header of the gzip-compressed segment `input` (from `origin`, for errors).
    pub(super) fn open(input: Box<dyn Read + Send>, origin: &Path) -> Result<Self, StoreError> {
        let mut input = GzDecoder::new(BufReader::new(input));
        let header = read_value(&mut input, origin)?.ok_or_else(|| StoreError::Decode {
            tree: "cold",
            reason: format!("an empty segment in {}", origin.display()),
        })?;
        let header: ColdHeader = decode("cold", &header)?;
        Ok(Self {
            input,
            origin: origin.to_path_buf(),
            header,
        })
    }

    /// The next transcript entry.
    pub(super) fn next_entry(&mut self) -> Result<Option<(u64, TranscriptEntry)>, StoreError> {
        match read_value(&mut self.input, &self.origin)? {
            Some(value) => Ok(Some(decode("cold", &value)?)),
            None => Ok(None),
        }
    }

    /// The entries `which` asks for.
    pub(super) fn entries(
        mut self,
        which: Entries,
    ) -> Result<(ColdHeader, Vec<(u64, TranscriptEntry)>), StoreError> {
        let (after, limit) = match which {
            Entries::None => return Ok((self.header, Vec::new())),
            Entries::All => (None, usize::MAX),
            Entries::After { after, limit } => (Some(after), limit),
        };
        let mut out = Vec::new();
        while out.len() < limit {
            let Some((seq, entry)) = self.next_entry()? else {
                break;
            };
            if after.is_none_or(|after| seq > after) {
                out.push((seq, entry));
            }
        }
        Ok((self.header, out))
    }
}

/// Where a cold session was found, opened while its cold lock was held (so a janitor
/// deleting the file afterwards does not take it from under the reader).
pub(super) enum Located {
    /// In a pack, named by the index.
    Packed {
        entry: ColdEntry,
        frame: FrameReader,
    },
    /// In an old-layout file (which may hold another key with the same hash).
    Legacy { path: PathBuf, file: std::fs::File },
}

/// What a thaw's commit checks is still so: the frame it read is still the session's.
enum Source {
    Packed(FrameLoc),
    Legacy(PathBuf),
}

/// What a thaw's transaction decided.
#[derive(Clone, Copy)]
enum Commit {
    Done,
    Moved,
    Hot,
}

/// What a thaw's commit found.
enum Thawed {
    /// The session is in sled now, under the new id.
    Done(SessionRecord),
    /// Its cold copy moved or went: look again.
    Moved,
    /// It was in sled already (another thaw, or sled won over a stale cold copy).
    Hot,
}

impl Located {
    fn source(&self) -> Source {
        match self {
            Located::Packed { entry, .. } => Source::Packed(entry.loc),
            Located::Legacy { path, .. } => Source::Legacy(path.clone()),
        }
    }

    /// The session's segment; `None` when an old-layout file holds another key.
    pub(super) fn open(self, key: &str, data_dir: &Path) -> Result<Option<Segment>, StoreError> {
        let (segment, packed) = match self {
            Located::Packed { entry, frame } => (
                Segment::open(Box::new(frame), &pack_path(data_dir, entry.loc.pack))?,
                true,
            ),
            Located::Legacy { path, file } => (Segment::open(Box::new(file), &path)?, false),
        };
        if segment.header.session_key == key {
            return Ok(Some(segment));
        }
        if packed {
            return Err(StoreError::Decode {
                tree: "cold",
                reason: format!(
                    "the index names a frame of session {:?} for {key:?}",
                    segment.header.session_key
                ),
            });
        }
        Ok(None)
    }
}

/// Stripes of [`ColdLocks`]: enough that unrelated sessions rarely wait for each other.
const LOCK_STRIPES: usize = 64;

/// Per-session locks, striped by the key's hash, held only for lookups and commits (never
/// across a frame's copy, so an inbox write never waits for a thaw or a freeze to read or
/// write a transcript). A freeze checks under it that the session has no queued message and
/// then leaves sled; an inbox write holds it while it writes the entry. So a message either
/// lands before that check (and the session stays hot) or after the session has left sled —
/// and then the turn that answers it thaws the session first (`pipeline::TurnBackend`).
/// Never a turn reads a session while it is half frozen.
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
    /// Bytes the frame added to its pack (now counted in the disk estimate).
    pub(super) segment_bytes: u64,
}

impl Store {
    /// Moves session `key` into the cold tier, if it was not updated since
    /// `expected_updated_at` and has no queued messages. Returns what left sled, or `None` if
    /// the session changed or has queued messages and was kept (its frame is then dead bytes
    /// in the pack). Only the janitor freezes.
    pub(super) fn freeze_session(
        &self,
        key: &str,
        expected_updated_at: u64,
    ) -> Result<Option<Frozen>, StoreError> {
        // A first look without the lock: the copy below runs without it.
        if !self.pending(key, 0, 1)?.is_empty() {
            return Ok(None);
        }
        let Some(record) = self.session(key)? else {
            return Ok(None);
        };
        if record.updated_at_ms != expected_updated_at {
            return Ok(None);
        }
        // Before the frame exists: from here on reads and turns look in the index.
        self.shared.cold_used.store(true, Ordering::Release);
        let origin = self.data_dir().join(COLD_DIR);
        let loc = self.shared.packs.writer().append(
            || self.resume_packs(),
            |out| write_segment(self, key, &record, out, &origin),
        )?;
        let segment_bytes = loc.bytes();
        self.shared.meter.add_file(segment_bytes);
        let cold = self.shared.cold_locks.lock(key);
        // A message queued since the first look keeps the session hot. So does a compaction
        // (which does not take the cold lock, nor change `updated_at_ms`) that replaced
        // entries while they were copied: the frame would pair the old record with the new
        // transcript. The next pass tries again.
        if !self.pending(key, 0, 1)?.is_empty() || self.session(key)?.as_ref() != Some(&record) {
            return Ok(None);
        }
        let entry = ColdEntry {
            loc,
            record: record.clone(),
        };
        let left = self.evict_records(key, Some(expected_updated_at), Some(&entry))?;
        drop(cold);
        let Some(record) = left else {
            return Ok(None);
        };
        let evicted = self.after_eviction(key, record)?;
        Ok(Some(Frozen {
            evicted,
            segment_bytes,
        }))
    }

    /// Where the writer continues after a start: the newest pack the index knows.
    pub(super) fn resume_packs(&self) -> Result<Resume, StoreError> {
        Ok(Resume {
            newest: cold_index::newest_pack(&self.inner().cold)?,
        })
    }

    /// False while the cold tier is known to be empty (see `Shared::cold_used`).
    pub(super) fn cold_used(&self) -> bool {
        self.shared.cold_used.load(Ordering::Acquire)
    }

    /// Whether session `key` may be cold: named by the index, or an old-layout file for its
    /// hash exists. A sled read (and a `stat` while old files remain); nothing while the tier
    /// is known to be empty. A turn calls it before reading its session, and thaws only then.
    pub fn may_be_cold(&self, key: &str) -> bool {
        if !self.cold_used() {
            return false;
        }
        // An index that cannot be read: let the thaw find out and report it.
        let indexed = cold_index::get(&self.inner().cold, key).map_or(true, |e| e.is_some());
        indexed || (self.legacy_cold() && cold_legacy::path_of(self.data_dir(), key).exists())
    }

    /// Where session `key`'s cold copy is, opened; the caller holds its cold lock.
    pub(super) fn locate_cold(&self, key: &str) -> Result<Option<Located>, StoreError> {
        if !self.cold_used() {
            return Ok(None);
        }
        if let Some(entry) = cold_index::get(&self.inner().cold, key)? {
            let frame = self.shared.packs.frame(entry.loc)?;
            return Ok(Some(Located::Packed { entry, frame }));
        }
        if self.legacy_cold() {
            let path = cold_legacy::path_of(self.data_dir(), key);
            match std::fs::File::open(&path) {
                Ok(file) => return Ok(Some(Located::Legacy { path, file })),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::file("open", &path)(e)),
            }
        }
        Ok(None)
    }

    /// Loads session `key` back from the cold tier into sled if it is cold (and not in sled
    /// already). True when it was thawed.
    ///
    /// The transcript is read and written (under a fresh id, invisible until the record
    /// exists) without the session's cold lock; only the lookup and the commit take it, and
    /// the commit checks that the frame read is still the session's. Runs on a blocking
    /// thread: the turn that needs the session awaits it, admission never does.
    pub fn thaw_session(&self, key: &str) -> Result<bool, StoreError> {
        let thawed = self.thaw_attempts(key);
        // A failed thaw is still owed: its turn tries again.
        if thawed.is_ok() {
            self.settle_thaw(key);
        }
        thawed
    }

    /// Counts the thaw that a message just queued for session `key` will cause, if the
    /// session is cold: its turn writes the whole transcript back, and admission's disk
    /// estimate must know before it accepts more. The caller holds the session's cold lock.
    pub(super) fn owe_thaw(&self, key: &str) {
        if !self.cold_used() {
            return;
        }
        let entry = match cold_index::get(&self.inner().cold, key) {
            Ok(Some(entry)) => entry,
            Ok(None) => return,
            Err(error) => {
                // Only the estimate misses it; the thaw itself reports the index.
                tracing::warn!(session_key = %key, %error, "cannot count an owed thaw");
                return;
            }
        };
        let mut owed = self
            .shared
            .owed_thaws
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if owed.len() < MAX_OWED_THAWS && !owed.contains_key(key) {
            let bytes = entry.record.bytes + entry.record.entries * TRANSCRIPT_KEY_BYTES;
            owed.insert(key.to_string(), bytes);
            self.shared.meter.owe_thaw(bytes);
        }
    }

    /// Whether a queued message of session `key` owes a thaw (see [`Store::owe_thaw`]).
    pub fn owes_thaw(&self, key: &str) -> bool {
        self.shared
            .owed_thaws
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains_key(key)
    }

    /// Takes session `key`'s owed thaw off admission's estimate: thawed, or gone.
    pub(super) fn settle_thaw(&self, key: &str) {
        let settled = self
            .shared
            .owed_thaws
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
        if let Some(bytes) = settled {
            self.shared.meter.settle_thaw(bytes);
        }
    }

    fn thaw_attempts(&self, key: &str) -> Result<bool, StoreError> {
        for _ in 0..THAW_ATTEMPTS {
            let located = {
                let _cold = self.shared.cold_locks.lock(key);
                if self.session(key)?.is_some() {
                    // sled wins: a cold copy beside it is stale.
                    self.drop_stale_cold(key)?;
                    return Ok(false);
                }
                match self.locate_cold(key)? {
                    Some(located) => located,
                    None => return Ok(false),
                }
            };
            let source = located.source();
            let Some(segment) = located.open(key, self.data_dir())? else {
                return Ok(false);
            };
            #[cfg(test)]
            self.run_thaw_hook();
            // Under the write gate, as every id: a rewrite computes the next generation's id
            // base under it, and an id the old generation handed out after that would be
            // handed out again by the new one (two sessions sharing transcript keys: the
            // eviction of one deleted the other's entries).
            let id = {
                let _write = self.write_gate();
                self.inner().next_id()?
            };
            let committed = self
                .write_thawed_transcript(id, segment)
                .and_then(|record| self.commit_thaw(key, record, &source));
            match committed {
                Ok(Thawed::Done(record)) => {
                    if let Source::Legacy(path) = &source {
                        self.remove_legacy(path)?;
                    }
                    tracing::info!(session_key = %key, entries = record.entries, "thawed a cold session");
                    return Ok(true);
                }
                Ok(Thawed::Moved) => {
                    self.delete_transcript(id)?;
                }
                Ok(Thawed::Hot) => {
                    self.delete_transcript(id)?;
                    return Ok(false);
                }
                Err(e) => {
                    // Nothing names the transcript written so far; a leftover is the doctor's.
                    let _ = self.delete_transcript(id);
                    return Err(e);
                }
            }
        }
        Err(StoreError::Invariant(
            "a cold session kept moving while it was thawed",
        ))
    }

    /// Writes a segment's transcript under session id `id` with its entries' own sequence
    /// numbers, in batches (each under the write gate, so a rewrite copies it). Returns the
    /// segment's record under `id`.
    fn write_thawed_transcript(
        &self,
        id: u64,
        mut segment: Segment,
    ) -> Result<SessionRecord, StoreError> {
        loop {
            let mut batch = sled::Batch::default();
            let mut n = 0;
            while n < BATCH {
                let Some((seq, entry)) = segment.next_entry()? else {
                    break;
                };
                batch.insert(&keys::transcript_key(id, seq), encode(&entry)?);
                n += 1;
            }
            if n > 0 {
                let _write = self.write_gate();
                self.inner()
                    .transcript
                    .apply_batch(batch)
                    .map_err(StoreError::sled("thawing a transcript"))?;
            }
            if n < BATCH {
                break;
            }
        }
        let mut record = segment.header.record;
        record.id = id;
        Ok(record)
    }

    /// The commit point of a thaw, under the session's cold lock: the record and its index
    /// entry in sled and the cold copy's index entry gone, in one transaction — if the
    /// session is not in sled and `source` is still its cold copy.
    fn commit_thaw(
        &self,
        key: &str,
        record: SessionRecord,
        source: &Source,
    ) -> Result<Thawed, StoreError> {
        let _cold = self.shared.cold_locks.lock(key);
        if let Source::Legacy(path) = source {
            if !path.exists() {
                return Ok(Thawed::Moved);
            }
        }
        let encoded = encode(&record)?;
        let updated_at_ms = record.updated_at_ms;
        let write = self.write_gate();
        let inner = self.inner();
        let outcome = (&inner.sessions, &inner.by_updated, &inner.cold).transaction(
            |(sessions, index, cold)| {
                if sessions.get(key)?.is_some() {
                    cold_index::tx_remove(cold, key)?;
                    return Ok(Commit::Hot);
                }
                let current = cold_index::tx_get(cold, key)?;
                let same = match source {
                    Source::Packed(loc) => current.as_ref().is_some_and(|e| e.loc == *loc),
                    Source::Legacy(_) => current.is_none(),
                };
                if !same {
                    return Ok(Commit::Moved);
                }
                cold_index::tx_remove(cold, key)?;
                sessions.insert(key.as_bytes(), encoded.as_slice())?;
                index.insert(by_updated::key(updated_at_ms, key), &[])?;
                Ok(Commit::Done)
            },
        );
        drop(write);
        match outcome {
            Ok(Commit::Done) => {}
            Ok(Commit::Moved) => return Ok(Thawed::Moved),
            Ok(Commit::Hot) => return Ok(Thawed::Hot),
            Err(TransactionError::Abort(e)) => return Err(e),
            Err(TransactionError::Storage(source)) => {
                return Err(StoreError::Sled {
                    context: "thawing a session",
                    source,
                })
            }
        }
        self.shared.totals.replace(None, Some(&record));
        self.shared
            .meter
            .add(record.bytes + record.entries * TRANSCRIPT_KEY_BYTES);
        Ok(Thawed::Done(record))
    }

    /// Drops session `key`'s cold copies (its index entry, an old-layout file of its own):
    /// stale when the session is in sled, gone for good after an eviction. The caller holds
    /// the session's cold lock.
    pub(super) fn drop_stale_cold(&self, key: &str) -> Result<(), StoreError> {
        if !self.cold_used() {
            return Ok(());
        }
        if cold_index::get(&self.inner().cold, key)?.is_some() {
            let _write = self.write_gate();
            let inner = self.inner();
            let removed: Result<_, TransactionError<StoreError>> =
                (&inner.cold,).transaction(|(cold,)| cold_index::tx_remove(cold, key).map(|_| ()));
            removed.map_err(|e| match e {
                TransactionError::Abort(e) => e,
                TransactionError::Storage(source) => StoreError::Sled {
                    context: "dropping a stale cold copy",
                    source,
                },
            })?;
        }
        if self.legacy_cold() {
            let path = cold_legacy::path_of(self.data_dir(), key);
            if let Ok(file) = std::fs::File::open(&path) {
                let held = Located::Legacy {
                    path: path.clone(),
                    file,
                }
                .open(key, self.data_dir());
                // Another key's file (same hash) stays; a damaged one is the doctor's.
                if let Ok(Some(_)) = held {
                    self.remove_legacy(&path)?;
                }
            }
        }
        Ok(())
    }

    /// Deletes the cold copy of session `key`, if there is one (a deleted or plainly evicted
    /// session must not come back from a stale copy).
    pub(super) fn forget_cold(&self, key: &str) -> Result<(), StoreError> {
        let _cold = self.shared.cold_locks.lock(key);
        self.drop_stale_cold(key)
    }

    /// Tests: freezes session `key` now, as the janitor would. True when it left sled.
    #[cfg(test)]
    pub(crate) fn freeze_for_test(&self, key: &str) -> Result<bool, StoreError> {
        let Some(record) = self.session(key)? else {
            return Ok(false);
        };
        Ok(self.freeze_session(key, record.updated_at_ms)?.is_some())
    }

    /// Tests: installs a function a thaw calls after reading its frame's header, before it
    /// writes anything (a test holds a thaw there).
    #[cfg(test)]
    pub(crate) fn set_thaw_hook(&self, hook: impl Fn() + Send + Sync + 'static) {
        *self
            .shared
            .thaw_hook
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(std::sync::Arc::new(hook));
    }

    #[cfg(test)]
    fn run_thaw_hook(&self) {
        let hook = self
            .shared
            .thaw_hook
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(hook) = hook {
            hook();
        }
    }
}
