//! A job whose send was lost is sent again by the outbox.

use super::common::*;
use crate::faults::{Arm, FaultPoint as F};
use crate::job::{EventKind as K, JobState};

pub(super) async fn run(ctx: &Ctx<'_>) -> Step {
    let job = ctx
        .submit(
            "dispatcher-dies",
            ctx.deadline(),
            3,
            vec![Arm::once(F::DispatchCrashBeforeSend)],
        )
        .await?;
    // The lost send is repaired once the dead dispatcher's hold lapses (the visibility).
    let view = ctx
        .until_within(&job, "the job succeeded", ctx.t().visibility * 6, |v| {
            v.job.state == JobState::Succeeded
        })
        .await?;
    let sends = ctx
        .rig
        .ledger
        .outbox_sends(&job)
        .await
        .map_err(|e| ctx.fail("the outbox could be read", e.to_string()))?;
    let first = sends.first();
    let created = view.first(K::JobCreated);
    let dispatched = view.first(K::Dispatched);
    let lock = i64::try_from(ctx.t().visibility.as_micros()).unwrap_or(0);
    let repaired = match (first, created, dispatched) {
        (Some(row), Some(c), Some(d)) => row.send_attempts >= 2 && d.at - c.at >= lock - 100_000,
        _ => false,
    };
    ctx.check(
        "the lost send was repaired from the outbox",
        repaired,
        match first {
            Some(row) => format!(
                "the created row was claimed {} time(s); sent {} ms after the job was created",
                row.send_attempts,
                match (created, dispatched) {
                    (Some(c), Some(d)) => (d.at - c.at) / 1000,
                    _ => -1,
                }
            ),
            None => "no outbox row".into(),
        },
        &[created, dispatched]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>(),
    );
    one_result_from_one_attempt(ctx, &view);
    Ok(())
}
