//! A visibility renewal that times out while the lease holds does not stop the work.

use super::common::*;
use crate::faults::{Arm, FaultPoint as F};
use crate::job::detail;
use crate::job::{EventKind as K, JobState};
use crate::ledger::Event;

pub(super) async fn run(ctx: &Ctx<'_>) -> Step {
    let t = ctx.t();
    // A's visibility renewals time out; its lease renewals go through; the call outlasts
    // the visibility.
    let job = ctx
        .submit(
            "renewal-times-out",
            ctx.deadline(),
            3,
            vec![
                Arm::always(F::QueueChangeVisibility),
                // Long enough for the message to come back even while a paused-worker
                // scenario of the same run has frozen the other worker.
                Arm::once(F::ProviderLatency).hold(t.visibility + t.heartbeat * 2 + ctx.pause()),
            ],
        )
        .await?;
    let view = ctx
        .until(&job, "the job succeeded after the message came back", |v| {
            v.job.state == JobState::Succeeded && second_delivery_examined(v)
        })
        .await?;
    let uncertain: Vec<&Event> = view
        .all(K::VisibilityRenewalFailed)
        .into_iter()
        .filter(|e| {
            e.detail_as::<detail::VisibilityRenewalFailed>()
                .is_some_and(|d| d.uncertain)
        })
        .collect();
    ctx.check(
        "the timed-out renewal was recorded as uncertain",
        !uncertain.is_empty(),
        format!("{} uncertain visibility renewal(s)", uncertain.len()),
        &uncertain,
    );
    suppressed_under_owner(
        ctx,
        &view,
        "the reappearing message deferred to A's valid lease",
    );
    one_result_from_one_attempt(ctx, &view);
    Ok(())
}
