//! A delivery after the message was deleted finds the job finished.

use super::common::*;
use crate::job::{EventKind as K, JobState};

pub(super) async fn run(ctx: &Ctx<'_>) -> Step {
    let job = ctx
        .submit("copied-after-delete", ctx.deadline(), 3, Vec::new())
        .await?;
    let done = ctx
        .until(&job, "the job succeeded and its message was deleted", |v| {
            v.job.state == JobState::Succeeded && v.has(K::MessageDeleted)
        })
        .await?;
    let deleted = done.first(K::MessageDeleted).map(|e| e.seq).unwrap_or(0);
    ctx.send_copy(&job).await?;
    let view = ctx
        .until(&job, "the copy was dealt with", |v| {
            v.after(deleted, K::DeliveryAckedTerminal).is_some()
                || v.after(deleted, K::MessageDeleted).is_some()
        })
        .await?;
    let copy = view.after(deleted, K::DeliveryReceived);
    let ack = view.after(deleted, K::DeliveryAckedTerminal);
    ctx.check(
        "the copy arrived after the delete and was acknowledged without inference",
        copy.is_some() && ack.is_some(),
        format!(
            "received after the delete: {}; acknowledged: {}",
            copy.is_some(),
            ack.is_some()
        ),
        &[copy, ack].into_iter().flatten().collect::<Vec<_>>(),
    );
    one_result_from_one_attempt(ctx, &view);
    Ok(())
}
