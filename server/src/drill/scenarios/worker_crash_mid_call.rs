//! A worker killed mid-call leaves a job the reaper recovers.

use super::common::*;
use crate::faults::{Arm, FaultPoint as F};
use crate::job::{EventKind as K, JobState};
use crate::ledger::AttemptOutcome;

pub(super) async fn run(ctx: &Ctx<'_>) -> Step {
    let t = ctx.t();
    let job = ctx
        .submit(
            "worker-dies",
            ctx.deadline(),
            3,
            vec![
                Arm::once(F::WorkerCrash).hold(t.heartbeat + t.heartbeat / 2),
                Arm::once(F::ProviderLatency).hold(t.visibility * 3),
            ],
        )
        .await?;
    let first = ctx
        .until(&job, "the call started", |v| v.has(K::AttemptStarted))
        .await?;
    ctx.until(&job, "the job was recovered", |v| v.has(K::RecoveryClaimed))
        .await?;
    // Time for the message to come back and for anything that would act on its own to act.
    tokio::time::sleep(ctx.t().visibility + ctx.t().heartbeat).await;
    let view = ctx.view(&job).await?;
    let Some((_, a_epoch)) = view.first_owner() else {
        return Err(ctx.fail("worker A claimed the job", "no claim on the timeline"));
    };
    let recovery = view
        .all(K::RecoveryClaimed)
        .into_iter()
        .find(|e| e.epoch > a_epoch);
    ctx.check(
        "a recovery claim fenced the dead worker out",
        recovery.is_some(),
        match recovery {
            Some(r) => format!(
                "recovery_claimed by {} at epoch {}: {}",
                r.actor, r.epoch, r.detail
            ),
            None => "no recovery".into(),
        },
        &recovery.into_iter().collect::<Vec<_>>(),
    );
    let attempt = view.attempts.first();
    ctx.check(
        "the job is unknown and its attempt lost",
        view.job.state == JobState::Unknown
            && attempt.is_some_and(|a| a.outcome == AttemptOutcome::Lost)
            && view.attempts.len() == 1,
        format!(
            "the job is {}; attempts: {}",
            view.job.state,
            view.attempts
                .iter()
                .map(|a| a.outcome.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        &view.all(K::StateChanged),
    );
    let input = ctx.rig.ledger.job_input(&job).await.ok().flatten();
    ctx.check(
        "nothing was lost",
        input.is_some()
            && view.job.deadline_at == first.job.deadline_at
            && view.job.max_attempts == first.job.max_attempts,
        format!(
            "input kept: {}; deadline kept: {}",
            input.is_some(),
            view.job.deadline_at == first.job.deadline_at
        ),
        &recovery.into_iter().collect::<Vec<_>>(),
    );
    Ok(())
}
