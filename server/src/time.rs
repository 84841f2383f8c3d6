//! Time as Fenceline writes and reads it, on `chrono`, for the API, the console, the exports
//! and the CLI alike. Every instant that decides anything is the database's clock, stored as
//! microseconds since the Unix epoch (UTC); this module only turns those into text for people
//! and programs, and text typed by operators back into instants.

use chrono::{DateTime, NaiveDate, NaiveDateTime, SecondsFormat, TimeZone, Utc};
pub use chrono_tz::Tz;

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

/// A name that is not an IANA time zone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a time zone: use an IANA name such as UTC, Europe/Paris or America/New_York")]
pub struct BadZone(pub String);

/// The IANA time zone called `name` (`UTC`, `Europe/Paris`), matched case-insensitively.
pub fn zone(name: &str) -> Result<Tz, BadZone> {
    let name = name.trim();
    name.parse::<Tz>()
        .ok()
        .or_else(|| {
            chrono_tz::TZ_VARIANTS
                .iter()
                .copied()
                .find(|tz| tz.name().eq_ignore_ascii_case(name))
        })
        .ok_or_else(|| BadZone(name.to_owned()))
}

/// An instant in `tz`.
pub fn in_zone(us: i64, tz: Tz) -> DateTime<Tz> {
    instant(us).with_timezone(&tz)
}

/// Date, time to the second and zone, for people: `2026-11-30 10:15:02 CET`.
pub fn date_time(us: i64, tz: Tz) -> String {
    in_zone(us, tz).format("%Y-%m-%d %H:%M:%S %Z").to_string()
}

/// Date and time to the millisecond in `tz`, without the zone (said once per table):
/// `2026-11-30 10:15:02.123`.
pub fn date_clock(us: i64, tz: Tz) -> String {
    in_zone(us, tz).format("%Y-%m-%d %H:%M:%S%.3f").to_string()
}

/// Time of day to the millisecond in `tz`: `10:15:02.123`.
pub fn clock_in(us: i64, tz: Tz) -> String {
    in_zone(us, tz).format("%H:%M:%S%.3f").to_string()
}

/// The calendar day of an instant in `tz`, to tell when a timeline crosses midnight.
pub fn day_in(us: i64, tz: Tz) -> NaiveDate {
    in_zone(us, tz).date_naive()
}

/// Parses what an operator typed as an instant, reading a time without an offset as a wall
/// time in `tz` (a browser's `datetime-local` input sends local wall time; a trailing `Z`
/// means UTC). A wall time that a clock change skips is refused; one that happens twice is its
/// earlier instant.
pub fn parse_instant_in(text: &str, tz: Tz) -> Result<DateTime<Utc>, BadTime> {
    let t = text.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(t) {
        return Ok(at.with_timezone(&Utc));
    }
    let (t, tz) = match t.strip_suffix('Z') {
        Some(utc) => (utc, chrono_tz::UTC),
        None => (t, tz),
    };
    let naive = [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
    ]
    .iter()
    .find_map(|f| NaiveDateTime::parse_from_str(t, f).ok())
    .or_else(|| {
        NaiveDate::parse_from_str(t, "%Y-%m-%d")
            .ok()
            .map(|d| d.and_time(chrono::NaiveTime::MIN))
    })
    .ok_or_else(|| BadTime(text.to_owned()))?;
    tz.from_local_datetime(&naive)
        .earliest()
        .map(|at| at.with_timezone(&Utc))
        .ok_or_else(|| BadTime(text.to_owned()))
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
    parse_instant_in(text, chrono_tz::UTC)
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
        assert_eq!(
            clock_in(1_700_000_000_123_456, chrono_tz::UTC),
            "22:13:20.123"
        );
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
    fn zones_are_iana_names_and_times_name_their_zone() {
        assert_eq!(zone("Europe/Paris"), Ok(chrono_tz::Europe::Paris));
        assert_eq!(zone("europe/paris"), Ok(chrono_tz::Europe::Paris));
        assert_eq!(zone("UTC"), Ok(chrono_tz::UTC));
        assert!(zone("Mars/Olympus").is_err());
        assert!(zone("").is_err());
        let at = 1_700_000_000_123_456;
        assert_eq!(date_time(at, chrono_tz::UTC), "2023-11-14 22:13:20 UTC");
        assert_eq!(
            date_time(at, chrono_tz::Europe::Paris),
            "2023-11-14 23:13:20 CET"
        );
        assert_eq!(
            date_time(at, chrono_tz::Asia::Tokyo),
            "2023-11-15 07:13:20 JST"
        );
        assert_eq!(clock_in(at, chrono_tz::Asia::Tokyo), "07:13:20.123");
        assert_eq!(
            date_clock(at, chrono_tz::America::New_York),
            "2023-11-14 17:13:20.123"
        );
    }

    #[test]
    fn typed_wall_times_are_read_in_the_chosen_zone() {
        let paris = chrono_tz::Europe::Paris;
        let ms = |t: &str| parse_instant_in(t, paris).map(unix_ms);
        assert_eq!(ms("2023-11-14T23:13:20"), Ok(1_700_000_000_000));
        assert_eq!(ms("2023-11-14 23:13:20"), Ok(1_700_000_000_000));
        // An explicit offset or Z wins over the zone.
        assert_eq!(ms("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
        assert_eq!(ms("2023-11-14T23:13:20+01:00"), Ok(1_700_000_000_000));
        // Midnight in Paris is 23:00 UTC the day before.
        assert_eq!(ms("2023-11-15"), Ok(1_700_002_800_000));
        // 02:30 on the night clocks go forward does not exist in Paris.
        assert!(ms("2026-03-29T02:30").is_err());
        // 02:30 on the night clocks go back happens twice: the first one.
        assert_eq!(
            parse_instant_in("2026-10-25T02:30", paris).map(|t| t.to_rfc3339()),
            Ok("2026-10-25T00:30:00+00:00".to_owned())
        );
        assert!(ms("2026-02-31").is_err());
        assert!(ms("2026-02-28T25:00").is_err());
        assert!(ms("soon").is_err());
    }

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(human_duration(850_000), "850ms");
        assert_eq!(human_duration(4_200_000), "4.2s");
        assert_eq!(human_duration(185_000_000), "3m 5s");
        assert_eq!(human_duration(-2_000_000), "-2.0s");
    }
}
