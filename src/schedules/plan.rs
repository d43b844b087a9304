//! When a job is due and what a due job does: plain functions over times in ms, so the
//! scheduler's decisions are tested without a clock.

use jiff::tz::TimeZone;

use super::cron::Cron;
use crate::config::{Missed, ScheduleConfig};

/// How often a job is due.
#[derive(Debug, Clone)]
pub(crate) enum Cadence {
    /// On a cron expression, in a time zone.
    Cron(Cron, TimeZone),
    /// Every `every_ms`, counted from `anchor_ms` (when the job was first stored), so a
    /// restart does not shift it.
    Every { every_ms: u64, anchor_ms: u64 },
}

impl Cadence {
    /// The cadence of `spec` (checked already), stored first at `created_at_ms`.
    pub(crate) fn of(spec: &ScheduleConfig, created_at_ms: u64) -> Result<Self, String> {
        match (&spec.cron, spec.every_ms) {
            (Some(cron), _) => {
                let zone = match &spec.time_zone {
                    Some(z) => crate::context::sources::time_zone(z).map_err(|e| e.to_string())?,
                    None => TimeZone::UTC,
                };
                Ok(Self::Cron(
                    Cron::parse(cron).map_err(|e| e.to_string())?,
                    zone,
                ))
            }
            (None, Some(every_ms)) if every_ms > 0 => Ok(Self::Every {
                every_ms,
                anchor_ms: created_at_ms,
            }),
            _ => Err("neither cron nor every_ms".into()),
        }
    }

    /// The first due time strictly after `t`.
    pub(crate) fn next_after(&self, t: u64) -> Option<u64> {
        match self {
            Self::Cron(cron, zone) => cron.next_after(t, zone),
            Self::Every {
                every_ms,
                anchor_ms,
            } => {
                if t < *anchor_ms {
                    return anchor_ms.checked_add(*every_ms);
                }
                let periods = (t - anchor_ms) / every_ms + 1;
                periods
                    .checked_mul(*every_ms)
                    .and_then(|d| anchor_ms.checked_add(d))
            }
        }
    }
}

/// What a job whose due time has come does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Run for `due_ms`; then it is next due at `next_due_ms`.
    Run {
        due_ms: u64,
        next_due_ms: Option<u64>,
    },
    /// Record `due_ms` as skipped (missed while down, policy `skip`); next due at
    /// `next_due_ms`.
    Skip {
        due_ms: u64,
        next_due_ms: Option<u64>,
    },
}

/// What a job due at `due_ms` does at `now_ms`, the scheduler having started at `started_ms`.
/// A due time before the start was missed while the server was down: it runs once, or is
/// skipped, by `missed`, however many due times passed. Either way the next due time is the
/// first after now, so a late scheduler never runs a job in a burst.
pub(crate) fn step(
    cadence: &Cadence,
    missed: Missed,
    due_ms: u64,
    now_ms: u64,
    started_ms: u64,
) -> Step {
    let next_due_ms = cadence.next_after(now_ms.max(due_ms));
    if due_ms < started_ms && missed == Missed::Skip {
        Step::Skip {
            due_ms,
            next_due_ms,
        }
    } else {
        Step::Run {
            due_ms,
            next_due_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;

    #[test]
    fn intervals_keep_their_phase() {
        let c = Cadence::Every {
            every_ms: 10 * MIN,
            anchor_ms: 1_000,
        };
        assert_eq!(c.next_after(0), Some(1_000 + 10 * MIN));
        assert_eq!(c.next_after(1_000), Some(1_000 + 10 * MIN));
        assert_eq!(c.next_after(1_000 + 10 * MIN), Some(1_000 + 20 * MIN));
        assert_eq!(c.next_after(1_000 + 25 * MIN), Some(1_000 + 30 * MIN));
        let far = Cadence::Every {
            every_ms: u64::MAX / 2,
            anchor_ms: u64::MAX / 2,
        };
        assert_eq!(far.next_after(u64::MAX - 1), None, "no overflow");
    }

    #[test]
    fn a_missed_run_runs_once_or_is_skipped_and_the_next_is_after_now() {
        let c = Cadence::Every {
            every_ms: MIN,
            anchor_ms: 0,
        };
        // Due at 1 min, down until 10.5 min: one run, next at 11 min.
        let (due, now, start) = (MIN, 10 * MIN + MIN / 2, 10 * MIN);
        assert_eq!(
            step(&c, Missed::RunOnce, due, now, start),
            Step::Run {
                due_ms: due,
                next_due_ms: Some(11 * MIN)
            }
        );
        assert_eq!(
            step(&c, Missed::Skip, due, now, start),
            Step::Skip {
                due_ms: due,
                next_due_ms: Some(11 * MIN)
            }
        );
        // Due while running: it runs, whatever the policy.
        assert_eq!(
            step(&c, Missed::Skip, 11 * MIN, 11 * MIN, start),
            Step::Run {
                due_ms: 11 * MIN,
                next_due_ms: Some(12 * MIN)
            }
        );
    }
}
