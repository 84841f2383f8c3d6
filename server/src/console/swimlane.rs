//! The job page's swimlane: the job's timeline as marks on one time axis, per lane.

use super::charts::{self, Mark};
use crate::job::detail;
use crate::job::EventKind;
use crate::ledger::{detail_text, Event, Job};
use crate::time::human_duration;

/// The swimlane marks of one job.
pub(super) fn swimlane_of(
    job: &Job,
    attempts: &[crate::ledger::Attempt],
    key: &[Event],
    renewals: &[crate::ledger::Bucket<EventKind>],
    (shown_from, shown_to): (i64, i64),
    end: i64,
    width: i64,
) -> fenceline_app::svg::Svg {
    let mut marks = Vec::new();
    let start = job.created_at;
    // Lease windows: each owner epoch from its claim (or a worker's adoption of the attempt in
    // flight) to the next ownership change.
    let owners: Vec<&Event> = key.iter().filter(|e| ends_ownership(e.kind)).collect();
    for (i, e) in owners
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind == EventKind::Claimed || adopted_by_worker(e))
    {
        let until = owners[i + 1..].first().map_or(end, |n| n.at);
        marks.push(Mark::Span {
            lane: 2,
            from: e.at,
            to: until,
            class: "lease".into(),
            label: format!("epoch {} · {}", e.epoch, e.actor),
            title: format!(
                "epoch {} owned by {} from +{}",
                e.epoch,
                e.actor,
                human_duration(e.at - start)
            ),
        });
    }
    waits_and_epoch_changes(job, key, start, end, &mut marks);
    for a in attempts {
        let to = a.finished_at.unwrap_or(end);
        let accepted = a.result_ref.is_some() && a.result_ref == job.result_ref;
        marks.push(Mark::Span {
            lane: 3,
            from: a.started_at,
            to,
            class: format!(
                "attempt outcome-{}{}",
                a.outcome.as_str(),
                if accepted { " accepted" } else { "" }
            ),
            label: format!(
                "#{} {}{}",
                a.attempt_no,
                a.outcome.as_str().replace('_', " "),
                if accepted { " ★" } else { "" }
            ),
            title: format!(
                "attempt {} at epoch {} by {}: {}{}",
                a.attempt_no,
                a.epoch,
                a.worker_id,
                a.outcome.as_str(),
                if accepted {
                    " (the accepted result)"
                } else {
                    ""
                }
            ),
        });
    }
    // A call that ran on after the ledger settled its attempt without it (a cancel, a
    // recovery), until its fenced-out worker stopped it or its late answer was rejected.
    for e in key {
        let ran_on = match e.kind {
            EventKind::LeaseLost => e
                .detail_as::<detail::LeaseLost>()
                .is_some_and(|d| d.call.as_deref() == Some("stopped")),
            EventKind::ResultRejected => true,
            _ => false,
        };
        let attempt = attempts
            .iter()
            .find(|a| Some(a.attempt_no) == e.attempt_no && a.epoch == e.epoch);
        let Some((a, settled)) = attempt.and_then(|a| Some((a, a.finished_at?))) else {
            continue;
        };
        if !ran_on || settled >= e.at {
            continue;
        }
        let how = if e.kind == EventKind::LeaseLost {
            format!("until {} stopped it", e.actor)
        } else {
            "until its answer came and was rejected".to_owned()
        };
        marks.push(Mark::Span {
            lane: 3,
            from: settled,
            to: e.at,
            class: "attempt ran-on".into(),
            label: format!("#{} ran on", a.attempt_no),
            title: format!(
                "attempt {}'s call ran on after the attempt was settled, {how} at +{} (#{}, {})",
                a.attempt_no,
                human_duration(e.at - start),
                e.seq,
                fenced_reason(e)
            ),
        });
    }
    for e in key {
        let at = e.at;
        let title = |what: &str| {
            format!(
                "#{} {} at +{} by {}",
                e.seq,
                what,
                human_duration(at - start),
                e.actor
            )
        };
        let point = |lane: usize, class: &str, symbol: char, what: &str| Mark::Point {
            lane,
            at,
            class: class.into(),
            symbol,
            title: title(what),
        };
        let mark = match e.kind {
            EventKind::DeliveryReceived => {
                let n = e.delivery.as_ref().map_or(0, |d| d.receive_count);
                Some(point(
                    0,
                    if n > 1 { "redelivery" } else { "delivery" },
                    '▼',
                    &format!("receive {n}"),
                ))
            }
            EventKind::DuplicateSuppressed => {
                Some(point(0, "suppressed", '⊘', "duplicate suppressed"))
            }
            EventKind::DeliveryDeferred => Some(point(0, "deferred", '…', "delivery deferred")),
            EventKind::DeliveryAckedTerminal => {
                Some(point(0, "acked", '✓', "acknowledged: job already terminal"))
            }
            EventKind::Claimed | EventKind::RecoveryClaimed => Some(point(
                4,
                "epoch",
                '◆',
                &format!("{} → epoch {}", e.kind.as_str().replace('_', " "), e.epoch),
            )),
            EventKind::DecisionRecorded => Some(point(
                4,
                "decision",
                '⚑',
                &format!("decision: {}", detail_text(&e.detail)),
            )),
            EventKind::ResultAccepted => {
                Some(point(4, "commit", '★', "result accepted (terminal commit)"))
            }
            EventKind::ResultRejected => Some(point(
                4,
                "rejected",
                '✗',
                &format!("result rejected: {}", detail_text(&e.detail)),
            )),
            EventKind::DeadlineExpired => Some(point(4, "expired", '◷', "deadline expired")),
            EventKind::BudgetExhausted => Some(point(4, "failed", '■', "attempt budget spent")),
            EventKind::LeaseLost => Some(point(2, "failed", '✗', "lease lost")),
            EventKind::Dispatched => Some(point(5, "dispatched", '↑', "dispatched to the queue")),
            EventKind::MessageDeleted => Some(point(
                5,
                "deleted",
                '✓',
                &format!("message deleted ({})", detail_text(&e.detail)),
            )),
            EventKind::DeleteFailed => Some(point(
                5,
                "failed",
                '✗',
                &format!("delete failed ({})", detail_text(&e.detail)),
            )),
            EventKind::MovedToDlq => {
                Some(point(5, "failed", '⇣', "moved to the dead-letter queue"))
            }
            EventKind::AttemptSubmitted => e.detail_as::<detail::AttemptSubmitted>().map(|d| {
                point(
                    3,
                    "submitted",
                    '↗',
                    &format!(
                        "attempt {} submitted: {} runs it as {}",
                        e.attempt_no.unwrap_or_default(),
                        d.provider,
                        d.provider_id
                    ),
                )
            }),
            EventKind::ProviderFallback => e.detail_as::<detail::ProviderFallback>().map(|d| {
                point(
                    3,
                    "fallback",
                    '⤳',
                    &format!(
                        "moved on from {} · {} to {} · {}: {} ({} s refused, {} s more asked, \
                         {} s allowed)",
                        d.from_provider,
                        d.from_model,
                        d.to_provider,
                        d.to_model,
                        d.error_code,
                        d.refused_for_ms / 1000,
                        d.retry_in_ms / 1000,
                        d.after_ms / 1000
                    ),
                )
            }),
            EventKind::UpstreamCancelled => e.detail_as::<detail::UpstreamCancelled>().map(|d| {
                point(
                    3,
                    "failed",
                    '⊘',
                    &format!(
                        "{} cancelled at the provider ({}): {}",
                        d.provider_id,
                        d.why.replace('_', " "),
                        d.answer
                    ),
                )
            }),
            _ => None,
        };
        marks.extend(mark);
    }
    for b in renewals {
        let (lane, class) = match b.kind {
            EventKind::VisibilityRenewed => (1, "renew-ok"),
            EventKind::VisibilityRenewalFailed => (1, "renew-failed"),
            EventKind::LeaseRenewed => (2, "renew-ok"),
            EventKind::LeaseRenewalFailed => (2, "renew-failed"),
            EventKind::Dispatched => (5, "dispatched"),
            EventKind::DuplicateSuppressed => (0, "suppressed"),
            EventKind::DeliveryAckedTerminal => (0, "acked"),
            _ => (0, "delivery"),
        };
        let from = shown_from + b.bucket * width;
        marks.push(Mark::Density {
            lane,
            from,
            to: from + width,
            count: b.count,
            class: class.into(),
            title: b.kind.as_str().replace('_', " "),
        });
    }
    charts::swimlane(start, shown_from, shown_to, &marks)
}

/// A worker's recovery that adopted the attempt in flight: it owns the job from there.
fn adopted_by_worker(e: &Event) -> bool {
    e.kind == EventKind::RecoveryClaimed
        && e.actor.starts_with("worker:")
        && e.detail_as::<detail::RecoveryClaimed>()
            .is_some_and(|d| d.adopted_attempt.is_some())
}

/// What ends an ownership period (a lease or a wait) on the lease / epoch lane.
fn ends_ownership(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::Claimed
            | EventKind::RecoveryClaimed
            | EventKind::DecisionRecorded
            | EventKind::StateChanged
            | EventKind::ResultAccepted
            | EventKind::DeadlineExpired
            | EventKind::BudgetExhausted
    )
}

/// The lease / epoch lane's waits and epoch changes: each move of the epoch that is not a
/// worker's claim (a recovery, a release, a decision) as a mark, and each period the job spent
/// `unknown` (until a decision) or `retry_authorized` (until a worker claims it), up to `end`
/// while it still waits.
fn waits_and_epoch_changes(job: &Job, key: &[Event], start: i64, end: i64, marks: &mut Vec<Mark>) {
    let mut epoch = 0;
    // Drawn after the waits, so a wait never covers the change that began it.
    let mut changes = Vec::new();
    for (i, e) in key.iter().enumerate() {
        if e.epoch > epoch && epoch > 0 && e.kind != EventKind::Claimed {
            let what = match e.kind {
                EventKind::StateChanged => format!(
                    "state changed → {}",
                    e.detail_as::<detail::StateChanged>().unwrap_or_default().to
                ),
                EventKind::RecoveryClaimed => format!(
                    "recovery claimed ({})",
                    e.detail_as::<detail::RecoveryClaimed>()
                        .unwrap_or_default()
                        .reason
                ),
                EventKind::DecisionRecorded => format!(
                    "decision {}",
                    e.detail_as::<detail::DecisionRecorded>()
                        .unwrap_or_default()
                        .decision
                ),
                other => other.as_str().replace('_', " "),
            };
            changes.push(Mark::Point {
                lane: 2,
                at: e.at,
                class: "epoch-change".into(),
                symbol: '◆',
                title: format!(
                    "#{} epoch {epoch} → {}: {what} at +{} by {}",
                    e.seq,
                    e.epoch,
                    human_duration(e.at - start),
                    e.actor
                ),
            });
        }
        epoch = epoch.max(e.epoch);
        let Some(to) = e.detail_as::<detail::StateChanged>().map(|d| d.to) else {
            continue;
        };
        if !matches!(to.as_str(), "unknown" | "retry_authorized") {
            continue;
        }
        let next = key[i + 1..].iter().find(|n| ends_ownership(n.kind));
        let (state, waiting_for) = if to == "unknown" {
            ("unknown", "a decision")
        } else {
            ("retry authorized", "a worker")
        };
        let since = format!(
            "epoch {}: {state} from +{}",
            e.epoch,
            human_duration(e.at - start)
        );
        let (until, title) = match next {
            Some(n) => {
                let by = match n.kind {
                    EventKind::DecisionRecorded => "the decision".to_owned(),
                    EventKind::Claimed | EventKind::RecoveryClaimed => {
                        format!("{} claimed it", n.actor)
                    }
                    other => other.as_str().replace('_', " "),
                };
                (
                    n.at,
                    format!(
                        "{since} until {by} at +{} ({})",
                        human_duration(n.at - start),
                        human_duration(n.at - e.at)
                    ),
                )
            }
            // Still so at this epoch: the wait goes on.
            None if job.state.as_str() == to && job.owner_epoch == e.epoch => (
                end,
                format!(
                    "{since}, waiting for {waiting_for} ({} so far)",
                    human_duration(end - e.at)
                ),
            ),
            // It ended after the last event drawn (a timeline longer than the chart reads).
            None => {
                let last = key.last().map_or(e.at, |l| l.at);
                (
                    last,
                    format!(
                        "{since}; it ended after #{}, the last event drawn",
                        key.last().map_or(e.seq, |l| l.seq)
                    ),
                )
            }
        };
        marks.push(Mark::Wait {
            lane: 2,
            from: e.at,
            to: until.max(e.at),
            class: format!("waiting {to}"),
            label: format!("epoch {} · {state}", e.epoch),
            title,
        });
    }
    marks.extend(changes);
}

/// Why a call's owner was fenced out, or its late answer rejected.
fn fenced_reason(e: &Event) -> String {
    match e.kind {
        EventKind::LeaseLost => e.detail_as::<detail::LeaseLost>().map(|d| d.reason),
        EventKind::ResultRejected => e.detail_as::<detail::ResultRejected>().map(|d| d.reason),
        _ => None,
    }
    .unwrap_or_default()
}
