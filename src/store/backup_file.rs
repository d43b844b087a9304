//! The backup file (`backup.rs` takes the snapshot) and the restore from it.
//!
//! Layout: the magic line `turnstile-backup\n` and a format version byte, then records, each
//! a tag byte: `T` (u16 length, tree name: the keys that follow belong to it), `K` (u32
//! length, key, u32 length, value), `F` (u16 length, a path under the data dir, u64 length,
//! the file's bytes); then `E` and the number of records before it (u64), and last the
//! SHA-256 of every byte before it. Integers are big-endian.
//!
//! A restore reads the whole file once to check the checksum before it touches anything, so a
//! damaged or truncated file is refused with nothing changed; only then does it build the data
//! dir, which must be empty or absent (a restore never overwrites a store). A restore that
//! fails half-way (the disk filled up) deletes what it wrote.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use super::archive::ARCHIVE_DIR;
use super::cold::COLD_DIR;
use super::DB_DIR;
use crate::error::StoreError;

const MAGIC: &[u8] = b"turnstile-backup\n";
/// The format this build writes and reads.
const FORMAT_VERSION: u8 = 1;
const TAG_TREE: u8 = b'T';
const TAG_KEY: u8 = b'K';
const TAG_FILE: u8 = b'F';
const TAG_END: u8 = b'E';
const CHECKSUM_BYTES: u64 = 32;
/// Most bytes of a tree name or file path in a backup (ours are a few dozen).
const MAX_NAME_BYTES: usize = 1024;
/// Most bytes of one key or value read from a backup: sled values here are at most the
/// codec's 16 MiB; anything past this is a damaged file, not a value.
const MAX_RECORD_BYTES: usize = 64 << 20;
/// Keys written per sled batch on restore (bounds its memory).
const RESTORE_BATCH: usize = 1_000;
/// Copy buffer for files, both ways.
const IO_BUFFER: usize = 256 << 10;
/// The data dir's subdirectories a backup may hold files of.
const FILE_DIRS: [&str; 2] = [COLD_DIR, ARCHIVE_DIR];

/// A file taken at the cut: its name under the data dir, an open handle and the bytes to copy.
pub(super) struct CutFile {
    pub(super) name: String,
    pub(super) file: File,
    pub(super) len: u64,
}

/// Writes a backup file, hashing every byte.
pub(super) struct BackupWriter<'a> {
    out: &'a mut dyn Write,
    hash: Sha256,
    bytes: u64,
    records: u64,
    keys: u64,
    files: u64,
}

fn write_error(e: std::io::Error) -> StoreError {
    StoreError::File {
        action: "write",
        path: PathBuf::from("the backup"),
        source: e,
    }
}

impl<'a> BackupWriter<'a> {
    pub(super) fn start(out: &'a mut dyn Write) -> Result<Self, StoreError> {
        let mut writer = Self {
            out,
            hash: Sha256::new(),
            bytes: 0,
            records: 0,
            keys: 0,
            files: 0,
        };
        writer.put(MAGIC)?;
        writer.put(&[FORMAT_VERSION])?;
        Ok(writer)
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        self.hash.update(bytes);
        self.bytes += bytes.len() as u64;
        self.out.write_all(bytes).map_err(write_error)
    }

    fn name(&mut self, tag: u8, name: &[u8]) -> Result<(), StoreError> {
        let len = u16::try_from(name.len())
            .ok()
            .filter(|n| usize::from(*n) <= MAX_NAME_BYTES)
            .ok_or(StoreError::Invariant(
                "a tree or file name too long to back up",
            ))?;
        self.records += 1;
        self.put(&[tag])?;
        self.put(&len.to_be_bytes())?;
        self.put(name)
    }

    pub(super) fn tree(&mut self, name: &[u8]) -> Result<(), StoreError> {
        self.name(TAG_TREE, name)
    }

    pub(super) fn key(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        let too_long = || StoreError::Invariant("a key or value too long to back up");
        let k = u32::try_from(key.len()).map_err(|_| too_long())?;
        let v = u32::try_from(value.len()).map_err(|_| too_long())?;
        self.records += 1;
        self.keys += 1;
        self.put(&[TAG_KEY])?;
        self.put(&k.to_be_bytes())?;
        self.put(key)?;
        self.put(&v.to_be_bytes())?;
        self.put(value)
    }

    /// Copies `file.len` bytes of the file (a shorter file is an error: it was cut short).
    pub(super) fn file(&mut self, file: CutFile) -> Result<(), StoreError> {
        self.name(TAG_FILE, file.name.as_bytes())?;
        self.files += 1;
        self.put(&file.len.to_be_bytes())?;
        let mut reader = file.file.take(file.len);
        let mut buf = vec![0u8; IO_BUFFER];
        let mut left = file.len;
        while left > 0 {
            let n = reader
                .read(&mut buf)
                .map_err(StoreError::file("read", Path::new(&file.name)))?;
            if n == 0 {
                return Err(StoreError::Backup {
                    path: PathBuf::from(&file.name),
                    reason: "the file became shorter while it was backed up".into(),
                });
            }
            self.put(&buf[..n])?;
            left -= n as u64;
        }
        Ok(())
    }

    /// Ends the file; returns the keys, files and bytes written.
    pub(super) fn finish(mut self) -> Result<(u64, u64, u64), StoreError> {
        let records = self.records;
        self.put(&[TAG_END])?;
        self.put(&records.to_be_bytes())?;
        let digest = self.hash.clone().finalize();
        self.out.write_all(&digest).map_err(write_error)?;
        self.out.flush().map_err(write_error)?;
        Ok((self.keys, self.files, self.bytes + CHECKSUM_BYTES))
    }
}

/// What a restore wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RestoreReport {
    /// Trees restored.
    pub trees: u64,
    /// Keys restored, over all trees.
    pub keys: u64,
    /// Files restored (cold packs, archives).
    pub files: u64,
}

fn damaged(path: &Path, reason: impl Into<String>) -> StoreError {
    StoreError::Backup {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Checks the backup at `path`: its length, magic, version and checksum. Reads it whole.
/// Returns the length of what the checksum covers.
pub fn verify_backup(path: &Path) -> Result<u64, StoreError> {
    let mut file = File::open(path).map_err(StoreError::file("open", path))?;
    let len = file
        .metadata()
        .map_err(StoreError::file("read the size of", path))?
        .len();
    let smallest = MAGIC.len() as u64 + 1 + 1 + 8 + CHECKSUM_BYTES;
    if len < smallest {
        return Err(damaged(
            path,
            format!("{len} bytes is too short to be a backup (truncated?)"),
        ));
    }
    let covered = len - CHECKSUM_BYTES;
    let mut head = [0u8; MAGIC.len() + 1];
    file.read_exact(&mut head)
        .map_err(StoreError::file("read", path))?;
    if &head[..MAGIC.len()] != MAGIC {
        return Err(damaged(
            path,
            "not a turnstile backup (its first line is wrong)",
        ));
    }
    if head[MAGIC.len()] != FORMAT_VERSION {
        return Err(damaged(
            path,
            format!(
                "backup format {} is not the one this build reads ({FORMAT_VERSION})",
                head[MAGIC.len()]
            ),
        ));
    }
    let mut hash = Sha256::new();
    hash.update(head);
    let mut body = (&mut file).take(covered - head.len() as u64);
    let mut buf = vec![0u8; IO_BUFFER];
    loop {
        let n = body
            .read(&mut buf)
            .map_err(StoreError::file("read", path))?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
    }
    let mut stored = [0u8; CHECKSUM_BYTES as usize];
    file.read_exact(&mut stored)
        .map_err(StoreError::file("read", path))?;
    if hash.finalize().as_slice() != &stored[..] {
        return Err(damaged(
            path,
            "its checksum does not match: the file is damaged or truncated",
        ));
    }
    Ok(covered)
}

/// Rebuilds a data dir from the backup at `from` into `data_dir`, which must be absent or
/// empty. The backup is verified whole first: a damaged one changes nothing.
pub fn restore_backup(from: &Path, data_dir: &Path) -> Result<RestoreReport, StoreError> {
    let covered = verify_backup(from)?;
    let created = match std::fs::read_dir(data_dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(damaged(
                    data_dir,
                    "the data dir is not empty; restore into a new or empty directory",
                ));
            }
            false
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => return Err(StoreError::file("list", data_dir)(e)),
    };
    std::fs::create_dir_all(data_dir).map_err(|source| StoreError::DataDir {
        path: data_dir.to_path_buf(),
        source,
    })?;
    let restored = rebuild(from, covered, data_dir);
    if restored.is_err() {
        // Leave the directory as it was found.
        let cleanup = if created {
            std::fs::remove_dir_all(data_dir)
        } else {
            std::fs::read_dir(data_dir).and_then(|entries| {
                for entry in entries.flatten() {
                    let path = entry.path();
                    if path.is_dir() {
                        std::fs::remove_dir_all(&path)?;
                    } else {
                        std::fs::remove_file(&path)?;
                    }
                }
                Ok(())
            })
        };
        if let Err(e) = cleanup {
            tracing::warn!(dir = %data_dir.display(), error = %e, "could not delete a failed restore");
        }
    }
    restored
}

/// Reads the backup's records (`covered` bytes, the checksum verified) into `data_dir`.
fn rebuild(from: &Path, covered: u64, data_dir: &Path) -> Result<RestoreReport, StoreError> {
    let file = File::open(from).map_err(StoreError::file("open", from))?;
    let mut input = Input {
        reader: BufReader::with_capacity(IO_BUFFER, file.take(covered)),
        path: from,
    };
    let mut head = [0u8; MAGIC.len() + 1];
    input.exact(&mut head)?;
    let db_dir = data_dir.join(DB_DIR);
    let db = super::sled_config::sled_config(&db_dir, &crate::config::StorageConfig::default())
        .open()
        .map_err(|source| StoreError::from_open(&db_dir, source))?;
    let mut report = RestoreReport::default();
    let mut tree: Option<sled::Tree> = None;
    let mut batch = sled::Batch::default();
    let mut in_batch = 0usize;
    let mut records = 0u64;
    let flush_batch = |tree: &Option<sled::Tree>, batch: &mut sled::Batch| match tree {
        Some(t) => t
            .apply_batch(std::mem::take(batch))
            .map_err(StoreError::sled("writing a restored tree")),
        None => Ok(()),
    };
    loop {
        let tag = input.byte()?;
        match tag {
            TAG_TREE => {
                flush_batch(&tree, &mut batch)?;
                in_batch = 0;
                let name = input.name()?;
                tree = Some(
                    db.open_tree(&name)
                        .map_err(StoreError::sled("creating a restored tree"))?,
                );
                report.trees += 1;
            }
            TAG_KEY => {
                if tree.is_none() {
                    return Err(damaged(from, "a key before any tree"));
                }
                let key = input.blob()?;
                let value = input.blob()?;
                batch.insert(key, value);
                in_batch += 1;
                report.keys += 1;
                if in_batch >= RESTORE_BATCH {
                    flush_batch(&tree, &mut batch)?;
                    in_batch = 0;
                }
            }
            TAG_FILE => {
                let name = input.name()?;
                let path = file_path(from, data_dir, &name)?;
                let len = input.u64()?;
                input.copy_to(&path, len)?;
                report.files += 1;
            }
            TAG_END => {
                flush_batch(&tree, &mut batch)?;
                let count = input.u64()?;
                if count != records {
                    return Err(damaged(
                        from,
                        format!("it says {count} records, but holds {records}"),
                    ));
                }
                if input.byte().is_ok() {
                    return Err(damaged(from, "bytes after its end"));
                }
                break;
            }
            other => {
                return Err(damaged(
                    from,
                    format!("unknown record tag {other:#04x} after {records} records"),
                ))
            }
        }
        records += 1;
    }
    db.flush()
        .map_err(StoreError::sled("flushing the restored database"))?;
    drop(db);
    for dir in FILE_DIRS
        .iter()
        .map(|d| data_dir.join(d))
        .chain([data_dir.to_path_buf()])
    {
        if dir.exists() {
            File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(StoreError::file("sync", &dir))?;
        }
    }
    Ok(report)
}

/// Where a file named `name` in the backup goes: only `cold/<file>` and `archives/<file>`,
/// never anything that climbs out of the data dir.
fn file_path(from: &Path, data_dir: &Path, name: &[u8]) -> Result<PathBuf, StoreError> {
    let bad = || {
        damaged(
            from,
            "it names a file outside the data dir's cold tier and archives",
        )
    };
    let name = std::str::from_utf8(name).map_err(|_| bad())?;
    let rel = Path::new(name);
    let parts: Vec<Component<'_>> = rel.components().collect();
    match parts.as_slice() {
        [Component::Normal(dir), Component::Normal(file)]
            if FILE_DIRS.iter().any(|d| std::ffi::OsStr::new(d) == *dir)
                && !file.to_string_lossy().starts_with('.') =>
        {
            Ok(data_dir.join(rel))
        }
        _ => Err(bad()),
    }
}

/// The backup being read, its checksum already verified (a damaged structure is still an
/// error, never a panic).
struct Input<'a> {
    reader: BufReader<std::io::Take<File>>,
    path: &'a Path,
}

impl Input<'_> {
    fn exact(&mut self, buf: &mut [u8]) -> Result<(), StoreError> {
        self.reader.read_exact(buf).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                damaged(self.path, "it ends in the middle of a record")
            } else {
                StoreError::file("read", self.path)(e)
            }
        })
    }

    fn byte(&mut self) -> Result<u8, StoreError> {
        let mut b = [0u8; 1];
        self.exact(&mut b)?;
        Ok(b[0])
    }

    fn u64(&mut self) -> Result<u64, StoreError> {
        let mut b = [0u8; 8];
        self.exact(&mut b)?;
        Ok(u64::from_be_bytes(b))
    }

    fn name(&mut self) -> Result<Vec<u8>, StoreError> {
        let mut b = [0u8; 2];
        self.exact(&mut b)?;
        let len = usize::from(u16::from_be_bytes(b));
        if len > MAX_NAME_BYTES {
            return Err(damaged(self.path, format!("a name of {len} bytes")));
        }
        let mut name = vec![0u8; len];
        self.exact(&mut name)?;
        Ok(name)
    }

    fn blob(&mut self) -> Result<Vec<u8>, StoreError> {
        let mut b = [0u8; 4];
        self.exact(&mut b)?;
        let len = usize::try_from(u32::from_be_bytes(b)).unwrap_or(usize::MAX);
        if len > MAX_RECORD_BYTES {
            return Err(damaged(self.path, format!("a value of {len} bytes")));
        }
        let mut blob = vec![0u8; len];
        self.exact(&mut blob)?;
        Ok(blob)
    }

    /// Writes the next `len` bytes to `path` (created new, synced).
    fn copy_to(&mut self, path: &Path, len: u64) -> Result<(), StoreError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(StoreError::file("create", parent))?;
        }
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(StoreError::file("create", path))?;
        let mut out = BufWriter::with_capacity(IO_BUFFER, file);
        let copied = std::io::copy(&mut (&mut self.reader).take(len), &mut out)
            .map_err(StoreError::file("write", path))?;
        if copied != len {
            return Err(damaged(self.path, "it ends in the middle of a file"));
        }
        out.into_inner()
            .map_err(|e| StoreError::file("write", path)(e.into_error()))?
            .sync_all()
            .map_err(StoreError::file("sync", path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_outside_the_cold_tier_and_archives_are_refused() {
        let (from, dir) = (Path::new("b"), Path::new("/data"));
        assert!(file_path(from, dir, b"cold/pack-00000001.seg").is_ok());
        assert!(file_path(from, dir, b"archives/1-x.jsonl.gz").is_ok());
        for bad in [
            &b"../etc/passwd"[..],
            b"cold/../../x",
            b"/cold/x",
            b"db/conf",
            b"cold/.hidden",
            b"cold",
            b"cold/a/b",
            b"\xff",
        ] {
            assert!(file_path(from, dir, bad).is_err(), "{bad:?}");
        }
    }
}
