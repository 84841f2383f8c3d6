//! A dead letter is replayed only after its job is inspected.

use std::time::Duration;

use super::common::*;
use crate::drill::rig::{DrillQueue, MAX_RECEIVE_COUNT};
use crate::faults::{Arm, FaultPoint as F};
use crate::job::detail;
use crate::job::{Actor, EventKind as K, JobState};
use crate::ledger::Event;
use crate::queue::Queue;

/// Whether a `replayed` event says its message came from the dead-letter queue.
pub(super) fn from_the_dlq(e: &Event) -> bool {
    e.detail_as::<detail::Replayed>()
        .is_some_and(|d| d.from == "dead_letter_queue")
}

pub(super) async fn run(ctx: &Ctx<'_>) -> Step {
    let job = ctx
        .submit(
            "dead-lettered",
            ctx.deadline(),
            3,
            vec![Arm::times(F::WorkerCrashOnReceive, MAX_RECEIVE_COUNT)],
        )
        .await?;
    let before = ctx.view(&job).await?;
    let Some(dlq) = ctx.rig.queue.dead_letters() else {
        return Err(ctx.fail("the drill's queue has a dead-letter queue", "none"));
    };
    if ctx.rig.queue_kind == DrillQueue::Embedded {
        // The embedded queue's move is put on the timeline by the reaper.
        ctx.until(
            &job,
            "the message was moved to the dead-letter queue",
            |v| v.has(K::MovedToDlq),
        )
        .await?;
    } else {
        let started = tokio::time::Instant::now();
        while dlq.depth().await.map(|d| d.visible).unwrap_or(0) == 0 {
            if started.elapsed() > ctx.limit() {
                return Err(ctx.fail(
                    "reached: the message landed in the dead-letter queue",
                    format!("not within {:?}", ctx.limit()),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let replay = if ctx
        .rig
        .faults
        .disabled(crate::faults::sabotage::Safeguard::InspectBeforeReplay)
    {
        // What a replay without inspection does: every letter goes back as it is.
        for letter in dlq
            .receive(10, Duration::from_secs(30), Duration::ZERO)
            .await
            .unwrap_or_default()
        {
            let _ = ctx.rig.queue.send(&letter.body, Duration::ZERO).await;
            let _ = dlq.delete(&letter.receipt).await;
        }
        crate::worker::dlq::Replay::default()
    } else {
        crate::worker::dlq::replay_inspected(&ctx.rig.ledger, &ctx.rig.queue, &Actor::Drill, 10)
            .await
            .map_err(|e| ctx.fail("the dead letter was replayed", e.to_string()))?
    };
    let view = ctx
        .until(&job, "the replayed job succeeded", |v| {
            v.job.state == JobState::Succeeded
        })
        .await?;
    let replayed = view.first(K::Replayed);
    let moved = view.first(K::MovedToDlq);
    // The embedded queue records the move with the receive count that caused it; SQS moves
    // letters out of sight, so there the letter's presence in the DLQ after the worker's
    // receives is the evidence, and the replay records it.
    let (landed, detail) = match (ctx.rig.queue_kind, moved) {
        (_, Some(m)) => {
            let receives = m
                .detail_as::<detail::MovedToDlq>()
                .and_then(|d| d.receive_count)
                .unwrap_or(0);
            (
                receives >= i64::from(MAX_RECEIVE_COUNT) && replayed.is_some_and(from_the_dlq),
                format!("moved after {receives} receive(s); maxReceiveCount {MAX_RECEIVE_COUNT}"),
            )
        }
        (DrillQueue::Sqs, None) => {
            ctx.note(
                "SQS moves a letter to the dead-letter queue without telling anyone: the \
                 letter's arrival there is read from the DLQ itself, and the replay records it.",
            );
            (
                replayed.is_some_and(from_the_dlq),
                "found in the dead-letter queue and replayed from it".to_owned(),
            )
        }
        (DrillQueue::Embedded, None) => (false, "no moved_to_dlq on the timeline".to_owned()),
    };
    ctx.check(
        "the message landed in the DLQ after maxReceiveCount receives",
        landed,
        detail,
        &[moved, replayed].into_iter().flatten().collect::<Vec<_>>(),
    );
    let inspected = replayed.is_some_and(|e| {
        e.detail_as::<detail::Replayed>()
            .is_some_and(|d| d.action == "redispatched" && d.state == "ready")
    }) && replay.jobs.iter().any(|j| j.job_id == job);
    ctx.check(
        "replay inspected the ledger before sending anything",
        inspected,
        match replayed {
            Some(e) => format!("replayed: {}", e.detail),
            None => "no replay on the timeline".into(),
        },
        &replayed.into_iter().collect::<Vec<_>>(),
    );
    let accepted = view.first(K::ResultAccepted);
    ctx.check(
        "job id, deadline and attempt budget were kept",
        view.job.job_id == before.job.job_id
            && view.job.deadline_at == before.job.deadline_at
            && view.job.max_attempts == before.job.max_attempts
            && view.job.attempt_count == 1
            && accepted.is_some(),
        format!(
            "deadline kept: {}; budget {} of {}; attempt count {}",
            view.job.deadline_at == before.job.deadline_at,
            view.job.max_attempts,
            before.job.max_attempts,
            view.job.attempt_count
        ),
        &accepted.into_iter().collect::<Vec<_>>(),
    );
    Ok(())
}
