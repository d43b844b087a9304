//! Whether the store can write now: a full disk (or any I/O failure of a write or flush) is a
//! state, not a wedge.
//!
//! After sled fails a write with an I/O error it refuses every later write until the database
//! is reopened. So the first failure puts the store in *cannot write*: writes are refused at
//! once with [`StoreError::CannotWrite`] (the HTTP layer answers 507 with `Retry-After`),
//! `/readyz` reports not ready with the reason, reads keep answering from the database as it
//! is, and the flusher stops flushing. A probe task writes and fsyncs a
//! [`PROBE_BYTES`]-byte file every [`PROBE_INTERVAL`]; once that succeeds, the store opens
//! what sled made durable as a fresh database generation (`recover.rs`), switches to it and is
//! writable again, with no restart. Nothing acknowledged is lost: an acknowledgement waits for
//! a flush, and a flush that fails acknowledges nothing.
//!
//! A contained sled panic (`contain.rs`) makes the store *damaged*: writes are refused too and
//! readiness stays false until an operator repairs it.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::error::StoreError;

/// How often a store that cannot write probes for space.
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// Bytes the probe writes and fsyncs: the room a recovery needs at least.
pub const PROBE_BYTES: usize = 256 * 1024;
/// A flush that has not finished after this long counts as failed (sled can hang on a full
/// disk); the tokio workers never wait on it, only the blocking pool.
pub(crate) const FLUSH_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a turn commit (or a flush waiter) caught by a full disk waits for the recovery
/// before it is refused, so a turn is not failed, retried and abandoned for a disk that is
/// about to have room again.
pub(crate) const RECOVERY_WAIT: Duration = Duration::from_secs(10);
/// The probe's file under the data dir.
const PROBE_FILE: &str = ".write-probe";

const WRITABLE: u8 = 0;
const CANNOT_WRITE: u8 = 1;
const DAMAGED: u8 = 2;

/// The store's condition, shared by every generation.
#[derive(Default)]
pub(super) struct Health {
    state: AtomicU8,
    reason: Mutex<String>,
    /// Woken when the store can write again.
    recovered: tokio::sync::Notify,
}

impl Health {
    /// Refuses a write when the store cannot write.
    pub(super) fn check_writable(&self) -> Result<(), StoreError> {
        match self.state.load(Ordering::Acquire) {
            WRITABLE => Ok(()),
            _ => Err(StoreError::CannotWrite {
                reason: self.reason(),
            }),
        }
    }

    fn reason(&self) -> String {
        self.reason
            .lock()
            .map(|r| r.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    fn set(&self, state: u8, reason: String) {
        if let Ok(mut r) = self.reason.lock() {
            *r = reason;
        }
        self.state.store(state, Ordering::Release);
    }

    /// A write or flush failed with `error`; from now on writes are refused until the probe
    /// succeeds. A damaged store stays damaged.
    pub(super) fn write_failed(&self, error: &str) {
        if self
            .state
            .compare_exchange(WRITABLE, CANNOT_WRITE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let reason = describe_failure(error);
            tracing::error!(reason = %reason, "the store cannot write; refusing writes until space returns");
            if let Ok(mut r) = self.reason.lock() {
                *r = reason;
            }
        }
    }

    /// sled panicked on damaged data: refuse writes and report not ready until repaired.
    pub(super) fn damaged(&self, reason: &str) {
        tracing::error!(
            reason,
            "the database is damaged; stop the server and run `turnstile doctor --repair`"
        );
        self.set(DAMAGED, format!("the database is damaged: {reason}"));
    }

    /// The probe and the recovery succeeded.
    pub(super) fn writable_again(&self) {
        if self
            .state
            .compare_exchange(CANNOT_WRITE, WRITABLE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            tracing::info!("the store can write again");
            self.recovered.notify_waiters();
        }
    }

    /// Waits until the store can write, at most `max`; whether it can.
    pub(super) async fn wait_writable(&self, max: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + max;
        loop {
            let notified = self.recovered.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.state.load(Ordering::Acquire) == WRITABLE {
                return true;
            }
            if self.state.load(Ordering::Acquire) == DAMAGED
                || tokio::time::timeout_at(deadline, notified).await.is_err()
            {
                return false;
            }
        }
    }

    /// True while writes are refused for lack of space (not for damage).
    pub(super) fn cannot_write(&self) -> bool {
        self.state.load(Ordering::Acquire) == CANNOT_WRITE
    }

    /// Why the store is not ready, or `None` when it is.
    pub(super) fn not_ready_reason(&self) -> Option<String> {
        (self.state.load(Ordering::Acquire) != WRITABLE).then(|| self.reason())
    }
}

/// A failure as operators should read it: a full disk says so.
pub(crate) fn describe_failure(error: &str) -> String {
    let lower = error.to_ascii_lowercase();
    if lower.contains("no space left") || lower.contains("storage full") || lower.contains("enospc")
    {
        format!("the disk is full ({error})")
    } else {
        format!("a write to disk failed ({error})")
    }
}

/// Whether `e` is an I/O failure of a write (as opposed to bad data or a bug).
pub(super) fn is_write_failure(e: &StoreError) -> bool {
    match e {
        StoreError::Sled { source, .. } => matches!(source, sled::Error::Io(_)),
        StoreError::Flush(_) | StoreError::CannotWrite { .. } => true,
        _ => false,
    }
}

/// Writes, fsyncs and deletes a [`PROBE_BYTES`] file under `data_dir`: whether there is room
/// to write again.
pub(super) fn probe(data_dir: &Path) -> std::io::Result<()> {
    let path = data_dir.join(PROBE_FILE);
    let result = std::fs::File::create(&path).and_then(|mut f| {
        f.write_all(&vec![0u8; PROBE_BYTES])?;
        f.sync_all()
    });
    let _ = std::fs::remove_file(&path);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_refuses_writes_until_recovered_and_damage_sticks() {
        let health = Health::default();
        assert!(health.check_writable().is_ok());
        assert_eq!(health.not_ready_reason(), None);
        health.write_failed("io error: No space left on device (os error 28)");
        let e = health.check_writable().unwrap_err();
        assert!(e.to_string().contains("the disk is full"), "{e}");
        assert!(health.not_ready_reason().unwrap().contains("disk is full"));
        health.writable_again();
        assert!(health.check_writable().is_ok());
        health.damaged("cannot find pid 194 in view_for_key");
        health.writable_again();
        assert!(
            health.check_writable().is_err(),
            "damage is not undone by a probe"
        );
        assert!(!health.cannot_write());
    }

    #[test]
    fn the_probe_writes_and_removes_its_file() {
        let dir = tempfile::tempdir().unwrap();
        probe(dir.path()).unwrap();
        assert!(!dir.path().join(PROBE_FILE).exists());
        assert!(probe(&dir.path().join("missing")).is_err());
    }
}
