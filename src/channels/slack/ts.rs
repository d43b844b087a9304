//! Slack message timestamps (`ts`, e.g. `1700000000.000100`): a message's id within its
//! conversation, and its time. Compared as numbers (seconds, then the fraction as
//! microseconds), never as strings.

/// `ts` as microseconds since the epoch, for ordering; 0 when it is not a timestamp.
pub(crate) fn key(ts: &str) -> u64 {
    let (secs, frac) = ts.split_once('.').unwrap_or((ts, ""));
    let Ok(secs) = secs.parse::<u64>() else {
        return 0;
    };
    // The fraction is six digits on Slack; pad or cut to microseconds.
    let digits: String = frac.chars().chain(std::iter::repeat('0')).take(6).collect();
    let micros = digits.parse::<u64>().unwrap_or(0);
    secs.saturating_mul(1_000_000).saturating_add(micros)
}

/// `ts` in milliseconds since the epoch.
pub(crate) fn millis(ts: &str) -> u64 {
    key(ts) / 1_000
}

/// Whether `ts` is a well-formed Slack timestamp.
pub(crate) fn valid(ts: &str) -> bool {
    let (secs, frac) = ts.split_once('.').unwrap_or((ts, "0"));
    !secs.is_empty()
        && secs.len() <= 12
        && frac.len() <= 9
        && secs.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_order_as_numbers() {
        assert!(key("1700000000.000100") < key("1700000000.000101"));
        assert!(key("999999999.999999") < key("1000000000.000000"));
        assert_eq!(key("1700000000.1"), 1_700_000_000_100_000);
        assert_eq!(millis("1700000000.123456"), 1_700_000_000_123);
        assert_eq!(key("garbage"), 0);
        assert!(valid("1700000000.000100") && valid("17"));
        assert!(!valid("") && !valid("1.2.3") && !valid("x.1"));
    }
}
