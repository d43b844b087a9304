//! Online backup: a consistent snapshot of a running store, written as one checksummed file
//! (`backup_file.rs` is the format and the restore).
//!
//! **Consistency without holding the writers.** sled has no snapshot, so the backup takes the
//! rewrite's road (`rewrite.rs`): every tree is copied into a staging database
//! (`<data_dir>/backup.tmp`) beside the writers, while watchers record the keys written
//! meanwhile; catch-up rounds copy those again, each shorter than the last. Only the last
//! round holds the write gate, and with it the cut is taken: the id base, the ledger stamp and
//! the cold tier's pack files, opened there and then with their lengths. The staging copy is
//! then the store exactly as it was at the cut, across all trees. Pack frames are only ever
//! appended, and synced before the index names them (`cold_pack.rs`), so the bytes below the
//! length seen at the cut hold every frame the copied index names; an open handle keeps a
//! pack readable even if the janitor deletes it afterwards. Writes wait only for that last
//! round (at most `rewrite::FINAL_ROUND_KEYS` keys) and the opening of the packs.
//!
//! The file is written after the gate is released, from the staging copy (no longer changing)
//! and the open packs, then the staging copy is deleted. Archives (`archives/`) are whole
//! files each written once and renamed into place; they are copied as found after the cut.
//!
//! Costs: the staging copy takes about the database's size on disk under the data dir while
//! the backup runs (it counts against `max_disk_bytes`), and one backup (or rewrite) runs at
//! a time.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::archive::ARCHIVE_DIR;
use super::backup_file::{BackupWriter, CutFile};
use super::changes::Changes;
use super::cold::COLD_DIR;
use super::cold_pack::pack_number;
use super::rewrite::{catch_up, copy_tree, SizeCap, Stop, TreeCopy, ID_BASE_KEY};
use super::{Store, TOTALS_KEY};
use crate::error::StoreError;

/// The staging copy's directory under the data dir (deleted when the backup ends, and at the
/// start of the next one if a crash left it).
pub(crate) const STAGING_DIR: &str = "backup.tmp";

/// Why a backup is refused while another runs.
pub(crate) const BUSY: &str = "another backup is running; retry when it is done";

/// What a backup did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct BackupReport {
    /// Keys written, over all trees.
    pub keys: u64,
    /// Files written (cold packs, archives).
    pub files: u64,
    /// Bytes of the backup file.
    pub bytes: u64,
    /// How long writes were held off for the cut, in ms.
    pub pause_ms: u64,
    /// How long the whole backup took, in ms.
    pub elapsed_ms: u64,
}

fn ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

fn stopped(stop: Stop) -> StoreError {
    match stop {
        Stop::Failed(e) => e,
        Stop::TooBig(_) => StoreError::Invariant("a backup's copy has no size cap"),
    }
}

impl Store {
    /// Writes a consistent snapshot of the store to `out` (see the module doc). Blocking;
    /// writes are held off only for the cut. Refuses a store whose cold tier still holds
    /// files of the old one-file-per-session layout (the janitor migrates them first).
    pub fn backup(&self, out: &mut dyn Write) -> Result<BackupReport, StoreError> {
        let started = Instant::now();
        let _only = match self.shared.backing_up.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                return Err(StoreError::Backup {
                    path: self.shared.data_dir.clone(),
                    reason: BUSY.into(),
                })
            }
        };
        if super::cold_legacy::may_exist(&self.shared.data_dir) {
            return Err(StoreError::Backup {
                path: self.shared.data_dir.join(COLD_DIR),
                reason: "the cold tier still holds files of the old layout; back up once the \
                         server has migrated them into packs"
                    .into(),
            });
        }
        let staging = self.shared.data_dir.join(STAGING_DIR);
        let (db, cut_files, pause_ms) = {
            // One backup or rewrite at a time: a rewrite would switch generations under the
            // watchers.
            let _one = self
                .shared
                .rewriting
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            remove_staging(&staging)?;
            let db = super::sled_config::sled_config(&staging, &self.shared.config)
                .temporary(true)
                .flush_every_ms(None)
                .open()
                .map_err(|source| StoreError::from_open(&staging, source))?;
            match self.copy_to_cut(&db, &staging) {
                Ok((files, pause_ms)) => (db, files, pause_ms),
                Err(e) => {
                    drop(db);
                    let _ = remove_staging(&staging);
                    return Err(e);
                }
            }
        };
        let written = write_file(&db, cut_files, &self.shared.data_dir, &[], out);
        drop(db);
        if let Err(e) = remove_staging(&staging) {
            tracing::warn!(error = %e, "could not delete a backup's staging copy");
        }
        let (keys, files, bytes) = written?;
        let report = BackupReport {
            keys,
            files,
            bytes,
            pause_ms,
            elapsed_ms: ms(started),
        };
        tracing::info!(?report, "backup written");
        Ok(report)
    }

    /// Copies every tree into `db` and takes the cut under the write gate; returns the cold
    /// tier's files as they were at the cut and how long writes waited, in ms.
    fn copy_to_cut(
        &self,
        db: &sled::Db,
        staging: &Path,
    ) -> Result<(Vec<CutFile>, u64), StoreError> {
        let old = self.inner();
        let names = old.db.tree_names();
        let copies = names
            .iter()
            .map(|name| TreeCopy::open(&old.db, db, name))
            .collect::<Result<Vec<_>, _>>()?;
        let no_cap = SizeCap {
            dir: staging,
            bytes: u64::MAX,
        };
        // Watching starts before the first key is read: every write from here on is seen.
        let sources: Vec<sled::Tree> = copies.iter().map(|c| c.src.clone()).collect();
        let changes = Changes::watch(&sources)?;
        let mut copied_bytes = 0;
        self.copy_beside_writers(&copies, &changes, &no_cap, &mut copied_bytes)
            .map_err(stopped)?;

        let gate = self
            .shared
            .write_gate
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let paused = Instant::now();
        let last: Vec<BTreeSet<sled::IVec>> = changes.finish()?;
        catch_up(&copies, &last)?;
        for name in old.db.tree_names() {
            if !names.contains(&name) {
                copy_tree(
                    &TreeCopy::open(&old.db, db, &name)?,
                    &no_cap,
                    &mut copied_bytes,
                )
                .map_err(stopped)?;
            }
        }
        let meta = db
            .open_tree("meta")
            .map_err(StoreError::sled("opening a backup's meta"))?;
        // A fresh database hands out ids from 0: the restored store starts above every id the
        // source handed out.
        let base = old.next_id()? + 1;
        meta.insert(ID_BASE_KEY, &base.to_be_bytes())
            .map_err(StoreError::sled("writing the id base"))?;
        // Totals kept at the source's last clean stop are stale; the restored store counts
        // its records again at its first start.
        meta.remove(TOTALS_KEY)
            .map_err(StoreError::sled("writing a backup's meta"))?;
        self.shared.ledger.stamp(db)?;
        let files = open_packs(&self.shared.data_dir)?;
        drop(gate);
        Ok((files, ms(paused)))
    }
}

/// Deletes a staging copy left behind (a crash during an earlier backup).
fn remove_staging(staging: &Path) -> Result<(), StoreError> {
    match std::fs::remove_dir_all(staging) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(StoreError::file("delete", staging)(e))
        }
        _ => Ok(()),
    }
}

/// The cold tier's pack files, opened, with their lengths now.
pub(super) fn open_packs(data_dir: &Path) -> Result<Vec<CutFile>, StoreError> {
    open_files(data_dir, COLD_DIR, |name, _| pack_number(name).is_some())
}

/// The archives as found now (each one a complete file; a half-written one has a dot name).
fn open_archives(data_dir: &Path) -> Result<Vec<CutFile>, StoreError> {
    open_files(data_dir, ARCHIVE_DIR, |name, entry| {
        !name.starts_with('.') && entry.file_type().is_ok_and(|t| t.is_file())
    })
}

/// The files of `data_dir/<sub>` that `keep` takes, opened, with their lengths now, by name.
/// A file deleted since the listing (by the janitor) is left out: the copied index no longer
/// names it.
fn open_files(
    data_dir: &Path,
    sub: &str,
    keep: impl Fn(&str, &std::fs::DirEntry) -> bool,
) -> Result<Vec<CutFile>, StoreError> {
    let dir = data_dir.join(sub);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::file("list", &dir)(e)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(StoreError::file("list", &dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !keep(&name, &entry) {
            continue;
        }
        let path: PathBuf = entry.path();
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(StoreError::file("open", &path)(e)),
        };
        let len = file
            .metadata()
            .map_err(StoreError::file("read the size of", &path))?
            .len();
        files.push(CutFile {
            name: format!("{sub}/{name}"),
            file,
            len,
        });
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(files)
}

/// Writes the staging copy and the files to `out`, then `meta` entries that override the
/// copy's (a restore applies them last); returns the keys, files and bytes written.
pub(super) fn write_file(
    db: &sled::Db,
    mut files: Vec<CutFile>,
    data_dir: &Path,
    meta: &[(&[u8], Vec<u8>)],
    out: &mut dyn Write,
) -> Result<(u64, u64, u64), StoreError> {
    let mut writer = BackupWriter::start(out)?;
    for name in db.tree_names() {
        let tree = db
            .open_tree(&name)
            .map_err(StoreError::sled("opening a backup's tree"))?;
        writer.tree(&name)?;
        for kv in tree.iter() {
            let (k, v) = kv.map_err(StoreError::sled("reading a backup's tree"))?;
            writer.key(&k, &v)?;
        }
    }
    if !meta.is_empty() {
        writer.tree(b"meta")?;
        for (k, v) in meta {
            writer.key(k, v)?;
        }
    }
    files.extend(open_archives(data_dir)?);
    for file in files {
        writer.file(file)?;
    }
    writer.finish()
}
