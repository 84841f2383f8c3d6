//! The worker, dispatcher and reaper against real queues: the embedded queue (on SQLite and
//! PostgreSQL) and an SQS protocol peer.

use std::collections::HashMap;
use std::time::Duration;

use fenceline::job::JobState;
use fenceline::ledger::AttemptOutcome;
use fenceline::provider::stub::StubConfig;
use fenceline::queue::faults::FaultPlan;
use fenceline::queue::Queue;
use fenceline::worker::message::JobMessage;

use crate::helpers::{count_kind, kinds, new_job, rig, rig_with, QueueKind};
use crate::on_every_queue;

const LIMIT: Duration = Duration::from_secs(20);

fn quick() -> StubConfig {
    StubConfig {
        latency: Duration::from_millis(20),
        ..Default::default()
    }
}

on_every_queue!(
    a_submitted_job_runs_to_one_accepted_result_and_its_message_is_deleted,
    a_call_longer_than_visibility_renews_visibility_and_lease_and_is_not_redelivered,
    malformed_messages_are_recorded_and_dead_lettered_and_the_worker_keeps_running,
    many_jobs_across_workers_with_duplicates_and_failed_deletes_each_get_one_result,
    a_retryable_failure_backs_off_and_the_outbox_sends_the_job_again,
    a_call_past_the_deadline_expires_the_job_and_a_later_copy_is_acknowledged,
);

async fn a_submitted_job_runs_to_one_accepted_result_and_its_message_is_deleted(kind: QueueKind) {
    let rig = rig(kind, quick(), 1).await;
    let job_id = rig.submit("one").await;
    let job = rig
        .wait_for(&job_id, LIMIT, |j| j.state == JobState::Succeeded)
        .await;
    assert_eq!(job.attempt_count, 1);
    assert_eq!(rig.stub.calls_for(&job_id), 1);
    let kinds = kinds(&rig.ledger, &job_id).await;
    for expected in [
        "job_created",
        "dispatched",
        "delivery_received",
        "claimed",
        "attempt_started",
        "attempt_finished",
        "result_accepted",
        "message_deleted",
    ] {
        assert!(
            kinds.iter().any(|k| k == expected),
            "{expected} missing from {kinds:?}"
        );
    }
    let received = rig.ledger.events(&job_id, 0, 100).await.unwrap();
    let delivery = received
        .iter()
        .find(|e| e.kind == "delivery_received")
        .and_then(|e| e.delivery.clone())
        .expect("the delivery is on the timeline");
    assert_eq!(
        delivery.handle_hash.len(),
        8,
        "a fingerprint, never the handle"
    );
    assert_eq!(delivery.receive_count, 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let depth = rig.queue.depth().await.unwrap();
    assert_eq!(
        (depth.visible, depth.in_flight),
        (0, 0),
        "the message is gone"
    );
    rig.stop().await;
}

async fn a_call_longer_than_visibility_renews_visibility_and_lease_and_is_not_redelivered(
    kind: QueueKind,
) {
    let rig = rig(
        kind,
        StubConfig {
            latency: Duration::from_millis(4500),
            ..Default::default()
        },
        2,
    )
    .await;
    let job_id = rig.submit("long").await;
    let job = rig
        .wait_for(&job_id, LIMIT, |j| j.state == JobState::Succeeded)
        .await;
    assert_eq!(job.owner_epoch, 1, "no other owner was ever authorized");
    assert_eq!(rig.stub.calls_for(&job_id), 1);
    assert!(count_kind(&rig.ledger, &job_id, "visibility_renewed").await >= 3);
    assert!(count_kind(&rig.ledger, &job_id, "lease_renewed").await >= 3);
    assert_eq!(
        count_kind(&rig.ledger, &job_id, "delivery_received").await,
        1
    );
    rig.stop().await;
}

async fn malformed_messages_are_recorded_and_dead_lettered_and_the_worker_keeps_running(
    kind: QueueKind,
) {
    let rig = rig(kind, quick(), 1).await;
    let other_tenant = crate::helpers::create(
        &rig.ledger,
        new_job("globex", "theirs", serde_json::json!(1)),
    )
    .await;
    // Let the dispatcher's own message for it go through first.
    rig.wait_for(&other_tenant, LIMIT, |j| j.state == JobState::Succeeded)
        .await;
    let bad = [
        "not json at all".to_owned(),
        "x".repeat(20 * 1024),
        r#"{"job_id":"job_0190b3c2-0000-7000-8000-000000000000","tenant":"acme"}"#.to_owned(),
        JobMessage::body(&other_tenant, "acme"),
        r#"{"hello":"world"}"#.to_owned(),
    ];
    for body in &bad {
        rig.queue.send(body, Duration::ZERO).await.unwrap();
    }
    let job_id = rig.submit("after-the-bad-ones").await;
    rig.wait_for(&job_id, LIMIT, |j| j.state == JobState::Succeeded)
        .await;
    let until = tokio::time::Instant::now() + LIMIT;
    let counts: HashMap<String, i64> = loop {
        let counts: HashMap<_, _> = rig
            .ledger
            .rejected_message_counts()
            .await
            .unwrap()
            .into_iter()
            .collect();
        if counts.values().sum::<i64>() >= 5 || tokio::time::Instant::now() > until {
            break counts;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for reason in [
        "not_json",
        "oversize",
        "unknown_job",
        "wrong_tenant",
        "not_a_job_message",
    ] {
        assert_eq!(counts.get(reason), Some(&1), "{reason}: {counts:?}");
    }
    let dlq = rig.queue.dead_letters().expect("a dead-letter queue");
    let mut dead = 0;
    for _ in 0..10 {
        dead += dlq
            .receive(10, Duration::from_secs(30), Duration::from_millis(200))
            .await
            .unwrap()
            .len();
        if dead >= 5 {
            break;
        }
    }
    assert_eq!(dead, 5, "every refused message is in the dead-letter queue");
    assert!(kinds(&rig.ledger, &other_tenant)
        .await
        .iter()
        .any(|k| k == "moved_to_dlq"));
    rig.stop().await;
}

async fn many_jobs_across_workers_with_duplicates_and_failed_deletes_each_get_one_result(
    kind: QueueKind,
) {
    let faults = FaultPlan {
        delete_timeout: 0.05,
        visibility_timeout: 0.05,
        duplicate: 0.05,
    };
    let rig = rig_with(kind, quick(), 3, faults).await;
    let n = if kind == QueueKind::Sqs { 60 } else { 150 };
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(rig.submit(&format!("many-{i}")).await);
    }
    for id in &ids {
        rig.wait_for(id, Duration::from_secs(60), |j| j.state.is_terminal())
            .await;
    }
    for id in &ids {
        let job = rig.ledger.job(id).await.unwrap().unwrap();
        assert_eq!(job.state, JobState::Succeeded, "{id}");
        let attempts = rig.ledger.attempts(id).await.unwrap();
        assert_eq!(attempts.len(), 1, "{id}: one attempt");
        assert_eq!(attempts[0].outcome, AttemptOutcome::Succeeded);
        assert_eq!(rig.stub.calls_for(id), 1, "{id}: the model was called once");
    }
    let (deletes, _, duplicates) = rig.queue.injected();
    assert!(
        deletes > 0 && duplicates > 0,
        "faults were injected: {:?}",
        rig.queue.injected()
    );
    rig.stop().await;
}

async fn a_retryable_failure_backs_off_and_the_outbox_sends_the_job_again(kind: QueueKind) {
    let rig = rig(
        kind,
        StubConfig {
            latency: Duration::from_millis(20),
            retryable_rate: 1.0,
            ..Default::default()
        },
        1,
    )
    .await;
    let mut job = new_job("acme", "always-rate-limited", serde_json::json!(1));
    job.max_attempts = 3;
    let job_id = rig.submit_job(job).await;
    let job = rig
        .wait_for(&job_id, LIMIT, |j| j.state.is_terminal())
        .await;
    assert_eq!(job.state, JobState::FailedTerminal);
    assert_eq!(job.attempt_count, 3, "the budget, and not one attempt more");
    assert_eq!(job.error_code.as_deref(), Some("stub_rate_limited"));
    let events = rig.ledger.events(&job_id, 0, 200).await.unwrap();
    let retries: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "state_changed" && e.detail["to"] == "retry_authorized")
        .map(|e| e.detail["retry_in_ms"].as_i64().unwrap())
        .collect();
    assert_eq!(retries.len(), 2);
    assert!(retries[1] > retries[0], "backoff grows: {retries:?}");
    assert_eq!(count_kind(&rig.ledger, &job_id, "dispatched").await, 3);
    assert_eq!(
        count_kind(&rig.ledger, &job_id, "budget_exhausted").await,
        1
    );
    rig.stop().await;
}

async fn a_call_past_the_deadline_expires_the_job_and_a_later_copy_is_acknowledged(
    kind: QueueKind,
) {
    let rig = rig(
        kind,
        StubConfig {
            latency: Duration::from_secs(6),
            ..Default::default()
        },
        1,
    )
    .await;
    let mut job = new_job("acme", "too-slow", serde_json::json!(1));
    job.deadline = Duration::from_secs(3);
    let job_id = rig.submit_job(job).await;
    let job = rig
        .wait_for(&job_id, LIMIT, |j| j.state.is_terminal())
        .await;
    assert_eq!(job.state, JobState::Expired);
    let deadline = job.deadline_at;
    let events = rig.ledger.events(&job_id, 0, 500).await.unwrap();
    assert!(
        events
            .iter()
            .filter(|e| e.kind == "lease_renewed" || e.kind == "visibility_renewed")
            .all(|e| e.at <= deadline),
        "renewals stop at the deadline"
    );
    // A late copy finds the terminal decision and creates no budget.
    rig.queue
        .send(&JobMessage::body(&job_id, "acme"), Duration::ZERO)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = rig.ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(after.state, JobState::Expired);
    assert_eq!(after.attempt_count, 1);
    assert!(count_kind(&rig.ledger, &job_id, "delivery_acked_terminal").await >= 1);
    rig.stop().await;
}
