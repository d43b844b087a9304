//! Five-field cron expressions (minute hour day-of-month month day-of-week) evaluated in an
//! IANA time zone with `jiff`, which the context engine already uses for dates: the cron
//! crates (`croner`, `cron`) need `chrono` and `chrono-tz`, a second time library and a second
//! time-zone database. Lists, ranges, steps (`*/15`, `1-30/5`), month and weekday names, `7`
//! for Sunday, and the `@hourly` … `@yearly` macros. When both day fields are restricted a day
//! matching either one matches, as in Vixie cron.

use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::Timestamp;

/// Days searched ahead for the next match: "29 February on a Monday" recurs within 28 years.
const MAX_SEARCH_DAYS: u32 = 366 * 29;

/// A parsed cron expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cron {
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    /// Whether day-of-month / day-of-week were restricted (not `*`).
    days_restricted: bool,
    weekdays_restricted: bool,
}

/// Why an expression is not a cron expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct CronError(String);

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

impl Cron {
    /// Parses `text` (five fields, or a macro).
    pub(crate) fn parse(text: &str) -> Result<Self, CronError> {
        let text = text.trim();
        let expanded = match text.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *".to_string(),
            "@monthly" => "0 0 1 * *".to_string(),
            "@weekly" => "0 0 * * 0".to_string(),
            "@daily" | "@midnight" => "0 0 * * *".to_string(),
            "@hourly" => "0 * * * *".to_string(),
            other if other.starts_with('@') => {
                return Err(CronError(format!("unknown cron macro {text:?}")))
            }
            other => other.to_string(),
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields[..] else {
            return Err(CronError(format!(
                "{text:?} has {} fields; a cron expression has five (minute hour day month \
                 weekday)",
                fields.len()
            )));
        };
        let weekdays = field(weekday, "weekday", 0, 7, &WEEKDAYS, 0)?;
        // 7 is Sunday too.
        let weekdays = (weekdays & 0x7f) | ((weekdays >> 7) & 1);
        Ok(Self {
            minutes: field(minute, "minute", 0, 59, &[], 0)?,
            hours: field(hour, "hour", 0, 23, &[], 0)? as u32,
            days: field(day, "day of month", 1, 31, &[], 0)? as u32,
            months: field(month, "month", 1, 12, &MONTHS, 1)? as u16,
            weekdays: weekdays as u8,
            days_restricted: day != "*",
            weekdays_restricted: weekday != "*",
        })
    }

    /// The first matching minute strictly after `after_ms` (ms since the epoch), in `zone`, as
    /// ms since the epoch. A local time a daylight-saving change skips fires just after the
    /// change; one that occurs twice fires once, at its first occurrence. `None` when nothing
    /// matches within [`MAX_SEARCH_DAYS`] (e.g. 31 February).
    pub(crate) fn next_after(&self, after_ms: u64, zone: &TimeZone) -> Option<u64> {
        let after = Timestamp::from_millisecond(i64::try_from(after_ms).ok()?).ok()?;
        let local = after.to_zoned_datetime(zone.clone()).datetime();
        let mut day = local.date();
        // The first candidate minute is the one after `after`'s.
        let mut from = (local.hour() as u32, local.minute() as u32 + 1);
        for _ in 0..MAX_SEARCH_DAYS {
            if self.day_matches(day) {
                for hour in from.0..24 {
                    if self.hours & (1 << hour) == 0 {
                        continue;
                    }
                    let first = if hour == from.0 { from.1 } else { 0 };
                    for minute in first..60 {
                        if self.minutes & (1 << minute) == 0 {
                            continue;
                        }
                        let ms = to_ms(day, hour, minute, zone)?;
                        // A gap moves a skipped time later; a fold may map an earlier local
                        // time to an instant already past.
                        if ms > after_ms {
                            return Some(ms);
                        }
                    }
                }
            }
            day = day.tomorrow().ok()?;
            from = (0, 0);
        }
        None
    }

    fn day_matches(&self, day: Date) -> bool {
        if self.months & (1 << day.month()) == 0 {
            return false;
        }
        let by_day = self.days & (1 << day.day()) != 0;
        let by_weekday = self.weekdays & (1 << day.weekday().to_sunday_zero_offset()) != 0;
        match (self.days_restricted, self.weekdays_restricted) {
            (true, true) => by_day || by_weekday,
            (true, false) => by_day,
            (false, true) => by_weekday,
            (false, false) => true,
        }
    }
}

/// `day` at `hour:minute` in `zone`, as ms since the epoch (a time in a gap moves past it).
fn to_ms(day: Date, hour: u32, minute: u32, zone: &TimeZone) -> Option<u64> {
    let dt = DateTime::new(
        day.year(),
        day.month(),
        day.day(),
        hour as i8,
        minute as i8,
        0,
        0,
    )
    .ok()?;
    let zoned = dt.to_zoned_datetime(zone.clone()).ok()?;
    u64::try_from(zoned.timestamp().as_millisecond()).ok()
}

/// One field as a bit set over `min..=max`: `*`, `n`, `a-b`, `*/s`, `a-b/s`, `n/s`, comma
/// lists; `names` (lower case) stand for `name_base + index`.
fn field(
    text: &str,
    what: &str,
    min: u32,
    max: u32,
    names: &[&str],
    name_base: u32,
) -> Result<u64, CronError> {
    let value = |s: &str| -> Result<u32, CronError> {
        let lower = s.to_ascii_lowercase();
        if let Some(i) = names.iter().position(|n| *n == lower) {
            return Ok(name_base + i as u32);
        }
        let n: u32 = s
            .parse()
            .map_err(|_| CronError(format!("{what} {s:?} is not a number")))?;
        if n < min || n > max {
            return Err(CronError(format!("{what} {n} is outside {min}-{max}")));
        }
        Ok(n)
    };
    let mut bits = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| CronError(format!("{what} step {s:?} must be 1 or more")))?;
                (r, step)
            }
            None => (part, 1),
        };
        let (lo, hi) = match range {
            "*" => (min, max),
            r => match r.split_once('-') {
                Some((a, b)) => (value(a)?, value(b)?),
                // `n/s` runs from n to the end.
                None if step > 1 => (value(r)?, max),
                None => {
                    let n = value(r)?;
                    (n, n)
                }
            },
        };
        if lo > hi {
            return Err(CronError(format!("{what} range {range:?} runs backwards")));
        }
        let mut n = lo;
        while n <= hi {
            bits |= 1 << n;
            n += step;
        }
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(zone: &str, y: i16, mo: i8, d: i8, h: i8, mi: i8) -> u64 {
        let dt = DateTime::new(y, mo, d, h, mi, 0, 0).expect("a date");
        let z = dt
            .to_zoned_datetime(TimeZone::get(zone).expect("a zone"))
            .expect("zoned");
        z.timestamp().as_millisecond() as u64
    }

    fn next(expr: &str, zone: &str, after: u64) -> Option<u64> {
        Cron::parse(expr)
            .expect("parses")
            .next_after(after, &TimeZone::get(zone).expect("a zone"))
    }

    #[test]
    fn the_next_minute_is_strictly_after() {
        let t = at("UTC", 2026, 12, 7, 9, 0);
        assert_eq!(
            next("0 9 * * *", "UTC", t),
            Some(at("UTC", 2026, 12, 8, 9, 0))
        );
        assert_eq!(next("0 9 * * *", "UTC", t - 1), Some(t));
        assert_eq!(next("*/15 * * * *", "UTC", t), Some(t + 15 * 60_000));
        assert_eq!(next("@hourly", "UTC", t), Some(t + 3_600_000));
    }

    #[test]
    fn names_ranges_lists_and_both_day_fields() {
        // Monday 7 December 2026: the next weekday 9:30 after Friday evening is Monday.
        let fri = at("UTC", 2026, 12, 4, 18, 0);
        assert_eq!(
            next("30 9 * * mon-fri", "UTC", fri),
            Some(at("UTC", 2026, 12, 7, 9, 30))
        );
        // Day 1 or any Sunday (either matches when both are given); 7 is Sunday.
        assert_eq!(
            next("0 0 1 * 7", "UTC", fri),
            Some(at("UTC", 2026, 12, 6, 0, 0))
        );
        assert_eq!(
            next("0 12 1,15 jan,jul *", "UTC", fri),
            Some(at("UTC", 2027, 1, 1, 12, 0))
        );
        assert_eq!(
            next("0 0 29 2 *", "UTC", fri),
            Some(at("UTC", 2028, 2, 29, 0, 0))
        );
        assert_eq!(next("0 0 31 2 *", "UTC", fri), None);
    }

    #[test]
    fn local_time_follows_the_zone_across_daylight_saving() {
        // Berlin springs forward on 29 March 2026 (02:00 → 03:00): 02:30 does not exist that
        // day and fires just after the change; the next day at 02:30 local again.
        let before = at("Europe/Berlin", 2026, 3, 29, 1, 0);
        let first = next("30 2 * * *", "Europe/Berlin", before).expect("a time");
        assert_eq!(first, at("Europe/Berlin", 2026, 3, 29, 3, 30));
        assert_eq!(
            next("30 2 * * *", "Europe/Berlin", first),
            Some(at("Europe/Berlin", 2026, 3, 30, 2, 30))
        );
        // It falls back on 25 October 2026: 02:30 happens twice and fires once.
        let before = at("Europe/Berlin", 2026, 10, 25, 1, 0);
        let once = next("30 2 * * *", "Europe/Berlin", before).expect("a time");
        let after = next("30 2 * * *", "Europe/Berlin", once).expect("a time");
        assert!(after - once > 23 * 3_600_000, "{once} {after}");
    }

    #[test]
    fn bad_expressions_say_what_is_wrong() {
        for (bad, says) in [
            ("* * * *", "five"),
            ("61 * * * *", "outside 0-59"),
            ("* * * foo *", "not a number"),
            ("*/0 * * * *", "step"),
            ("5-1 * * * *", "backwards"),
            ("@often", "macro"),
            ("", "five"),
        ] {
            let e = Cron::parse(bad).expect_err(bad).to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }
}
