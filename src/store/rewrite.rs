//! Giving space back: the live data is copied into a fresh database generation, which then
//! replaces the current one, and the old generation's directory is deleted. The same copy
//! brings a store that could not write (full disk) back: sled refuses writes after an I/O
//! error until reopened, so the recovery copies what it holds into a new generation
//! (`health.rs`).
//!
//! sled never shrinks its files when keys are deleted; it reuses the space, but under churn
//! with large values (whole nodes stored as blob files) garbage can build up faster than its
//! segment cleaner reclaims it. A rewrite bounds that: the new generation holds only live
//! data. Generations and `CURRENT` are described in `generations.rs`: the new generation is
//! copied, checked (the same keys per tree as the old one while writes are held; a tree whose
//! copy differs is copied again), flushed and marked complete before `CURRENT` is switched to
//! it (atomically, durably); the old one is deleted only after that. A crash before the switch
//! leaves the old generation current and the incomplete copy is deleted on the next open.
//!
//! Writes are held off (the write gate, exclusively) for the copy, the check, the
//! flush and the switch: admission waits for as long as the live data takes to copy. Copying
//! beside the writers through sled's subscribers was tried and deadlocks: a sled transaction
//! holds sled's process-wide concurrency lock while it hands an event to a subscriber, so a
//! drainer that writes the event into the copy (sled again) can wait on that writer for ever.
//! Sequence numbers and ids continue across generations (`id_base`), and group-commit tickets
//! too.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::generations::{self, generation_name, generation_number};
use super::{disk, Store, StoreInner};
use crate::error::StoreError;

/// The `meta` key holding the id base of a generation (big-endian u64).
const ID_BASE_KEY: &[u8] = b"id_base";
/// Keys copied per sled batch; bounds the memory of a rewrite.
const COPY_BATCH: usize = 1_000;
/// How often a rewrite copies a tree whose copy differs from its source before giving up
/// (the rewrite then fails and the old generation stays current).
const COPY_ATTEMPTS: u32 = 3;
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

/// One tree being copied: the old generation's tree and its copy.
struct TreeCopy {
    src: sled::Tree,
    dst: sled::Tree,
}

/// Copies one tree and checks that the copy holds exactly the source's keys; a copy that
/// does not is cleared and made again, up to [`COPY_ATTEMPTS`] times. Writes are held off, yet
/// one CI run saw a copy whose key count differed from its source's (not reproduced in 80 runs
/// since). The suspected cause: sled finishes an interrupted node merge lazily, on the next
/// traversal, so the copy's pass can be the first to walk a tree that evictions left
/// mid-merge. Returns the keys copied.
fn copy_verified(copy: &TreeCopy) -> Result<u64, StoreError> {
    for attempt in 1..=COPY_ATTEMPTS {
        let copied = copy_tree(copy)?;
        match first_difference(copy)? {
            None => return Ok(copied),
            Some(difference) => {
                tracing::warn!(
                    tree = %String::from_utf8_lossy(&copy.src.name()),
                    attempt,
                    copied,
                    %difference,
                    "a rewrite's copy differs from its source; copying the tree again"
                );
                copy.dst
                    .clear()
                    .map_err(StoreError::sled("clearing a rewrite's copy"))?;
            }
        }
    }
    Err(StoreError::Invariant(
        "a rewrite's copy does not hold the same keys as its source",
    ))
}

/// The first key that only one of the source and its copy holds, walking both in key order.
/// Keys, not values: the old generation's ledger mark can be restamped while writes are held.
fn first_difference(copy: &TreeCopy) -> Result<Option<String>, StoreError> {
    let mut src = copy.src.iter().keys();
    let mut dst = copy.dst.iter().keys();
    loop {
        const CONTEXT: &str = "reading for a rewrite's check";
        let a = src.next().transpose().map_err(StoreError::sled(CONTEXT))?;
        let b = dst.next().transpose().map_err(StoreError::sled(CONTEXT))?;
        match (a, b) {
            (None, None) => return Ok(None),
            (Some(a), Some(b)) if a == b => {}
            (a, b) => {
                let show = |k: Option<sled::IVec>| {
                    k.map_or("nothing".to_string(), |k| format!("{:?}", k.as_ref()))
                };
                return Ok(Some(format!(
                    "source has {}, copy has {}",
                    show(a),
                    show(b)
                )));
            }
        }
    }
}

/// Copies one tree in batches (bounding the memory of a rewrite).
fn copy_tree(copy: &TreeCopy) -> Result<u64, StoreError> {
    let mut copied = 0u64;
    let mut iter = copy.src.iter();
    loop {
        let mut batch = sled::Batch::default();
        let mut in_batch = 0usize;
        for kv in iter.by_ref().take(COPY_BATCH) {
            let (k, v) = kv.map_err(StoreError::sled("reading for a rewrite"))?;
            batch.insert(k, v);
            in_batch += 1;
        }
        copy.dst
            .apply_batch(batch)
            .map_err(StoreError::sled("writing a rewrite"))?;
        copied += in_batch as u64;
        if in_batch < COPY_BATCH {
            return Ok(copied);
        }
    }
}

impl Store {
    /// The name and directory of the generation after `old`'s, emptied of an incomplete
    /// earlier copy (a complete newer generation makes the store refuse to open).
    pub(super) fn next_generation(
        &self,
        old: &StoreInner,
    ) -> Result<(String, PathBuf), StoreError> {
        let number = old
            .dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(generation_number)
            .unwrap_or(0);
        let name = generation_name(number + 1);
        let dir = self.shared.data_dir.join(&name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(StoreError::file("delete", &dir))?;
        }
        Ok((name, dir))
    }

    /// Copies the live data into a fresh database generation and switches to it (see the
    /// module doc). Blocking; writes wait only for the final switch. Must run inside a tokio
    /// runtime (it starts the new generation's group commit). One rewrite runs at a time.
    pub fn rewrite(&self) -> Result<Rewritten, StoreError> {
        let _one = self
            .shared
            .rewriting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let old = self.inner();
        let bytes_before = disk::dir_disk_bytes(&old.dir).unwrap_or(0);
        let (name, dir) = self.next_generation(&old)?;
        let config = &self.shared.config;
        let db = sled::Config::new()
            .path(&dir)
            .cache_capacity(config.cache_capacity_bytes)
            .flush_every_ms(Some(config.flush_every_ms.max(1)))
            .open()
            .map_err(|source| StoreError::from_open(&dir, source))?;
        let copied = self.copy_and_switch(&old, db.clone(), &name);
        let (keys, pause_ms) = match copied {
            Ok(done) => done,
            Err(e) => {
                drop(db);
                if let Err(rm) = std::fs::remove_dir_all(&dir) {
                    tracing::warn!(dir = %dir.display(), error = %rm, "could not delete an incomplete rewrite");
                }
                return Err(e);
            }
        };
        drop(db);
        let bytes_after = disk::dir_disk_bytes(&dir).unwrap_or(0);

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

    /// The copy (writes going on), then the switch (writes held). Returns the keys copied and
    /// how long writes were held, in ms.
    fn copy_and_switch(
        &self,
        old: &Arc<StoreInner>,
        db: sled::Db,
        name: &str,
    ) -> Result<(u64, u64), StoreError> {
        // Writes are held off for the whole copy. Copying beside the writers (sled's
        // subscribers replaying their writes) deadlocked: a transaction holds sled's
        // process-wide lock while it hands an event to a subscriber, and whoever drains that
        // subscriber into the copy needs the same lock.
        let gate = self
            .shared
            .write_gate
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let paused = Instant::now();
        let mut keys = 0u64;
        for tree in old.db.tree_names() {
            let src = old
                .db
                .open_tree(&tree)
                .map_err(StoreError::sled("opening a tree to copy"))?;
            let dst = db
                .open_tree(&tree)
                .map_err(StoreError::sled("creating a tree copy"))?;
            keys += copy_verified(&TreeCopy { src, dst })?;
        }
        // Every id the old generation handed out is below this one.
        let base = old.next_id()? + 1;
        db.open_tree("meta")
            .and_then(|m| m.insert(ID_BASE_KEY, &base.to_be_bytes()))
            .map_err(StoreError::sled("writing the id base"))?;
        self.shared.ledger.stamp(&db)?;
        db.flush().map_err(StoreError::sled("flushing a rewrite"))?;
        // The old generation too, while nothing writes: sled flushes a database as its last
        // handle drops, under its process-wide lock, and a flush with work left beside a
        // running transaction hung the server. A clean one has nothing to wait for.
        if let Err(error) = old.db.flush() {
            tracing::warn!(%error, "could not flush the generation being replaced");
        }
        let dir = self.shared.data_dir.join(name);
        generations::mark_verified(&dir)?;
        generations::switch_current(&self.shared.data_dir, name)?;
        let next = StoreInner::from_db(
            db,
            dir,
            &self.shared.config,
            (old.commit.written(), old.commit.written()),
            &self.shared.ledger,
            &self.shared.health,
        )?;
        *self
            .shared
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(next);
        drop(gate);
        // Whatever waits on the old generation's flushes is in the flushed copy.
        old.commit.all_durable();
        let pause_ms = u64::try_from(paused.elapsed().as_millis()).unwrap_or(u64::MAX);
        Ok((keys, pause_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trees() -> (tempfile::TempDir, TreeCopy) {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new()
            .temporary(true)
            .path(dir.path())
            .open()
            .unwrap();
        let src = db.open_tree("src").unwrap();
        for i in 0..2_500u32 {
            src.insert(i.to_be_bytes(), &[1u8; 8]).unwrap();
        }
        let dst = db.open_tree("dst").unwrap();
        (dir, TreeCopy { src, dst })
    }

    #[test]
    fn a_copy_holding_a_key_its_source_lacks_is_made_again() {
        let (_dir, copy) = trees();
        copy.dst.insert(b"stray", &[]).unwrap();
        assert_eq!(copy_verified(&copy).unwrap(), 2_500);
        assert_eq!(copy.dst.len(), 2_500);
        assert!(first_difference(&copy).unwrap().is_none());
    }

    #[test]
    fn the_check_finds_a_missing_or_extra_key() {
        let (_dir, copy) = trees();
        copy_tree(&copy).unwrap();
        assert!(first_difference(&copy).unwrap().is_none());
        copy.dst.remove(1_234u32.to_be_bytes()).unwrap();
        let missing = first_difference(&copy).unwrap().expect("a missing key");
        assert!(missing.contains("source has [0, 0, 4, 210]"), "{missing}");
        copy.dst.insert(1_234u32.to_be_bytes(), &[1u8; 8]).unwrap();
        copy.dst.insert(9_999u32.to_be_bytes(), &[]).unwrap();
        let extra = first_difference(&copy).unwrap().expect("an extra key");
        assert!(extra.contains("source has nothing"), "{extra}");
    }
}
