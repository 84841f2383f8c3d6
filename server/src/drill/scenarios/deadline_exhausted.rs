//! Renewals stop at the job's deadline.

use super::common::*;
use crate::faults::{Arm, FaultPoint as F};
use crate::job::detail;
use crate::job::{EventKind as K, JobState};
use crate::ledger::Event;

pub(super) async fn run(ctx: &Ctx<'_>) -> Step {
    let t = ctx.t();
    let job = ctx
        .submit(
            "outlives-deadline",
            // Room for the message to come back once if a frozen worker took it (see
            // `live_owner_suppresses_duplicate`) and still be claimed before the deadline.
            t.visibility * 3,
            3,
            vec![Arm::once(F::ProviderLatency).hold(t.visibility * 10)],
        )
        .await?;
    let expired = ctx
        .until(&job, "the job expired", |v| {
            v.job.state == JobState::Expired
        })
        .await?;
    ctx.send_copy(&job).await?;
    let last = expired.events.last().map(|e| e.seq).unwrap_or(0);
    let view = ctx
        .until(&job, "the late copy was acknowledged", |v| {
            v.after(last, K::DeliveryAckedTerminal).is_some()
        })
        .await?;
    let margin_ms = i64::try_from(t.margin.as_millis()).unwrap_or(0);
    let visibility_ms = i64::try_from(t.visibility.as_millis()).unwrap_or(0);
    let stop = renewals_at_deadline(&view.events, view.job.deadline_at, margin_ms, visibility_ms);
    ctx.check(
        "renewals stopped at the deadline",
        stop.passed,
        stop.finding,
        &stop.evidence,
    );
    let change = view.first(K::DeadlineExpired);
    ctx.check(
        "the job expired",
        view.job.state == JobState::Expired,
        format!("the job is {}", view.job.state),
        &change.into_iter().collect::<Vec<_>>(),
    );
    let ack = view.after(last, K::DeliveryAckedTerminal);
    ctx.check(
        "the late copy was acknowledged without a new attempt or budget",
        ack.is_some() && view.attempts.len() == 1 && view.job.attempt_count == 1,
        format!(
            "{} attempt(s); attempt count {}",
            view.attempts.len(),
            view.job.attempt_count
        ),
        &ack.into_iter().collect::<Vec<_>>(),
    );
    Ok(())
}

/// What the renewals of a job that outlived its deadline show.
pub(super) struct DeadlineStop<'e> {
    passed: bool,
    finding: String,
    evidence: Vec<&'e Event>,
}

/// Whether a job's renewals stopped at its deadline (`deadline` in µs, database clock).
///
/// A visibility renewal may ask for no more than what was left of the deadline when it was
/// asked, plus the margin; a lease renewal can only happen before the deadline. Both are read
/// from what the worker recorded, not from when the record landed. Only a visibility renewal
/// asked in the last stretch before the deadline, where a full `visibility_ms` would run past
/// it, or one the worker did not ask because the deadline was reached, puts the cap to the
/// test: a timeline without one (the worker stopped early) proves nothing and fails.
pub(super) fn renewals_at_deadline(
    events: &[Event],
    deadline: i64,
    margin_ms: i64,
    visibility_ms: i64,
) -> DeadlineStop<'_> {
    let renewals: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e.kind, K::VisibilityRenewed | K::LeaseRenewed))
        .collect();
    let asked = |e: &Event| {
        (
            e.detail_as::<detail::VisibilityRenewed>()
                .map(|d| d.timeout_ms),
            e.detail_as::<detail::VisibilityRenewed>()
                .and_then(|d| d.deadline_left_ms),
        )
    };
    let past: Vec<&Event> = renewals
        .iter()
        .copied()
        .filter(|e| match (e.kind, asked(e)) {
            (K::VisibilityRenewed, (Some(timeout), Some(left))) => timeout > left + margin_ms + 1,
            (K::VisibilityRenewed, _) => true,
            _ => e.at > deadline,
        })
        .collect();
    let stretch = visibility_ms - margin_ms;
    let tested: Vec<&Event> = events
        .iter()
        .filter(|e| match (e.kind, asked(e)) {
            (K::VisibilityRenewed, (_, Some(left))) => left < stretch,
            (K::VisibilityRenewalFailed, _) => e
                .detail_as::<detail::VisibilityRenewalFailed>()
                .is_some_and(|d| d.reason.as_deref() == Some("cap_or_deadline")),
            _ => false,
        })
        .collect();
    let stretch_s = stretch as f64 / 1000.0;
    let finding = if !past.is_empty() {
        format!(
            "{} of {} renewal(s) asked past the deadline",
            past.len(),
            renewals.len()
        )
    } else if tested.is_empty() {
        format!(
            "{} renewal(s), none in the last {stretch_s:.1} s before the deadline, where the cap \
             applies: the worker stopped before it, so the cap was not put to the test",
            renewals.len()
        )
    } else {
        format!(
            "{} renewal(s), {} of them in the last {stretch_s:.1} s before the deadline, each \
             capped at it",
            renewals.len(),
            tested.len()
        )
    };
    DeadlineStop {
        passed: !renewals.is_empty() && !tested.is_empty() && past.is_empty(),
        finding,
        evidence: if !past.is_empty() {
            past
        } else if !tested.is_empty() {
            tested
        } else {
            renewals[renewals.len().saturating_sub(1)..].to_vec()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::EventKind as K;
    use crate::ledger::Event;
    use serde_json::json;

    const DEADLINE: i64 = 100_000_000;

    /// A renewal recorded `left_ms` before the deadline, asking for `timeout_ms`.
    fn renewal(seq: i64, kind: K, left_ms: i64, timeout_ms: i64) -> Event {
        Event {
            job_id: "job".into(),
            seq,
            at: DEADLINE - left_ms * 1000,
            kind,
            epoch: 1,
            actor: "w".into(),
            delivery: None,
            attempt_no: Some(1),
            deadline_left_ms: Some(left_ms),
            detail: match kind {
                K::VisibilityRenewed => {
                    json!({ "timeout_ms": timeout_ms, "deadline_left_ms": left_ms })
                }
                K::VisibilityRenewalFailed => {
                    json!({ "reason": "cap_or_deadline", "uncertain": false })
                }
                _ => json!({}),
            },
        }
    }

    /// Renewals every 700 ms from `first_left_ms` before the deadline down to `last_left_ms`,
    /// each asking `ask(left)` (compressed timings: 2 s visibility, 300 ms margin).
    fn heartbeats(first_left_ms: i64, last_left_ms: i64, ask: impl Fn(i64) -> i64) -> Vec<Event> {
        let mut events = Vec::new();
        let mut left = first_left_ms;
        while left >= last_left_ms {
            let seq = events.len() as i64;
            events.push(renewal(seq, K::LeaseRenewed, left, 0));
            events.push(renewal(seq + 1, K::VisibilityRenewed, left, ask(left)));
            left -= 700;
        }
        events
    }

    fn capped(left: i64) -> i64 {
        (left + 300).min(2000)
    }

    #[test]
    fn renewals_capped_up_to_the_deadline_pass() {
        let events = heartbeats(5000, 100, capped);
        let stop = renewals_at_deadline(&events, DEADLINE, 300, 2000);
        assert!(stop.passed, "{}", stop.finding);
        assert!(stop
            .evidence
            .iter()
            .all(|e| e.deadline_left_ms.is_some_and(|l| l < 1700)));
    }

    #[test]
    fn a_renewal_not_asked_because_the_deadline_came_counts_as_reaching_it() {
        let mut events = heartbeats(5000, 1800, capped);
        events.push(renewal(99, K::VisibilityRenewalFailed, 0, 0));
        let stop = renewals_at_deadline(&events, DEADLINE, 300, 2000);
        assert!(stop.passed, "{}", stop.finding);
    }

    #[test]
    fn an_uncapped_renewal_near_the_deadline_fails() {
        let events = heartbeats(5000, 100, |_| 2000);
        let stop = renewals_at_deadline(&events, DEADLINE, 300, 2000);
        assert!(!stop.passed);
        assert!(
            stop.finding
                .starts_with("3 of 16 renewal(s) asked past the deadline"),
            "{}",
            stop.finding
        );
        assert!(stop
            .evidence
            .iter()
            .all(|e| e.kind == K::VisibilityRenewed && e.deadline_left_ms < Some(1700)));
    }

    #[test]
    fn renewals_that_stop_before_the_last_stretch_prove_nothing_and_fail() {
        // The worker stopped 2.2 s before the deadline: every renewal it asked was a full
        // one, which is what an uncapped worker asks too.
        let events = heartbeats(5000, 2200, capped);
        let stop = renewals_at_deadline(&events, DEADLINE, 300, 2000);
        assert!(!stop.passed, "{}", stop.finding);
        assert!(
            stop.finding.contains("not put to the test"),
            "{}",
            stop.finding
        );
        let uncapped = heartbeats(5000, 2200, |_| 2000);
        assert!(!renewals_at_deadline(&uncapped, DEADLINE, 300, 2000).passed);
    }

    #[test]
    fn no_renewal_at_all_fails() {
        let stop = renewals_at_deadline(&[], DEADLINE, 300, 2000);
        assert!(!stop.passed);
        assert!(stop.evidence.is_empty());
    }
}
