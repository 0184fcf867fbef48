//! Recurring jobs (`wasmgear schedule`): when a schedule ticks, and which tick to fire.
//!
//! A schedule ticks on a cron expression in a time zone, or every fixed interval (ticks at
//! the multiples of the interval since the Unix epoch, so that every worker computes the
//! same ones). Workers fire it: the tick's job is enqueued with the schedule's name and tick
//! time, and the function's queue refuses a second job for a tick it has had (PROTOCOL.md,
//! "Recurring jobs"). Times are ms since the epoch on Redis' clock.

use std::str::FromStr;
use std::time::Duration;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};

/// The shortest interval of `--every`, and the finest a cron expression can tick.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// The tick of a schedule that never ticks again: where it is moved to (listed, never due;
/// ms since the epoch with 15 digits, the most the library takes).
pub const NEVER_MS: u64 = 999_999_999_999_999;
/// The most ticks walked to find the latest one due (a cron expression that ticks every
/// second, missed for a day, is 86,400).
const MAX_WALK: usize = 200_000;

/// Why a schedule is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The cron expression does not parse.
    #[error(
        "invalid cron expression {expression:?}: {reason} (give 5 fields, MIN HOUR DAY MONTH WEEKDAY, or 6 with seconds first)"
    )]
    Cron {
        /// The expression.
        expression: String,
        /// The parser's message.
        reason: String,
    },
    /// The time zone is not in the IANA database.
    #[error("unknown time zone {0:?} (give an IANA name such as Europe/Paris, or UTC)")]
    TimeZone(String),
    /// The interval is too short.
    #[error("interval {0:?} is shorter than 1s")]
    Interval(Duration),
    /// The expression never ticks again (a year in the past, say).
    #[error("cron expression {0:?} never ticks after now")]
    Never(String),
    /// The name is not usable.
    #[error("schedule name {0:?} must be 1 to 100 letters, digits, '_', '-' or '.'")]
    Name(String),
}

/// When a schedule ticks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Recurrence {
    /// On a cron expression, in a time zone.
    Cron {
        /// The expression as given (5 or 6 fields, or `@daily`...).
        expression: String,
        /// The IANA time zone it is read in.
        tz: String,
    },
    /// Every `every_ms`, at the multiples of it since the epoch.
    Every {
        /// The interval, ms.
        every_ms: u64,
    },
}

/// What to do with ticks missed while no worker ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// Fire once, for the latest tick missed.
    #[default]
    One,
    /// Fire none of them; wait for the next tick.
    None,
}

impl FromStr for CatchUp {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "one" => Ok(CatchUp::One),
            "none" => Ok(CatchUp::None),
            other => Err(format!("--catch-up is one or none, not {other:?}")),
        }
    }
}

/// What the scheduler does with a schedule found due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Firing {
    /// The tick to enqueue a job for, if any.
    pub fire: Option<u64>,
    /// The schedule's next tick after this one (first tick after `now`).
    pub next: u64,
}

/// Checks a schedule's name.
pub fn check_name(name: &str) -> Result<(), ScheduleError> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(ScheduleError::Name(name.to_string()))
    }
}

impl Recurrence {
    /// A cron recurrence, checked: the expression parses and the zone exists.
    pub fn cron(expression: &str, tz: &str) -> Result<Self, ScheduleError> {
        let recurrence = Recurrence::Cron {
            expression: expression.trim().to_string(),
            tz: tz.to_string(),
        };
        recurrence.parsed_cron()?;
        Ok(recurrence)
    }

    /// A fixed interval, checked.
    pub fn every(interval: Duration) -> Result<Self, ScheduleError> {
        if interval < MIN_INTERVAL {
            return Err(ScheduleError::Interval(interval));
        }
        Ok(Recurrence::Every {
            every_ms: interval.as_millis() as u64,
        })
    }

    fn parsed_cron(&self) -> Result<Option<(jiff_cron::Schedule, TimeZone)>, ScheduleError> {
        let Recurrence::Cron { expression, tz } = self else {
            return Ok(None);
        };
        // Five fields (no seconds) as cron has them: tick at second 0.
        let fields = expression.split_whitespace().count();
        let text = if fields == 5 {
            format!("0 {expression}")
        } else {
            expression.clone()
        };
        let schedule = jiff_cron::Schedule::from_str(&text).map_err(|e| {
            // The parser draws a caret under the field on lines of their own: its last line
            // is the sentence.
            let text = e.to_string();
            let reason = text
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty() && l.trim() != "^")
                .unwrap_or(&text)
                .trim()
                .to_string();
            ScheduleError::Cron {
                expression: expression.clone(),
                reason,
            }
        })?;
        let zone = TimeZone::get(tz).map_err(|_| ScheduleError::TimeZone(tz.clone()))?;
        Ok(Some((schedule, zone)))
    }

    /// The first tick strictly after `after_ms`; `None` if it never ticks again.
    pub fn next_after(&self, after_ms: u64) -> Result<Option<u64>, ScheduleError> {
        match self {
            Recurrence::Every { every_ms } => {
                let every = (*every_ms).max(1);
                Ok(Some((after_ms / every + 1) * every))
            }
            Recurrence::Cron { .. } => {
                let Some((schedule, zone)) = self.parsed_cron()? else {
                    return Ok(None);
                };
                let after = Timestamp::from_millisecond(after_ms as i64)
                    .unwrap_or(Timestamp::UNIX_EPOCH)
                    .to_zoned(zone);
                Ok(schedule
                    .after(after)
                    .next()
                    .map(|z| z.timestamp().as_millisecond().max(0) as u64))
            }
        }
    }

    /// What to do at `now_ms` with a schedule whose next tick `next_ms` is due
    /// (`next_ms <= now_ms`): which tick to fire, by `catch_up`, and the next tick.
    pub fn firing(
        &self,
        next_ms: u64,
        now_ms: u64,
        catch_up: CatchUp,
    ) -> Result<Option<Firing>, ScheduleError> {
        let Some(next) = self.next_after(now_ms)? else {
            return Ok(None);
        };
        // The latest tick not after now, walking from the due one.
        let mut latest = next_ms;
        let mut missed = 0usize;
        while let Some(tick) = self.next_after(latest)? {
            if tick > now_ms || missed >= MAX_WALK {
                break;
            }
            latest = tick;
            missed += 1;
        }
        let fire = match catch_up {
            CatchUp::One => Some(latest),
            // Only the due tick, and only if no whole tick has been missed since.
            CatchUp::None => (missed == 0).then_some(next_ms),
        };
        Ok(Some(Firing { fire, next }))
    }
}

/// A recurring job, as `wg:{schedules}:defs` holds it (its input is kept beside it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleDef {
    /// The schedule's name (unique).
    pub name: String,
    /// The function its jobs are of.
    pub function: String,
    /// When it ticks.
    pub recurrence: Recurrence,
    /// Missed ticks: fire once, or not at all.
    #[serde(default)]
    pub catch_up: CatchUp,
    /// Whether it is paused (no tick fires).
    #[serde(default)]
    pub paused: bool,
    /// The jobs' priority.
    #[serde(default)]
    pub priority: i32,
    /// The jobs' attempts (`None`: the plugin's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// The jobs' timeout, ms (`None`: the plugin's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The jobs' uniq key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uniq: Option<String>,
    /// The jobs' tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The jobs' group (see `EnqueueOptions::group`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// When it was added, ms (Redis' clock).
    #[serde(default)]
    pub created_ms: u64,
    /// The W3C traceparent of the span it was added in (set by `schedule_add`): each tick
    /// starts a trace of its own, linked to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// The W3C tracestate that came with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

/// Why a schedule's due tick could not fire, as `wg:{schedules}:errors` holds it until the
/// tick fires (or the schedule is replaced, paused, resumed or removed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleFailure {
    /// Why: the enqueue's refusal, in its words.
    pub error: String,
    /// The tick that could not fire (ms).
    pub tick_ms: u64,
    /// When it first failed (ms, Redis' clock).
    pub since_ms: u64,
    /// How many tries in a row have failed.
    pub failures: u32,
    /// When it is tried again (ms, Redis' clock).
    pub retry_ms: u64,
}

/// How long a schedule whose tick has failed `failures` times in a row waits before the
/// next try: [`SCHEDULE_RETRY_FIRST_MS`](crate::limits::SCHEDULE_RETRY_FIRST_MS), doubled
/// with each failure, at most [`SCHEDULE_RETRY_MAX_MS`](crate::limits::SCHEDULE_RETRY_MAX_MS).
pub fn retry_after(failures: u32) -> Duration {
    use crate::limits::{SCHEDULE_RETRY_FIRST_MS, SCHEDULE_RETRY_MAX_MS};
    let doubled = SCHEDULE_RETRY_FIRST_MS.saturating_mul(1 << failures.saturating_sub(1).min(20));
    Duration::from_millis(doubled.min(SCHEDULE_RETRY_MAX_MS))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> u64 {
        text.parse::<Timestamp>().unwrap().as_millisecond() as u64
    }

    #[test]
    fn intervals_tick_at_multiples_since_the_epoch() {
        let every = Recurrence::every(Duration::from_secs(30)).unwrap();
        assert_eq!(every.next_after(0).unwrap(), Some(30_000));
        assert_eq!(every.next_after(29_999).unwrap(), Some(30_000));
        assert_eq!(every.next_after(30_000).unwrap(), Some(60_000));
        assert!(matches!(
            Recurrence::every(Duration::from_millis(500)),
            Err(ScheduleError::Interval(_))
        ));
    }

    #[test]
    fn cron_reads_five_or_six_fields_in_a_time_zone() {
        let every_5 = Recurrence::cron("*/5 * * * *", "UTC").unwrap();
        let t = ms("2026-11-26T10:07:30Z");
        assert_eq!(
            every_5.next_after(t).unwrap(),
            Some(ms("2026-11-26T10:10:00Z"))
        );
        // 09:00 in Paris is 08:00 UTC in winter, 07:00 UTC in summer.
        let nine = Recurrence::cron("0 9 * * *", "Europe/Paris").unwrap();
        assert_eq!(
            nine.next_after(t).unwrap(),
            Some(ms("2026-11-27T08:00:00Z"))
        );
        assert_eq!(
            nine.next_after(ms("2026-07-01T12:00:00Z")).unwrap(),
            Some(ms("2026-07-02T07:00:00Z"))
        );
        let seconds = Recurrence::cron("*/2 * * * * *", "UTC").unwrap();
        assert_eq!(seconds.next_after(t).unwrap(), Some(t + 2000));
    }

    #[test]
    fn bad_expressions_and_zones_are_refused_in_one_sentence() {
        let error = Recurrence::cron("61 * * * *", "UTC")
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("invalid cron expression \"61 * * * *\": "),
            "{error}"
        );
        assert!(!error.contains('\n') && error.contains("'61'"), "{error}");
        assert!(matches!(
            Recurrence::cron("* * * * *", "Mars/Olympus"),
            Err(ScheduleError::TimeZone(_))
        ));
        assert!(Recurrence::cron("not cron", "UTC").is_err());
        assert!(check_name("nightly-report.v2").is_ok());
        assert!(check_name("bad name").is_err() && check_name("").is_err());
    }

    #[test]
    fn a_failing_tick_waits_longer_each_time_up_to_a_minute() {
        let waits: Vec<u64> = [1, 2, 3, 6, 7, 100, u32::MAX]
            .map(|n| retry_after(n).as_millis() as u64)
            .into();
        assert_eq!(waits, [1000, 2000, 4000, 32_000, 60_000, 60_000, 60_000]);
        assert_eq!(retry_after(0), Duration::from_secs(1));
    }

    #[test]
    fn a_due_tick_fires_and_missed_ones_fire_once_or_not_at_all() {
        let every = Recurrence::every(Duration::from_secs(10)).unwrap();
        // On time: the due tick fires, the next is the one after now.
        let on_time = every
            .firing(100_000, 100_300, CatchUp::None)
            .unwrap()
            .unwrap();
        assert_eq!((on_time.fire, on_time.next), (Some(100_000), 110_000));
        // Three ticks missed: one fires (the latest), or none.
        let late = every
            .firing(100_000, 135_000, CatchUp::One)
            .unwrap()
            .unwrap();
        assert_eq!((late.fire, late.next), (Some(130_000), 140_000));
        let skipped = every
            .firing(100_000, 135_000, CatchUp::None)
            .unwrap()
            .unwrap();
        assert_eq!((skipped.fire, skipped.next), (None, 140_000));
    }
}
