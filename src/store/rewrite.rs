//! Giving space back: the live data is copied into a fresh database generation, which then
//! replaces the current one, and the old generation's directory is deleted. The same copy
//! brings a store that could not write (full disk) back: sled refuses writes after an I/O
//! error until reopened, so the recovery copies what it holds into a new generation
//! (`health.rs`).
//!
//! sled never shrinks its files when keys are deleted; it reuses the space, but under churn
//! with large values (whole nodes stored as blob files) garbage can build up faster than its
//! segment cleaner reclaims it. A rewrite bounds that: the new generation holds only live
//! data. Generations and `CURRENT` are described in `generations.rs`.
//!
//! **Writers do not wait for the copy.** The trees are copied beside the writers while a
//! watcher per tree (sled's subscribers) records the keys written meanwhile ([`Changes`]);
//! catch-up rounds copy those keys again from the old generation, each round shorter than the
//! last; only the last round (a few thousand keys at most, [`FINAL_ROUND_KEYS`]), the id
//! base, the flush of what that round wrote and the switch of `CURRENT` hold the write gate.
//! The watchers only put keys in a set and never call sled: a sled transaction hands its
//! events to subscribers while it holds sled's process-wide lock, so a watcher that wrote into
//! the copy could wait on that writer for ever (an earlier attempt did and deadlocked). A key
//! copied again is read from the old generation at that moment, so the order in which events
//! arrive does not matter: under the gate the old generation is the truth, and every key
//! written since the copy began is copied from it one last time.
//!
//! **A rewrite never grows the store.** The copy is given up, and the old generation stays,
//! when it reaches [`MAX_COPY_RATIO`] of the old generation's bytes (sled lays freshly
//! inserted small values out loosely: a copy of 1.7 M small keys took twice its source), or
//! more room than the caller allows ([`RewriteLimits`]).
//!
//! Sequence numbers and ids continue across generations (`id_base`), and group-commit tickets
//! too.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::changes::Changes;
use super::generations::{self, generation_name, generation_number};
use super::{disk, Store, StoreInner};
use crate::error::StoreError;

/// The `meta` key holding the id base of a generation (big-endian u64).
pub(super) const ID_BASE_KEY: &[u8] = b"id_base";
/// Keys copied per sled batch; bounds the memory of a rewrite, and how long one batch holds
/// sled's process-wide lock (writers wait for at most one batch).
const COPY_BATCH: usize = 1_000;
/// The copy is flushed, and its size on disk looked at, after this many batches. sled reclaims the space of the node versions
/// a bulk insert leaves behind only once they are flushed: 200,000 keys of 100 bytes took
/// 4.3 bytes on disk per raw byte copied without flushes, 3.1 flushed every 32 batches, 2.5
/// every 8, 2.3 every 2 (a standalone copy on this machine).
const FLUSH_BATCHES: u64 = 4;
/// After each batch and flush of the bulk copy, the copy waits this many times as long as the
/// batch took: the writers beside it get sled's lock and the disk back (a copy of 400 MB
/// beside a prober posting every 100 ms held one acknowledgement for a second without it).
const COPY_REST: f64 = 1.0;
/// Most bytes (keys and values) in one copy batch: large values make fewer keys a batch.
const COPY_BATCH_BYTES: usize = 4 << 20;
/// A copy that reaches this fraction of the old generation's bytes is given up: the rewrite
/// would give too little back (or grow the store).
pub(super) const MAX_COPY_RATIO: f64 = 0.8;
/// Catch-up rounds beside the writers before the last one, under the write gate. Each copies
/// again the keys written during the one before; under a steady load they shrink fast.
const MAX_CATCH_UP_ROUNDS: usize = 16;
/// The catch-up stops going round once a round has at most this many keys to copy again; the
/// last round copies what was written meanwhile with writes held off.
pub(super) const FINAL_ROUND_KEYS: usize = 5_000;
/// How long a rewrite waits for readers of the old generation before leaving its directory
/// to be deleted on the next open.
const RETIRE_WAIT: Duration = Duration::from_secs(5);

/// What a rewrite did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    /// The new generation's directory (deleted again when the copy was given up).
    pub dir: PathBuf,
    /// Bytes on disk of the old generation.
    pub bytes_before: u64,
    /// Bytes on disk of the new generation (of the copy when it was given up).
    pub bytes_after: u64,
    /// Keys copied.
    pub keys: u64,
    /// How long writes waited, in ms.
    pub pause_ms: u64,
    /// Whether the new generation replaced the old one; false when the copy was given up for
    /// not being smaller ([`MAX_COPY_RATIO`]) or not fitting the room it was given.
    pub switched: bool,
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
pub(super) struct TreeCopy {
    pub(super) src: sled::Tree,
    pub(super) dst: sled::Tree,
}

impl TreeCopy {
    /// Tree `name` of `src` and its namesake in `dst` (created if new).
    pub(super) fn open(src: &sled::Db, dst: &sled::Db, name: &[u8]) -> Result<Self, StoreError> {
        Ok(Self {
            src: src
                .open_tree(name)
                .map_err(StoreError::sled("opening a tree to copy"))?,
            dst: dst
                .open_tree(name)
                .map_err(StoreError::sled("creating a tree copy"))?,
        })
    }
}

/// Why a copy stopped before its end.
pub(super) enum Stop {
    /// The copy passed `cap` bytes on disk.
    TooBig(u64),
    Failed(StoreError),
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Self {
        Stop::Failed(e)
    }
}

/// The copy's size limit and where to measure it.
pub(super) struct SizeCap<'a> {
    pub(super) dir: &'a Path,
    pub(super) bytes: u64,
}

impl SizeCap<'_> {
    fn check(&self) -> Result<(), Stop> {
        let bytes = disk::dir_disk_bytes(self.dir).unwrap_or(0);
        if bytes > self.bytes {
            return Err(Stop::TooBig(bytes));
        }
        Ok(())
    }
}

/// Copies one tree in batches (bounding the memory of a rewrite). `copied_bytes` counts the
/// keys and values copied so far across trees: the copy stops as soon as they alone pass the
/// cap, and its size on disk is checked at every flush. A flush comes every
/// [`FLUSH_BATCHES`] batches, or sooner once a quarter of the cap was copied since the last
/// one: on a small budget four full batches would be more than the room the copy was given,
/// and the data dir could pass the budget by that much before the check saw it. Returns the
/// keys copied.
pub(super) fn copy_tree(
    copy: &TreeCopy,
    cap: &SizeCap<'_>,
    copied_bytes: &mut u64,
) -> Result<u64, Stop> {
    let mut copied = 0u64;
    let mut batches = 0u64;
    let batch_bytes = COPY_BATCH_BYTES.min(usize::try_from(cap.bytes / 8).unwrap_or(usize::MAX));
    let mut since_flush = 0u64;
    let mut iter = copy.src.iter().peekable();
    while iter.peek().is_some() {
        let mut batch = sled::Batch::default();
        let (mut keys, mut bytes) = (0usize, 0usize);
        while keys < COPY_BATCH && (keys == 0 || bytes < batch_bytes) {
            let Some(kv) = iter.next() else {
                break;
            };
            let (k, v) = kv.map_err(StoreError::sled("reading for a rewrite"))?;
            bytes += k.len() + v.len();
            batch.insert(k, v);
            keys += 1;
        }
        let started = Instant::now();
        copy.dst
            .apply_batch(batch)
            .map_err(StoreError::sled("writing a rewrite"))?;
        // A batch holds sled's process-wide lock and keeps the disk busy: the copy rests as
        // long again before the next one, so writers beside it find both free half the time.
        std::thread::sleep(started.elapsed().mul_f64(COPY_REST));
        copied += keys as u64;
        *copied_bytes += bytes as u64;
        if *copied_bytes > cap.bytes {
            return Err(Stop::TooBig(*copied_bytes));
        }
        batches += 1;
        since_flush += bytes as u64;
        if batches.is_multiple_of(FLUSH_BATCHES) || since_flush >= cap.bytes / 4 {
            since_flush = 0;
            let started = Instant::now();
            copy.dst
                .flush()
                .map_err(StoreError::sled("flushing a rewrite"))?;
            std::thread::sleep(started.elapsed().mul_f64(COPY_REST));
            cap.check()?;
        }
    }
    Ok(copied)
}

/// Marks every key that only one of the source and its copy holds, walking both in key order,
/// so that a catch-up round copies it again. Writes go on meanwhile, so most differences are
/// keys written since the copy passed them (marked by the watchers too); a difference the
/// writers did not make would be a copy that lost a key (one CI run saw a copy whose key count
/// differed from its source's while writes were held; sled finishes an interrupted node merge
/// lazily, on the next traversal, which is the suspected cause).
fn mark_differences(copy: &TreeCopy, tree: usize, changes: &Changes) -> Result<u64, StoreError> {
    const CONTEXT: &str = "reading for a rewrite's check";
    let mut src = copy.src.iter().keys().peekable();
    let mut dst = copy.dst.iter().keys().peekable();
    let mut marked = 0u64;
    loop {
        let a = src
            .peek()
            .cloned()
            .transpose()
            .map_err(StoreError::sled(CONTEXT))?;
        let b = dst
            .peek()
            .cloned()
            .transpose()
            .map_err(StoreError::sled(CONTEXT))?;
        match (a, b) {
            (None, None) => return Ok(marked),
            (Some(a), Some(b)) if a == b => {
                src.next();
                dst.next();
            }
            (Some(a), b) if b.as_ref().is_none_or(|b| a < *b) => {
                changes.mark(tree, a);
                marked += 1;
                src.next();
            }
            (_, Some(b)) => {
                changes.mark(tree, b);
                marked += 1;
                dst.next();
            }
            (Some(_), None) => unreachable!("handled by the arm above"),
        }
    }
}

/// Copies `keys` again from the source: the value it holds now, or a removal.
fn copy_again(copy: &TreeCopy, keys: &BTreeSet<sled::IVec>) -> Result<u64, StoreError> {
    let mut keys = keys.iter().peekable();
    let mut copied = 0u64;
    while keys.peek().is_some() {
        let mut batch = sled::Batch::default();
        for key in keys.by_ref().take(COPY_BATCH) {
            match copy
                .src
                .get(key)
                .map_err(StoreError::sled("reading for a rewrite"))?
            {
                Some(value) => batch.insert(key.clone(), value),
                None => batch.remove(key.clone()),
            }
            copied += 1;
        }
        copy.dst
            .apply_batch(batch)
            .map_err(StoreError::sled("writing a rewrite"))?;
    }
    Ok(copied)
}

/// Copies again, tree by tree, the keys `changed` names.
pub(super) fn catch_up(
    copies: &[TreeCopy],
    changed: &[BTreeSet<sled::IVec>],
) -> Result<u64, StoreError> {
    let mut copied = 0;
    for (copy, keys) in copies.iter().zip(changed) {
        copied += copy_again(copy, keys)?;
    }
    Ok(copied)
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
    /// module doc), with no limit on the copy's size but [`MAX_COPY_RATIO`].
    pub fn rewrite(&self) -> Result<Rewritten, StoreError> {
        self.rewrite_within(u64::MAX)
    }

    /// Like [`Store::rewrite`]; the copy is also given up once it takes more than
    /// `max_copy_bytes` on disk (the room the disk budget leaves it). Blocking; writes wait
    /// only for the last catch-up round and the switch. Must run inside a tokio runtime (it
    /// starts the new generation's group commit). One rewrite runs at a time.
    pub fn rewrite_within(&self, max_copy_bytes: u64) -> Result<Rewritten, StoreError> {
        let _one = self
            .shared
            .rewriting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let old = self.inner();
        let bytes_before = disk::dir_disk_bytes(&old.dir).unwrap_or(0);
        let (name, dir) = self.next_generation(&old)?;
        let config = &self.shared.config;
        let db = super::sled_config::sled_config(&dir, config)
            .open()
            .map_err(|source| StoreError::from_open(&dir, source))?;
        let cap = SizeCap {
            dir: &dir,
            bytes: max_copy_bytes.min((bytes_before as f64 * MAX_COPY_RATIO) as u64),
        };
        let copied = self.copy_and_switch(&old, db.clone(), &name, &cap);
        let given_up = |db: sled::Db, bytes_after: u64| {
            drop(db);
            if let Err(rm) = std::fs::remove_dir_all(&dir) {
                tracing::warn!(dir = %dir.display(), error = %rm, "could not delete an incomplete rewrite");
            }
            bytes_after
        };
        let (keys, pause_ms) = match copied {
            Ok(done) => done,
            Err(Stop::TooBig(bytes_after)) => {
                let bytes_after = given_up(db, bytes_after);
                tracing::info!(
                    bytes_before,
                    bytes_after,
                    cap_bytes = cap.bytes,
                    "rewrite given up: the copy would not be smaller than the database"
                );
                return Ok(Rewritten {
                    dir,
                    bytes_before,
                    bytes_after,
                    keys: 0,
                    pause_ms: 0,
                    switched: false,
                    old_deleted: false,
                });
            }
            Err(Stop::Failed(e)) => {
                given_up(db, 0);
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
            switched: true,
            old_deleted,
        })
    }

    /// Copies `copies` whole, then the catch-up rounds, all beside the writers: what is left
    /// for the last round (under the write gate, the caller's) is in `changes`. Returns the
    /// keys copied; `copied_bytes` counts their bytes.
    pub(super) fn copy_beside_writers(
        &self,
        copies: &[TreeCopy],
        changes: &Changes,
        cap: &SizeCap<'_>,
        copied_bytes: &mut u64,
    ) -> Result<u64, Stop> {
        let mut keys = 0u64;
        for copy in copies {
            keys += copy_tree(copy, cap, copied_bytes)?;
        }
        #[cfg(test)]
        if let Some(hook) = self
            .shared
            .after_copy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
        {
            hook();
        }
        for (index, copy) in copies.iter().enumerate() {
            mark_differences(copy, index, changes)?;
        }
        for _ in 0..MAX_CATCH_UP_ROUNDS {
            let changed = changes.take()?;
            let n: usize = changed.iter().map(BTreeSet::len).sum();
            catch_up(copies, &changed)?;
            if n <= FINAL_ROUND_KEYS {
                break;
            }
        }
        Ok(keys)
    }

    /// The copy and the catch-up rounds (writes going on), then the last round and the
    /// switch (writes held). Returns the keys copied and how long writes were held, in ms.
    fn copy_and_switch(
        &self,
        old: &Arc<StoreInner>,
        db: sled::Db,
        name: &str,
        cap: &SizeCap<'_>,
    ) -> Result<(u64, u64), Stop> {
        let names = old.db.tree_names();
        let copies = names
            .iter()
            .map(|tree| TreeCopy::open(&old.db, &db, tree))
            .collect::<Result<Vec<_>, _>>()?;
        // Watching starts before the first key is read: every write from here on is seen.
        let sources: Vec<sled::Tree> = copies.iter().map(|c| c.src.clone()).collect();
        let changes = Changes::watch(&sources)?;
        let mut copied_bytes = 0u64;
        let mut keys = self.copy_beside_writers(&copies, &changes, cap, &mut copied_bytes)?;
        // Most of the copy reaches the disk here, beside the writers; the flush under the
        // gate writes only the last round.
        db.flush().map_err(StoreError::sled("flushing a rewrite"))?;
        cap.check()?;

        let gate = self
            .shared
            .write_gate
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let paused = Instant::now();
        let last = changes.finish()?;
        catch_up(&copies, &last)?;
        // A tree made while the copy ran (none is, today) is copied whole.
        for tree in old.db.tree_names() {
            if !names.contains(&tree) {
                let copy = TreeCopy::open(&old.db, &db, &tree)?;
                keys += copy_tree(
                    &copy,
                    &SizeCap {
                        dir: cap.dir,
                        bytes: u64::MAX,
                    },
                    &mut copied_bytes,
                )?;
            }
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

    fn no_cap(dir: &Path) -> SizeCap<'_> {
        SizeCap {
            dir,
            bytes: u64::MAX,
        }
    }

    #[test]
    fn a_copy_holding_a_key_its_source_lacks_or_missing_one_is_mended() {
        let (dir, copy) = trees();
        assert!(matches!(
            copy_tree(&copy, &no_cap(dir.path()), &mut 0),
            Ok(2_500)
        ));
        copy.dst.insert(b"stray", &[]).unwrap();
        copy.dst.remove(1_234u32.to_be_bytes()).unwrap();
        let changes = Changes::watch(&[]).unwrap();
        let changes_of_one = Changes::watch(std::slice::from_ref(&copy.src)).unwrap();
        drop(changes);
        assert_eq!(mark_differences(&copy, 0, &changes_of_one).unwrap(), 2);
        let marked = changes_of_one.finish().unwrap();
        assert_eq!(marked[0].len(), 2);
        catch_up(std::slice::from_ref(&copy), &marked).unwrap();
        assert_eq!(copy.dst.len(), 2_500);
        assert!(copy.dst.get(b"stray").unwrap().is_none());
        assert!(copy.dst.get(1_234u32.to_be_bytes()).unwrap().is_some());
    }

    #[test]
    fn a_copy_past_its_cap_stops() {
        let (dir, copy) = trees();
        let cap = SizeCap {
            dir: dir.path(),
            bytes: 0,
        };
        assert!(matches!(
            copy_tree(&copy, &cap, &mut 0),
            Err(Stop::TooBig(_))
        ));
    }
}
