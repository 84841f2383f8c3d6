//! An attempt whose answer is lost leaves the job `unknown` until a decision.

use super::common::*;
use super::paused_worker_stale_epoch::paused_worker;
use crate::job::{Actor, EventKind as K, JobState};
use crate::ledger::Decision;

pub(super) async fn run(ctx: &Ctx<'_>) -> Step {
    let (job, recovered_at) = paused_worker(ctx).await?;
    // The message is delivered again while the job is unknown: that alone must not start a
    // second attempt.
    let last = ctx.view(&job).await?.events.last().map_or(0, |e| e.seq);
    ctx.send_copy(&job).await?;
    ctx.until(&job, "the copy reached a worker", |v| {
        v.after(last, K::DeliveryReceived).is_some()
    })
    .await?;
    // Time for anything that would start a second attempt on its own to do so.
    tokio::time::sleep(ctx.t().visibility).await;
    let before = ctx.view(&job).await?;
    let copy = before.after(last, K::DeliveryReceived);
    let waiting = before.job.state == JobState::Unknown && before.attempts.len() == 1;
    ctx.check(
        "no second attempt before a recorded decision",
        waiting,
        format!(
            "{:?} after a copy of the message arrived the job was {} with {} attempt(s)",
            ctx.t().visibility,
            before.job.state,
            before.attempts.len(),
        ),
        &copy.into_iter().collect::<Vec<_>>(),
    );
    if !waiting {
        return Err(Stop);
    }
    let reason = "drill: the uncertain attempt was reviewed; a fenced retry is authorized";
    if let Err(error) = ctx
        .rig
        .ledger
        .decide(
            &job,
            before.job.owner_epoch,
            &Decision::AuthorizeRetry,
            &Actor::Drill,
            reason,
        )
        .await
    {
        return Err(ctx.fail("a fenced retry was authorized", error.to_string()));
    }
    let view = ctx
        .until(&job, "the authorized retry succeeded", |v| {
            v.job.state == JobState::Succeeded
        })
        .await?;
    let decision = view.first(K::DecisionRecorded);
    let second = view.all(K::AttemptStarted).get(1).copied();
    let ordered = matches!((decision, second), (Some(d), Some(s)) if s.seq > d.seq);
    ctx.check(
        "the second attempt started after the decision",
        ordered,
        format!(
            "the second attempt started {} the decision",
            if ordered { "after" } else { "not after" }
        ),
        &[decision, second].into_iter().flatten().collect::<Vec<_>>(),
    );
    ctx.check(
        "the retry ran at a higher epoch",
        second.is_some_and(|s| s.epoch > recovered_at),
        format!(
            "second attempt at epoch {}; recovery was at {recovered_at}",
            second.map_or("—".to_owned(), |s| s.epoch.to_string())
        ),
        &second.into_iter().collect::<Vec<_>>(),
    );
    let accepted = view.all(K::ResultAccepted);
    ctx.check(
        "the retry succeeded and the attempt count is cumulative (2)",
        view.job.attempt_count == 2 && accepted.len() == 1,
        format!(
            "attempt count {}, {} accepted result(s)",
            view.job.attempt_count,
            accepted.len()
        ),
        &accepted,
    );
    Ok(())
}
