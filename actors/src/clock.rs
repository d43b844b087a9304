//! The one wall clock: [`now_ms`], milliseconds since the Unix epoch, for every timestamp the
//! runtime stores or compares (transcript entries, the inbox, expiries, the janitor's ages).
//!
//! It reads the system clock, moved by however far tokio's clock is from the real monotonic
//! clock: nothing in production (there `tokio::time::Instant::now()` is
//! `std::time::Instant::now()`), and under a test's paused time (`start_paused`,
//! `tokio::time::advance`) exactly the virtual time advanced, so tests that move timers move
//! the wall clock too, through the same seam.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Wall-clock milliseconds since the Unix epoch, following tokio's virtual time in tests (see
/// the module docs); 0 if the clock is set before 1970, `u64::MAX` past the year 584 million.
pub fn now_ms() -> u64 {
    let real = Instant::now();
    let virtual_now = tokio::time::Instant::now().into_std();
    let wall_nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    // Signed: paused time can be behind the real clock as well as ahead of it.
    let shift_nanos: i128 = if virtual_now >= real {
        i128::try_from(virtual_now.duration_since(real).as_nanos()).unwrap_or(i128::MAX)
    } else {
        i128::try_from(real.duration_since(virtual_now).as_nanos())
            .map_or(i128::MIN, |n| n.saturating_neg())
    };
    let nanos = i128::try_from(wall_nanos)
        .unwrap_or(i128::MAX)
        .saturating_add(shift_nanos)
        .max(0);
    u64::try_from(nanos / 1_000_000).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn system_ms() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    #[test]
    fn outside_a_runtime_it_is_the_system_clock() {
        let before = system_ms();
        let now = now_ms();
        let after = system_ms();
        assert!(before <= now && now <= after, "{before} {now} {after}");
    }

    #[tokio::test]
    async fn in_a_running_runtime_it_is_the_system_clock() {
        let before = system_ms();
        let now = now_ms();
        let after = system_ms();
        assert!(before <= now && now <= after, "{before} {now} {after}");
    }

    #[tokio::test(start_paused = true)]
    async fn under_paused_time_it_moves_with_the_virtual_clock() {
        let start = now_ms();
        tokio::time::advance(Duration::from_secs(3_600)).await;
        let later = now_ms();
        // An hour of virtual time, give or take the real time this test took to run.
        let moved = later.saturating_sub(start);
        assert!((3_599_000..=3_601_000).contains(&moved), "moved {moved} ms");
    }
}
