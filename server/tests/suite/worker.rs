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

use crate::helpers::{count_kind, kinds, new_job, rig, rig_with, wait_for_event, QueueKind};
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
    wait_for_event(&rig.ledger, &job_id, "message_deleted", LIMIT).await;
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
    wait_for_event(&rig.ledger, &other_tenant, "moved_to_dlq", LIMIT).await;
    rig.stop().await;
}

async fn many_jobs_across_workers_with_duplicates_and_failed_deletes_each_get_one_result(
    kind: QueueKind,
) {
    // Rates high enough that every kind of fault surely fires at these job counts
    // (no delete fault among 60 jobs at 15 % has odds below one in ten thousand).
    let faults = FaultPlan {
        delete_timeout: 0.15,
        visibility_timeout: 0.1,
        duplicate: 0.1,
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
            .all(|e| e.at <= deadline + 500_000),
        "renewals stop at the deadline (an event is written just after the renewal it records)"
    );
    // A late copy finds the terminal decision and creates no budget.
    rig.queue
        .send(&JobMessage::body(&job_id, "acme"), Duration::ZERO)
        .await
        .unwrap();
    wait_for_event(&rig.ledger, &job_id, "delivery_acked_terminal", LIMIT).await;
    let after = rig.ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(after.state, JobState::Expired);
    assert_eq!(after.attempt_count, 1);
    rig.stop().await;
}

/// Faults only the embedded queue can inject exactly: a copy of a message while its owner
/// works, and a copy after deletion.
mod embedded_copies {
    use super::*;
    use crate::helpers::Rig;
    use fenceline::queue::AnyQueue;

    async fn message_id_of(rig: &Rig, job_id: &str) -> String {
        rig.ledger
            .events(job_id, 0, 100)
            .await
            .unwrap()
            .into_iter()
            .find_map(|e| (e.kind == "delivery_received").then(|| e.delivery.unwrap().message_id))
            .expect("a delivery")
    }

    fn embedded(rig: &Rig) -> &fenceline::queue::embedded::EmbeddedQueue {
        match rig.queue.inner() {
            AnyQueue::Embedded(q) => q,
            AnyQueue::Sqs(_) => unreachable!("embedded rig"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_copy_delivered_while_the_owner_works_is_suppressed_without_inference() {
        let rig = rig(
            QueueKind::EmbeddedSqlite,
            StubConfig {
                latency: Duration::from_secs(3),
                ..Default::default()
            },
            2,
        )
        .await;
        let job_id = rig.submit("dup").await;
        rig.wait_for(&job_id, LIMIT, |j| j.pending_attempt.is_some())
            .await;
        let message_id = message_id_of(&rig, &job_id).await;
        embedded(&rig)
            .deliver_copy(
                &message_id,
                &JobMessage::body(&job_id, "acme"),
                Duration::ZERO,
            )
            .await
            .unwrap();
        rig.wait_for(&job_id, LIMIT, |j| j.state == JobState::Succeeded)
            .await;
        assert!(count_kind(&rig.ledger, &job_id, "duplicate_suppressed").await >= 1);
        assert_eq!(rig.stub.calls_for(&job_id), 1);
        assert_eq!(rig.ledger.attempts(&job_id).await.unwrap().len(), 1);
        rig.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_copy_delivered_after_deletion_is_acknowledged_without_inference() {
        let rig = rig(QueueKind::EmbeddedPostgres, quick(), 1).await;
        let job_id = rig.submit("after-delete").await;
        rig.wait_for(&job_id, LIMIT, |j| j.state == JobState::Succeeded)
            .await;
        let message_id = message_id_of(&rig, &job_id).await;
        embedded(&rig)
            .deliver_copy(
                &message_id,
                &JobMessage::body(&job_id, "acme"),
                Duration::ZERO,
            )
            .await
            .unwrap();
        let until = tokio::time::Instant::now() + LIMIT;
        while count_kind(&rig.ledger, &job_id, "delivery_acked_terminal").await == 0 {
            assert!(
                tokio::time::Instant::now() < until,
                "the copy was never acknowledged"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(rig.stub.calls_for(&job_id), 1);
        rig.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_lost_response_is_settled_by_retrieval_not_by_a_second_call() {
        let rig = rig(
            QueueKind::EmbeddedSqlite,
            StubConfig {
                latency: Duration::from_millis(50),
                lost_response_rate: 1.0,
                ..Default::default()
            },
            1,
        )
        .await;
        let job_id = rig.submit("lost").await;
        rig.wait_for(&job_id, LIMIT, |j| j.state == JobState::Succeeded)
            .await;
        assert_eq!(rig.stub.calls_for(&job_id), 1);
        assert_eq!(rig.ledger.attempts(&job_id).await.unwrap().len(), 1);
        rig.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_graceful_shutdown_hands_an_attempt_in_flight_back_to_the_ledger() {
        let rig = rig(
            QueueKind::EmbeddedSqlite,
            StubConfig {
                latency: Duration::from_secs(30),
                ..Default::default()
            },
            1,
        )
        .await;
        let job_id = rig.submit("shutdown").await;
        rig.wait_for(&job_id, LIMIT, |j| j.pending_attempt.is_some())
            .await;
        let ledger = rig.ledger.clone();
        rig.stop().await;
        let job = ledger.job(&job_id).await.unwrap().unwrap();
        assert_eq!(
            job.state,
            JobState::Unknown,
            "the call may have reached the model"
        );
        assert_eq!(job.recovery_reason.as_deref(), Some("shutdown"));
        assert_eq!(
            ledger.attempts(&job_id).await.unwrap()[0].outcome,
            AttemptOutcome::Lost
        );
        assert!(kinds(&ledger, &job_id)
            .await
            .iter()
            .any(|k| k == "message_deleted"));
    }
}

mod reaper {
    use super::*;
    use fenceline::job::Actor;
    use fenceline::provider::stub::StubProvider;
    use fenceline::provider::{Progress, Provider, ProviderRequest};
    use fenceline::worker::reaper::reap_once;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_reaper_recovers_reconciles_expires_and_redispatches() {
        let (ledger, _db) = crate::helpers::fresh_ledger(crate::helpers::Db::Sqlite).await;
        let stub = StubProvider::new(StubConfig::default());
        // An owner that called the model and vanished before committing.
        let job_id =
            crate::helpers::create(&ledger, new_job("acme", "vanished", serde_json::json!(1)))
                .await;
        let claimed = ledger
            .claim(&job_id, "gone", Duration::from_millis(100))
            .await
            .unwrap();
        let attempt = ledger
            .start_attempt(&job_id, claimed.epoch, "gone", "stub")
            .await
            .unwrap();
        let client_id = format!("{job_id}:{}", attempt.attempt_no);
        ledger
            .set_provider_request_id(&job_id, attempt.attempt_no, claimed.epoch, &client_id)
            .await
            .unwrap();
        let request = ProviderRequest {
            job_id: job_id.clone(),
            attempt_no: attempt.attempt_no,
            client_request_id: client_id,
            input: serde_json::json!(1),
            model: serde_json::json!({}),
        };
        stub.call(request, Progress::default()).await;
        // A job past its deadline, and one whose message went missing.
        let mut short = new_job("acme", "short", serde_json::json!(2));
        short.deadline = Duration::from_millis(100);
        let short_id = crate::helpers::create(&ledger, short).await;
        let quiet_id =
            crate::helpers::create(&ledger, new_job("acme", "quiet", serde_json::json!(3))).await;
        let outbox = ledger
            .claim_outbox(10, Duration::from_secs(60))
            .await
            .unwrap();
        let sent: Vec<_> = outbox
            .into_iter()
            .map(|item| (item, "m".to_owned()))
            .collect();
        ledger.mark_dispatched(&sent, "test").await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;

        let first = reap_once(&ledger, &stub, Duration::from_millis(200))
            .await
            .unwrap();
        assert_eq!(first.expired, 1);
        assert_eq!(first.recovered, 1);
        assert_eq!(
            first.reconciled, 1,
            "retrieval found the vanished owner's answer"
        );
        assert!(first.redispatched >= 1);
        let job = ledger.job(&job_id).await.unwrap().unwrap();
        assert_eq!(job.state, JobState::Succeeded);
        assert_eq!(
            ledger.decisions(&job_id).await.unwrap()[0].actor,
            Actor::System.to_string()
        );
        assert_eq!(
            ledger.job(&short_id).await.unwrap().unwrap().state,
            JobState::Expired
        );
        assert!(
            kinds(&ledger, &quiet_id)
                .await
                .iter()
                .filter(|k| *k == "dispatched")
                .count()
                == 1
        );
        assert!(
            ledger.outbox_pending().await.unwrap() >= 1,
            "the quiet job is queued to be sent again"
        );
    }
}

on_every_queue!(a_dead_letter_replay_inspects_the_ledger_first);

async fn a_dead_letter_replay_inspects_the_ledger_first(kind: QueueKind) {
    use fenceline::job::Actor;
    use fenceline::worker::dlq::replay_inspected;
    let t = crate::helpers::fresh_queue(kind, 2).await;
    let (ledger, _db) = match &t.ledger {
        Some(l) => (l.clone(), None),
        None => {
            let (l, db) = crate::helpers::fresh_ledger(crate::helpers::Db::Sqlite).await;
            (l, Some(db))
        }
    };
    let workable =
        crate::helpers::create(&ledger, new_job("acme", "workable", serde_json::json!(1))).await;
    let finished =
        crate::helpers::create(&ledger, new_job("acme", "finished", serde_json::json!(2))).await;
    let claimed = ledger
        .claim(&finished, "w", Duration::from_secs(30))
        .await
        .unwrap();
    let attempt = ledger
        .start_attempt(&finished, claimed.epoch, "w", "stub")
        .await
        .unwrap();
    ledger
        .accept_result(&finished, claimed.epoch, attempt.attempt_no, "w", "{}")
        .await
        .unwrap();
    for id in [&workable, &finished] {
        t.queue
            .send(&JobMessage::body(id, "acme"), Duration::ZERO)
            .await
            .unwrap();
    }
    // Consumers that keep failing: every receive lets the message come straight back.
    for _ in 0..6 {
        let _ = t
            .queue
            .receive(10, Duration::ZERO, Duration::from_millis(200))
            .await
            .unwrap();
    }
    let outbox_before = ledger.outbox_pending().await.unwrap();
    let replay = replay_inspected(&ledger, &t.queue, &Actor::Operator("ana".into()), 10)
        .await
        .unwrap();
    assert_eq!(replay.redispatched, 1, "{replay:?}");
    assert_eq!(replay.dropped_terminal, 1, "{replay:?}");
    assert_eq!(ledger.outbox_pending().await.unwrap(), outbox_before + 1);
    assert!(kinds(&ledger, &workable)
        .await
        .iter()
        .any(|k| k == "replayed"));
    let job = ledger.job(&workable).await.unwrap().unwrap();
    assert_eq!(
        (job.state, job.attempt_count, job.max_attempts),
        (JobState::Ready, 0, 3)
    );
    let dlq = t.queue.dead_letters().unwrap();
    assert!(dlq
        .receive(10, Duration::from_secs(5), Duration::from_millis(200))
        .await
        .unwrap()
        .is_empty());
}
