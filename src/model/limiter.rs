//! [`ModelLimiter`]: what one model may be sent at once and per minute, shared by every
//! session, so thousands of sessions meet a provider's quota as one client.
//!
//! Three limits, checked before each request:
//! - a **pause**: after a 429 every request to the model waits, for the server's
//!   `Retry-After` (or a back-off doubling per 429 in a row, from `base_pause`), at most
//!   `max_pause`. Sessions do not each retry alone into the same quota;
//! - an **adaptive concurrency limit** (AIMD): `[model] max_connections` (at most
//!   [`MAX_ADAPTIVE_CONCURRENCY`]) until the first 429, then halved from the number of requests in flight (once per congestion
//!   event: 429s of requests sent before the cut do not cut again), and raised by one per
//!   success while it is what holds requests back;
//! - optional **rates**: requests and tokens per minute, as token buckets holding
//!   [`RATE_BURST_SECONDS`] of quota. A request costs its prompt plus the answer's reserve.
//!
//! Time is `tokio::time`, so tests run it on paused virtual time. Waiters are bounded by the
//! callers (the turn engine's `lanes.max_concurrent_turns`): the limiter holds no queue, a
//! waiter sleeps on a timer or a [`Notify`].

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Ceiling of the adaptive concurrency limit (the largest `lanes.max_concurrent_turns`): in
/// effect no limit until the provider first answers 429.
pub(crate) const MAX_ADAPTIVE_CONCURRENCY: u32 = 100_000;

/// The adaptive limit never falls below this: one request probes whether the quota is back.
pub(crate) const MIN_ADAPTIVE_CONCURRENCY: u32 = 1;

/// Share of the requests in flight the limit is cut to on a 429 (multiplicative decrease).
pub(crate) const DECREASE_FACTOR: f64 = 0.5;

/// Seconds of quota a rate bucket holds: a burst may use up to this much of a minute's
/// allowance at once, the rest is spread over the minute.
pub(crate) const RATE_BURST_SECONDS: u32 = 6;

/// Shortest sleep for a rate bucket: rounding must not turn a wait into a busy loop.
const MIN_RATE_WAIT: Duration = Duration::from_millis(1);

/// Longest single sleep for a rate bucket; the waiter looks again after it.
const MAX_RATE_WAIT: Duration = Duration::from_secs(60);

/// What a [`ModelLimiter`] enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LimiterSettings {
    /// Requests per minute; 0 = no limit.
    pub requests_per_minute: u32,
    /// Tokens (prompt plus answer reserve) per minute; 0 = no limit.
    pub tokens_per_minute: u64,
    /// Pause after a 429 without `Retry-After`; doubles per 429 in a row.
    pub base_pause: Duration,
    /// Longest pause, whatever the server asks.
    pub max_pause: Duration,
    /// Requests in flight at once, at most: the adaptive limit starts there and never grows
    /// past it (`[model] max_connections`).
    pub max_concurrency: u32,
}

impl LimiterSettings {
    /// The adaptive limit's ceiling: `max_concurrency`, within 1..=[`MAX_ADAPTIVE_CONCURRENCY`].
    fn ceiling(&self) -> u32 {
        self.max_concurrency
            .clamp(MIN_ADAPTIVE_CONCURRENCY, MAX_ADAPTIVE_CONCURRENCY)
    }
}

/// A token bucket: `level` of `capacity` units, refilled at `per_sec`.
#[derive(Debug)]
struct Bucket {
    capacity: f64,
    per_sec: f64,
    level: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket for `per_minute` units, or none when the limit is off.
    fn per_minute(per_minute: u64, now: Instant) -> Option<Self> {
        if per_minute == 0 {
            return None;
        }
        let per_sec = per_minute as f64 / 60.0;
        let capacity = (per_sec * f64::from(RATE_BURST_SECONDS)).max(1.0);
        Some(Self {
            capacity,
            per_sec,
            level: capacity,
            at: now,
        })
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.level = (self.level + elapsed * self.per_sec).min(self.capacity);
        self.at = now;
    }

    /// How long until `cost` may be taken. A cost above the capacity waits for a full bucket
    /// and then drives the level negative, so later requests repay it.
    fn wait_for(&self, cost: f64) -> Option<Duration> {
        let need = cost.min(self.capacity);
        (self.level < need).then(|| {
            Duration::try_from_secs_f64((need - self.level) / self.per_sec)
                .unwrap_or(MAX_RATE_WAIT)
                .clamp(MIN_RATE_WAIT, MAX_RATE_WAIT)
        })
    }
}

#[derive(Debug)]
struct State {
    in_flight: u32,
    /// The adaptive concurrency limit (fractional so decreases keep their precision).
    limit: f64,
    /// Bumped by every decrease: a 429 of a request granted before it does not cut again.
    epoch: u64,
    paused_until: Option<Instant>,
    /// 429s in a row since the last success.
    streak: u32,
    requests: Option<Bucket>,
    tokens: Option<Bucket>,
}

/// Why a request cannot go yet.
enum Wait {
    Until(Instant),
    /// The concurrency limit is reached: wait for a request to finish.
    Slot,
}

impl State {
    fn try_grant(&mut self, now: Instant, cost: u64) -> Result<u64, Wait> {
        if let Some(until) = self.paused_until {
            if now < until {
                return Err(Wait::Until(until));
            }
            self.paused_until = None;
        }
        if f64::from(self.in_flight) >= self.limit.floor() {
            return Err(Wait::Slot);
        }
        let cost = cost as f64;
        let mut wait = None::<Duration>;
        for (bucket, units) in [(&mut self.requests, 1.0), (&mut self.tokens, cost)] {
            if let Some(bucket) = bucket {
                bucket.refill(now);
                wait = wait.max(bucket.wait_for(units));
            }
        }
        if let Some(wait) = wait {
            return Err(Wait::Until(now + wait));
        }
        if let Some(b) = &mut self.requests {
            b.level -= 1.0;
        }
        if let Some(b) = &mut self.tokens {
            b.level -= cost;
        }
        self.in_flight += 1;
        Ok(self.epoch)
    }

    fn finish(&mut self, epoch: u64, outcome: Outcome, settings: &LimiterSettings, now: Instant) {
        let flight = self.in_flight;
        self.in_flight = self.in_flight.saturating_sub(1);
        match outcome {
            Outcome::Other => {}
            Outcome::Success => {
                self.streak = 0;
                // Raise only a limit that holds requests back: one far above use means nothing.
                if f64::from(flight) >= self.limit.floor() {
                    self.limit = (self.limit + 1.0).min(f64::from(settings.ceiling()));
                }
            }
            Outcome::RateLimited(retry_after) => {
                self.streak = self.streak.saturating_add(1);
                let backoff = crate::backoff::doubling(
                    settings.base_pause,
                    settings.max_pause,
                    self.streak.saturating_sub(1),
                );
                let pause = retry_after.unwrap_or(backoff).min(settings.max_pause);
                let until = now + pause;
                self.paused_until = Some(self.paused_until.map_or(until, |u| u.max(until)));
                if epoch == self.epoch {
                    let cut = (self.limit.min(f64::from(flight)) * DECREASE_FACTOR).floor();
                    self.limit = cut.max(f64::from(MIN_ADAPTIVE_CONCURRENCY));
                    self.epoch += 1;
                    tracing::warn!(
                        limit = self.limit,
                        pause_ms = pause.as_millis() as u64,
                        "the provider rate-limits this model; pausing and lowering concurrency"
                    );
                }
            }
        }
    }
}

/// How a request ended, as the limiter learns from it.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    Success,
    /// A 429, with the server's `Retry-After`.
    RateLimited(Option<Duration>),
    /// Any other end (an error, a cancelled call): nothing learned.
    Other,
}

#[derive(Debug)]
struct Shared {
    settings: LimiterSettings,
    // A std mutex: every critical section is a few arithmetic steps, never across an await.
    state: Mutex<State>,
    notify: Notify,
}

/// One model's limiter. Clones share the same limits.
#[derive(Debug, Clone)]
pub(crate) struct ModelLimiter {
    shared: Arc<Shared>,
}

impl ModelLimiter {
    /// A limiter enforcing `settings`, with full rate buckets.
    pub(crate) fn new(settings: LimiterSettings) -> Self {
        let now = Instant::now();
        Self {
            shared: Arc::new(Shared {
                settings,
                state: Mutex::new(State {
                    in_flight: 0,
                    limit: f64::from(settings.ceiling()),
                    epoch: 0,
                    paused_until: None,
                    streak: 0,
                    requests: Bucket::per_minute(u64::from(settings.requests_per_minute), now),
                    tokens: Bucket::per_minute(settings.tokens_per_minute, now),
                }),
                notify: Notify::new(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until a request costing `tokens` may be sent. Dropping the future gives up the
    /// wait; the permit must be held until the answer is read.
    pub(crate) async fn acquire(&self, tokens: u64) -> LimiterPermit {
        loop {
            // Registered before the check, so a slot freed in between is not missed.
            let notified = self.shared.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let wait = match self.state().try_grant(Instant::now(), tokens) {
                Ok(epoch) => {
                    return LimiterPermit {
                        limiter: self.clone(),
                        epoch,
                        outcome: Outcome::Other,
                    }
                }
                Err(wait) => wait,
            };
            match wait {
                Wait::Until(at) => tokio::time::sleep_until(at).await,
                Wait::Slot => notified.await,
            }
        }
    }

    /// The adaptive concurrency limit now.
    #[cfg(test)]
    pub(crate) fn concurrency_limit(&self) -> u32 {
        self.state().limit as u32
    }

    /// Requests granted and not yet finished.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> u32 {
        self.state().in_flight
    }

    /// When requests may go again after a 429, if they are paused.
    #[cfg(test)]
    pub(crate) fn paused_until(&self) -> Option<Instant> {
        self.state().paused_until.filter(|u| *u > Instant::now())
    }
}

/// The right to send one request; tell it how the request ended, or drop it (nothing
/// learned).
#[derive(Debug)]
pub(crate) struct LimiterPermit {
    limiter: ModelLimiter,
    epoch: u64,
    outcome: Outcome,
}

impl LimiterPermit {
    /// The request was answered: the limit may grow.
    pub(crate) fn succeeded(mut self) {
        self.outcome = Outcome::Success;
    }

    /// The provider answered 429, asking to wait `retry_after`: every request to the model
    /// pauses and the limit is cut.
    pub(crate) fn rate_limited(mut self, retry_after: Option<Duration>) {
        self.outcome = Outcome::RateLimited(retry_after);
    }
}

impl Drop for LimiterPermit {
    fn drop(&mut self) {
        let shared = &self.limiter.shared;
        let grown = {
            let mut state = self.limiter.state();
            let before = state.limit.floor();
            state.finish(self.epoch, self.outcome, &shared.settings, Instant::now());
            (state.limit.floor() - before).max(0.0) as usize
        };
        // One waiter for the freed slot, and one per slot the limit grew by.
        for _ in 0..=grown {
            shared.notify.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(rpm: u32, tpm: u64) -> LimiterSettings {
        LimiterSettings {
            requests_per_minute: rpm,
            tokens_per_minute: tpm,
            base_pause: Duration::from_millis(500),
            max_pause: Duration::from_secs(20),
            max_concurrency: MAX_ADAPTIVE_CONCURRENCY,
        }
    }

    /// Starts `n` tasks that each take a permit, hold it for `hold`, and report it succeeded.
    fn spawn_requests(
        limiter: &ModelLimiter,
        n: usize,
        hold: Duration,
    ) -> Vec<tokio::task::JoinHandle<Instant>> {
        (0..n)
            .map(|_| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    let permit = limiter.acquire(1).await;
                    let granted = Instant::now();
                    tokio::time::sleep(hold).await;
                    permit.succeeded();
                    granted
                })
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn unlimited_until_the_first_429() {
        let limiter = ModelLimiter::new(settings(0, 0));
        let start = Instant::now();
        let tasks = spawn_requests(&limiter, 500, Duration::from_secs(2));
        for task in tasks {
            assert_eq!(task.await.unwrap(), start, "nothing waits");
        }
        assert_eq!(limiter.concurrency_limit(), MAX_ADAPTIVE_CONCURRENCY);
        assert_eq!(limiter.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn past_max_connections_requests_wait_their_turn_and_the_limit_never_grows_past_it() {
        let limiter = ModelLimiter::new(LimiterSettings {
            max_concurrency: 2,
            ..settings(0, 0)
        });
        let start = Instant::now();
        let hold = Duration::from_secs(2);
        let mut granted = Vec::new();
        for task in spawn_requests(&limiter, 6, hold) {
            granted.push(task.await.unwrap() - start);
        }
        granted.sort();
        // Two at a time, each batch after the one before: queued, none refused.
        assert_eq!(
            granted,
            [0, 0, 2, 2, 4, 4].map(Duration::from_secs).to_vec()
        );
        assert_eq!(
            limiter.concurrency_limit(),
            2,
            "successes do not raise it past the cap"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_429_pauses_everyone_for_retry_after_and_halves_the_flight() {
        let limiter = ModelLimiter::new(settings(0, 0));
        let permits: Vec<_> =
            futures_util::future::join_all((0..40).map(|_| limiter.acquire(1))).await;
        let start = Instant::now();
        let mut permits = permits.into_iter();
        permits
            .next()
            .unwrap()
            .rate_limited(Some(Duration::from_secs(3)));
        assert_eq!(limiter.concurrency_limit(), 20, "half of the 40 in flight");
        // The other 39 were sent before the cut: their 429s pause but do not cut again.
        for p in permits.by_ref().take(9) {
            p.rate_limited(Some(Duration::from_secs(1)));
        }
        assert_eq!(limiter.concurrency_limit(), 20);
        assert_eq!(limiter.paused_until(), Some(start + Duration::from_secs(3)));
        drop(permits);
        // New requests wait out the longest pause asked for.
        let tasks = spawn_requests(&limiter, 30, Duration::from_secs(1));
        let mut granted = Vec::new();
        for task in tasks {
            granted.push(task.await.unwrap());
        }
        let resumed = start + Duration::from_secs(3);
        assert!(granted.iter().all(|g| *g >= resumed), "{granted:?}");
        // At most 20 in the first second after the pause; the rest after those finish.
        let first = granted
            .iter()
            .filter(|g| **g < resumed + Duration::from_secs(1))
            .count();
        assert_eq!(first, 20, "{granted:?}");
        assert!(
            limiter.concurrency_limit() > 20,
            "successes raise the limit"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_retry_after_the_pause_doubles_per_429_in_a_row() {
        let limiter = ModelLimiter::new(settings(0, 0));
        let start = Instant::now();
        limiter.acquire(1).await.rate_limited(None);
        assert_eq!(
            limiter.paused_until(),
            Some(start + Duration::from_millis(500))
        );
        assert_eq!(limiter.concurrency_limit(), MIN_ADAPTIVE_CONCURRENCY);
        let p = limiter.acquire(1).await;
        assert_eq!(Instant::now(), start + Duration::from_millis(500));
        p.rate_limited(None);
        assert_eq!(
            limiter.paused_until(),
            Some(Instant::now() + Duration::from_secs(1))
        );
        // A huge Retry-After is capped at max_pause.
        limiter
            .acquire(1)
            .await
            .rate_limited(Some(Duration::from_secs(3_600)));
        assert_eq!(
            limiter.paused_until(),
            Some(Instant::now() + Duration::from_secs(20))
        );
        // A success resets the streak and grows the limit by one.
        limiter.acquire(1).await.succeeded();
        assert_eq!(limiter.concurrency_limit(), 2);
        let t = Instant::now();
        limiter.acquire(1).await.rate_limited(None);
        assert_eq!(limiter.paused_until(), Some(t + Duration::from_millis(500)));
    }

    #[tokio::test(start_paused = true)]
    async fn requests_per_minute_spread_over_the_minute() {
        // 60 per minute: a burst of RATE_BURST_SECONDS, then one per second.
        let limiter = ModelLimiter::new(settings(60, 0));
        let start = Instant::now();
        let tasks = spawn_requests(&limiter, 12, Duration::ZERO);
        let mut granted = Vec::new();
        for task in tasks {
            granted.push(task.await.unwrap() - start);
        }
        granted.sort();
        let burst = RATE_BURST_SECONDS as usize;
        assert!(granted[..burst].iter().all(|d| d.is_zero()), "{granted:?}");
        for (i, d) in granted[burst..].iter().enumerate() {
            let expected = Duration::from_secs(i as u64 + 1);
            assert!(
                *d >= expected && *d < expected + Duration::from_millis(10),
                "request {} at {d:?}, expected {expected:?}",
                burst + i
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_per_minute_count_each_requests_cost() {
        // 6,000 tokens per minute: 600 in the bucket, 100 per second.
        let limiter = ModelLimiter::new(settings(0, 6_000));
        let start = Instant::now();
        limiter.acquire(500).await.succeeded();
        assert_eq!(Instant::now(), start);
        limiter.acquire(500).await.succeeded();
        assert_eq!(
            Instant::now(),
            start + Duration::from_secs(4),
            "400 more needed"
        );
        // A request larger than the bucket waits for a full one, then leaves a debt.
        limiter.acquire(10_000).await.succeeded();
        assert_eq!(Instant::now(), start + Duration::from_secs(10));
        limiter.acquire(100).await.succeeded();
        assert_eq!(Instant::now(), start + Duration::from_secs(10 + 95));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_wait_or_permit_frees_its_slot() {
        let limiter = ModelLimiter::new(settings(0, 0));
        let first = limiter.acquire(1).await;
        first.rate_limited(Some(Duration::ZERO));
        assert_eq!(limiter.concurrency_limit(), 1);
        let held = limiter.acquire(1).await;
        // A second caller waits for the slot; giving up the wait leaves nothing behind.
        let waiting = tokio::time::timeout(Duration::from_secs(1), limiter.acquire(1)).await;
        assert!(waiting.is_err(), "the slot is taken");
        drop(held);
        assert_eq!(limiter.in_flight(), 0);
        let again = tokio::time::timeout(Duration::from_secs(1), limiter.acquire(1)).await;
        assert!(again.is_ok(), "a dropped permit frees its slot");
    }
}
