//! Back-off between delivery attempts: exponential, capped, with jitter so many failing
//! deliveries do not retry in lockstep.

use std::time::Duration;

/// The pause before retry number `attempt` (1 for the first retry): `initial · 2^(attempt-1)`
/// capped at `max`, then "equal jitter" (half fixed, half random).
pub(crate) fn backoff(initial: Duration, max: Duration, attempt: u32) -> Duration {
    let exp = initial
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(20))
        .min(max);
    let half = exp / 2;
    let jitter_ms = u64::try_from(half.as_millis()).unwrap_or(u64::MAX);
    half + Duration::from_millis(fastrand::u64(0..=jitter_ms))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let (i, m) = (Duration::from_millis(100), Duration::from_millis(1_000));
        for _ in 0..50 {
            let first = backoff(i, m, 1);
            assert!(
                first >= Duration::from_millis(50) && first <= i,
                "{first:?}"
            );
            let third = backoff(i, m, 3);
            assert!(third >= Duration::from_millis(200) && third <= Duration::from_millis(400));
            assert!(backoff(i, m, 40) <= m);
        }
    }
}
