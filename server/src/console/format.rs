//! How the console writes rows for operators (times in UTC, from `crate::time`).

use fenceline_app::console::{EventRow, JobRow};

use crate::ledger::{detail_text, Event, Job};
use crate::time::{clock_in, date_clock, date_time, human_duration, Tz};

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

pub(super) fn job_row(now: i64, j: &Job, zone: Tz) -> JobRow {
    JobRow {
        job_id: j.job_id.clone(),
        tenant: j.tenant.clone(),
        idempotency_key: j.idempotency_key.clone(),
        state: j.state.as_str().into(),
        cancellable: j.state.cancellable(),
        terminal: j.state.is_terminal(),
        events: j.next_event_seq - 1,
        epoch: j.owner_epoch,
        attempts: format!("{}/{}", j.attempt_count, j.max_attempts),
        created: date_time(j.created_at, zone),
        updated: ago(now, j.updated_at),
        deadline: if j.state.is_terminal() {
            "—".into()
        } else {
            left(now, j.deadline_at)
        },
        error_code: j.error_code.clone(),
    }
}

/// One event as a timeline row; `with_date` when the row starts a page or a new day (in
/// `zone`), otherwise its time of day is enough.
pub(super) fn event_row(created_at: i64, e: &Event, zone: Tz, with_date: bool) -> EventRow {
    EventRow {
        seq: e.seq,
        at: if with_date {
            date_clock(e.at, zone)
        } else {
            clock_in(e.at, zone)
        },
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

/// A Markdown table cell: pipes and line breaks may not break the table.
pub fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// A value from outside the ledger's own words (a tenant's key, a worker's or a provider's id,
/// an operator's reason, an event's details) in a table cell, as a Markdown code span: shown
/// as written, never a link, an image or markup once pasted into a Markdown tool. Its fence is
/// one backtick longer than the longest run of them inside.
pub fn code(s: &str) -> String {
    let s = cell(s);
    if s.is_empty() {
        return s;
    }
    let longest = s.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{s}{pad}{fence}")
}
