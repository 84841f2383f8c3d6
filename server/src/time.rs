//! Time as Fenceline writes and reads it, on `chrono`, for the API, the console, the exports
//! and the CLI alike. Every instant that decides anything is the database's clock, stored as
//! microseconds since the Unix epoch (UTC); this module only turns those into text for people
//! and programs, and text typed by operators back into instants.

use chrono::{DateTime, NaiveDate, NaiveDateTime, SecondsFormat, Utc};

/// Database-clock microseconds as a `chrono` instant (saturating at chrono's range).
pub fn instant(us: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(us).unwrap_or(if us < 0 {
        DateTime::<Utc>::MIN_UTC
    } else {
        DateTime::<Utc>::MAX_UTC
    })
}

/// RFC 3339 with microseconds, for programs: `2023-11-14T22:13:20.123456Z`.
pub fn rfc3339_us(us: i64) -> String {
    instant(us).to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Date and time to the second, for people: `2026-11-30 09:15:02` (UTC).
pub fn short_time(us: i64) -> String {
    instant(us).format("%Y-%m-%d %H:%M:%S").to_string()
}

/// Time of day to the millisecond, for rows of one timeline: `09:15:02.123`.
pub fn clock(us: i64) -> String {
    instant(us).format("%H:%M:%S%.3f").to_string()
}

/// A span of microseconds, short: `850ms`, `4.2s`, `3m 5s`, `2h 10m`, `3d 4h`.
pub fn human_duration(us: i64) -> String {
    let ms = us / 1000;
    let sign = if ms < 0 { "-" } else { "" };
    let ms = ms.abs();
    if ms < 1000 {
        format!("{sign}{ms}ms")
    } else if ms < 60_000 {
        format!("{sign}{:.1}s", ms as f64 / 1000.0)
    } else if ms < 3_600_000 {
        format!("{sign}{}m {}s", ms / 60_000, ms % 60_000 / 1000)
    } else if ms < 86_400_000 {
        format!("{sign}{}h {}m", ms / 3_600_000, ms % 3_600_000 / 60_000)
    } else {
        format!(
            "{sign}{}d {}h",
            ms / 86_400_000,
            ms % 86_400_000 / 3_600_000
        )
    }
}

/// Text an operator typed (or a browser's date and time input sent) that is not a time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a date and time: use 2026-11-30, 2026-11-30T09:15 or 2026-11-30T09:15:30")]
pub struct BadTime(pub String);

/// Parses `2026-11-30`, `2026-11-30T09:15`, `2026-11-30 09:15:30` or full RFC 3339 as an instant
/// (UTC unless an offset is given). Impossible dates and times (`2026-02-31`, hour 25) are
/// refused, not rolled over.
pub fn parse_instant(text: &str) -> Result<DateTime<Utc>, BadTime> {
    let t = text.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(t) {
        return Ok(at.with_timezone(&Utc));
    }
    let t = t.strip_suffix('Z').unwrap_or(t);
    for format in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(at) = NaiveDateTime::parse_from_str(t, format) {
            return Ok(at.and_utc());
        }
    }
    NaiveDate::parse_from_str(t, "%Y-%m-%d")
        .map(|d| d.and_time(chrono::NaiveTime::MIN).and_utc())
        .map_err(|_| BadTime(text.to_owned()))
}

/// Milliseconds since the Unix epoch of an instant.
pub fn unix_ms(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339_us(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            rfc3339_us(1_700_000_000_123_456),
            "2023-11-14T22:13:20.123456Z"
        );
        assert_eq!(
            rfc3339_us(951_782_400_000_000),
            "2000-02-29T00:00:00.000000Z"
        );
        assert_eq!(rfc3339_us(-1), "1969-12-31T23:59:59.999999Z");
        assert_eq!(short_time(1_700_000_000_123_456), "2023-11-14 22:13:20");
        assert_eq!(clock(1_700_000_000_123_456), "22:13:20.123");
    }

    #[test]
    fn operators_can_type_times_as_browsers_send_them() {
        let ms = |t: &str| parse_instant(t).map(unix_ms);
        assert_eq!(ms("1970-01-01T00:00"), Ok(0));
        assert_eq!(ms("2023-11-14T22:13:20"), Ok(1_700_000_000_000));
        assert_eq!(ms("2023-11-14 22:13:20Z"), Ok(1_700_000_000_000));
        assert_eq!(ms("2023-11-14T23:13:20+01:00"), Ok(1_700_000_000_000));
        assert_eq!(ms("2000-02-29"), Ok(951_782_400_000));
        assert!(ms("yesterday").is_err());
        assert!(ms("2023-13-01").is_err());
    }

    #[test]
    fn impossible_dates_and_times_are_refused_not_rolled_over() {
        assert!(parse_instant("2026-02-31").is_err());
        assert!(parse_instant("2026-02-28T25:00").is_err());
        assert!(parse_instant("2025-02-29").is_err());
        assert!(parse_instant("2024-02-29").is_ok());
    }

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(human_duration(850_000), "850ms");
        assert_eq!(human_duration(4_200_000), "4.2s");
        assert_eq!(human_duration(185_000_000), "3m 5s");
        assert_eq!(human_duration(-2_000_000), "-2.0s");
    }
}
