//! A burst under a provider's rate limit: refusals spend no budget.

use std::time::Duration;

use super::common::*;
use crate::drill::rig::MAX_RECEIVE_COUNT;
use crate::faults::{Arm, FaultPoint as F};
use crate::job::{EventKind as K, JobState};
use crate::ledger::{AttemptOutcome, Event};

pub(super) async fn run(ctx: &Ctx<'_>) -> Step {
    const BURST: usize = 16;
    // A call every 300 ms, a bucket a second deep (three calls): most of the burst is refused
    // at first, however fast the queue delivers it.
    let limit = Arm::always(F::ProviderRateLimit).hold(Duration::from_millis(300));
    let mut jobs = Vec::with_capacity(BURST);
    for i in 0..BURST {
        let role = format!("burst-{i:02}");
        jobs.push(
            ctx.submit(&role, ctx.deadline(), 1, vec![limit.clone()])
                .await?,
        );
    }
    let mut views = Vec::with_capacity(BURST);
    for job in &jobs {
        views.push(
            ctx.until(job, "the job finished", |v| v.job.state.is_terminal())
                .await?,
        );
    }
    let succeeded: Vec<&View> = views
        .iter()
        .filter(|v| v.job.state == JobState::Succeeded)
        .collect();
    let accepted: Vec<&Event> = views
        .iter()
        .filter_map(|v| v.first(K::ResultAccepted))
        .collect();
    ctx.check(
        "every job of the burst succeeded",
        succeeded.len() == BURST,
        format!(
            "{} of {BURST} succeeded{}",
            succeeded.len(),
            views
                .iter()
                .find(|v| v.job.state != JobState::Succeeded)
                .map(|v| format!(
                    "; {} is {} ({})",
                    v.job.job_id,
                    v.job.state,
                    v.job.error_code.as_deref().unwrap_or("no error")
                ))
                .unwrap_or_default()
        ),
        &accepted,
    );
    let refusals: Vec<&Event> = views.iter().flat_map(|v| v.all(K::Throttled)).collect();
    let refused_attempts: usize = views
        .iter()
        .map(|v| {
            v.attempts
                .iter()
                .filter(|a| a.outcome == AttemptOutcome::Throttled)
                .count()
        })
        .sum();
    let spent: Vec<i64> = views.iter().map(|v| v.job.budget_used).collect();
    ctx.check(
        "refusals were recorded and spent no attempt of the budget",
        !refusals.is_empty()
            && refused_attempts == refusals.len()
            && views
                .iter()
                .all(|v| v.job.state != JobState::Succeeded || v.job.budget_used == 1),
        format!(
            "{} refusals recorded ({refused_attempts} attempts throttled); budget spent per \
             job (of 1): {}",
            refusals.len(),
            if spent.iter().all(|n| *n == 1) {
                "1 each".to_owned()
            } else {
                format!("{spent:?}")
            }
        ),
        &refusals.iter().take(12).copied().collect::<Vec<_>>(),
    );
    let receives: Vec<&Event> = views
        .iter()
        .flat_map(|v| v.all(K::DeliveryReceived))
        .collect();
    let most = receives
        .iter()
        .filter_map(|e| e.delivery.as_ref().map(|d| d.receive_count))
        .max()
        .unwrap_or(0);
    let dead: Vec<&Event> = views.iter().flat_map(|v| v.all(K::MovedToDlq)).collect();
    let busiest = receives
        .iter()
        .copied()
        .filter(|e| e.delivery.as_ref().is_some_and(|d| d.receive_count == most))
        .take(1)
        .collect::<Vec<_>>();
    ctx.check(
        "no message reached the dead-letter queue",
        !receives.is_empty() && dead.is_empty() && most <= i64::from(MAX_RECEIVE_COUNT),
        format!(
            "each message received at most {most} time(s) (the queue moves one received \
             more than {MAX_RECEIVE_COUNT} times); {} moved to the dead-letter queue",
            dead.len()
        ),
        &if dead.is_empty() { busiest } else { dead },
    );
    Ok(())
}
