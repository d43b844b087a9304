//! The one back-off: exponential delays capped at a maximum, with "equal jitter" for retries,
//! and the server's `Retry-After` hints. Used by the model client (retries of one request), the
//! model limiter (pauses after 429s in a row, unjittered), and the channels (delivery and
//! polling retries).
//!
//! Jitter spreads retries of many sessions that failed together (a 429 burst, a receiver that
//! went down) so they do not return together. It needs no cryptographic randomness: its one
//! source is `fastrand` (a per-thread generator seeded randomly).

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

/// Largest exponent of the doubling: `base * 2^31` is past any cap a setting can name.
const MAX_DOUBLINGS: u32 = 31;

/// `base * 2^step`, capped at `max` (no jitter): the limiter's pause after `step + 1` 429s in
/// a row.
pub(crate) fn doubling(base: Duration, max: Duration, step: u32) -> Duration {
    base.saturating_mul(2u32.saturating_pow(step.min(MAX_DOUBLINGS)))
        .min(max)
}

/// The delay before retry number `retry` (0 for the first retry): [`doubling`], of which a
/// random half is taken away ("equal jitter"), so it lies in `[full / 2, full]`.
pub(crate) fn jittered(base: Duration, max: Duration, retry: u32) -> Duration {
    let full = doubling(base, max, retry);
    let half = full / 2;
    half + half.mul_f64(fastrand::f64())
}

/// When and how often to retry one model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RetryPolicy {
    /// Retries after the first attempt.
    pub(crate) max_retries: u32,
    /// The first delay; doubles per retry.
    pub(crate) base: Duration,
    /// The longest delay, and the longest `Retry-After` waited for.
    pub(crate) max: Duration,
}

impl RetryPolicy {
    /// The delay before retry number `retry` (0 for the first retry): see [`jittered`].
    pub(crate) fn delay(&self, retry: u32) -> Duration {
        jittered(self.base, self.max, retry)
    }
}

/// The delay the server asks for: `retry-after-ms` (OpenAI; milliseconds), else `Retry-After`
/// in seconds or as an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return seconds(ms / 1_000.0);
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return seconds(secs);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

fn seconds(secs: f64) -> Option<Duration> {
    (secs.is_finite() && secs >= 0.0)
        .then(|| Duration::try_from_secs_f64(secs).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn delays_grow_stay_bounded_and_vary() {
        let policy = RetryPolicy {
            max_retries: 10,
            base: Duration::from_millis(100),
            max: Duration::from_secs(2),
        };
        for retry in 0..40 {
            let full = (Duration::from_millis(100) * 2u32.saturating_pow(retry.min(31)))
                .min(Duration::from_secs(2));
            let d = policy.delay(retry);
            assert!(
                d >= full / 2 && d <= full,
                "retry {retry}: {d:?} vs {full:?}"
            );
        }
        let samples: std::collections::HashSet<Duration> =
            (0..20).map(|_| policy.delay(3)).collect();
        assert!(samples.len() > 1, "jitter must vary");
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        // The channels' retries: attempt 1 is retry 0.
        let (i, m) = (Duration::from_millis(100), Duration::from_millis(1_000));
        for _ in 0..50 {
            let first = jittered(i, m, 0);
            assert!(
                first >= Duration::from_millis(50) && first <= i,
                "{first:?}"
            );
            let third = jittered(i, m, 2);
            assert!(third >= Duration::from_millis(200) && third <= Duration::from_millis(400));
            assert!(jittered(i, m, 39) <= m);
        }
    }

    #[test]
    fn doubling_has_no_jitter() {
        let (b, m) = (Duration::from_millis(100), Duration::from_secs(1));
        assert_eq!(doubling(b, m, 0), b);
        assert_eq!(doubling(b, m, 2), Duration::from_millis(400));
        assert_eq!(doubling(b, m, 40), m);
        assert_eq!(doubling(b, Duration::MAX, u32::MAX), b * (1 << 31));
    }

    #[test]
    fn reads_retry_after_headers() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", HeaderValue::from_static("150"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(150)));
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("-3"));
        assert_eq!(retry_after(&h), None);
        let past = httpdate::fmt_http_date(SystemTime::UNIX_EPOCH);
        h.insert("retry-after", HeaderValue::from_str(&past).unwrap());
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
        let later = SystemTime::now() + Duration::from_secs(30);
        h.insert(
            "retry-after",
            HeaderValue::from_str(&httpdate::fmt_http_date(later)).unwrap(),
        );
        let d = retry_after(&h).unwrap();
        assert!(
            d > Duration::from_secs(25) && d <= Duration::from_secs(30),
            "{d:?}"
        );
        h.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
    }
}
