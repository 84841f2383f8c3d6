//! A lease that cannot be renewed stops the work.

use super::common::*;
use crate::faults::{Arm, FaultPoint as F};
use crate::job::{EventKind as K, JobState};
use crate::ledger::{AttemptOutcome, Event};

pub(super) async fn run(ctx: &Ctx<'_>) -> Step {
    let t = ctx.t();
    let job = ctx
        .submit(
            "lease-not-renewed",
            ctx.deadline(),
            3,
            vec![
                Arm::always(F::LeaseRenew),
                Arm::once(F::ProviderLatency).hold(t.lease * 3),
            ],
        )
        .await?;
    let view = ctx
        .until(
            &job,
            "the job was recovered and A stopped or tried to commit",
            |v| {
                v.has(K::RecoveryClaimed)
                    && (v.has(K::LeaseLost) || v.has(K::ResultRejected) || v.has(K::ResultAccepted))
            },
        )
        .await?;
    let Some((a, a_epoch)) = view.first_owner() else {
        return Err(ctx.fail("worker A claimed the job", "no claim on the timeline"));
    };
    let lost: Vec<&Event> = view
        .all(K::LeaseLost)
        .into_iter()
        .filter(|e| e.actor == a && e.epoch == a_epoch)
        .collect();
    ctx.check(
        "A stopped its call and recorded lease_lost",
        !lost.is_empty(),
        match lost.first() {
            Some(l) => format!("lease_lost by {a}: {}", l.detail),
            None => format!("no lease_lost by {a}"),
        },
        &lost,
    );
    let commits = view.count(K::ResultAccepted) + view.count(K::ResultRejected);
    ctx.check(
        "A committed nothing",
        commits == 0,
        format!("{commits} result commit(s)"),
        &lost,
    );
    let recovery = view
        .all(K::RecoveryClaimed)
        .into_iter()
        .find(|e| e.epoch > a_epoch);
    let attempt_lost = view
        .attempts
        .first()
        .is_some_and(|a| a.outcome == AttemptOutcome::Lost);
    ctx.check(
        "recovery followed the state table: the attempt is lost and the job unknown",
        recovery.is_some() && view.job.state == JobState::Unknown && attempt_lost,
        format!(
            "the job is {} at epoch {}; first attempt {}",
            view.job.state,
            view.job.owner_epoch,
            view.attempts
                .first()
                .map_or("missing", |a| a.outcome.as_str())
        ),
        &recovery.into_iter().collect::<Vec<_>>(),
    );
    Ok(())
}
