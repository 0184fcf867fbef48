//! Durations and points in time as people write them: `250ms`, `10s`, `2h`, `1d`;
//! `1767225600` or `2026-01-01T00:00:00Z`. Used by the CLI and by plugin manifests.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};

/// Milliseconds since the Unix epoch on this machine's clock (used only for display and
/// client-side deadlines; the scripts use Redis' own clock).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Parses a duration: `250ms`, `10s`, `5m`, `2h`, `1d`, or a plain number of seconds.
pub fn parse_duration(text: &str) -> anyhow::Result<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().with_context(|| {
        format!("invalid duration {text:?}: expected e.g. 250ms, 10s, 5m, 2h, 1d")
    })?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86400.0,
        _ => bail!("invalid duration {text:?}: unknown unit {unit:?} (use ms, s, m, h or d)"),
    };
    Duration::try_from_secs_f64(seconds)
        .with_context(|| format!("invalid duration {text:?}: out of range"))
}

/// Parses a point in time: seconds since the Unix epoch (`1767225600`) or a UTC timestamp
/// `YYYY-MM-DDTHH:MM:SSZ` (`2026-01-01T00:00:00Z`).
pub fn parse_time(text: &str) -> anyhow::Result<SystemTime> {
    let text = text.trim();
    let bad = || {
        anyhow::anyhow!(
            "invalid time {text:?}: expected seconds since the Unix epoch or YYYY-MM-DDTHH:MM:SSZ (UTC)"
        )
    };
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(UNIX_EPOCH + Duration::from_secs(seconds));
    }
    let b = text.as_bytes();
    let shape_ok = b.len() == 20
        && b[4] == b'-'
        && b[7] == b'-'
        && (b[10] == b'T' || b[10] == b' ')
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'Z';
    if !shape_ok {
        return Err(bad());
    }
    let num = |range: std::ops::Range<usize>| -> anyhow::Result<i64> {
        text[range].parse::<i64>().map_err(|_| bad())
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(bad());
    }
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second;
    let seconds = u64::try_from(seconds).map_err(|_| bad())?;
    Ok(UNIX_EPOCH + Duration::from_secs(seconds))
}

/// The UTC date `YYYY-MM-DD` of a day counted from 1970-01-01 (day 0).
pub fn date_of_day(days: i64) -> String {
    // The inverse of the day count in `parse_time` (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The day (counted from 1970-01-01) of a UTC date `YYYY-MM-DD`.
pub fn day_of_date(text: &str) -> anyhow::Result<i64> {
    let time = parse_time(&format!("{}T00:00:00Z", text.trim()))
        .map_err(|_| anyhow::anyhow!("invalid date {text:?}: expected YYYY-MM-DD"))?;
    let seconds = time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Ok((seconds / 86_400) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_and_refuse_garbage() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        for bad in ["", "s", "10x", "-1s", "1e999s"] {
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
        assert!(day_of_date("2026-13-01").is_err());
        assert!(day_of_date("yesterday").is_err());
    }

    #[test]
    fn times_parse_as_epoch_seconds_or_utc_timestamps() {
        let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_secs();
        assert_eq!(secs(parse_time("1767225600").unwrap()), 1_767_225_600);
        assert_eq!(
            secs(parse_time("2026-01-01T00:00:00Z").unwrap()),
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
        ] {
            assert!(parse_time(bad).is_err(), "{bad:?} parsed");
        }
    }
}
