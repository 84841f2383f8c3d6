//! A copy delivered while the first owner works is suppressed under its epoch.

use super::common::*;
use crate::faults::{Arm, FaultPoint as F};
use crate::job::{EventKind as K, JobState};

pub(super) async fn run(ctx: &Ctx<'_>) -> Step {
    let t = ctx.t();
    let job = ctx
        .submit(
            "copied",
            ctx.deadline(),
            3,
            vec![
                // The copy goes out as the owner receives the message. A worker frozen by a
                // paused-worker scenario of the same run may take it in a receive it had open
                // and hold it until it wakes: the owner works on past that.
                Arm::once(F::ProviderLatency).hold(t.visibility + ctx.pause()),
                Arm::once(F::QueueReceiveDuplicate),
            ],
        )
        .await?;
    let view = ctx
        .until(&job, "the job succeeded and the copy was examined", |v| {
            v.job.state == JobState::Succeeded
                && v.has(K::MessageDeleted)
                && second_delivery_examined(v)
        })
        .await?;
    let deliveries = view.all(K::DeliveryReceived);
    let messages: std::collections::HashSet<_> = deliveries
        .iter()
        .filter_map(|e| e.delivery.as_ref().map(|d| d.message_id.as_str()))
        .collect();
    ctx.check(
        "a copy of the message reached a receiver while the owner worked",
        messages.len() >= 2,
        format!(
            "{} deliveries of {} distinct messages",
            deliveries.len(),
            messages.len()
        ),
        &deliveries,
    );
    suppressed_under_owner(
        ctx,
        &view,
        "the copy was suppressed under the live owner's epoch, without inference",
    );
    one_result_from_one_attempt(ctx, &view);
    Ok(())
}
