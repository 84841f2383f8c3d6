//! How the console writes times, durations and rows for operators (UTC).

use fenceline_app::console::{EventRow, JobRow};

use super::charts::human_duration;
use crate::http::time::rfc3339_us;
use crate::ledger::{detail_text, Event, Job};

/// `2026-11-30 09:15:02` (UTC, seconds).
pub(crate) fn short_time(us: i64) -> String {
    let full = rfc3339_us(us);
    format!("{} {}", &full[..10], &full[11..19])
}

/// `09:15:02.123`.
pub(super) fn clock(us: i64) -> String {
    rfc3339_us(us)[11..23].to_owned()
}

pub(super) fn ago(now: i64, us: i64) -> String {
    let d = now - us;
    if d < 0 {
        format!("in {}", human_duration(-d))
    } else {
        format!("{} ago", human_duration(d))
    }
}

pub(super) fn left(now: i64, deadline: i64) -> String {
    if deadline <= now {
        format!("passed {} ago", human_duration(now - deadline))
    } else {
        format!("{} left", human_duration(deadline - now))
    }
}

pub(super) fn job_row(now: i64, j: &Job) -> JobRow {
    JobRow {
        job_id: j.job_id.clone(),
        tenant: j.tenant.clone(),
        state: j.state.as_str().into(),
        epoch: j.owner_epoch,
        attempts: format!("{}/{}", j.attempt_count, j.max_attempts),
        created: short_time(j.created_at),
        updated: ago(now, j.updated_at),
        deadline: if j.state.is_terminal() {
            "—".into()
        } else {
            left(now, j.deadline_at)
        },
        error_code: j.error_code.clone(),
    }
}

/// Parses `2026-11-30T09:15`, `2026-11-30T09:15:30` or `2026-11-30` as UTC milliseconds.
pub(super) fn parse_utc_ms(s: &str) -> Option<i64> {
    let s = s.trim().trim_end_matches('Z');
    let (date, time) = s.split_once(['T', ' ']).unwrap_or((s, "00:00"));
    let mut d = date.split('-').map(|p| p.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.split(':').map(|p| p.parse::<f64>());
    let (hh, mm) = (t.next()?.ok()?, t.next().unwrap_or(Ok(0.0)).ok()?);
    let ss = t.next().unwrap_or(Ok(0.0)).ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return None;
    }
    // Days from civil (H. Hinnant).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400_000 + ((hh * 3600.0 + mm * 60.0 + ss) * 1000.0) as i64)
}

pub(super) fn event_row(created_at: i64, e: &Event) -> EventRow {
    EventRow {
        seq: e.seq,
        at: clock(e.at),
        offset: format!("+{}", human_duration(e.at - created_at)),
        kind: e.kind.to_string(),
        epoch: e.epoch,
        actor: e.actor.clone(),
        delivery: e.delivery.as_ref().map(|d| {
            format!(
                "{} r{} #{}",
                d.message_id.chars().take(8).collect::<String>(),
                d.receive_count,
                d.handle_hash
            )
        }),
        attempt_no: e.attempt_no,
        deadline_left: e.deadline_left_ms.map(|ms| {
            if ms <= 0 {
                "passed".into()
            } else {
                human_duration(ms * 1000)
            }
        }),
        detail: detail_text(&e.detail),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_can_type_times_as_browsers_send_them() {
        assert_eq!(parse_utc_ms("1970-01-01T00:00"), Some(0));
        assert_eq!(parse_utc_ms("2023-11-14T22:13:20"), Some(1_700_000_000_000));
        assert_eq!(parse_utc_ms("2000-02-29"), Some(951_782_400_000));
        assert_eq!(parse_utc_ms("yesterday"), None);
        assert_eq!(parse_utc_ms("2023-13-01"), None);
    }
}
