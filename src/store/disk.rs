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

/// Live logical bytes in the database (transcript values and keys, inbox entries) and the
/// level at which the janitor wants to hear about it. Updated with one atomic add per write.
#[derive(Default)]
pub(super) struct UsageMeter {
    live: AtomicU64,
    /// The janitor is told when `live` reaches this; 0 means "not set yet".
    trigger_at: AtomicU64,
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
        let trigger = self.trigger_at.load(Ordering::Relaxed);
        if trigger != 0 && now >= trigger {
            if let Some(hook) = self.hook.get() {
                hook();
            }
        }
    }

    pub(super) fn sub(&self, bytes: u64) {
        let _ = self
            .live
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(bytes))
            });
    }

    pub(super) fn set_trigger(&self, bytes: u64) {
        self.trigger_at.store(bytes.max(1), Ordering::Relaxed);
    }

    /// Installs the hook; only the first call has an effect.
    pub(super) fn set_hook(&self, hook: Box<dyn Fn() + Send + Sync>) -> bool {
        self.hook.set(hook).is_ok()
    }
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
}
