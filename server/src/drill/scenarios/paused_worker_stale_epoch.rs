//! A paused worker wakes after recovery and its commit is rejected as stale.

use super::common::*;
use crate::faults::{Arm, FaultPoint as F};
use crate::job::{EventKind as K, JobState};
use crate::ledger::Event;

/// A freezes once its call has come back, until visibility and lease expire; the job is
/// recovered; A wakes up and tries to commit. Returns the job and the recovery's epoch.
pub(super) async fn paused_worker(ctx: &Ctx<'_>) -> Result<(String, i64), Stop> {
    let pause = ctx.pause();
    let job = ctx
        .submit(
            "paused",
            ctx.deadline(),
            3,
            vec![Arm::once(F::WorkerPause).hold(pause)],
        )
        .await?;
    let view = ctx
        .until(&job, "the paused worker woke up and tried to commit", |v| {
            v.has(K::ResultRejected) || (v.has(K::RecoveryClaimed) && v.has(K::ResultAccepted))
        })
        .await?;
    let Some((a, a_epoch)) = view.first_owner() else {
        return Err(ctx.fail("worker A claimed the job", "no claim on the timeline"));
    };
    let recovery = view
        .all(K::RecoveryClaimed)
        .into_iter()
        .find(|e| e.epoch > a_epoch);
    ctx.check(
        "recovery advanced the epoch past A's",
        recovery.is_some(),
        match recovery {
            Some(r) => format!(
                "recovery_claimed by {} at epoch {} (the first owner, {a}, held {a_epoch})",
                r.actor, r.epoch
            ),
            None => format!("no recovery past epoch {a_epoch}"),
        },
        &recovery.into_iter().collect::<Vec<_>>(),
    );
    let rejected: Vec<&Event> = view
        .all(K::ResultRejected)
        .into_iter()
        .filter(|e| e.actor == a)
        .collect();
    let stale = rejected
        .iter()
        .any(|e| reason_of(e) == "stale_epoch" && e.epoch == a_epoch);
    ctx.check(
        "A's commit was rejected as stale_epoch",
        stale && !view.has(K::ResultAccepted),
        format!(
            "{} rejection(s) of A ({}); {} accepted",
            rejected.len(),
            rejected
                .iter()
                .map(|e| reason_of(e))
                .collect::<Vec<_>>()
                .join(", "),
            view.count(K::ResultAccepted)
        ),
        &rejected,
    );
    // A's own delivery: the receive its claim came from. A fresh receive by the same worker
    // after it woke examines the ledger like any other and may delete; the stale delivery
    // must not be.
    let a_handle = view
        .events
        .iter()
        .find(|e| e.kind == K::DeliveryReceived && e.actor == a)
        .and_then(|e| e.delivery.as_ref())
        .map(|d| d.handle_hash.clone());
    let deletes_by_a: Vec<&Event> = view
        .events
        .iter()
        .filter(|e| {
            e.actor == a
                && matches!(e.kind, K::MessageDeleted | K::DeleteFailed)
                && e.delivery.as_ref().map(|d| &d.handle_hash) == a_handle.as_ref()
        })
        .collect();
    ctx.check(
        "A did not delete the message",
        a_handle.is_some() && deletes_by_a.is_empty(),
        format!(
            "{} delete(s) with A's delivery (handle {})",
            deletes_by_a.len(),
            a_handle.as_deref().unwrap_or("unknown")
        ),
        if deletes_by_a.is_empty() {
            &rejected
        } else {
            &deletes_by_a
        },
    );
    let state_change = recovery.and_then(|r| view.after(r.seq - 1, K::StateChanged));
    ctx.check(
        "the job waits as unknown",
        view.job.state == JobState::Unknown,
        format!(
            "the job is {} (recovery reason: {})",
            view.job.state,
            view.job.recovery_reason.as_deref().unwrap_or("none")
        ),
        &state_change.into_iter().collect::<Vec<_>>(),
    );
    let epoch = recovery.map(|r| r.epoch).unwrap_or(a_epoch);
    Ok((job, epoch))
}
