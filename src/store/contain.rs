//! Containing sled's panics on damaged files.
//!
//! sled 0.34 panics on some corrupt data instead of returning an error ("tried to serialize
//! Uninitialized", "cannot find pid N in view_for_key"). [`contain`] runs a sled call under
//! `catch_unwind` and turns such a panic into [`StoreError::Corrupt`], so a damaged store is
//! refused with a message (and the store marked damaged) instead of a backtrace or an aborted
//! request. While a contained call runs, the panic hook stays quiet on that thread: the panic
//! is reported once, as the error, not as "panicked at" on stderr.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

use crate::error::StoreError;

thread_local! {
    /// True while this thread runs a contained call.
    static CONTAINED: Cell<bool> = const { Cell::new(false) };
}

static HOOK: Once = Once::new();

/// Installs (once per process) a panic hook that is silent for contained calls and defers to
/// the previous hook otherwise.
fn install_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CONTAINED.with(Cell::get) {
                previous(info);
            }
        }));
    });
}

/// Runs `f`, turning a panic inside it into [`StoreError::Corrupt`] with `what` as context.
/// Unwind safety: after a contained panic the caller treats the database as damaged and does
/// not trust it for writes (see `health.rs`), so a half-updated sled structure is never used
/// as if it were sound.
pub(crate) fn contain<T>(
    what: &'static str,
    f: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    install_hook();
    let was = CONTAINED.with(|c| c.replace(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    CONTAINED.with(|c| c.set(was));
    match result {
        Ok(r) => r,
        Err(payload) => {
            let reason = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            Err(StoreError::Corrupt { what, reason })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_a_corrupt_error() {
        let r: Result<(), _> = contain("reading", || panic!("tried to serialize Uninitialized"));
        let e = r.unwrap_err().to_string();
        assert!(e.contains("tried to serialize Uninitialized"), "{e}");
        assert!(e.contains("reading"), "{e}");
        assert_eq!(contain("ok", || Ok(5)).unwrap(), 5);
        assert!(
            !CONTAINED.with(Cell::get),
            "the flag is reset after a contained call"
        );
    }
}
