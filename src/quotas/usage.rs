//! One subject's quota usage and its arithmetic: a message token bucket in integer
//! thousandths (no float drift across restarts) and a token count per UTC day. Plain data,
//! stored as it is (`store/quotas.rs`).

use serde::{Deserialize, Serialize};

/// Milliseconds of a UTC day.
pub(crate) const DAY_MS: u64 = 86_400_000;
/// Milliseconds of a message window (the unit of `messages_per_minute`).
pub(crate) const MINUTE_MS: u64 = 60_000;
/// Fixed-point scale of the bucket: thousandths of a message.
const MILLI: u64 = 1_000;

/// What one subject (a sender, chat, account or agent) has used.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct QuotaUsage {
    /// The message bucket's level in thousandths of a message, as of `bucket_at_ms`.
    pub(crate) bucket_milli: u64,
    /// When the level was measured; 0: never, the bucket is full.
    pub(crate) bucket_at_ms: u64,
    /// The UTC day (`ms / DAY_MS`) `tokens_today` counts.
    pub(crate) day: u64,
    /// Model tokens used on `day`.
    pub(crate) tokens_today: u64,
    /// Messages refused over the quota, ever (since the last reset).
    pub(crate) messages_over: u64,
    /// When the subject was last sent a notice (0: never).
    pub(crate) noticed_at_ms: u64,
}

/// A rule's limits, as the arithmetic needs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Messages per minute; `None`: no message limit.
    pub(crate) per_minute: Option<u32>,
    /// The bucket's size in messages.
    pub(crate) burst: u32,
    /// Tokens per day; `None`: no token limit.
    pub(crate) tokens_per_day: Option<u64>,
}

/// Which limit a message is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Over {
    /// Messages per minute.
    Messages,
    /// Tokens per day.
    Tokens,
}

impl Over {
    /// Its name in answers and metrics.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Over::Messages => "messages",
            Over::Tokens => "tokens",
        }
    }

    /// How long a notice lasts: one per window.
    fn window_ms(self) -> u64 {
        match self {
            Over::Messages => MINUTE_MS,
            Over::Tokens => DAY_MS,
        }
    }
}

impl QuotaUsage {
    /// The bucket's level at `now_ms`, in thousandths (full for a new subject; a clock that
    /// went back refills nothing).
    fn level(&self, limits: &Limits, now_ms: u64) -> u64 {
        let cap = u64::from(limits.burst) * MILLI;
        let Some(per_minute) = limits.per_minute else {
            return cap;
        };
        if self.bucket_at_ms == 0 {
            return cap;
        }
        let elapsed = now_ms.saturating_sub(self.bucket_at_ms);
        // per_minute messages a minute: per_minute * MILLI thousandths per MINUTE_MS.
        let refill = u128::from(elapsed) * u128::from(per_minute) * u128::from(MILLI)
            / u128::from(MINUTE_MS);
        u64::try_from(u128::from(self.bucket_milli) + refill)
            .unwrap_or(u64::MAX)
            .min(cap)
    }

    /// Tokens used today as of `now_ms`.
    pub(crate) fn tokens_on(&self, now_ms: u64) -> u64 {
        if self.day == now_ms / DAY_MS {
            self.tokens_today
        } else {
            0
        }
    }

    /// Which limit a new message at `now_ms` is over, if any (nothing is taken).
    pub(crate) fn over(&self, limits: &Limits, now_ms: u64) -> Option<Over> {
        if limits.per_minute.is_some() && self.level(limits, now_ms) < MILLI {
            return Some(Over::Messages);
        }
        match limits.tokens_per_day {
            Some(max) if self.tokens_on(now_ms) >= max => Some(Over::Tokens),
            _ => None,
        }
    }

    /// Takes one message from the bucket at `now_ms` (to zero if it is short).
    pub(crate) fn take_message(&mut self, limits: &Limits, now_ms: u64) {
        if limits.per_minute.is_none() {
            return;
        }
        self.bucket_milli = self.level(limits, now_ms).saturating_sub(MILLI);
        self.bucket_at_ms = now_ms.max(1);
    }

    /// Adds `tokens` used at `now_ms` (a new UTC day starts from zero).
    pub(crate) fn add_tokens(&mut self, tokens: u64, now_ms: u64) {
        let today = now_ms / DAY_MS;
        if self.day != today {
            self.day = today;
            self.tokens_today = 0;
        }
        self.tokens_today = self.tokens_today.saturating_add(tokens);
    }

    /// Counts a refused message; true when it should get the notice (the first over its
    /// limit in the limit's window).
    pub(crate) fn refuse(&mut self, over: Over, now_ms: u64) -> bool {
        self.messages_over = self.messages_over.saturating_add(1);
        let due = self.noticed_at_ms == 0
            || now_ms.saturating_sub(self.noticed_at_ms) >= over.window_ms()
            || (over == Over::Tokens && self.noticed_at_ms / DAY_MS != now_ms / DAY_MS);
        if due {
            self.noticed_at_ms = now_ms.max(1);
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        per_minute: Some(6),
        burst: 3,
        tokens_per_day: Some(100),
    };

    #[test]
    fn a_burst_then_one_message_per_refill_interval() {
        let mut u = QuotaUsage::default();
        let t = 1_000_000;
        for _ in 0..3 {
            assert_eq!(u.over(&LIMITS, t), None);
            u.take_message(&LIMITS, t);
        }
        assert_eq!(u.over(&LIMITS, t), Some(Over::Messages));
        // 6 a minute: one every 10 s.
        assert_eq!(u.over(&LIMITS, t + 9_999), Some(Over::Messages));
        assert_eq!(u.over(&LIMITS, t + 10_000), None);
        u.take_message(&LIMITS, t + 10_000);
        assert_eq!(u.over(&LIMITS, t + 10_000), Some(Over::Messages));
        // Refills to the burst, not beyond.
        assert_eq!(u.level(&LIMITS, t + 3_600_000), 3_000);
    }

    #[test]
    fn a_clock_that_goes_back_refills_nothing() {
        let mut u = QuotaUsage::default();
        for _ in 0..3 {
            u.take_message(&LIMITS, 50_000);
        }
        assert_eq!(u.over(&LIMITS, 10_000), Some(Over::Messages));
    }

    #[test]
    fn tokens_count_per_utc_day() {
        let mut u = QuotaUsage::default();
        let day2 = 2 * DAY_MS + 5;
        u.add_tokens(60, day2);
        assert_eq!(u.over(&LIMITS, day2), None);
        u.add_tokens(40, day2 + 1);
        assert_eq!(u.over(&LIMITS, day2 + 1), Some(Over::Tokens));
        assert_eq!(u.over(&LIMITS, 3 * DAY_MS), None, "a new day");
        u.add_tokens(1, 3 * DAY_MS);
        assert_eq!(u.tokens_on(3 * DAY_MS), 1);
    }

    #[test]
    fn a_notice_once_per_window() {
        let mut u = QuotaUsage::default();
        assert!(u.refuse(Over::Messages, 1_000));
        assert!(!u.refuse(Over::Messages, 30_000));
        assert!(u.refuse(Over::Messages, 61_000));
        assert!(
            !u.refuse(Over::Tokens, 62_000),
            "within the day of the last notice"
        );
        assert!(u.refuse(Over::Tokens, DAY_MS + 1));
        assert_eq!(u.messages_over, 5);
    }

    #[test]
    fn no_message_limit_never_refuses_messages() {
        let limits = Limits {
            per_minute: None,
            burst: 0,
            tokens_per_day: None,
        };
        let mut u = QuotaUsage::default();
        for t in 0..100 {
            u.take_message(&limits, t);
            assert_eq!(u.over(&limits, t), None);
        }
    }
}
