//! Retry timing: exponential back-off with jitter, and the server's `Retry-After` hints.
//!
//! Jitter spreads retries of many sessions that failed together (a 429 burst) so they do not
//! return together. It needs no cryptographic randomness: a hash of the clock and a counter,
//! keyed by std's per-process random `RandomState`, is unpredictable enough.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

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
    /// The delay before retry number `retry` (0 for the first retry): `base * 2^retry`, capped
    /// at `max`, of which a random half is taken away ("equal jitter").
    pub(crate) fn delay(&self, retry: u32) -> Duration {
        let full = self
            .base
            .saturating_mul(2u32.saturating_pow(retry.min(31)))
            .min(self.max);
        let half = full / 2;
        half + half.mul_f64(jitter_fraction())
    }
}

/// A number in `[0, 1)`, different on every call.
fn jitter_fraction() -> f64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let seed = COUNTER.fetch_add(1, Ordering::Relaxed) ^ (u64::from(nanos) << 20);
    let hash = RandomState::new().hash_one(seed);
    // The top 53 bits fill an f64 mantissa exactly.
    (hash >> 11) as f64 / (1u64 << 53) as f64
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
