//! Pausing between a channel's retries, unless it is told to stop first. The delays come from
//! the one back-off, `crate::backoff`.

use std::time::Duration;

/// Sleeps `pause` unless `stop` becomes true first; returns false if it did.
pub(crate) async fn pause_unless_stopped(
    pause: Duration,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> bool {
    if *stop.borrow() {
        return false;
    }
    tokio::select! {
        _ = tokio::time::sleep(pause) => true,
        _ = stop.wait_for(|s| *s) => false,
    }
}
