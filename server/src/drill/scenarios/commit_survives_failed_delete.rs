//! A commit stands when the delete after it fails.

use super::common::*;
use crate::faults::{Arm, FaultPoint as F};
use crate::job::EventKind as K;

pub(super) async fn run(ctx: &Ctx<'_>) -> Step {
    let job = ctx
        .submit(
            "delete-fails",
            ctx.returning_deadline(),
            3,
            vec![Arm::once(F::QueueDelete)],
        )
        .await?;
    let view = ctx
        .until(&job, "the message came back and was dealt with", |v| {
            v.first(K::DeleteFailed).is_some_and(|f| {
                v.after(f.seq, K::DeliveryReceived)
                    .is_some_and(|back| v.after(back.seq, K::MessageDeleted).is_some())
            })
        })
        .await?;
    let accepted = view.first(K::ResultAccepted);
    let failed = accepted.and_then(|a| view.after(a.seq, K::DeleteFailed));
    ctx.check(
        "the delete after the commit failed",
        failed.is_some(),
        match failed {
            Some(f) => format!("delete_failed: {}", f.detail),
            None => "no failed delete after the commit".into(),
        },
        &[accepted, failed].into_iter().flatten().collect::<Vec<_>>(),
    );
    let ack = failed.and_then(|f| view.after(f.seq, K::DeliveryAckedTerminal));
    ctx.check(
        "the redelivery was acknowledged without inference",
        ack.is_some() && view.attempts.len() == 1,
        format!(
            "acknowledged: {}; {} attempt(s)",
            ack.is_some(),
            view.attempts.len()
        ),
        &ack.into_iter().collect::<Vec<_>>(),
    );
    one_result_from_one_attempt(ctx, &view);
    let gone = ack.and_then(|a| view.after(a.seq, K::MessageDeleted));
    ctx.check(
        "the message is eventually gone",
        gone.is_some(),
        "deleted after the acknowledgement",
        &gone.into_iter().collect::<Vec<_>>(),
    );
    Ok(())
}
