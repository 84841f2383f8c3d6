//! The worker, dispatcher and reaper against real queues: the embedded queue (on SQLite and
//! PostgreSQL) and an SQS protocol peer.

use std::collections::HashMap;
use std::time::Duration;

use fenceline::job::message::JobMessage;
use fenceline::job::{detail, JobState};
use fenceline::ledger::AttemptOutcome;
use fenceline::provider::stub::StubConfig;
use fenceline::queue::faults::FaultPlan;
use fenceline::queue::Queue;

use crate::helpers::{
    as_owner, count_kind, kinds, new_job, rig, rig_with, wait_for_event, QueueKind,
};
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
    // Every renewal's events are numbered without a hole.
    let events = rig.ledger.events(&job_id, 0, 500).await.unwrap();
    for pair in events.windows(2) {
        assert_eq!(
            pair[1].seq,
            pair[0].seq + 1,
            "no gap after #{}",
            pair[0].seq
        );
    }
    assert_eq!(
        count_kind(&rig.ledger, &job_id, "delivery_received").await,
        1
    );
    rig.stop().await;
}

/// On the embedded queue a heartbeat round renews a job's lease and its visibility in one
/// transaction. When the commit's answer comes only after the round stopped waiting for it,
/// the visibility outcome committed with it is on the timeline once: nothing records it again
/// as uncertain.
async fn a_renewal_answered_late_records_its_visibility_outcome_once(kind: QueueKind) {
    let rig = rig(
        kind,
        StubConfig {
            latency: Duration::from_millis(5000),
            ..Default::default()
        },
        1,
    )
    .await;
    let job_id = rig.submit("late").await;
    wait_for_event(&rig.ledger, &job_id, "lease_renewed", LIMIT).await;
    // Longer than a round waits for a renewal (1.7 s with the compressed timings).
    rig.ledger
        .slow_renewal_answers(1, Duration::from_millis(2500));
    rig.wait_for(&job_id, LIMIT, |j| j.state == JobState::Succeeded)
        .await;
    let events = rig.ledger.all_events(&job_id).await.unwrap();
    let count = |kind: &str| events.iter().filter(|e| e.kind.as_str() == kind).count();
    let uncertain = events
        .iter()
        .filter(|e| {
            e.detail_as::<detail::VisibilityRenewalFailed>()
                .is_some_and(|d| d.uncertain)
                || e.detail_as::<detail::DeleteFailed>()
                    .is_some_and(|d| d.uncertain)
        })
        .count();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(uncertain, 0, "{kinds:?}");
    assert_eq!(
        count("visibility_renewed") + count("visibility_renewal_failed"),
        count("lease_renewed"),
        "one visibility outcome for each renewal: {kinds:?}"
    );
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_renewal_answered_late_records_its_visibility_outcome_once_on_sqlite() {
    a_renewal_answered_late_records_its_visibility_outcome_once(QueueKind::EmbeddedSqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_renewal_answered_late_records_its_visibility_outcome_once_on_postgres() {
    if crate::helpers::skip_postgres() {
        return;
    }
    a_renewal_answered_late_records_its_visibility_outcome_once(QueueKind::EmbeddedPostgres).await;
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
        .filter_map(|e| e.detail_as::<detail::StateChanged>())
        .filter(|d| d.to == "retry_authorized")
        .map(|d| d.retry_in_ms.unwrap())
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

    pub(super) async fn message_id_of(rig: &Rig, job_id: &str) -> String {
        rig.ledger
            .events(job_id, 0, 100)
            .await
            .unwrap()
            .into_iter()
            .find_map(|e| (e.kind == "delivery_received").then(|| e.delivery.unwrap().message_id))
            .expect("a delivery")
    }

    pub(super) fn embedded(rig: &Rig) -> &fenceline::queue::embedded::EmbeddedQueue {
        match rig.queue.inner() {
            AnyQueue::Embedded(q) => q,
            AnyQueue::Sqs(_) => unreachable!("embedded rig"),
        }
    }

    /// Two workers; a job whose call takes `latency`; once the call is under way, a copy of
    /// its message is delivered (as a standard queue may).
    pub(super) async fn copy_while_the_owner_works(latency: Duration, key: &str) -> (Rig, String) {
        let rig = rig(
            QueueKind::EmbeddedSqlite,
            StubConfig {
                latency,
                ..Default::default()
            },
            2,
        )
        .await;
        let job_id = rig.submit(key).await;
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
        (rig, job_id)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_copy_delivered_while_the_owner_works_is_suppressed_without_inference() {
        let (rig, job_id) = copy_while_the_owner_works(Duration::from_secs(3), "dup").await;
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
                retrieval: true,
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
    use fenceline::worker::reaper::{reap_once, reconcile_once, RetrievalCursor};

    /// A job whose owner (worker `gone`, holding a lease of `lease`) called the model, which
    /// answered, and vanished before committing. The attempt keeps the provider's own id for
    /// the request; retrieval asks by Fenceline's.
    async fn called_and_vanished(
        ledger: &fenceline::ledger::Ledger,
        stub: &StubProvider,
        new: fenceline::ledger::NewJob,
        lease: Duration,
    ) -> String {
        let job_id = crate::helpers::create(ledger, new).await;
        let (claimed, attempt) = ledger
            .claim_and_start(&job_id, "gone", lease, None, "stub")
            .await
            .unwrap();
        let client_id = format!("{job_id}:{}", attempt.attempt_no);
        ledger
            .set_provider_request_id(
                &as_owner(&job_id, claimed.epoch, "gone"),
                attempt.attempt_no,
                "req_named_by_the_provider",
            )
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
        job_id
    }

    /// The deployment's provider is never asked about a drill's jobs (their drill decides
    /// them) nor about an attempt another provider ran. A job of the deployment's own beside
    /// them is asked about and settled.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn provider_retrieval_leaves_drill_jobs_to_their_drill() {
        let (ledger, _db) = crate::helpers::fresh_ledger(crate::helpers::Db::Sqlite).await;
        let stub = StubProvider::new(StubConfig {
            retrieval: true,
            ..Default::default()
        });
        let mut ids = Vec::new();
        for drill in [Some("drl_someone"), None] {
            let mut new = new_job("acme", drill.unwrap_or("own"), serde_json::json!(1));
            new.drill_run = drill.map(str::to_owned);
            ids.push(called_and_vanished(&ledger, &stub, new, Duration::from_millis(50)).await);
        }
        // A job whose last attempt went to another provider (its route moved it on): this
        // provider never heard of it.
        let elsewhere =
            crate::helpers::create(&ledger, new_job("acme", "else", serde_json::json!(1))).await;
        ledger
            .claim_and_start(
                &elsewhere,
                "gone",
                Duration::from_millis(50),
                None,
                "anthropic",
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(
            reap_once(&ledger, Duration::from_secs(600))
                .await
                .unwrap()
                .recovered,
            3
        );
        let reconciled = reconcile_once(
            &ledger,
            &stub,
            &mut RetrievalCursor::default(),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        assert_eq!(
            (reconciled.asked, reconciled.settled),
            (1, 1),
            "{reconciled:?}"
        );
        let drill_job = ledger.job(&ids[0]).await.unwrap().unwrap();
        assert_eq!(drill_job.state, JobState::Unknown, "left to its drill");
        let own = ledger.job(&ids[1]).await.unwrap().unwrap();
        assert_eq!(own.state, JobState::Succeeded);
        let other = ledger.job(&elsewhere).await.unwrap().unwrap();
        assert_eq!(
            other.state,
            JobState::Unknown,
            "not asked of the wrong provider"
        );
        assert_eq!(
            reconciled.unsupported, 1,
            "and marked as needing a decision"
        );
        assert_eq!(
            crate::helpers::count_kind(&ledger, &elsewhere, "retrieval_unsupported").await,
            1
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_reaper_recovers_reconciles_expires_and_redispatches() {
        let (ledger, _db) = crate::helpers::fresh_ledger(crate::helpers::Db::Sqlite).await;
        let stub = StubProvider::new(StubConfig {
            retrieval: true,
            ..Default::default()
        });
        // An owner that called the model and vanished before committing.
        let vanished = new_job("acme", "vanished", serde_json::json!(1));
        let job_id =
            called_and_vanished(&ledger, &stub, vanished, Duration::from_millis(100)).await;
        // A job past its deadline, and one whose message went missing.
        let mut short = new_job("acme", "short", serde_json::json!(2));
        short.deadline = Duration::from_millis(100);
        let short_id = crate::helpers::create(&ledger, short).await;
        let quiet_id =
            crate::helpers::create(&ledger, new_job("acme", "quiet", serde_json::json!(3))).await;
        let outbox = ledger
            .claim_outbox(10, Duration::from_secs(60), "")
            .await
            .unwrap();
        let sent: Vec<_> = outbox
            .into_iter()
            .map(|item| (item, "m".to_owned()))
            .collect();
        ledger.mark_dispatched(&sent, "test", "").await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;

        let first = reap_once(&ledger, Duration::from_millis(200))
            .await
            .unwrap();
        assert_eq!(first.expired, 1);
        assert_eq!(first.recovered, 1);
        let reconciled = reconcile_once(
            &ledger,
            &stub,
            &mut RetrievalCursor::default(),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        assert_eq!(
            reconciled.settled, 1,
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
        .start_attempt(&as_owner(&finished, claimed.epoch, "w"), "stub")
        .await
        .unwrap();
    ledger
        .accept_result(
            &as_owner(&finished, claimed.epoch, "w"),
            attempt.attempt_no,
            "{}",
        )
        .await
        .unwrap();
    let uncertain =
        crate::helpers::create(&ledger, new_job("acme", "uncertain", serde_json::json!(3))).await;
    let claimed = ledger
        .claim(&uncertain, "w", Duration::from_secs(30))
        .await
        .unwrap();
    ledger
        .start_attempt(&as_owner(&uncertain, claimed.epoch, "w"), "stub")
        .await
        .unwrap();
    ledger
        .release(&as_owner(&uncertain, claimed.epoch, "w"), "test")
        .await
        .unwrap();
    // The embedded queue got each job's message as the job was created; SQS gets them here,
    // as the dispatcher would send them.
    if kind == QueueKind::Sqs {
        for id in [&workable, &finished, &uncertain] {
            t.queue
                .send(&JobMessage::body(id, "acme"), Duration::ZERO)
                .await
                .unwrap();
        }
    }
    // Consumers that keep failing: every receive lets the message come straight back.
    for _ in 0..6 {
        let _ = t
            .queue
            .receive(10, Duration::ZERO, Duration::from_millis(200))
            .await
            .unwrap();
    }
    if kind != QueueKind::Sqs {
        // The embedded queue's move to the dead-letter queue is observable: the reaper puts it
        // on each job's timeline (SQS moves letters out of sight).
        fenceline::worker::reaper::reap_once(&ledger, Duration::from_secs(600))
            .await
            .unwrap();
        for id in [&workable, &finished, &uncertain] {
            let moved = ledger
                .events(id, 0, 100)
                .await
                .unwrap()
                .into_iter()
                .filter(|e| e.kind == "moved_to_dlq")
                .collect::<Vec<_>>();
            assert_eq!(moved.len(), 1, "{id}: {:?}", kinds(&ledger, id).await);
            let moved = moved[0].detail_as::<detail::MovedToDlq>().unwrap();
            assert!(moved.receive_count.unwrap() >= 2);
        }
    }
    let outbox_before = ledger.outbox_pending().await.unwrap();
    let replay = replay_inspected(&ledger, &t.queue, &Actor::Operator("ana".into()), 10)
        .await
        .unwrap();
    assert_eq!(replay.redispatched, 1, "{replay:?}");
    assert_eq!(replay.dropped_terminal, 1, "{replay:?}");
    assert_eq!(replay.awaiting_decision, 1, "{replay:?}");
    assert_eq!(ledger.outbox_pending().await.unwrap(), outbox_before + 1);
    // Each inspected letter's fate is on its job's timeline, with who replayed.
    for (id, action) in [
        (&workable, "redispatched"),
        (&finished, "dropped_terminal"),
        (&uncertain, "kept_awaiting_decision"),
    ] {
        let replayed = ledger
            .events(id, 0, 100)
            .await
            .unwrap()
            .into_iter()
            .find(|e| e.kind == "replayed")
            .unwrap_or_else(|| panic!("{id} has no replayed event"));
        assert_eq!(
            replayed.detail_as::<detail::Replayed>().unwrap().action,
            action
        );
        assert_eq!(replayed.actor, "operator:ana");
    }
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

/// A model whose calls take a set time per attempt and which notes when a call was cancelled
/// (its future dropped before it answered).
#[derive(Clone)]
struct Scripted {
    latencies: std::sync::Arc<Vec<Duration>>,
    cancelled: std::sync::Arc<std::sync::Mutex<Vec<(i64, tokio::time::Instant)>>>,
}

impl Scripted {
    fn new(latencies: Vec<Duration>) -> Self {
        Scripted {
            latencies: std::sync::Arc::new(latencies),
            cancelled: Default::default(),
        }
    }

    fn cancelled(&self) -> Vec<(i64, tokio::time::Instant)> {
        self.cancelled.lock().unwrap().clone()
    }
}

struct CancelGuard {
    attempt_no: i64,
    armed: bool,
    into: std::sync::Arc<std::sync::Mutex<Vec<(i64, tokio::time::Instant)>>>,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.armed {
            self.into
                .lock()
                .unwrap()
                .push((self.attempt_no, tokio::time::Instant::now()));
        }
    }
}

impl fenceline::provider::Provider for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    fn default_model(&self) -> &str {
        "m"
    }

    async fn call(
        &self,
        request: fenceline::provider::ProviderRequest,
        progress: fenceline::provider::Progress,
    ) -> fenceline::provider::ProviderOutcome {
        let mut guard = CancelGuard {
            attempt_no: request.attempt_no,
            armed: true,
            into: self.cancelled.clone(),
        };
        let index = usize::try_from(request.attempt_no - 1).unwrap_or(0);
        let latency = self.latencies[index.min(self.latencies.len() - 1)];
        let until = tokio::time::Instant::now() + latency;
        while tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(100)).await;
            progress.tick();
        }
        guard.armed = false;
        fenceline::provider::ProviderOutcome::Succeeded {
            answer: format!("{{\"attempt\": {}}}", request.attempt_no),
            request_id: None,
            limits: Default::default(),
            usage: None,
        }
    }

    async fn retrieve(&self, _: &str) -> fenceline::provider::Retrieval {
        fenceline::provider::Retrieval::Inconclusive
    }
}

mod hardening {
    use super::*;
    use crate::helpers::{create, deliver, fresh_ledger, skip_postgres, Db};
    use fenceline::job::Actor;
    use fenceline::ledger::Decision;
    use fenceline::queue::embedded::EmbeddedQueue;
    use fenceline::worker::{Outcome, Timings, Worker, WorkerConfig};
    use sqlx::{Connection, Executor};
    use tokio_util::sync::CancellationToken;

    fn compressed_worker(
        ledger: &fenceline::ledger::Ledger,
        queue: &EmbeddedQueue,
        provider: &Scripted,
        id: &str,
    ) -> Worker<EmbeddedQueue, Scripted> {
        let mut config = WorkerConfig::new(id);
        config.timings = Timings::compressed();
        Worker::new(ledger.clone(), queue.clone(), provider.clone(), config)
    }

    /// A renewal that hangs on a locked row must not let the model call run on unfenced:
    /// the worker stops it before its last confirmed lease runs out, and records `lease_lost`
    /// once the ledger answers again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_hanging_lease_renewal_stops_the_call_before_the_lease_can_expire() {
        if skip_postgres() {
            return;
        }
        let (ledger, db) = fresh_ledger(Db::Postgres).await;
        let queue = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
        let provider = Scripted::new(vec![Duration::from_secs(30)]);
        let worker = compressed_worker(&ledger, &queue, &provider, "A");
        let job_id = create(&ledger, new_job("acme", "hang", serde_json::json!(1))).await;
        let stop = CancellationToken::new();
        let heartbeat = worker.spawn_heartbeat(stop.clone());
        let delivery = deliver(&queue, &job_id).await;
        let task = {
            let worker = worker.clone();
            tokio::spawn(async move { worker.handle_delivery(delivery).await })
        };
        wait_for_event(&ledger, &job_id, "lease_renewed", LIMIT).await;
        // Another session locks the job row: every renewal now waits on it.
        let mut locker = sqlx::PgConnection::connect(&db.url).await.unwrap();
        locker.execute("BEGIN").await.unwrap();
        sqlx::query("SELECT job_id FROM jobs WHERE job_id = $1 FOR UPDATE")
            .bind(&job_id)
            .execute(&mut locker)
            .await
            .unwrap();
        let locked_at = tokio::time::Instant::now();
        let lease = Timings::compressed().lease;
        let until = locked_at + Duration::from_secs(10);
        while provider.cancelled().is_empty() {
            assert!(
                tokio::time::Instant::now() < until,
                "the call ran on while its renewal hung"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let cancelled_at = provider.cancelled()[0].1;
        assert!(
            cancelled_at < locked_at + lease,
            "the call stopped {:?} after the lock, but the lease lasts at most {lease:?}",
            cancelled_at - locked_at
        );
        locker.execute("ROLLBACK").await.unwrap();
        let outcome = tokio::time::timeout(LIMIT, task).await.unwrap().unwrap();
        assert!(
            matches!(&outcome, Outcome::Stopped(why) if why.starts_with("lease_lost")),
            "{outcome:?}"
        );
        wait_for_event(&ledger, &job_id, "lease_lost", LIMIT).await;
        assert_eq!(
            ledger.job(&job_id).await.unwrap().unwrap().result_ref,
            None,
            "nothing was accepted"
        );
        stop.cancel();
        heartbeat.await.unwrap();
    }

    /// An operator cancels a job while its model call runs: the worker learns it at its next
    /// renewal, stops the call, and the timeline says what became of it (which attempt, how
    /// long it had run, that it was stopped here) after the cancel.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_cancelled_jobs_running_call_is_stopped_and_its_timeline_says_so() {
        let app = crate::helpers::spawn_app(Db::Sqlite).await;
        let ledger = app.ledger.clone();
        let queue = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
        let provider = Scripted::new(vec![Duration::from_secs(8)]);
        let worker = compressed_worker(&ledger, &queue, &provider, "A");
        let job_id = create(&ledger, new_job("acme", "cancel-me", serde_json::json!(1))).await;
        let stop = CancellationToken::new();
        let heartbeat = worker.spawn_heartbeat(stop.clone());
        let delivery = deliver(&queue, &job_id).await;
        let task = {
            let worker = worker.clone();
            tokio::spawn(async move { worker.handle_delivery(delivery).await })
        };
        wait_for_event(&ledger, &job_id, "lease_renewed", LIMIT).await;
        let job = ledger.job(&job_id).await.unwrap().unwrap();
        ledger
            .cancel(
                &job_id,
                job.owner_epoch,
                JobState::Running,
                &Actor::Operator("olga".into()),
                "wrong document",
            )
            .await
            .unwrap();
        let outcome = tokio::time::timeout(LIMIT, task).await.unwrap().unwrap();
        assert!(
            matches!(&outcome, Outcome::Stopped(_) | Outcome::Fenced(_)),
            "{outcome:?}"
        );
        assert_eq!(provider.cancelled().len(), 1, "the call was stopped here");
        let events = ledger.events(&job_id, 0, 1000).await.unwrap();
        let cancel = events
            .iter()
            .position(|e| e.kind.as_str() == "decision_recorded")
            .unwrap();
        let after: Vec<_> = events[cancel..]
            .iter()
            .filter(|e| e.attempt_no == Some(1))
            .collect();
        let stopped = after
            .iter()
            .find(|e| {
                e.detail_as::<detail::LeaseLost>()
                    .is_some_and(|d| d.call.as_deref() == Some("stopped"))
            })
            .unwrap_or_else(|| panic!("no record of the call after the cancel: {events:#?}"));
        assert_eq!(
            stopped.epoch, job.owner_epoch,
            "recorded by the fenced-out owner"
        );
        assert!(
            stopped
                .detail_as::<detail::LeaseLost>()
                .and_then(|d| d.call_ran_ms)
                .unwrap()
                >= 700,
            "{:?}",
            stopped.detail
        );
        // The job page says it under the attempt, and the swimlane draws the call running on
        // past the cancel until it was stopped.
        let password = "correct horse battery staple";
        ledger
            .add_operator(
                "vera",
                fenceline::operators::Role::Viewer,
                None,
                &fenceline::operators::hash_password(password).unwrap(),
            )
            .await
            .unwrap();
        let mut browser = crate::helpers::Browser::new(&app.base);
        browser.sign_in("vera", password).await;
        let html = browser.page(&format!("/jobs/{job_id}")).await;
        assert!(
            html.contains("its call ran ") && html.contains("and was stopped by worker:A at +"),
            "{html}"
        );
        assert!(html.contains("<g class=\"attempt ran-on\">"), "{html}");
        stop.cancel();
        heartbeat.await.unwrap();
    }

    /// The same process takes a job again while its older, fenced-out task still runs: the
    /// old task's end must not release the new, live attempt.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_fenced_out_task_ending_does_not_release_the_same_jobs_live_attempt() {
        let (ledger, _db) = fresh_ledger(Db::Sqlite).await;
        let queue = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
        let provider = Scripted::new(vec![Duration::from_secs(5), Duration::from_secs(3)]);
        let worker = compressed_worker(&ledger, &queue, &provider, "A");
        let job_id = create(&ledger, new_job("acme", "again", serde_json::json!(1))).await;
        // First delivery, with no heartbeat yet: its lease lapses while the call runs.
        let first = {
            let worker = worker.clone();
            let delivery = deliver(&queue, &job_id).await;
            tokio::spawn(async move { worker.handle_delivery(delivery).await })
        };
        wait_for_event(&ledger, &job_id, "attempt_started", LIMIT).await;
        tokio::time::sleep(Timings::compressed().lease + Duration::from_millis(300)).await;
        let recovered = ledger
            .recovery_claim(&job_id, &Actor::System, "lease_expired", false)
            .await
            .unwrap();
        assert_eq!(recovered.state, JobState::Unknown);
        ledger
            .decide(
                &job_id,
                recovered.epoch,
                &Decision::AuthorizeRetry,
                &Actor::Operator("ops".into()),
                "retry",
            )
            .await
            .unwrap();
        // The same worker takes the job again at a newer epoch, now with its heartbeat.
        let second = {
            let worker = worker.clone();
            let delivery = deliver(&queue, &job_id).await;
            tokio::spawn(async move { worker.handle_delivery(delivery).await })
        };
        let started = tokio::time::Instant::now() + LIMIT;
        while ledger.job(&job_id).await.unwrap().unwrap().attempt_count < 2 {
            assert!(tokio::time::Instant::now() < started);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let stop = CancellationToken::new();
        let heartbeat = worker.spawn_heartbeat(stop.clone());
        let second = tokio::time::timeout(LIMIT, second).await.unwrap().unwrap();
        let first = tokio::time::timeout(LIMIT, first).await.unwrap().unwrap();
        assert_eq!(second, Outcome::Succeeded, "first ended as {first:?}");
        assert!(
            matches!(first, Outcome::Fenced(_) | Outcome::Stopped(_)),
            "{first:?}"
        );
        let job = ledger.job(&job_id).await.unwrap().unwrap();
        assert_eq!(job.state, JobState::Succeeded);
        assert_eq!(job.attempt_count, 2, "cumulative");
        stop.cancel();
        heartbeat.await.unwrap();
    }

    /// Visibility and the lease renew separately: a queue slow to answer visibility changes
    /// must not cost a call its lease while the ledger renews it on time. Each change here
    /// takes 1.5 s, more than a compressed lease (2 s) leaves after its margin and the next
    /// renewal; the call lasts five seconds, several leases.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_queue_slow_to_change_visibility_does_not_cost_the_lease() {
        let (ledger, _db) = fresh_ledger(Db::Sqlite).await;
        let inner = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
        let queue = super::slow_sends::Slow::new(inner.clone(), Duration::ZERO, usize::MAX)
            .with_visibility_delay(Duration::from_millis(1500));
        let provider = Scripted::new(vec![Duration::from_secs(5)]);
        let mut config = WorkerConfig::new("A");
        config.timings = Timings::compressed();
        let worker = Worker::new(ledger.clone(), queue, provider.clone(), config);
        let job_id = create(&ledger, new_job("acme", "slow-link", serde_json::json!(1))).await;
        let stop = CancellationToken::new();
        let heartbeat = worker.spawn_heartbeat(stop.clone());
        let delivery = deliver(&inner, &job_id).await;
        let outcome = tokio::time::timeout(LIMIT, worker.handle_delivery(delivery))
            .await
            .unwrap();
        let kinds: Vec<String> = ledger
            .events(&job_id, 0, 1000)
            .await
            .unwrap()
            .iter()
            .map(|e| e.kind.as_str().to_owned())
            .collect();
        assert_eq!(outcome, Outcome::Succeeded, "{kinds:?}");
        assert!(provider.cancelled().is_empty(), "the call was stopped");
        assert!(!kinds.iter().any(|k| k == "lease_lost"), "{kinds:?}");
        assert!(kinds.iter().any(|k| k == "lease_renewed"), "{kinds:?}");
        assert!(kinds.iter().any(|k| k == "visibility_renewed"), "{kinds:?}");
        stop.cancel();
        heartbeat.await.unwrap();
    }

    /// An owner whose delivery was overtaken (visibility lapsed, the message received again
    /// with a new handle) deletes with its outdated handle: the embedded queue knows nothing
    /// was deleted, and the timeline must say so instead of `message_deleted`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_delete_with_an_outdated_handle_is_recorded_as_not_deleted() {
        let (ledger, _db) = fresh_ledger(Db::Sqlite).await;
        let queue = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
        let provider = Scripted::new(vec![Duration::from_millis(50)]);
        let worker = compressed_worker(&ledger, &queue, &provider, "A");
        let job_id = create(&ledger, new_job("acme", "overtaken", serde_json::json!(1))).await;
        queue
            .send(&JobMessage::body(&job_id, "acme"), Duration::ZERO)
            .await
            .unwrap();
        let first = queue
            .receive(1, Duration::from_millis(200), Duration::from_secs(2))
            .await
            .unwrap()
            .remove(0);
        tokio::time::sleep(Duration::from_millis(400)).await;
        let second = queue
            .receive(1, Duration::from_secs(60), Duration::from_secs(2))
            .await
            .unwrap()
            .remove(0);
        assert_eq!(worker.handle_delivery(first).await, Outcome::Succeeded);
        let events = ledger.events(&job_id, 0, 100).await.unwrap();
        assert!(
            !events.iter().any(|e| e.kind == "message_deleted"),
            "nothing was deleted: {:?}",
            kinds(&ledger, &job_id).await
        );
        let failed = events
            .iter()
            .find(|e| e.kind == "delete_failed")
            .expect("the delete is on the timeline as not done");
        assert_eq!(
            failed.detail_as::<detail::DeleteFailed>().unwrap().error,
            "stale_receipt_handle"
        );
        // The newer delivery finds the job terminal, acknowledges it and really deletes.
        assert_eq!(worker.handle_delivery(second).await, Outcome::AckedTerminal);
        wait_for_event(&ledger, &job_id, "message_deleted", LIMIT).await;
        let depth = queue.depth().await.unwrap();
        assert_eq!(depth.visible + depth.in_flight, 0, "{depth:?}");
    }

    /// A healthy long call with a duplicate copy: the copy is deferred for as long as the
    /// ledger makes safe, so it neither burns its receives into the dead-letter queue nor
    /// comes back while the owner works.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_duplicate_of_a_long_call_is_deferred_and_never_reaches_the_dead_letter_queue() {
        let (rig, job_id) =
            super::embedded_copies::copy_while_the_owner_works(Duration::from_secs(8), "long-dup")
                .await;
        rig.wait_for(&job_id, LIMIT, |j| j.state == JobState::Succeeded)
            .await;
        let dlq = rig.queue.dead_letters().expect("a dead-letter queue");
        let depth = dlq.depth().await.unwrap();
        assert_eq!(depth.visible + depth.in_flight, 0, "{depth:?}");
        assert_eq!(
            count_kind(&rig.ledger, &job_id, "duplicate_suppressed").await,
            1,
            "the copy was deferred once, not redelivered every second"
        );
        assert_eq!(count_kind(&rig.ledger, &job_id, "moved_to_dlq").await, 0);
        let suppressed = rig
            .ledger
            .events(&job_id, 0, 100)
            .await
            .unwrap()
            .into_iter()
            .find(|e| e.kind == "duplicate_suppressed")
            .unwrap();
        assert!(
            suppressed
                .detail_as::<detail::DuplicateSuppressed>()
                .unwrap()
                .defer_ms
                > 60_000,
            "deferred towards the deadline: {}",
            suppressed.detail
        );
        rig.stop().await;
    }

    async fn unknown_job(ledger: &fenceline::ledger::Ledger, key: &str, replay: bool) -> String {
        let mut job = new_job("acme", key, serde_json::json!(key));
        if replay {
            job.replay_policy = fenceline::ledger::ReplayPolicy::ReplayOnUnknown;
        }
        let job_id = create(ledger, job).await;
        let claimed = ledger
            .claim(&job_id, "w", Duration::from_secs(60))
            .await
            .unwrap();
        ledger
            .start_attempt(&as_owner(&job_id, claimed.epoch, "w"), "stub")
            .await
            .unwrap();
        ledger
            .release(&as_owner(&job_id, claimed.epoch, "w"), "test")
            .await
            .unwrap();
        job_id
    }

    async fn the_reaper_applies_replay_policies_to_new_unknown_jobs_while_500_older_ones_wait(
        db: Db,
    ) {
        let (ledger, _db) = fresh_ledger(db).await;
        for i in 0..500 {
            unknown_job(&ledger, &format!("old-{i}"), false).await;
        }
        let fresh = unknown_job(&ledger, "new", true).await;
        fenceline::worker::reaper::reap_once(&ledger, Duration::from_secs(600))
            .await
            .unwrap();
        let job = ledger.job(&fresh).await.unwrap().unwrap();
        assert_eq!(job.state, JobState::RetryAuthorized);
        assert_eq!(ledger.decisions(&fresh).await.unwrap()[0].actor, "policy");
    }

    crate::on_both_backends!(
        the_reaper_applies_replay_policies_to_new_unknown_jobs_while_500_older_ones_wait
    );

    /// The reconciliation queue pages past its first hundred jobs, oldest first, and says
    /// which jobs retrieval cannot settle.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn the_unknown_page_lists_every_job_in_pages_and_says_when_only_a_decision_helps() {
        let app = crate::helpers::spawn_app(Db::Sqlite).await;
        let mut ids = Vec::new();
        for i in 0..101 {
            ids.push(unknown_job(&app.ledger, &format!("u-{i}"), false).await);
        }
        // Retrieval is off: the reaper's retrieval marks each job once.
        let no_retrieval = fenceline::provider::stub::StubProvider::default();
        let mut cursor = fenceline::worker::reaper::RetrievalCursor::default();
        for _ in 0..3 {
            fenceline::worker::reaper::reconcile_once(
                &app.ledger,
                &no_retrieval,
                &mut cursor,
                Duration::from_secs(1),
            )
            .await
            .unwrap();
        }
        let mut browser = app.signed_in(fenceline::operators::Role::Viewer).await;
        let first = browser.page("/unknown").await;
        assert!(first.contains("101 jobs wait"), "{first}");
        assert!(first.contains(&ids[0]) && first.contains(&ids[99]));
        assert!(!first.contains(&ids[100]), "a page holds 100");
        assert!(first.contains("not possible: needs a decision"));
        assert!(first.contains("offers no retrieval"));
        let next = first
            .split("href=\"/unknown?after=")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("a link to the next page")
            .replace("&amp;", "&");
        let second = browser.page(&format!("/unknown?after={next}")).await;
        assert!(second.contains(&ids[100]), "the 101st job is on page two");
        assert!(!second.contains(&ids[0]));
    }

    /// A provider whose retrieval never answers (the provider `unknown_job`'s attempts went
    /// to: only that one is asked).
    #[derive(Clone)]
    struct SlowRetrieval;

    impl fenceline::provider::Provider for SlowRetrieval {
        fn name(&self) -> &str {
            "stub"
        }
        fn default_model(&self) -> &str {
            "m"
        }
        async fn call(
            &self,
            _: fenceline::provider::ProviderRequest,
            _: fenceline::provider::Progress,
        ) -> fenceline::provider::ProviderOutcome {
            std::future::pending().await
        }
        async fn retrieve(&self, _: &str) -> fenceline::provider::Retrieval {
            tokio::time::sleep(Duration::from_secs(600)).await;
            fenceline::provider::Retrieval::Inconclusive
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_provider_retrieval_never_stalls_lease_recovery() {
        let (ledger, _db) = fresh_ledger(Db::Sqlite).await;
        // An unknown job whose attempt has a request id to look up.
        let uncertain = unknown_job(&ledger, "uncertain", false).await;
        let stop = CancellationToken::new();
        let reaper = tokio::spawn(fenceline::worker::reaper::run(
            ledger.clone(),
            SlowRetrieval,
            Duration::from_millis(100),
            Duration::from_secs(600),
            stop.clone(),
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
        // An owner that vanishes while the retrieval hangs: its lease runs out.
        let vanished = create(&ledger, new_job("acme", "vanished", serde_json::json!(2))).await;
        ledger
            .claim(&vanished, "gone", Duration::from_millis(100))
            .await
            .unwrap();
        let until = tokio::time::Instant::now() + Duration::from_secs(5);
        while ledger.job(&vanished).await.unwrap().unwrap().state != JobState::RetryAuthorized {
            assert!(
                tokio::time::Instant::now() < until,
                "lease recovery waited on a provider retrieval"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // And one retrieval round ends within its per-call bound, the job still open.
        let round = tokio::time::timeout(
            Duration::from_secs(3),
            fenceline::worker::reaper::reconcile_once(
                &ledger,
                &SlowRetrieval,
                &mut fenceline::worker::reaper::RetrievalCursor::default(),
                Duration::from_millis(300),
            ),
        )
        .await
        .expect("bounded")
        .unwrap();
        assert_eq!((round.asked, round.inconclusive), (1, 1));
        assert_eq!(
            ledger.job(&uncertain).await.unwrap().unwrap().state,
            JobState::Unknown
        );
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), reaper)
            .await
            .expect("the reaper stops promptly")
            .unwrap();
    }

    /// With no retrieval (the stub's, switched off), a lost response really leaves the job
    /// `unknown`; the reaper says once on its timeline that it needs a decision.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn without_retrieval_a_lost_response_waits_for_a_decision_and_says_why_once() {
        let rig = rig(
            QueueKind::EmbeddedSqlite,
            StubConfig {
                latency: Duration::from_millis(50),
                lost_response_rate: 1.0,
                retrieval: false,
                ..Default::default()
            },
            1,
        )
        .await;
        let job_id = rig.submit("lost-for-good").await;
        rig.wait_for(&job_id, LIMIT, |j| j.state == JobState::Unknown)
            .await;
        wait_for_event(&rig.ledger, &job_id, "retrieval_unsupported", LIMIT).await;
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(
            count_kind(&rig.ledger, &job_id, "retrieval_unsupported").await,
            1,
            "said once, not every round"
        );
        assert_eq!(rig.stub.calls_for(&job_id), 1);
        assert_eq!(rig.ledger.attempts(&job_id).await.unwrap().len(), 1);
        rig.stop().await;
    }
}

/// A worker holds one delivery's future for as long as its call runs: with 120,000 calls in
/// flight, every kilobyte of it is 120 MB. The queue and ledger requests on its other paths
/// (an SQS request alone is about 10 KB) are boxed, so they take memory only while they run.
#[tokio::test]
async fn a_delivery_in_flight_holds_a_small_future() {
    use fenceline::provider::stub::StubProvider;
    use fenceline::provider::AnyProvider;
    use fenceline::queue::embedded::EmbeddedQueue;
    use fenceline::queue::{AnyQueue, Delivery, ReceiptHandle};
    use fenceline::worker::{Worker, WorkerConfig};
    let (ledger, _db) = crate::helpers::fresh_ledger(crate::helpers::Db::Sqlite).await;
    let queue = AnyQueue::Embedded(EmbeddedQueue::new(ledger.clone(), "sizes", 5));
    let provider = AnyProvider::Stub(StubProvider::new(StubConfig::default()));
    let worker = Worker::new(ledger, queue, provider, WorkerConfig::new("sizes"));
    let future = worker.handle_delivery(Delivery {
        message_id: String::new(),
        receipt: ReceiptHandle::new(String::new()),
        body: String::new(),
        receive_count: 1,
        first_receive_at_ms: None,
        sent_at_ms: None,
    });
    let bytes = std::mem::size_of_val(&future);
    eprintln!("one delivery's future: {bytes} bytes");
    assert!(bytes <= 6144, "one delivery's future is {bytes} bytes");
}

/// A model client that panics once the call is under way (a bug in provider code).
#[derive(Clone)]
struct PanickingProvider;

impl fenceline::provider::Provider for PanickingProvider {
    fn name(&self) -> &str {
        "panics"
    }

    fn default_model(&self) -> &str {
        "m"
    }

    async fn call(
        &self,
        _request: fenceline::provider::ProviderRequest,
        _progress: fenceline::provider::Progress,
    ) -> fenceline::provider::ProviderOutcome {
        tokio::time::sleep(Duration::from_millis(100)).await;
        panic!("a bug in the model client");
    }

    async fn retrieve(&self, _client_request_id: &str) -> fenceline::provider::Retrieval {
        fenceline::provider::Retrieval::Unsupported
    }
}

/// Work that ends without returning — its task panicked — must stop being renewed: otherwise
/// the heartbeat keeps its lease alive until the deadline and no one can recover the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_that_panics_stops_being_renewed_and_its_job_is_recovered_when_the_lease_runs_out() {
    use fenceline::queue::embedded::EmbeddedQueue;
    use fenceline::worker::{dispatcher, reaper, Timings, Worker, WorkerConfig};
    let (ledger, _db) = crate::helpers::fresh_ledger(crate::helpers::Db::Sqlite).await;
    let queue = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
    let mut config = WorkerConfig::new("w");
    config.timings = Timings::compressed();
    let worker = Worker::new(ledger.clone(), queue.clone(), PanickingProvider, config);
    let stop = tokio_util::sync::CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    let (w, s) = (worker.clone(), stop.clone());
    tasks.spawn(async move { w.run(s).await });
    let (l, s) = (ledger.clone(), stop.clone());
    tasks.spawn(async move {
        dispatcher::run(l, queue, Duration::from_millis(20), Default::default(), s).await
    });
    let job_id = crate::helpers::create(&ledger, new_job("acme", "p", serde_json::json!({}))).await;
    wait_for_event(&ledger, &job_id, "attempt_started", LIMIT).await;
    // The call panics after 100 ms; the heartbeat renews every 0.7 s.
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    while worker.in_flight() > 0 {
        assert!(
            tokio::time::Instant::now() < until,
            "the panicked work is still registered for renewals"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let renewed = count_kind(&ledger, &job_id, "lease_renewed").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        count_kind(&ledger, &job_id, "lease_renewed").await,
        renewed,
        "a lease renewed after its work was gone"
    );
    // The lease (2 s) runs out and the reaper recovers the job: the call may have run.
    let (l, s) = (ledger.clone(), stop.clone());
    tasks.spawn(async move {
        reaper::run(
            l,
            PanickingProvider,
            Duration::from_millis(200),
            Duration::from_secs(600),
            s,
        )
        .await
    });
    wait_for_event(&ledger, &job_id, "recovery_claimed", LIMIT).await;
    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Unknown);
    stop.cancel();
    while tasks.join_next().await.is_some() {}
}

/// The ledger lost mid-run (its database refusing connections for longer than several
/// visibility timeouts) with a message on SQS: the worker stops receiving once a delivery
/// finds the ledger unreachable, instead of receiving the message again each time its
/// visibility lapses and walking it into the dead-letter queue, and takes it up again once the
/// ledger answers. The job runs once, on the message's second receive.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_stops_receiving_while_the_ledger_is_lost_and_resumes_when_it_answers() {
    use fenceline::worker::{Timings, Worker, WorkerConfig};
    use sqlx::{Connection, Executor};
    if crate::helpers::skip_postgres() || crate::helpers::skip_sqs() {
        return;
    }
    let (ledger, db) = crate::helpers::fresh_ledger(crate::helpers::Db::Postgres).await;
    // Three receives and a message is dead-lettered: a worker receiving through the outage
    // would have spent them all.
    let test_queue = crate::helpers::fresh_queue(QueueKind::Sqs, 3).await;
    let queue = test_queue.queue.clone();
    let stub = fenceline::provider::stub::StubProvider::new(quick());
    let mut config = WorkerConfig::new("w-outage".to_owned());
    config.timings = Timings::compressed();
    config.drain_timeout = Duration::from_millis(300);
    let worker = Worker::new(ledger.clone(), queue.clone(), stub.clone(), config);
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn({
        let stop = stop.clone();
        async move { worker.run(stop).await }
    });
    // Created with no dispatcher running: its message is sent by hand during the outage.
    let job_id =
        crate::helpers::create(&ledger, new_job("acme", "outage", serde_json::json!(1))).await;

    let admin = std::env::var("FENCELINE_TEST_PG_URL").unwrap();
    let name = db.url.rsplit('/').next().unwrap().to_owned();
    let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
    conn.execute(format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false").as_str())
        .await
        .unwrap();
    conn.execute(
        format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
            .as_str(),
    )
    .await
    .unwrap();
    assert!(ledger.ping().await.is_err(), "the ledger is lost");
    queue
        .send(&JobMessage::body(&job_id, "acme"), Duration::ZERO)
        .await
        .unwrap();
    // Four visibility timeouts (2 s each) without the ledger.
    tokio::time::sleep(Duration::from_secs(8)).await;
    conn.execute(format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true").as_str())
        .await
        .unwrap();

    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    let job = loop {
        let job = ledger.job(&job_id).await.ok().flatten();
        if let Some(job) = job.filter(|j| j.state == JobState::Succeeded) {
            break job;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "the job did not run once the ledger answered: {}",
            crate::helpers::timeline(&ledger, &job_id).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(job.attempt_count, 1);
    assert_eq!(stub.calls_for(&job_id), 1);
    let events = ledger.events(&job_id, 0, 100).await.unwrap();
    let receives: Vec<u32> = events
        .iter()
        .filter(|e| e.kind == "delivery_received")
        .filter_map(|e| e.delivery.as_ref().map(|d| d.receive_count as u32))
        .collect();
    // Received once in the outage (nothing recorded: the ledger was not there), then once after
    // it; a third receive only if noticing the loss took a whole visibility timeout.
    assert!(
        receives.len() == 1 && (2..=3).contains(&receives[0]),
        "receive counts on the timeline: {receives:?}"
    );
    stop.cancel();
    running.await.unwrap();
}

/// The outbox dispatcher against a queue that answers slowly, or stops answering.
mod slow_sends {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::helpers::{create, fresh_ledger, new_job, Db};
    use fenceline::ledger::Ledger;
    use fenceline::queue::embedded::EmbeddedQueue;
    use fenceline::queue::{BatchResult, Delivery, Depth, QueueError, ReceiptHandle};
    use fenceline::worker::dispatcher::{self, Lane};
    use tokio_util::sync::CancellationToken;

    /// The embedded queue behind a slow link: every send request takes `delay`, and the ones
    /// after the first `answered` never come back (a dispatcher that dies waiting); every
    /// visibility change takes `visibility_delay`, as on an SQS endpoint under load. Records
    /// every body it delivered to the queue.
    #[derive(Clone)]
    pub(super) struct Slow {
        inner: EmbeddedQueue,
        delay: Duration,
        visibility_delay: Duration,
        answered: usize,
        requests: Arc<AtomicUsize>,
        hung: Arc<tokio::sync::Notify>,
        sent: Arc<Mutex<Vec<String>>>,
    }

    impl Slow {
        pub(super) fn new(inner: EmbeddedQueue, delay: Duration, answered: usize) -> Slow {
            Slow {
                inner,
                delay,
                visibility_delay: Duration::ZERO,
                answered,
                requests: Arc::default(),
                hung: Arc::default(),
                sent: Arc::default(),
            }
        }

        pub(super) fn with_visibility_delay(self, visibility_delay: Duration) -> Slow {
            Slow {
                visibility_delay,
                ..self
            }
        }

        /// Bodies the queue received more than once.
        fn sent_twice(&self) -> Vec<String> {
            let mut seen = HashMap::<String, usize>::new();
            for body in self.sent.lock().unwrap().iter() {
                *seen.entry(body.clone()).or_default() += 1;
            }
            seen.into_iter()
                .filter(|(_, n)| *n > 1)
                .map(|(b, _)| b)
                .collect()
        }
    }

    impl Queue for Slow {
        fn describe(&self) -> String {
            self.inner.describe()
        }

        async fn send(&self, body: &str, delay: Duration) -> Result<String, QueueError> {
            self.inner.send(body, delay).await
        }

        async fn send_batch(
            &self,
            bodies: &[String],
        ) -> Result<Vec<Result<String, QueueError>>, QueueError> {
            if self.requests.fetch_add(1, Ordering::SeqCst) >= self.answered {
                self.hung.notify_one();
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(self.delay).await;
            let out = self.inner.send_batch(bodies).await;
            self.sent.lock().unwrap().extend(bodies.iter().cloned());
            out
        }

        async fn receive(
            &self,
            max: usize,
            visibility: Duration,
            wait: Duration,
        ) -> Result<Vec<Delivery>, QueueError> {
            self.inner.receive(max, visibility, wait).await
        }

        async fn change_visibility(
            &self,
            receipt: &ReceiptHandle,
            timeout: Duration,
        ) -> Result<(), QueueError> {
            tokio::time::sleep(self.visibility_delay).await;
            self.inner.change_visibility(receipt, timeout).await
        }

        async fn change_visibility_batch(
            &self,
            entries: &[(ReceiptHandle, Duration)],
        ) -> Result<BatchResult, QueueError> {
            tokio::time::sleep(self.visibility_delay).await;
            self.inner.change_visibility_batch(entries).await
        }

        async fn delete(&self, receipt: &ReceiptHandle) -> Result<(), QueueError> {
            self.inner.delete(receipt).await
        }

        async fn delete_batch(
            &self,
            receipts: &[ReceiptHandle],
        ) -> Result<BatchResult, QueueError> {
            self.inner.delete_batch(receipts).await
        }

        async fn depth(&self) -> Result<Depth, QueueError> {
            self.inner.depth().await
        }

        fn dead_letters(&self) -> Option<Self> {
            None
        }
    }

    async fn jobs_waiting_to_be_sent(n: usize) -> (Ledger, crate::helpers::TestDb) {
        let (ledger, db) = fresh_ledger(Db::Sqlite).await;
        for i in 0..n {
            create(
                &ledger,
                new_job("acme", &format!("k{i}"), serde_json::json!(i)),
            )
            .await;
        }
        assert_eq!(ledger.outbox_pending().await.unwrap(), n as i64);
        (ledger, db)
    }

    /// A round of 500 rows takes 5 s on this link, longer than the 3 s its rows are held. Two
    /// dispatchers share the outbox: each job must still be sent once, and recorded.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_dispatchers_over_a_slow_queue_send_each_job_once() {
        let (ledger, _db) = jobs_waiting_to_be_sent(500).await;
        let inner = EmbeddedQueue::new(ledger.clone(), "slow", 5);
        let queue = Slow::new(inner, Duration::from_millis(100), usize::MAX);
        let lane = Lane {
            lock: Duration::from_secs(3),
            ..Lane::default()
        };
        let stop = CancellationToken::new();
        let mut dispatchers = tokio::task::JoinSet::new();
        for _ in 0..2 {
            let (ledger, queue, lane, stop) =
                (ledger.clone(), queue.clone(), lane.clone(), stop.clone());
            dispatchers.spawn(async move {
                let idle = Duration::from_millis(20);
                dispatcher::run_lane(ledger, queue, idle, Default::default(), lane, stop).await
            });
        }
        let until = tokio::time::Instant::now() + Duration::from_secs(40);
        while ledger.outbox_pending().await.unwrap() > 0 {
            assert!(
                tokio::time::Instant::now() < until,
                "the outbox never emptied"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop.cancel();
        while dispatchers.join_next().await.is_some() {}
        let twice = queue.sent_twice();
        assert!(
            twice.is_empty(),
            "{} of 500 jobs sent more than once, e.g. {:?}",
            twice.len(),
            twice.first()
        );
        assert_eq!(queue.sent.lock().unwrap().len(), 500);
    }

    /// The link stops answering after 15 requests (150 messages) and the dispatcher dies
    /// waiting: every message the queue acknowledged is recorded as sent, not sent again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dispatcher_that_dies_mid_round_has_recorded_what_the_queue_acknowledged() {
        let (ledger, _db) = jobs_waiting_to_be_sent(300).await;
        let inner = EmbeddedQueue::new(ledger.clone(), "hangs", 5);
        let queue = Slow::new(inner, Duration::ZERO, 15);
        let round = tokio::spawn({
            let (ledger, queue) = (ledger.clone(), queue.clone());
            let (idle, stop) = (Duration::from_millis(20), CancellationToken::new());
            async move { dispatcher::run(ledger, queue, idle, Default::default(), stop).await }
        });
        tokio::time::timeout(Duration::from_secs(20), queue.hung.notified())
            .await
            .expect("the dispatcher reached the request that hangs");
        round.abort();
        let acknowledged = queue.sent.lock().unwrap().len();
        let recorded = 300 - ledger.outbox_pending().await.unwrap();
        assert_eq!(
            (recorded, acknowledged),
            (150, 150),
            "recorded as sent, beside what the queue acknowledged"
        );
    }
}

/// `fenceline bench pipeline`'s reference writes the record of a job's path with set-based
/// statements alone: it must write what that path writes, or its figure means nothing.
mod record_reference {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn on_sqlite() {
        writes_what_a_jobs_path_writes(QueueKind::EmbeddedSqlite).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn on_postgres() {
        if crate::helpers::skip_postgres() {
            return;
        }
        writes_what_a_jobs_path_writes(QueueKind::EmbeddedPostgres).await
    }

    async fn writes_what_a_jobs_path_writes(kind: QueueKind) {
        let rig = rig(kind, quick(), 1).await;
        let job_id = rig.submit("path").await;
        rig.wait_for(&job_id, LIMIT, |j| j.state == JobState::Succeeded)
            .await;
        wait_for_event(&rig.ledger, &job_id, "message_deleted", LIMIT).await;
        let ledger = &rig.ledger;
        // 130 jobs: a whole batch of 128 and a short one, from two writers.
        let done = ledger
            .record_reference("reference", "reference-queue", "ref", 130, 2)
            .await
            .unwrap();
        assert_eq!(done, 130, "every job of the reference ends succeeded");
        let path_kinds = kinds(ledger, &job_id).await;
        let path_job = ledger.job(&job_id).await.unwrap().unwrap();
        let path_attempts = ledger.attempts(&job_id).await.unwrap();
        let path_sends = ledger.outbox_sends(&job_id).await.unwrap();
        for reference in ["job_ref_0_1", "job_ref_0_128", "job_ref_1_2"] {
            assert_eq!(
                kinds(ledger, reference).await,
                path_kinds,
                "{reference}: the same timeline"
            );
            let job = ledger.job(reference).await.unwrap().unwrap();
            assert_eq!(job.state, JobState::Succeeded);
            assert_eq!(
                (job.owner_epoch, job.attempt_count, job.next_event_seq),
                (
                    path_job.owner_epoch,
                    path_job.attempt_count,
                    path_job.next_event_seq
                ),
                "{reference}: the same epoch, attempts and timeline places"
            );
            assert!(job.result_ref.is_some());
            let attempts = ledger.attempts(reference).await.unwrap();
            assert_eq!(attempts.len(), path_attempts.len());
            assert_eq!(attempts[0].outcome, AttemptOutcome::Succeeded);
            let sends = ledger.outbox_sends(reference).await.unwrap();
            assert_eq!(sends.len(), path_sends.len());
            assert!(sends.iter().all(|s| s.dispatched_at.is_some()));
        }
        assert!(
            ledger.job("job_ref_1_3").await.unwrap().is_none(),
            "the short batch has two jobs"
        );
        let queue =
            fenceline::queue::embedded::EmbeddedQueue::new(ledger.clone(), "reference-queue", 5);
        let depth = queue.depth().await.unwrap();
        assert_eq!(
            (depth.visible, depth.in_flight),
            (0, 0),
            "every message was received, then deleted"
        );
        rig.stop().await;
    }
}
