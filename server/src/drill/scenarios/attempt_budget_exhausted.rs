//! A job that spends its attempt budget fails for good.

use std::time::Duration;

use super::common::*;
use crate::faults::{Arm, FaultPoint as F};
use crate::job::detail;
use crate::job::{EventKind as K, JobState};

pub(super) async fn run(ctx: &Ctx<'_>) -> Step {
    let budget = 3u32;
    let job = ctx
        .submit(
            "always-retryable",
            ctx.deadline(),
            budget,
            vec![Arm::always(F::ProviderRetryable)],
        )
        .await?;
    ctx.until(&job, "the job failed for good", |v| {
        v.job.state == JobState::FailedTerminal
    })
    .await?;
    // Time for an extra attempt to show up, if anything would start one.
    tokio::time::sleep(ctx.t().visibility).await;
    let view = ctx.view(&job).await?;
    let started = view.all(K::AttemptStarted);
    let gaps: Vec<(i64, Duration)> = view
        .attempts
        .windows(2)
        .map(|w| {
            let gap = w[1].started_at - w[0].finished_at.unwrap_or(w[1].started_at);
            (gap / 1000, ctx.t().backoff(w[0].attempt_no))
        })
        .collect();
    // What the ledger scheduled after each failure, beside what happened: a slow machine may
    // space retries by more than the backoff even when none was scheduled.
    let scheduled: Vec<i64> = view
        .all(K::StateChanged)
        .into_iter()
        .filter_map(|e| e.detail_as::<detail::StateChanged>())
        .filter(|d| d.to == "retry_authorized")
        .filter_map(|d| d.retry_in_ms)
        .collect();
    ctx.check(
        "attempts were spaced by the backoff",
        gaps.len() + 1 == budget as usize
            && scheduled.len() == gaps.len()
            && gaps
                .iter()
                .zip(&scheduled)
                .all(|((gap_ms, backoff), due_ms)| {
                    let backoff = backoff.as_millis() as i64;
                    *gap_ms + 50 >= backoff && *due_ms + 50 >= backoff
                }),
        format!(
            "{} attempts; between them: {}",
            view.attempts.len(),
            gaps.iter()
                .enumerate()
                .map(|(i, (g, b))| format!(
                    "{g} ms (backoff {} ms, retry scheduled in {})",
                    b.as_millis(),
                    scheduled
                        .get(i)
                        .map_or("—".to_string(), |d| format!("{d} ms"))
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        &started,
    );
    let change = view.first(K::BudgetExhausted).or_else(|| {
        view.all(K::StateChanged).into_iter().find(|e| {
            e.detail_as::<detail::StateChanged>()
                .is_some_and(|d| d.to == "failed_terminal")
        })
    });
    ctx.check(
        "failed_terminal once the budget was spent",
        view.job.state == JobState::FailedTerminal && view.job.attempt_count == i64::from(budget),
        format!(
            "the job is {} after {} of {budget} attempts (error {})",
            view.job.state,
            view.job.attempt_count,
            view.job.error_code.as_deref().unwrap_or("none")
        ),
        &change
            .or(started.last().copied())
            .into_iter()
            .collect::<Vec<_>>(),
    );
    ctx.check(
        "no extra attempt",
        view.attempts.len() == budget as usize && started.len() == budget as usize,
        format!("{} attempt(s) recorded", view.attempts.len()),
        &started,
    );
    Ok(())
}
