//! A delete under an outdated receipt handle deletes nothing and is recorded so.

use super::common::*;
use crate::drill::rig::DrillQueue;
use crate::faults::{Arm, FaultPoint as F};
use crate::job::EventKind as K;

pub(super) async fn run(ctx: &Ctx<'_>) -> Step {
    if ctx.rig.queue_kind == DrillQueue::Sqs {
        ctx.note(
            "SQS reports success for a delete with an outdated handle, which moto does not \
             reproduce: fenceline's client wrapper reports the success and sends nothing.",
        );
    }
    let job = ctx
        .submit(
            "stale-handle",
            ctx.returning_deadline(),
            3,
            vec![Arm::once(F::QueueDeleteStaleHandle)],
        )
        .await?;
    let view = ctx
        .until(
            &job,
            "the remaining message came back and was dealt with",
            |v| v.count(K::MessageDeleted) >= 2,
        )
        .await?;
    let accepted = view.first(K::ResultAccepted);
    let first_delete = accepted.and_then(|a| view.after(a.seq, K::MessageDeleted));
    let first_message = view
        .first(K::DeliveryReceived)
        .and_then(|e| e.delivery.as_ref())
        .map(|d| d.message_id.clone());
    let back = first_delete.and_then(|d| {
        view.events.iter().find(|e| {
            e.seq > d.seq
                && e.kind == K::DeliveryReceived
                && e.delivery.as_ref().map(|x| &x.message_id) == first_message.as_ref()
        })
    });
    ctx.check(
        "the delete reported success but the message remained",
        first_delete.is_some() && back.is_some(),
        match back.and_then(|b| b.delivery.as_ref()) {
            Some(d) => format!("the same message came back (receive {})", d.receive_count),
            None => "the message did not come back after the reported delete".into(),
        },
        &[first_delete, back]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>(),
    );
    let ack = back.and_then(|b| view.after(b.seq, K::DeliveryAckedTerminal));
    ctx.check(
        "the next receiver found the terminal job and acknowledged it",
        ack.is_some(),
        match ack {
            Some(a) => format!("acknowledged by {} ({})", a.actor, a.detail),
            None => "no acknowledgement after the message came back".into(),
        },
        &ack.into_iter().collect::<Vec<_>>(),
    );
    one_result_from_one_attempt(ctx, &view);
    Ok(())
}
