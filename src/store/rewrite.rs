//! Giving space back: the live data is copied into a fresh database generation, which then
//! replaces the current one, and the old generation's directory is deleted.
//!
//! sled never shrinks its files when keys are deleted; it reuses the space, but under churn
//! with large values (whole nodes stored as blob files) garbage can build up faster than its
//! segment cleaner reclaims it. A rewrite bounds that: the new generation holds only live
//! data. Generations live in `<data_dir>/db` (the first) and `<data_dir>/db.<n>`; the file
//! `<data_dir>/CURRENT` names the current one and is replaced atomically (written aside,
//! fsynced, renamed, directory fsynced) only after the new generation is complete and flushed.
//! A crash before the switch leaves the old generation current and the half-copied one is
//! deleted on the next open; a crash after it leaves the old one to be deleted likewise.
//!
//! While the copy runs, writes wait (the store's write gate); reads go on against the old
//! generation, which is consistent because nothing writes to it. Sequence numbers and ids
//! continue across generations (`id_base`), and group-commit tickets too.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{disk, Store, StoreInner, DB_DIR};
use crate::error::StoreError;

/// The file naming the current generation's directory.
const CURRENT_FILE: &str = "CURRENT";
/// The `meta` key holding the id base of a generation (big-endian u64).
const ID_BASE_KEY: &[u8] = b"id_base";
/// Keys copied per sled batch; bounds the memory of a rewrite.
const COPY_BATCH: usize = 1_000;
/// How long a rewrite waits for readers of the old generation before leaving its directory
/// to be deleted on the next open.
const RETIRE_WAIT: Duration = Duration::from_secs(5);

/// What a rewrite did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    /// The new generation's directory.
    pub dir: PathBuf,
    /// Bytes on disk of the old generation.
    pub bytes_before: u64,
    /// Bytes on disk of the new generation.
    pub bytes_after: u64,
    /// Keys copied.
    pub keys: u64,
    /// How long writes waited, in ms.
    pub pause_ms: u64,
    /// Whether the old generation's directory is already deleted.
    pub old_deleted: bool,
}

fn generation_number(name: &str) -> Option<u64> {
    if name == DB_DIR {
        return Some(0);
    }
    let n = name.strip_prefix("db.")?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .then(|| n.parse().ok())
        .flatten()
}

/// The current generation's directory (`db` when there is no `CURRENT` file).
pub(super) fn current_dir(data_dir: &Path) -> Result<PathBuf, StoreError> {
    let path = data_dir.join(CURRENT_FILE);
    match std::fs::read_to_string(&path) {
        Ok(name) => {
            let name = name.trim();
            if generation_number(name).is_none() {
                return Err(StoreError::Decode {
                    tree: "CURRENT",
                    reason: format!("{name:?} is not a database generation"),
                });
            }
            Ok(data_dir.join(name))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let first = data_dir.join(DB_DIR);
            // Without CURRENT only the first generation can be current. If it is gone while
            // later ones exist, CURRENT was lost: refuse rather than start empty and delete them.
            if !first.exists() && has_later_generation(data_dir) {
                return Err(StoreError::Decode {
                    tree: "CURRENT",
                    reason: format!(
                        "{} is missing but db.<n> directories exist; write the name of the newest \
                         complete one into it",
                        path.display()
                    ),
                });
            }
            Ok(first)
        }
        Err(e) => Err(StoreError::file("read", &path)(e)),
    }
}

fn has_later_generation(data_dir: &Path) -> bool {
    std::fs::read_dir(data_dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name()
                .to_str()
                .and_then(generation_number)
                .is_some_and(|n| n > 0)
        })
    })
}

/// Deletes generation directories other than `current` (interrupted or retired ones).
pub(super) fn remove_other_generations(data_dir: &Path, current: &Path) {
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_generation = entry
            .file_name()
            .to_str()
            .and_then(generation_number)
            .is_some();
        if is_generation && path != current && path.is_dir() {
            match std::fs::remove_dir_all(&path) {
                Ok(()) => {
                    tracing::info!(dir = %path.display(), "deleted an old database generation")
                }
                Err(e) => {
                    tracing::warn!(dir = %path.display(), error = %e, "could not delete an old database generation")
                }
            }
        }
    }
}

/// The id base stored in a generation (0 for the first).
pub(super) fn id_base(db: &sled::Db) -> Result<u64, StoreError> {
    let meta = db
        .open_tree("meta")
        .map_err(StoreError::sled("opening meta"))?;
    Ok(meta
        .get(ID_BASE_KEY)
        .map_err(StoreError::sled("reading the id base"))?
        .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0))
}

/// Points `CURRENT` at `name`, atomically and durably.
fn switch_current(data_dir: &Path, name: &str) -> Result<(), StoreError> {
    use std::io::Write;
    let tmp = data_dir.join(format!("{CURRENT_FILE}.tmp"));
    let mut file = std::fs::File::create(&tmp).map_err(StoreError::file("create", &tmp))?;
    file.write_all(name.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(StoreError::file("write", &tmp))?;
    let current = data_dir.join(CURRENT_FILE);
    std::fs::rename(&tmp, &current).map_err(StoreError::file("rename", &tmp))?;
    std::fs::File::open(data_dir)
        .and_then(|d| d.sync_all())
        .map_err(StoreError::file("sync", data_dir))?;
    Ok(())
}

fn copy_tree(src: &sled::Tree, dst: &sled::Tree) -> Result<u64, StoreError> {
    let mut copied = 0u64;
    let mut batch = sled::Batch::default();
    let mut in_batch = 0usize;
    for kv in src.iter() {
        let (k, v) = kv.map_err(StoreError::sled("reading for a rewrite"))?;
        batch.insert(k, v);
        in_batch += 1;
        if in_batch == COPY_BATCH {
            dst.apply_batch(std::mem::take(&mut batch))
                .map_err(StoreError::sled("writing a rewrite"))?;
            copied += in_batch as u64;
            in_batch = 0;
        }
    }
    dst.apply_batch(batch)
        .map_err(StoreError::sled("writing a rewrite"))?;
    Ok(copied + in_batch as u64)
}

impl Store {
    /// Copies the live data into a fresh database generation and switches to it (see the
    /// module doc). Blocking: writes wait until the copy is done. Must run inside a tokio
    /// runtime (it starts the new generation's group commit).
    pub fn rewrite(&self) -> Result<Rewritten, StoreError> {
        let gate = self
            .shared
            .write_gate
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let paused = Instant::now();
        let old = self.inner();
        let bytes_before = disk::dir_disk_bytes(&old.dir).unwrap_or(0);
        old.commit.flush_blocking()?;
        let number = old
            .dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(generation_number)
            .unwrap_or(0);
        let name = format!("db.{}", number + 1);
        let dir = self.shared.data_dir.join(&name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(StoreError::file("delete", &dir))?;
        }
        let config = &self.shared.config;
        let db = sled::Config::new()
            .path(&dir)
            .cache_capacity(config.cache_capacity_bytes)
            .flush_every_ms(Some(config.flush_every_ms.max(1)))
            .open()
            .map_err(|source| StoreError::from_open(&dir, source))?;
        let mut keys = 0u64;
        for tree_name in old.db.tree_names() {
            let src = old
                .db
                .open_tree(&tree_name)
                .map_err(StoreError::sled("opening a tree to copy"))?;
            let dst = db
                .open_tree(&tree_name)
                .map_err(StoreError::sled("creating a tree copy"))?;
            keys += copy_tree(&src, &dst)?;
        }
        // Every id the old generation handed out is below this one.
        let base = old.next_id()? + 1;
        db.open_tree("meta")
            .and_then(|m| m.insert(ID_BASE_KEY, &base.to_be_bytes()))
            .map_err(StoreError::sled("writing the id base"))?;
        db.flush().map_err(StoreError::sled("flushing a rewrite"))?;
        switch_current(&self.shared.data_dir, &name)?;
        let next = StoreInner::from_db(db, dir.clone(), config, old.commit.written())?;
        let bytes_after = disk::dir_disk_bytes(&dir).unwrap_or(0);
        *self
            .shared
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(next);
        drop(gate);
        let pause_ms = u64::try_from(paused.elapsed().as_millis()).unwrap_or(u64::MAX);

        // Retire the old generation once its readers and its flusher have let go.
        old.commit.stop();
        let deadline = Instant::now() + RETIRE_WAIT;
        while (Arc::strong_count(&old) > 1 || !old.commit.is_stopped()) && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let released = Arc::strong_count(&old) == 1 && old.commit.is_stopped();
        let old_dir = old.dir.clone();
        drop(old);
        let old_deleted = released && std::fs::remove_dir_all(&old_dir).is_ok();
        if !old_deleted {
            tracing::warn!(dir = %old_dir.display(), "old database generation still in use; it is deleted on the next open");
        }
        tracing::info!(
            bytes_before,
            bytes_after,
            keys,
            pause_ms,
            dir = %dir.display(),
            "database rewritten"
        );
        Ok(Rewritten {
            dir,
            bytes_before,
            bytes_after,
            keys,
            pause_ms,
            old_deleted,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_current_file_is_refused_not_guessed() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(current_dir(dir.path()).unwrap(), dir.path().join("db"));
        std::fs::create_dir(dir.path().join("db.3")).unwrap();
        assert!(current_dir(dir.path()).is_err());
        std::fs::write(dir.path().join(CURRENT_FILE), "db.3").unwrap();
        assert_eq!(current_dir(dir.path()).unwrap(), dir.path().join("db.3"));
        std::fs::write(dir.path().join(CURRENT_FILE), "../etc").unwrap();
        assert!(current_dir(dir.path()).is_err());
    }

    #[test]
    fn generation_names() {
        assert_eq!(generation_number("db"), Some(0));
        assert_eq!(generation_number("db.12"), Some(12));
        for bad in ["db.", "db.x", "db.-1", "archives", "../db.1", "db.1/.."] {
            assert_eq!(generation_number(bad), None, "{bad}");
        }
    }
}
