//! The cold tier's old layout: one segment file per session, `cold/<hash of the key>.seg`
//! (a 64-bit FNV-1a hash, so nothing a user chose is in a file name). Data dirs written
//! before the packs keep such files; they stay readable (a read, a thaw or a delete finds a
//! session there when the index does not name it) until the janitor has moved them into
//! packs ([`Store::migrate_legacy`](super::Store), in bounded batches). Nothing writes this
//! layout any more but a test helper.
//!
//! A file's content is exactly one pack frame's gzip member, so a migration copies its bytes.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::cold::{fnv1a, COLD_DIR};
use super::cold_pack::pack_number;
use super::Store;
use crate::error::StoreError;

/// Most old segment files listed at once; bounds the listing's memory (the rest are found
/// by the janitor's next pass).
pub(super) const MAX_LISTED: usize = 100_000;

/// One old segment file (or a temporary file an interrupted freeze of the old layout left).
#[derive(Debug, Clone)]
pub(super) struct LegacyFile {
    pub(super) path: PathBuf,
    /// Bytes allocated on disk.
    pub(super) disk_bytes: u64,
    modified: SystemTime,
}

impl LegacyFile {
    /// A temporary file of an interrupted freeze: never a session's only copy.
    pub(super) fn is_temporary(&self) -> bool {
        self.path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
    }
}

/// The old segment path for `key`. Two keys with the same hash could not both be cold there:
/// the second was evicted instead.
pub(super) fn path_of(data_dir: &Path, key: &str) -> PathBuf {
    data_dir
        .join(COLD_DIR)
        .join(format!("{:016x}.seg", fnv1a(key)))
}

/// Old segment files, oldest first (at most [`MAX_LISTED`]), temporary leftovers first.
pub(super) fn list(data_dir: &Path) -> Result<Vec<LegacyFile>, StoreError> {
    let dir = data_dir.join(COLD_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::file("list", &dir)(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        if out.len() >= MAX_LISTED {
            break;
        }
        let entry = entry.map_err(StoreError::file("list", &dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if pack_number(&name).is_some() {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let temporary = name.starts_with('.');
        out.push(LegacyFile {
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

/// Whether the cold tier's directory may hold old segment files (when it cannot be listed:
/// assumed so). Stops at the first one; packs are few.
pub(super) fn may_exist(data_dir: &Path) -> bool {
    match std::fs::read_dir(data_dir.join(COLD_DIR)) {
        Ok(entries) => entries.flatten().any(|e| {
            pack_number(&e.file_name().to_string_lossy()).is_none()
                && e.file_type().is_ok_and(|t| t.is_file())
        }),
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

/// Syncs the cold tier's directory, so deleted files stay deleted after a crash.
pub(super) fn sync_dir(data_dir: &Path) -> Result<(), StoreError> {
    let dir = data_dir.join(COLD_DIR);
    std::fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(StoreError::file("sync", &dir))
}

impl Store {
    /// False once the janitor found no old segment file left (see `Shared::legacy_cold`).
    pub(super) fn legacy_cold(&self) -> bool {
        self.shared
            .legacy_cold
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Deletes an old segment file, if it is there, and takes its size off the disk estimate.
    pub(super) fn remove_legacy(&self, path: &Path) -> Result<(), StoreError> {
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

/// Tests: writes session `key` (in sled) as an old-layout segment file, as the cold tier did
/// before packs, so a test can start from a data dir written by that version.
#[cfg(test)]
pub(super) fn write_old_segment(store: &Store, key: &str) -> Result<PathBuf, StoreError> {
    use std::io::{BufWriter, Write};

    use flate2::write::GzEncoder;
    use flate2::Compression;

    let record = store
        .session(key)?
        .ok_or(StoreError::Invariant("no such session to write"))?;
    let path = path_of(store.data_dir(), key);
    let dir = store.data_dir().join(COLD_DIR);
    std::fs::create_dir_all(&dir).map_err(StoreError::file("create", &dir))?;
    let file = std::fs::File::create(&path).map_err(StoreError::file("create", &path))?;
    let mut out = GzEncoder::new(BufWriter::new(file), Compression::default());
    super::cold::write_segment(store, key, &record, &mut out, &path)?;
    let mut inner = out.finish().map_err(StoreError::file("compress", &path))?;
    inner.flush().map_err(StoreError::file("write", &path))?;
    Ok(path)
}
