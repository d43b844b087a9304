//! Archives: an evicted session's transcript, kept as gzip-compressed JSONL (the export
//! format) in `<data_dir>/archives` when `storage.keep_archives` is on. Archives count against
//! the disk budget and are the first thing the janitor deletes, oldest first.
//!
//! File names are `<evicted_at_ms, 13+ digits>-<session id>.jsonl.gz`: they sort by age and
//! never contain anything a user chose (the session key is inside, in the header line).

use std::io::Write;
use std::path::{Path, PathBuf};

use flate2::write::GzEncoder;
use flate2::Compression;

use super::{export::write_session_jsonl, SessionRecord, Store};
use crate::error::StoreError;

/// The archive directory under the data dir.
pub(crate) const ARCHIVE_DIR: &str = "archives";

/// Most archive files listed in one janitor pass; bounds the listing's memory.
const MAX_LISTED: usize = 100_000;

/// One archive file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ArchiveFile {
    pub(super) path: PathBuf,
    /// Bytes allocated on disk.
    pub(super) disk_bytes: u64,
}

/// Writes session `key` as an archive and returns its path. Written to a temporary name and
/// renamed, so a crash never leaves a half archive under a final name.
pub(super) fn write(
    store: &Store,
    key: &str,
    record: &SessionRecord,
    evicted_at_ms: u64,
) -> Result<PathBuf, StoreError> {
    let dir = store.data_dir().join(ARCHIVE_DIR);
    std::fs::create_dir_all(&dir).map_err(StoreError::file("create", &dir))?;
    let name = format!("{evicted_at_ms:013}-{}.jsonl.gz", record.id);
    let path = dir.join(&name);
    let tmp = dir.join(format!(".{name}.tmp"));
    let file = std::fs::File::create(&tmp).map_err(StoreError::file("create", &tmp))?;
    let mut gz = GzEncoder::new(std::io::BufWriter::new(file), Compression::fast());
    write_session_jsonl(store, key, record, &mut gz)?;
    let mut inner = gz.finish().map_err(StoreError::file("compress", &tmp))?;
    inner.flush().map_err(StoreError::file("write", &tmp))?;
    drop(inner);
    std::fs::rename(&tmp, &path).map_err(StoreError::file("rename", &tmp))?;
    Ok(path)
}

/// Archive files, oldest first (at most [`MAX_LISTED`]). Leftover temporary files of an
/// interrupted archive are listed too, first, so they are the first to go.
pub(super) fn list(data_dir: &Path) -> Result<Vec<ArchiveFile>, StoreError> {
    let dir = data_dir.join(ARCHIVE_DIR);
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
        let path = entry.path();
        let disk_bytes = super::disk::dir_disk_bytes_of_file(&meta);
        out.push(ArchiveFile { path, disk_bytes });
    }
    out.sort_by(|a, b| a.path.file_name().cmp(&b.path.file_name()));
    Ok(out)
}
