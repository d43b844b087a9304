//! Measuring disk use, and the live-byte meter that tells the janitor when writes may have
//! crossed high water without a directory walk per write.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Most directory levels [`dir_disk_bytes`] descends; the data dir is shallow (`db/blobs`,
/// `archives`), so anything deeper is not ours and is not followed.
const MAX_DEPTH: usize = 8;

/// Bytes really allocated on disk for everything under `path` (blocks × 512 on Unix, so
/// sparse and preallocated files count as what they occupy). Symlinks are not followed.
/// A path that does not exist measures 0.
pub fn dir_disk_bytes(path: &Path) -> std::io::Result<u64> {
    let mut total = 0u64;
    let mut stack = vec![(path.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            // A file deleted while we walk (sled's snapshots, an archive) just no longer counts.
            let meta = match entry.metadata() {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            if meta.is_dir() {
                if depth < MAX_DEPTH {
                    stack.push((entry.path(), depth + 1));
                }
            } else {
                total = total.saturating_add(allocated(&meta));
            }
        }
    }
    Ok(total)
}

/// Bytes allocated on disk for one file.
pub(super) fn dir_disk_bytes_of_file(meta: &std::fs::Metadata) -> u64 {
    allocated(meta)
}

#[cfg(unix)]
fn allocated(meta: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    meta.blocks().saturating_mul(512)
}

#[cfg(not(unix))]
fn allocated(meta: &std::fs::Metadata) -> u64 {
    meta.len()
}

/// Disk bytes a logical byte written is assumed to take until the janitor measures again:
/// sled appends every write to its log (1×) and relocates half-empty segments later; 2× is the
/// upper end of what the overload tests showed between two measurements.
pub(super) const DISK_BYTES_PER_WRITTEN_BYTE: u64 = 2;

/// Disk bytes admission keeps free per logical byte of an acknowledged message still in the
/// inbox: its turn writes the text again as a transcript entry and a reply assumed as long
/// (the built-in echo model's), each at [`DISK_BYTES_PER_WRITTEN_BYTE`]. Admission cannot
/// refuse those writes any more, so without this room a backlog (messages held by the
/// debounce) carried the data dir past its budget.
pub(super) const PENDING_DISK_BYTES_PER_BYTE: u64 = 2 * DISK_BYTES_PER_WRITTEN_BYTE;

/// Live logical bytes in the database (transcript values and keys, inbox entries) and the
/// level at which the janitor wants to hear about it; and an estimate of the data dir's
/// allocated size (the janitor's newest measurement plus what was written since), which
/// admission checks against the budget. Updated with atomic adds per write, no directory walk.
#[derive(Default)]
pub(super) struct UsageMeter {
    live: AtomicU64,
    /// The janitor is told when `live` reaches this; 0 means "not set yet".
    trigger_at: AtomicU64,
    /// The data dir's allocated bytes at the janitor's newest measurement; 0 means "never
    /// measured" (no janitor: admission is not gated).
    measured_disk: AtomicU64,
    /// Logical bytes written since that measurement (deletes do not give disk space back).
    written_since: AtomicU64,
    /// Allocated bytes of files the store wrote beside sled since that measurement (cold
    /// segments): counted 1×, their size is known once written. Without them admission would
    /// not see the cold tier grow between two janitor passes.
    files_written_since: AtomicU64,
    /// Allocated bytes of such files deleted since that measurement (their space does come
    /// back at once, unlike sled's).
    files_deleted_since: AtomicU64,
    /// The janitor is told when the disk estimate reaches this (high water); 0: not set.
    disk_trigger_at: AtomicU64,
    /// Room admission keeps free for the janitor's next rewrite (the fresh copy it expects).
    rewrite_reserve: AtomicU64,
    /// Logical bytes (keys and values) of the acknowledged messages in the inbox.
    pending: AtomicU64,
    /// Logical bytes the thaws of cold sessions with acknowledged messages will write (their
    /// turns thaw them; admission does not, see `cold.rs`).
    owed_thaws: AtomicU64,
    hook: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl UsageMeter {
    pub(super) fn live(&self) -> u64 {
        self.live.load(Ordering::Relaxed)
    }

    pub(super) fn set_live(&self, bytes: u64) {
        self.live.store(bytes, Ordering::Relaxed);
    }

    pub(super) fn add(&self, bytes: u64) {
        let now = self.live.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.written_since.fetch_add(bytes, Ordering::Relaxed);
        let trigger = self.trigger_at.load(Ordering::Relaxed);
        let disk_trigger = self.disk_trigger_at.load(Ordering::Relaxed);
        if (trigger != 0 && now >= trigger)
            || (disk_trigger != 0 && self.disk_estimate() >= disk_trigger)
        {
            self.wake();
        }
    }

    /// Calls the janitor hook, if installed (cheap: the hook is coalesced).
    pub(super) fn wake(&self) {
        if let Some(hook) = self.hook.get() {
            hook();
        }
    }

    /// The data dir's allocated bytes as far as known without measuring: the newest
    /// measurement plus [`DISK_BYTES_PER_WRITTEN_BYTE`] per byte written since. 0 before the
    /// first measurement.
    pub(super) fn disk_estimate(&self) -> u64 {
        let measured = self.measured_disk.load(Ordering::Relaxed);
        if measured == 0 {
            return 0;
        }
        measured
            .saturating_add(
                self.written_since
                    .load(Ordering::Relaxed)
                    .saturating_mul(DISK_BYTES_PER_WRITTEN_BYTE),
            )
            .saturating_add(self.files_written_since.load(Ordering::Relaxed))
            .saturating_sub(self.files_deleted_since.load(Ordering::Relaxed))
            // 0 means "never measured".
            .max(1)
    }

    /// Counts a file written beside sled (a cold segment) of `bytes` allocated bytes in the
    /// disk estimate, and wakes the janitor if that crosses its disk trigger.
    pub(super) fn add_file(&self, bytes: u64) {
        self.files_written_since.fetch_add(bytes, Ordering::Relaxed);
        let disk_trigger = self.disk_trigger_at.load(Ordering::Relaxed);
        if disk_trigger != 0 && self.disk_estimate() >= disk_trigger {
            self.wake();
        }
    }

    /// Takes a deleted file of `bytes` allocated bytes off the disk estimate.
    pub(super) fn remove_file(&self, bytes: u64) {
        self.files_deleted_since.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Call before walking the data dir: what was written so far will be in the measurement.
    pub(super) fn measure_begins(&self) -> Counted {
        Counted {
            written: self.written_since.load(Ordering::Relaxed),
            files: self.files_written_since.load(Ordering::Relaxed),
        }
    }

    /// Records a measurement of the data dir that began when [`Self::measure_begins`]
    /// returned `counted`. Writes during the walk stay counted, and deletions since the last
    /// measurement are forgotten (the walk may or may not have seen the file): an
    /// overestimate, never under.
    pub(super) fn set_measured(&self, disk_bytes: u64, counted: Counted) {
        let _ = self
            .written_since
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(counted.written))
            });
        let _ = self
            .files_written_since
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(counted.files))
            });
        self.files_deleted_since.store(0, Ordering::Relaxed);
        self.measured_disk
            .store(disk_bytes.max(1), Ordering::Relaxed);
    }

    /// Counts an acknowledged message of `bytes` (inbox key and value) written to the inbox:
    /// live bytes now, and pending bytes until its turn consumes it.
    pub(super) fn add_inbox(&self, bytes: u64) {
        self.pending.fetch_add(bytes, Ordering::Relaxed);
        self.add(bytes);
    }

    /// Takes inbox entries of `bytes` (consumed by a turn, or deleted) off the live and the
    /// pending bytes.
    pub(super) fn sub_inbox(&self, bytes: u64) {
        saturating_sub(&self.pending, bytes);
        self.sub(bytes);
    }

    /// Sets the pending bytes from a scan of the inbox (on open, after clearing it).
    pub(super) fn set_pending(&self, bytes: u64) {
        self.pending.store(bytes, Ordering::Relaxed);
    }

    /// Disk bytes the turns of the acknowledged messages in the inbox are expected to write,
    /// thaws of their cold sessions included.
    pub(super) fn pending_disk_bytes(&self) -> u64 {
        self.pending
            .load(Ordering::Relaxed)
            .saturating_mul(PENDING_DISK_BYTES_PER_BYTE)
            .saturating_add(
                self.owed_thaws
                    .load(Ordering::Relaxed)
                    .saturating_mul(DISK_BYTES_PER_WRITTEN_BYTE),
            )
    }

    /// Counts a thaw of `bytes` logical bytes that a queued message's turn will write.
    pub(super) fn owe_thaw(&self, bytes: u64) {
        self.owed_thaws.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Takes a thaw counted by [`UsageMeter::owe_thaw`] off (done, or no longer owed).
    pub(super) fn settle_thaw(&self, bytes: u64) {
        saturating_sub(&self.owed_thaws, bytes);
    }

    /// Room kept free for a rewrite's fresh copy.
    pub(super) fn rewrite_reserve(&self) -> u64 {
        self.rewrite_reserve.load(Ordering::Relaxed)
    }

    /// Sets the room kept free for a rewrite's fresh copy.
    pub(super) fn set_rewrite_reserve(&self, bytes: u64) {
        self.rewrite_reserve.store(bytes, Ordering::Relaxed);
    }

    /// Sets the disk estimate at which the janitor hook fires.
    pub(super) fn set_disk_trigger(&self, bytes: u64) {
        self.disk_trigger_at.store(bytes.max(1), Ordering::Relaxed);
    }

    pub(super) fn sub(&self, bytes: u64) {
        saturating_sub(&self.live, bytes);
    }

    pub(super) fn set_trigger(&self, bytes: u64) {
        self.trigger_at.store(bytes.max(1), Ordering::Relaxed);
    }

    /// Installs the hook; only the first call has an effect.
    pub(super) fn set_hook(&self, hook: Box<dyn Fn() + Send + Sync>) -> bool {
        self.hook.set(hook).is_ok()
    }
}

/// Subtracts `bytes` from `counter`, stopping at zero (a count set from a scan may be below
/// what is later taken off it).
fn saturating_sub(counter: &AtomicU64, bytes: u64) {
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_sub(bytes))
    });
}

/// What the disk estimate had counted when a measurement began.
#[derive(Debug, Clone, Copy)]
pub(super) struct Counted {
    written: u64,
    files: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    #[test]
    fn measures_allocated_bytes_recursively() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(dir_disk_bytes(&dir.path().join("missing")).unwrap(), 0);
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/b/f"), vec![1u8; 100_000]).unwrap();
        std::fs::write(dir.path().join("g"), vec![1u8; 10]).unwrap();
        let n = dir_disk_bytes(dir.path()).unwrap();
        assert!((100_010..200_000).contains(&n), "{n}");
    }

    #[test]
    fn meter_fires_the_hook_at_the_trigger() {
        let meter = UsageMeter::default();
        let fired = Arc::new(AtomicUsize::new(0));
        let f = Arc::clone(&fired);
        assert!(meter.set_hook(Box::new(move || {
            f.fetch_add(1, Ordering::Relaxed);
        })));
        meter.add(500);
        assert_eq!(fired.load(Ordering::Relaxed), 0, "no trigger set yet");
        meter.set_trigger(1_000);
        meter.add(400);
        assert_eq!(fired.load(Ordering::Relaxed), 0);
        meter.add(100);
        assert_eq!(fired.load(Ordering::Relaxed), 1);
        meter.sub(5_000);
        assert_eq!(meter.live(), 0);
    }

    #[test]
    fn disk_estimate_counts_writes_since_the_measurement_and_fires_at_its_trigger() {
        let meter = UsageMeter::default();
        let fired = Arc::new(AtomicUsize::new(0));
        let f = Arc::clone(&fired);
        assert!(meter.set_hook(Box::new(move || {
            f.fetch_add(1, Ordering::Relaxed);
        })));
        meter.add(1_000);
        assert_eq!(meter.disk_estimate(), 0, "never measured: no estimate");
        let counted = meter.measure_begins();
        meter.set_measured(10_000, counted);
        meter.set_disk_trigger(12_000);
        meter.add(500);
        meter.sub(500);
        assert_eq!(
            meter.disk_estimate(),
            10_000 + 500 * DISK_BYTES_PER_WRITTEN_BYTE,
            "a delete gives no disk space back"
        );
        assert_eq!(fired.load(Ordering::Relaxed), 0);
        meter.add(500);
        assert_eq!(fired.load(Ordering::Relaxed), 1);
        let counted = meter.measure_begins();
        meter.add(100);
        meter.set_measured(9_000, counted);
        assert_eq!(
            meter.disk_estimate(),
            9_000 + 100 * DISK_BYTES_PER_WRITTEN_BYTE,
            "a write during the walk stays counted"
        );
    }

    #[test]
    fn disk_estimate_counts_files_written_and_deleted_beside_sled() {
        let meter = UsageMeter::default();
        let fired = Arc::new(AtomicUsize::new(0));
        let f = Arc::clone(&fired);
        assert!(meter.set_hook(Box::new(move || {
            f.fetch_add(1, Ordering::Relaxed);
        })));
        let counted = meter.measure_begins();
        meter.set_measured(10_000, counted);
        meter.set_disk_trigger(14_000);
        meter.add_file(4_096);
        assert_eq!(meter.disk_estimate(), 14_096, "a segment counts 1x");
        assert_eq!(fired.load(Ordering::Relaxed), 1, "and wakes the janitor");
        meter.remove_file(4_096);
        assert_eq!(
            meter.disk_estimate(),
            10_000,
            "a deleted file gives its space back"
        );
        meter.remove_file(1 << 40);
        assert_eq!(meter.disk_estimate(), 1, "never below 'measured'");
        let counted = meter.measure_begins();
        meter.add_file(100);
        meter.set_measured(9_000, counted);
        assert_eq!(
            meter.disk_estimate(),
            9_100,
            "a file written during the walk stays counted, deletions are forgotten"
        );
    }
}
