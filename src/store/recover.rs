//! Coming back from a full disk without a restart.
//!
//! After an I/O error sled refuses every later write, and some reads, until the database is
//! opened again; it cannot be reopened in place while this process holds it (its file lock,
//! and threads that may stay stuck in the failed flush). So the recovery copies the current
//! generation's files — what sled made durable, exactly what a restart would find — into the
//! next generation's directory, opens that (sled recovers its log as after a crash), marks it
//! complete, switches `CURRENT` to it and swaps it in. Writes are refused meanwhile (the
//! store's health), so nothing is written to the old generation during the copy. Writes that
//! were in sled's memory but never flushed were never acknowledged; their waiters are refused
//! (`GroupCommit`'s inherited tickets), and a turn whose commit was lost is retried by its
//! lane against the inbox as recovered.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::generations;
use super::{Store, StoreInner};
use crate::error::StoreError;

/// Most directory levels copied (a generation holds `blobs/` one level down).
const MAX_COPY_DEPTH: usize = 4;
/// How long the recovery waits for the old generation to be let go before leaving its
/// directory to be deleted on the next open.
const RETIRE_WAIT: Duration = Duration::from_secs(2);

fn copy_dir(from: &Path, to: &Path, depth: usize) -> Result<(), StoreError> {
    std::fs::create_dir_all(to).map_err(StoreError::file("create", to))?;
    let entries = std::fs::read_dir(from).map_err(StoreError::file("read", from))?;
    for entry in entries {
        let entry = entry.map_err(StoreError::file("read", from))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().map_err(StoreError::file("read", &src))?;
        if kind.is_dir() && depth < MAX_COPY_DEPTH {
            copy_dir(&src, &dst, depth + 1)?;
        } else if kind.is_file() && entry.file_name() != generations::VERIFIED_FILE {
            std::fs::copy(&src, &dst).map_err(StoreError::file("copy", &src))?;
            std::fs::File::open(&dst)
                .and_then(|f| f.sync_all())
                .map_err(StoreError::file("sync", &dst))?;
        }
    }
    Ok(())
}

impl Store {
    /// Replaces the current generation by a copy of its durable files (see the module doc).
    /// Blocking; must run inside a tokio runtime. On failure the copy is deleted and the store
    /// stays as it was.
    pub(super) fn recover_from_disk(&self) -> Result<(), StoreError> {
        let _one = self
            .shared
            .rewriting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let old = self.inner();
        let (name, dir) = self.next_generation(&old)?;
        let opened = copy_dir(&old.dir, &dir, 0)
            .and_then(|()| StoreInner::open_db(&dir, &self.shared.config))
            .and_then(|(db, _)| {
                db.flush()
                    .map_err(StoreError::sled("flushing a recovered generation"))?;
                generations::mark_verified(&dir)?;
                generations::switch_current(&self.shared.data_dir, &name)?;
                Ok(db)
            });
        let db = match opened {
            Ok(db) => db,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let tickets = (old.commit.written(), old.commit.flushed_upto());
        let next = StoreInner::from_db(
            db,
            dir.clone(),
            &self.shared.config,
            tickets,
            &self.shared.ledger,
            &self.shared.health,
        )?;
        *self
            .shared
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(next);
        self.recount_queued();
        old.commit.stop();
        let deadline = Instant::now() + RETIRE_WAIT;
        while (Arc::strong_count(&old) > 1 || !old.commit.is_stopped()) && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let released = Arc::strong_count(&old) == 1 && old.commit.is_stopped();
        let old_dir = old.dir.clone();
        drop(old);
        if !(released && std::fs::remove_dir_all(&old_dir).is_ok()) {
            tracing::warn!(dir = %old_dir.display(), "the generation that could not write is still in use; it is deleted on the next open");
        }
        tracing::info!(dir = %dir.display(), "recovered from disk into a new generation");
        Ok(())
    }
}
