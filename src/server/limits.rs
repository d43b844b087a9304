//! Per-client rate limits (`[server.rate_limit]`): a GCRA token bucket per client (governor),
//! keyed by IP or by API key. Over the limit a request gets 429 with `Retry-After`.
//!
//! The set of tracked clients is bounded by `max_clients`: when it is full, idle clients
//! (whose buckets are full again) are forgotten, at most once per [`SHRINK_INTERVAL`]; if it is
//! still full, new clients share one overflow bucket, so a flood of addresses cannot grow
//! memory.

use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter as Gcra};

use crate::config::{RateLimitBy, RateLimitConfig};

/// Shortest pause between two sweeps of idle clients.
pub(super) const SHRINK_INTERVAL: Duration = Duration::from_secs(1);

/// Who a request is counted against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Client {
    Ip(IpAddr),
    /// The holder of the API key (the server has one key).
    ApiKey,
    /// Peers not identifiable (no socket address) and clients past `max_clients`.
    Shared,
}

/// The rate limiter of one server.
pub(crate) struct RateLimiter {
    gcra: DefaultKeyedRateLimiter<Client>,
    by: RateLimitBy,
    max_clients: usize,
    last_shrink: Mutex<Instant>,
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter")
            .field("by", &self.by)
            .field("max_clients", &self.max_clients)
            .finish_non_exhaustive()
    }
}

impl RateLimiter {
    /// A limiter for `config`, or `None` when rate limiting is off.
    pub(crate) fn from_config(config: &RateLimitConfig) -> Option<Self> {
        let rate = NonZeroU32::new(config.requests_per_second)?;
        let burst = NonZeroU32::new(config.burst).unwrap_or(rate);
        Some(Self {
            gcra: Gcra::dashmap(Quota::per_second(rate).allow_burst(burst)),
            by: config.by,
            max_clients: config.max_clients.max(1),
            last_shrink: Mutex::new(Instant::now()),
        })
    }

    /// Counts one request from `ip` (`authenticated`: it carried the valid API key). `Err`
    /// holds how long the client should wait.
    pub(crate) fn check(&self, ip: Option<IpAddr>, authenticated: bool) -> Result<(), Duration> {
        let mut client = match (self.by, authenticated, ip) {
            (RateLimitBy::Key, true, _) => Client::ApiKey,
            (_, _, Some(ip)) => Client::Ip(ip),
            (_, _, None) => Client::Shared,
        };
        if self.gcra.len() >= self.max_clients {
            self.shrink();
            if self.gcra.len() >= self.max_clients {
                client = Client::Shared;
            }
        }
        self.gcra
            .check_key(&client)
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }

    fn shrink(&self) {
        let Ok(mut last) = self.last_shrink.try_lock() else {
            return;
        };
        if last.elapsed() >= SHRINK_INTERVAL {
            self.gcra.retain_recent();
            *last = Instant::now();
        }
    }
}

/// `Retry-After` seconds for a wait: rounded up, at least 1.
pub(super) fn retry_after_secs(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(rps: u32, burst: u32, by: RateLimitBy, max_clients: usize) -> RateLimiter {
        RateLimiter::from_config(&RateLimitConfig {
            requests_per_second: rps,
            burst,
            by,
            max_clients,
        })
        .unwrap()
    }

    #[test]
    fn bursts_then_limits_per_client() {
        let l = limiter(1, 3, RateLimitBy::Ip, 100);
        let a = Some(IpAddr::from([10, 0, 0, 1]));
        let b = Some(IpAddr::from([10, 0, 0, 2]));
        for _ in 0..3 {
            assert!(l.check(a, false).is_ok());
        }
        let wait = l.check(a, false).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        assert!(
            l.check(b, false).is_ok(),
            "another client has its own bucket"
        );
    }

    #[test]
    fn by_key_shares_one_bucket_for_the_key_holder() {
        let l = limiter(1, 1, RateLimitBy::Key, 100);
        assert!(l.check(Some(IpAddr::from([1, 1, 1, 1])), true).is_ok());
        assert!(l.check(Some(IpAddr::from([2, 2, 2, 2])), true).is_err());
        assert!(l.check(Some(IpAddr::from([2, 2, 2, 2])), false).is_ok());
    }

    #[test]
    fn clients_past_the_cap_share_a_bucket() {
        let l = limiter(1, 1, RateLimitBy::Ip, 2);
        assert!(l.check(Some(IpAddr::from([1, 0, 0, 1])), false).is_ok());
        assert!(l.check(Some(IpAddr::from([1, 0, 0, 2])), false).is_ok());
        assert!(l.check(Some(IpAddr::from([1, 0, 0, 3])), false).is_ok());
        assert!(l.check(Some(IpAddr::from([1, 0, 0, 4])), false).is_err());
        assert!(l.gcra.len() <= 3);
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1_500)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(3)), 3);
    }
}
