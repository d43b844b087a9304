//! The janitor's and the doctor's work on the cold tier: packs whose sessions are all gone
//! are deleted, packs mostly dead are compacted, old-layout files are moved into packs, the
//! oldest cold files are deleted for the budget, and the doctor reads every frame.
//!
//! The rules:
//! * A thaw or a delete only drops a session's index entry; its frame stays as dead bytes.
//!   Every pass deletes the packs that hold no live session (and pack files the index never
//!   named: a crash before their first frame was indexed) and compacts up to
//!   [`MAX_COMPACTIONS_PER_PASS`] sealed packs whose live bytes are under [`COMPACT_BELOW`] of
//!   their size ([`COMPACT_UNDER_PRESSURE_BELOW`] over high water): their live frames are
//!   copied as they are into the open pack (synced), the index moved frame by frame, made
//!   durable, and only then the old pack deleted. None of that loses a session, so it runs at
//!   any fill (and in warn mode); a compaction needs room for the live part of one pack (at
//!   most [`PACK_MAX_BYTES`](super::cold_pack::PACK_MAX_BYTES), a 64th of the budget).
//! * Old-layout files (`cold_legacy.rs`) move into packs at up to [`MIGRATE_PER_PASS`] a
//!   pass, in batches of [`MIGRATE_BATCH`]: copied and synced, indexed, the index made
//!   durable, and only then the files deleted.
//! * Deleting cold sessions for the budget (only when `budget.rs`'s rules say so) goes by
//!   whole files, oldest first: old-layout files, then packs by number.

use std::collections::HashSet;
use std::path::Path;

use sled::transaction::{TransactionError, Transactional};

use super::cold::{Located, Segment, COLD_DIR};
use super::cold_index::{self, ColdEntry};
use super::cold_legacy::{self, LegacyFile};
use super::cold_pack::{pack_number, pack_path, FrameLoc, PackWriter};
use super::{DoctorReport, Store};
use crate::error::StoreError;

/// Old-layout files moved into packs per janitor pass (the rest in the next passes).
pub(super) const MIGRATE_PER_PASS: usize = 20_000;
/// Old-layout files copied, synced and indexed together.
pub(super) const MIGRATE_BATCH: usize = 1_000;
/// A sealed pack whose live bytes are under this fraction of its size is compacted...
pub(super) const COMPACT_BELOW: f64 = 0.5;
/// ...or under this one while the data dir is over high water: a thaw or a delete leaves its
/// frame as dead bytes (one file per session gave them back at once), and under pressure that
/// room is worth the copy.
pub(super) const COMPACT_UNDER_PRESSURE_BELOW: f64 = 0.8;
/// Packs compacted per janitor pass.
pub(super) const MAX_COMPACTIONS_PER_PASS: usize = 4;

/// What one pass of upkeep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tidied {
    /// Old-layout files moved into packs.
    pub(super) migrated: u64,
    /// Packs deleted because nothing in them was live (or the index never named them).
    pub(super) packs_removed: u64,
    /// Packs compacted (their live frames moved, the pack deleted).
    pub(super) packs_compacted: u64,
    /// Disk bytes given back.
    pub(super) bytes_freed: u64,
}

/// A file of the cold tier, as the janitor deletes them for the budget.
#[derive(Debug, Clone)]
pub(super) enum ColdFile {
    /// An old-layout file: one session (none for an interrupted freeze's leftover).
    Legacy(LegacyFile),
    /// Pack `n`.
    Pack { n: u64, disk_bytes: u64 },
}

impl ColdFile {
    /// Bytes allocated on disk.
    pub(super) fn disk_bytes(&self) -> u64 {
        match self {
            ColdFile::Legacy(f) => f.disk_bytes,
            ColdFile::Pack { disk_bytes, .. } => *disk_bytes,
        }
    }
}

fn disk_bytes_of(path: &Path) -> Option<u64> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| super::disk::dir_disk_bytes_of_file(&m))
}

fn tx_error(context: &'static str) -> impl Fn(TransactionError<StoreError>) -> StoreError {
    move |e| match e {
        TransactionError::Abort(e) => e,
        TransactionError::Storage(source) => StoreError::Sled { context, source },
    }
}

impl Store {
    /// One pass of upkeep (see the module doc); `pressure`: the data dir is over high water.
    /// Runs on the janitor's blocking thread.
    pub(super) fn tidy_cold(&self, pressure: bool) -> Result<Tidied, StoreError> {
        let compact_below = if pressure {
            COMPACT_UNDER_PRESSURE_BELOW
        } else {
            COMPACT_BELOW
        };
        let mut done = Tidied::default();
        if self.legacy_cold() {
            self.migrate_legacy(MIGRATE_PER_PASS, &mut done)?;
        }
        if !self.cold_used() {
            return Ok(done);
        }
        let mut writer = self.shared.packs.writer();
        let current = writer.current();
        let packs = cold_index::packs(&self.inner().cold)?;
        let mut compactions = 0;
        for (n, info) in packs {
            if Some(n) == current {
                continue;
            }
            if info.live_sessions == 0 {
                done.bytes_freed += self.remove_pack(&mut writer, n)?;
                done.packs_removed += 1;
                continue;
            }
            let path = pack_path(self.data_dir(), n);
            let Ok(len) = std::fs::metadata(&path).map(|m| m.len()) else {
                continue;
            };
            let sealed = self.shared.packs.sealed(info.frames, len);
            if sealed
                && compactions < MAX_COMPACTIONS_PER_PASS
                && (info.live_bytes as f64) < compact_below * len as f64
            {
                let before = disk_bytes_of(&path).unwrap_or(0);
                if self.compact_pack(&mut writer, n)? {
                    done.bytes_freed += before.saturating_sub(info.live_bytes);
                    done.packs_compacted += 1;
                }
                compactions += 1;
            }
        }
        // Known again: a compaction above may have filled and indexed packs of its own.
        let known: HashSet<u64> = cold_index::packs(&self.inner().cold)?
            .iter()
            .map(|(n, _)| *n)
            .collect();
        for (n, _) in self.pack_files()? {
            if !known.contains(&n) && Some(n) != writer.current() {
                done.bytes_freed += self.remove_pack(&mut writer, n)?;
                done.packs_removed += 1;
            }
        }
        drop(writer);
        if done != Tidied::default() {
            tracing::info!(
                migrated = done.migrated,
                packs_removed = done.packs_removed,
                packs_compacted = done.packs_compacted,
                bytes_freed = done.bytes_freed,
                "cold tier tidied"
            );
        }
        Ok(done)
    }

    /// Pack files in the cold directory: (number, disk bytes), lowest number first.
    fn pack_files(&self) -> Result<Vec<(u64, u64)>, StoreError> {
        let dir = self.data_dir().join(COLD_DIR);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(StoreError::file("list", &dir)(e)),
        };
        let mut out = Vec::new();
        for entry in entries.take(cold_legacy::MAX_LISTED) {
            let entry = entry.map_err(StoreError::file("list", &dir))?;
            let Some(n) = pack_number(&entry.file_name().to_string_lossy()) else {
                continue;
            };
            let Ok(meta) = entry.metadata() else { continue };
            out.push((n, super::disk::dir_disk_bytes_of_file(&meta)));
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Deletes pack `n`, which the index names no frame of, and forgets it. Returns the disk
    /// bytes it held.
    fn remove_pack(&self, writer: &mut PackWriter<'_>, n: u64) -> Result<u64, StoreError> {
        let bytes = writer.delete_pack(n)?;
        self.shared.meter.remove_file(bytes);
        let _write = self.write_gate();
        cold_index::forget_pack(&self.inner().cold, n)?;
        Ok(bytes)
    }

    /// Copies pack `n`'s live frames into the open pack and deletes `n` once the index names
    /// none of its frames (durably). False when some frame stayed (moved meanwhile by
    /// nothing else: a session thawed or deleted in between leaves only dead bytes).
    fn compact_pack(&self, writer: &mut PackWriter<'_>, n: u64) -> Result<bool, StoreError> {
        let tree = self.inner().cold.clone();
        let mut copied = Vec::new();
        for (offset, key) in cold_index::frames_of(&tree, n)? {
            let Some(entry) = cold_index::get(&tree, &key)? else {
                continue;
            };
            if entry.loc.pack != n || entry.loc.offset != offset {
                continue;
            }
            let member = self.shared.packs.frame_bytes(entry.loc)?;
            let loc = writer.append_raw(|| self.resume_packs(), &member)?;
            if loc.pack == n {
                return Err(StoreError::Invariant(
                    "a cold pack was compacted into itself",
                ));
            }
            self.shared.meter.add_file(loc.bytes());
            copied.push((key, entry, loc));
        }
        writer.sync()?;
        for (key, old, loc) in copied {
            self.move_frame(&key, &old, loc)?;
        }
        let still_live = cold_index::pack_info(&tree, n)?.is_some_and(|i| i.live_sessions > 0);
        if still_live {
            return Ok(false);
        }
        // The index's moves are durable before the frames they left are deleted.
        self.inner()
            .db
            .flush()
            .map_err(StoreError::sled("flushing the cold index"))?;
        self.remove_pack(writer, n)?;
        Ok(true)
    }

    /// Names `loc` as session `key`'s frame if the index still names `old`.
    fn move_frame(&self, key: &str, old: &ColdEntry, loc: FrameLoc) -> Result<(), StoreError> {
        let _cold = self.shared.cold_locks.lock(key);
        let _write = self.write_gate();
        let inner = self.inner();
        let moved = ColdEntry {
            loc,
            record: old.record.clone(),
        };
        let r: Result<(), TransactionError<StoreError>> = (&inner.cold,).transaction(|(cold,)| {
            if cold_index::tx_get(cold, key)?.as_ref() == Some(old) {
                cold_index::tx_insert(cold, key, &moved)?;
            }
            Ok(())
        });
        r.map_err(tx_error("moving a cold frame"))
    }

    /// Moves up to `max` old-layout files into packs (see the module doc); with none left,
    /// notes that the old layout is gone, so reads stop looking for it.
    fn migrate_legacy(&self, max: usize, done: &mut Tidied) -> Result<(), StoreError> {
        let files = cold_legacy::list(self.data_dir())?;
        if files.is_empty() {
            self.shared
                .legacy_cold
                .store(false, std::sync::atomic::Ordering::Release);
            return Ok(());
        }
        self.shared
            .cold_used
            .store(true, std::sync::atomic::Ordering::Release);
        for batch in files
            .chunks(MIGRATE_BATCH)
            .take(max.div_ceil(MIGRATE_BATCH))
        {
            self.migrate_batch(batch, done)?;
        }
        Ok(())
    }

    fn migrate_batch(&self, files: &[LegacyFile], done: &mut Tidied) -> Result<(), StoreError> {
        let mut appended = Vec::new();
        {
            let mut writer = self.shared.packs.writer();
            for file in files {
                if file.is_temporary() {
                    self.remove_legacy(&file.path)?;
                    continue;
                }
                let member = match std::fs::read(&file.path) {
                    Ok(m) => m,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(StoreError::file("read", &file.path)(e)),
                };
                let header = match Segment::open(
                    Box::new(std::io::Cursor::new(member.clone())),
                    &file.path,
                ) {
                    Ok(segment) => segment.header,
                    Err(error) => {
                        // Kept where it is for the doctor: it may be a session's only copy.
                        tracing::warn!(path = %file.path.display(), %error, "an old cold segment does not decode; left in place");
                        continue;
                    }
                };
                if cold_legacy::path_of(self.data_dir(), &header.session_key) != file.path {
                    tracing::warn!(path = %file.path.display(), "an old cold segment holds another session than its name says; left in place");
                    continue;
                }
                let loc = writer.append_raw(|| self.resume_packs(), &member)?;
                self.shared.meter.add_file(loc.bytes());
                appended.push((file.path.clone(), header, loc));
            }
            writer.sync()?;
        }
        let mut moved = Vec::new();
        for (path, header, loc) in appended {
            let key = header.session_key.as_str();
            let _cold = self.shared.cold_locks.lock(key);
            if !path.exists() {
                // Thawed or deleted meanwhile: the copy is dead bytes.
                continue;
            }
            let entry = ColdEntry {
                loc,
                record: header.record,
            };
            let _write = self.write_gate();
            let inner = self.inner();
            let r: Result<(), TransactionError<StoreError>> = (&inner.sessions, &inner.cold)
                .transaction(|(sessions, cold)| {
                    // sled wins, and an index entry is newer than any old-layout file.
                    if sessions.get(key)?.is_none() && cold_index::tx_get(cold, key)?.is_none() {
                        cold_index::tx_insert(cold, key, &entry)?;
                    }
                    Ok(())
                });
            r.map_err(tx_error("indexing an old cold segment"))?;
            moved.push(path);
        }
        // The index is durable before the files it replaces go.
        self.inner()
            .db
            .flush()
            .map_err(StoreError::sled("flushing the cold index"))?;
        for path in &moved {
            self.remove_legacy(path)?;
            done.migrated += 1;
        }
        cold_legacy::sync_dir(self.data_dir())
    }

    /// The cold tier's files oldest first, for deletion by the budget: old-layout files (by
    /// age), then packs (by number).
    pub(super) fn cold_files_oldest_first(&self) -> Result<Vec<ColdFile>, StoreError> {
        let mut out: Vec<ColdFile> = if self.legacy_cold() {
            cold_legacy::list(self.data_dir())?
                .into_iter()
                .map(ColdFile::Legacy)
                .collect()
        } else {
            Vec::new()
        };
        out.extend(
            self.pack_files()?
                .into_iter()
                .map(|(n, disk_bytes)| ColdFile::Pack { n, disk_bytes }),
        );
        Ok(out)
    }

    /// Deletes a cold file and every session in it, for the budget. Returns the sessions
    /// deleted.
    pub(super) fn delete_cold_file(&self, file: &ColdFile) -> Result<u64, StoreError> {
        match file {
            ColdFile::Legacy(f) => {
                self.remove_legacy(&f.path)?;
                Ok(u64::from(!f.is_temporary()))
            }
            ColdFile::Pack { n, .. } => {
                let mut writer = self.shared.packs.writer();
                let tree = self.inner().cold.clone();
                let mut deleted = 0;
                for (offset, key) in cold_index::frames_of(&tree, *n)? {
                    let _cold = self.shared.cold_locks.lock(&key);
                    let _write = self.write_gate();
                    let inner = self.inner();
                    let r: Result<bool, TransactionError<StoreError>> =
                        (&inner.cold,).transaction(|(cold,)| {
                            match cold_index::tx_get(cold, &key)? {
                                Some(e) if e.loc.pack == *n && e.loc.offset == offset => {
                                    cold_index::tx_remove(cold, &key)?;
                                    Ok(true)
                                }
                                _ => Ok(false),
                            }
                        });
                    if r.map_err(tx_error("deleting a cold session"))? {
                        deleted += 1;
                    }
                }
                // Durable before the file goes: a crash must not leave the index naming
                // frames of a deleted pack.
                self.inner()
                    .db
                    .flush()
                    .map_err(StoreError::sled("flushing the cold index"))?;
                self.remove_pack(&mut writer, *n)?;
                Ok(deleted)
            }
        }
    }

    /// The doctor's check of the cold tier: every indexed frame decodes to the end and holds
    /// its session; every old-layout file decodes and is named after its key. A damaged one
    /// is reported, never deleted (it may be the only copy of a session).
    pub(super) fn check_cold(&self, report: &mut DoctorReport) -> Result<(), StoreError> {
        let tree = self.inner().cold.clone();
        for item in cold_index::sessions_after(&tree, None) {
            let (key, entry) = match item {
                Ok(found) => found,
                Err(e @ StoreError::Decode { .. }) => {
                    report.cold_damaged += 1;
                    report.note("cold", b"", format!("an index entry does not decode: {e}"));
                    continue;
                }
                Err(e) => return Err(e),
            };
            let read = self.shared.packs.frame(entry.loc).and_then(|frame| {
                Located::Packed { entry, frame }
                    .open(&key, self.data_dir())?
                    .ok_or(StoreError::Invariant("a frame of another session"))?
                    .entries(super::cold::Entries::All)
            });
            if let Err(e) = read {
                report.cold_damaged += 1;
                report.note("cold", key.as_bytes(), format!("does not decode: {e}"));
            }
        }
        for file in cold_legacy::list(self.data_dir())? {
            if file.is_temporary() {
                // An interrupted freeze's leftover: the janitor deletes it.
                continue;
            }
            let name = file
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let read = std::fs::File::open(&file.path)
                .map_err(StoreError::file("open", &file.path))
                .and_then(|f| Segment::open(Box::new(f), &file.path))
                .and_then(|segment| {
                    let key = segment.header.session_key.clone();
                    segment.entries(super::cold::Entries::All).map(|_| key)
                });
            let problem = match read {
                Ok(key) if cold_legacy::path_of(self.data_dir(), &key) != file.path => {
                    Some(format!("holds session {key:?} under another name"))
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
}
