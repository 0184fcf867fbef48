//! Durations and points in time as people write them: `250ms`, `10s`, `2h 30m`, `1d`;
//! `1767225600` or `2026-01-01T00:00:00Z`; and back again (`2m 5s`, `3d 4h`). Used by the
//! CLI, the client's statistics and plugin manifests. The parsing, the calendar and the
//! printing are jiff's; this module only picks the formats.

use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use jiff::civil::Date;
use jiff::fmt::friendly::{Designator, FractionalUnit, SpanPrinter};
use jiff::{SignedDuration, Span, SpanRelativeTo, SpanRound, Timestamp, Unit};

/// The length of a statistics day: the client, the CLI and the scripts (which are given
/// this number) all count days as `milliseconds since the epoch / DAY_MS`, in UTC.
pub const DAY_MS: u64 = 86_400_000;

/// Milliseconds since the Unix epoch on this machine's clock (used only for display and
/// client-side deadlines; the scripts use Redis' own clock).
pub fn now_ms() -> u64 {
    u64::try_from(Timestamp::now().as_millisecond()).unwrap_or(0)
}

/// Today's statistics day (UTC) on this machine's clock.
pub fn today() -> i64 {
    Timestamp::now().as_millisecond().div_euclid(DAY_MS as i64)
}

/// Parses a duration: `250ms`, `10s`, `1.5s`, `5m`, `2h 30m`, `1d` (24 hours), or a plain
/// number of seconds.
pub fn parse_duration(text: &str) -> anyhow::Result<Duration> {
    let text = text.trim();
    let expected = "expected e.g. 250ms, 10s, 5m, 2h 30m or 1d";
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let seconds: f64 = text
            .parse()
            .with_context(|| format!("invalid duration {text:?}: {expected}"))?;
        return Duration::try_from_secs_f64(seconds)
            .with_context(|| format!("invalid duration {text:?}: out of range"));
    }
    let span: Span = text
        .parse()
        .with_context(|| format!("invalid duration {text:?}: {expected}"))?;
    if span.get_years() != 0 || span.get_months() != 0 || span.get_weeks() != 0 {
        bail!(
            "invalid duration {text:?}: years, months and weeks vary in length; use d, h, m, s or ms"
        );
    }
    let signed = span
        .to_duration(SpanRelativeTo::days_are_24_hours())
        .with_context(|| format!("invalid duration {text:?}: out of range"))?;
    Duration::try_from(signed).with_context(|| format!("invalid duration {text:?}: negative"))
}

/// Parses a point in time: seconds since the Unix epoch (`1767225600`) or an RFC 3339
/// timestamp with its offset (`2026-01-01T00:00:00Z`, `2026-01-01T01:00:00+01:00`).
/// Times before 1970 are refused.
pub fn parse_time(text: &str) -> anyhow::Result<SystemTime> {
    let text = text.trim();
    let bad = || {
        anyhow::anyhow!(
            "invalid time {text:?}: expected seconds since the Unix epoch or an RFC 3339 time such as 2026-01-01T00:00:00Z"
        )
    };
    let time = match text.parse::<u64>() {
        Ok(seconds) => i64::try_from(seconds)
            .ok()
            .and_then(|s| Timestamp::from_second(s).ok())
            .ok_or_else(bad)?,
        Err(_) => text.parse::<Timestamp>().map_err(|_| bad())?,
    };
    if time < Timestamp::UNIX_EPOCH {
        return Err(bad());
    }
    Ok(SystemTime::from(time))
}

/// The UTC date `YYYY-MM-DD` of a statistics day (day 0 is 1970-01-01); a day outside the
/// calendar's range is shown as its number.
pub fn date_of_day(days: i64) -> String {
    days.checked_mul(86_400)
        .and_then(|seconds| Timestamp::from_second(seconds).ok())
        .map(|t| t.to_zoned(jiff::tz::TimeZone::UTC).date().to_string())
        .unwrap_or_else(|| format!("day {days}"))
}

/// The statistics day of a UTC date `YYYY-MM-DD`.
pub fn day_of_date(text: &str) -> anyhow::Result<i64> {
    let text = text.trim();
    let date: Date = text
        .parse()
        .map_err(|_| anyhow::anyhow!("invalid date {text:?}: expected YYYY-MM-DD"))?;
    let seconds = date
        .to_zoned(jiff::tz::TimeZone::UTC)
        .with_context(|| format!("invalid date {text:?}: out of range"))?
        .timestamp()
        .as_second();
    Ok(seconds.div_euclid(86_400))
}

/// A duration for people, as precise as its size calls for: `250ms`, `12.3s`, `5m 3s`,
/// `2h 5m`, `3d 4h`.
pub fn human(duration: Duration) -> String {
    let Ok(signed) = SignedDuration::try_from(duration) else {
        return format!("{}s", duration.as_secs());
    };
    let printer = SpanPrinter::new().designator(Designator::Compact);
    if duration < Duration::from_secs(1) {
        return format!("{}ms", duration.as_millis());
    }
    if duration < Duration::from_secs(60) {
        return printer
            .fractional(Some(FractionalUnit::Second))
            .precision(Some(1))
            .duration_to_string(&signed);
    }
    let (largest, smallest) = match duration.as_secs() {
        0..3_600 => (Unit::Minute, Unit::Second),
        3_600..86_400 => (Unit::Hour, Unit::Minute),
        _ => (Unit::Day, Unit::Hour),
    };
    let rounded = Span::try_from(signed).and_then(|span| {
        span.round(
            SpanRound::new()
                .largest(largest)
                .smallest(smallest)
                .days_are_24_hours(),
        )
    });
    match rounded {
        Ok(span) => printer.span_to_string(&span),
        Err(_) => printer.duration_to_string(&signed),
    }
}

/// `ms` (milliseconds since the epoch) as `2026-11-26 00:41:02 UTC`.
pub fn utc_text(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

/// How far `ms` (milliseconds since the epoch) is from now: `in 5m 3s` or `2.0s ago`.
pub fn in_or_ago(ms: u64) -> String {
    let now = now_ms();
    match ms >= now {
        true => format!("in {}", human(Duration::from_millis(ms - now))),
        false => format!("{} ago", human(Duration::from_millis(now - ms))),
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    #[test]
    fn durations_parse_with_units_and_refuse_garbage() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("2h 30m").unwrap(), Duration::from_secs(9000));
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86_400));
        assert_eq!(parse_duration("7d").unwrap(), Duration::from_secs(604_800));
        for bad in ["", "s", "10x", "-1s", "1e999s", "1mo", "1y", "2w", "1.2.3"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn days_and_dates_convert_both_ways() {
        assert_eq!(date_of_day(0), "1970-01-01");
        assert_eq!(date_of_day(20_414), "2025-11-22");
        for day in [0, 59, 60, 365, 11_016, 20_454, 30_000] {
            assert_eq!(day_of_date(&date_of_day(day)).unwrap(), day);
        }
        assert_eq!(date_of_day(i64::MAX), format!("day {}", i64::MAX));
        assert!(day_of_date("2026-13-01").is_err());
        assert!(day_of_date("2026-02-30").is_err());
        assert!(day_of_date("yesterday").is_err());
        assert_eq!(today(), (now_ms() / DAY_MS) as i64);
    }

    #[test]
    fn times_parse_as_epoch_seconds_or_rfc3339() {
        let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_secs();
        assert_eq!(secs(parse_time("1767225600").unwrap()), 1_767_225_600);
        assert_eq!(
            secs(parse_time("2026-01-01T00:00:00Z").unwrap()),
            1_767_225_600
        );
        assert_eq!(
            secs(parse_time("2026-01-01T01:00:00+01:00").unwrap()),
            1_767_225_600
        );
        assert_eq!(
            secs(parse_time("2024-02-29T12:34:56Z").unwrap()),
            1_709_210_096
        );
        assert_eq!(secs(parse_time("1970-01-01T00:00:00Z").unwrap()), 0);
        for bad in [
            "",
            "tomorrow",
            "2026-13-01T00:00:00Z",
            "2026-01-01T00:00:00",
            "1969-12-31T23:59:59Z",
            "99999999999999999999",
        ] {
            assert!(parse_time(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn durations_print_as_precisely_as_their_size_calls_for() {
        let cases = [
            (Duration::from_millis(250), "250ms"),
            (Duration::from_millis(12_345), "12.3s"),
            (Duration::from_secs(303), "5m 3s"),
            (Duration::from_secs(2 * 3600 + 5 * 60 + 10), "2h 5m"),
            (Duration::from_secs(3 * 86_400 + 4 * 3600 + 99), "3d 4h"),
        ];
        for (duration, text) in cases {
            assert_eq!(human(duration), text);
        }
        assert!(in_or_ago(now_ms() + 3_600_000).starts_with("in "));
        assert!(in_or_ago(1_000).ends_with(" ago"));
    }
}
