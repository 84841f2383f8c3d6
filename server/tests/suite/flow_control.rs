//! Flow control: a refusal the provider confirms it never ran spends no budget, and the
//! outbox sends tenants' jobs in fair turns.

use std::time::Duration;

use fenceline::job::JobState;
use fenceline::ledger::{AttemptOutcome, Failure, Ledger, LedgerError, Refusal, Throttle};
use serde_json::json;

use crate::helpers::{as_owner, create, fresh_ledger, kinds, new_job, rig, Db, QueueKind};
use crate::{on_both_backends, on_every_queue};

on_both_backends!(
    a_refusal_is_recorded_but_spends_none_of_the_budget,
    a_job_refused_until_its_deadline_expires_with_the_refusal_as_its_last_error,
    the_outbox_sends_tenants_in_fair_turns_whatever_one_has_waiting,
);

on_both_backends!(a_quiet_tenants_jobs_start_at_once_behind_another_tenants_backlog);

on_every_queue!(workers_meet_a_rate_limit_without_losing_a_job_or_spending_its_budget);

const LONG: Duration = Duration::from_secs(60);

fn refusal<T: std::fmt::Debug>(result: Result<T, LedgerError>) -> Refusal {
    match result {
        Err(LedgerError::Refused { refusal, .. }) => refusal,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn throttle(wait_ms: u64) -> Throttle {
    Throttle {
        error_code: "rate_limited".into(),
        wait: Duration::from_millis(wait_ms),
        limit: Some("requests".into()),
        provider: "openai".into(),
        model: "gpt-4o-mini".into(),
    }
}

/// Claims the job as `worker` (starting its attempt) once its retry time has come.
async fn claim_when_due(ledger: &Ledger, job_id: &str, worker: &str) -> (i64, i64) {
    for _ in 0..100 {
        match ledger
            .claim_and_start(job_id, worker, LONG, None, "stub")
            .await
        {
            Ok((claimed, attempt)) => return (claimed.epoch, attempt.attempt_no),
            Err(LedgerError::Refused {
                refusal: Refusal::BackoffPending,
                ..
            }) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(e) => panic!("claim of {job_id}: {e}"),
        }
    }
    panic!("{job_id} never came due");
}

async fn a_refusal_is_recorded_but_spends_none_of_the_budget(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let mut new = new_job("acme", "refused", json!(1));
    new.max_attempts = 2;
    let job_id = create(&ledger, new).await;
    // Five refusals in a row: more than the budget of two, which stays whole.
    for n in 1..=5 {
        let (epoch, attempt_no) = claim_when_due(&ledger, &job_id, "a").await;
        assert_eq!(attempt_no, n, "attempt numbers go on counting refusals");
        let job = ledger.job(&job_id).await.unwrap().unwrap();
        assert_eq!(job.budget_used, 1, "the pending attempt holds its share");
        let throttled = ledger
            .record_throttle(&as_owner(&job_id, epoch, "a"), attempt_no, &throttle(30))
            .await
            .unwrap();
        let job = ledger.job(&job_id).await.unwrap().unwrap();
        assert_eq!(job.state, JobState::RetryAuthorized);
        assert_eq!(job.budget_used, 0, "a refusal gives its share back");
        assert_eq!(job.attempt_count, n);
        assert_eq!(job.retry_at, Some(throttled.retry_at));
        assert_eq!(job.error_code.as_deref(), Some("rate_limited"));
        // Sent again when the provider's reset comes, not before.
        assert_eq!(
            refusal(ledger.claim(&job_id, "b", LONG).await),
            Refusal::BackoffPending
        );
    }
    // The whole budget is still there: two attempts that may run the model.
    let retry = Failure::Retryable {
        error_code: "http_408".into(),
        backoff: Duration::from_millis(10),
    };
    let (epoch, attempt_no) = claim_when_due(&ledger, &job_id, "a").await;
    ledger
        .record_failure(&as_owner(&job_id, epoch, "a"), attempt_no, &retry)
        .await
        .unwrap();
    let (epoch, attempt_no) = claim_when_due(&ledger, &job_id, "a").await;
    assert_eq!(attempt_no, 7);
    ledger
        .accept_result(&as_owner(&job_id, epoch, "a"), attempt_no, "\"answer\"")
        .await
        .unwrap();
    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Succeeded);
    assert_eq!((job.attempt_count, job.budget_used), (7, 2));
    let outcomes: Vec<AttemptOutcome> = ledger
        .attempts(&job_id)
        .await
        .unwrap()
        .iter()
        .map(|a| a.outcome)
        .collect();
    assert_eq!(
        outcomes,
        [
            AttemptOutcome::Throttled,
            AttemptOutcome::Throttled,
            AttemptOutcome::Throttled,
            AttemptOutcome::Throttled,
            AttemptOutcome::Throttled,
            AttemptOutcome::FailedRetryable,
            AttemptOutcome::Succeeded,
        ]
    );
    let kinds = kinds(&ledger, &job_id).await;
    assert_eq!(kinds.iter().filter(|k| *k == "throttled").count(), 5);
    // Each refusal re-dispatches the job through the outbox.
    let sends = ledger.outbox_sends(&job_id).await.unwrap();
    assert_eq!(
        sends.iter().filter(|s| s.reason == "throttled").count(),
        5,
        "{sends:?}"
    );
}

async fn a_job_refused_until_its_deadline_expires_with_the_refusal_as_its_last_error(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let mut new = new_job("acme", "refused-forever", json!(1));
    new.deadline = Duration::from_millis(600);
    let job_id = create(&ledger, new).await;
    let (epoch, attempt_no) = claim_when_due(&ledger, &job_id, "a").await;
    // The provider names a reset past the deadline: the job waits no later than it.
    let throttled = ledger
        .record_throttle(
            &as_owner(&job_id, epoch, "a"),
            attempt_no,
            &throttle(60_000),
        )
        .await
        .unwrap();
    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(throttled.retry_at, job.deadline_at);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(ledger
        .expire_if_due(&job_id, &fenceline::job::Actor::System)
        .await
        .unwrap());
    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Expired);
    assert_eq!(job.budget_used, 0, "no attempt spent");
    let events = ledger.events(&job_id, 0, 100).await.unwrap();
    let expired = events
        .iter()
        .find(|e| e.kind == "deadline_expired")
        .expect("deadline_expired");
    assert_eq!(expired.detail["last_error"], json!("rate_limited"));
}

async fn the_outbox_sends_tenants_in_fair_turns_whatever_one_has_waiting(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let big: Vec<String> = {
        let mut ids = Vec::new();
        for i in 0..60 {
            ids.push(create(&ledger, new_job("big", &format!("big-{i}"), json!(i))).await);
        }
        ids
    };
    // Some of big's backlog is sent before small comes.
    let first = ledger.claim_outbox(10, LONG, "").await.unwrap();
    assert!(first.iter().all(|item| item.tenant == "big"));
    let sent: Vec<_> = first
        .iter()
        .map(|item| (item.clone(), format!("m-{}", item.id)))
        .collect();
    ledger.mark_dispatched(&sent, "test", "").await.unwrap();
    let mut small = Vec::new();
    for i in 0..5 {
        small.push(create(&ledger, new_job("small", &format!("small-{i}"), json!(i))).await);
    }
    // The next ten sends take turns: small's five among them, big's backlog notwithstanding.
    let next = ledger.claim_outbox(10, LONG, "").await.unwrap();
    let tenants: Vec<&str> = next.iter().map(|item| item.tenant.as_str()).collect();
    assert_eq!(
        tenants.iter().filter(|t| **t == "small").count(),
        5,
        "{tenants:?}"
    );
    assert_eq!(
        tenants.iter().filter(|t| **t == "big").count(),
        5,
        "{tenants:?}"
    );
    // Each tenant's own jobs keep their order.
    let big_sent: Vec<&str> = first
        .iter()
        .chain(&next)
        .filter(|item| item.tenant == "big")
        .map(|item| item.job_id.as_str())
        .collect();
    assert_eq!(
        big_sent,
        big[..15].iter().map(String::as_str).collect::<Vec<_>>()
    );
    let small_sent: Vec<&str> = next
        .iter()
        .filter(|item| item.tenant == "small")
        .map(|item| item.job_id.as_str())
        .collect();
    assert_eq!(
        small_sent,
        small.iter().map(String::as_str).collect::<Vec<_>>()
    );
}

/// A burst of jobs, each allowed a single attempt, against a model that admits 20 requests a
/// second: every job succeeds, none spends more than its one attempt, the refusals are on
/// record, and no job's message is received more than twice.
async fn workers_meet_a_rate_limit_without_losing_a_job_or_spending_its_budget(kind: QueueKind) {
    const JOBS: usize = 60;
    let rig = rig(
        kind,
        fenceline::provider::stub::StubConfig {
            latency: Duration::from_millis(100),
            rate_limit: Some(20.0),
            ..Default::default()
        },
        2,
    )
    .await;
    let mut ids = Vec::new();
    for i in 0..JOBS {
        let mut job = new_job("acme", &format!("burst-{i}"), json!(i));
        job.max_attempts = 1;
        ids.push(rig.submit_job(job).await);
    }
    let started = std::time::Instant::now();
    let mut refused = 0;
    for id in &ids {
        let job = rig
            .wait_for(id, Duration::from_secs(30), |j| j.state.is_terminal())
            .await;
        assert_eq!(
            job.state,
            JobState::Succeeded,
            "{id}: {:?}",
            kinds(&rig.ledger, id).await
        );
        assert_eq!(job.budget_used, 1, "{id}");
        let attempts = rig.ledger.attempts(id).await.unwrap();
        refused += attempts
            .iter()
            .filter(|a| a.outcome == AttemptOutcome::Throttled)
            .count();
        let received = kinds(&rig.ledger, id)
            .await
            .iter()
            .filter(|k| *k == "delivery_received")
            .count();
        assert!(received <= attempts.len() + 1, "{id}: {received} receives");
    }
    let took = started.elapsed();
    // 60 jobs at 20 a second, the first 20 at once: about 2 s when the workers pace well.
    assert!(took < Duration::from_secs(8), "took {took:?}");
    assert!(refused <= JOBS / 2, "{refused} refusals for {JOBS} jobs");
    rig.stop().await;
}

/// One worker of width 16 on the embedded queue with a 100 ms model, the dispatcher metered as
/// `serve` runs it: tenant big submits 600 jobs (about four seconds of work), then tenant
/// small submits 10. Small's jobs are done in a fraction of big's run, and big's all finish.
async fn a_quiet_tenants_jobs_start_at_once_behind_another_tenants_backlog(db: Db) {
    use fenceline::ledger::{LedgerOptions, WorkerReport};
    use fenceline::provider::limits::Limits;
    use fenceline::provider::stub::{StubConfig, StubProvider};
    use fenceline::queue::{embedded::EmbeddedQueue, Queue};
    use fenceline::worker::{dispatcher, presence, Timings, Worker, WorkerConfig};
    let name = format!("q{}", uuid::Uuid::now_v7().simple());
    let options = LedgerOptions {
        direct_queue: Some(name.clone()),
        ..crate::helpers::options()
    };
    let (ledger, _db) = crate::helpers::fresh_ledger_with(db, &options).await;
    let queue = EmbeddedQueue::new(ledger.clone(), &name, 5);
    let stub = StubProvider::new(StubConfig {
        latency: Duration::from_millis(100),
        ..Default::default()
    });
    let stop = tokio_util::sync::CancellationToken::new();
    let mut config = WorkerConfig::new("w-fair");
    config.timings = Timings::compressed();
    config.max_in_flight = 16;
    let limits = Limits::new(16);
    let report = WorkerReport {
        worker_id: "w-fair".into(),
        queue: queue.describe(),
        provider: "stub".into(),
        max_in_flight: 16,
        capacity: 16,
    };
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(presence::run(
        ledger.clone(),
        report,
        limits.clone(),
        stop.clone(),
    ));
    let worker = Worker::sharing(ledger.clone(), queue.clone(), stub, config, limits);
    let s = stop.clone();
    tasks.spawn(async move { worker.run(s).await });
    let (l, q, s) = (ledger.clone(), queue.clone(), stop.clone());
    tasks.spawn(async move {
        let lane = dispatcher::Lane::metered(dispatcher::Meter::Fleet);
        dispatcher::run_lane(l, q, Duration::from_millis(20), Default::default(), lane, s).await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut big = Vec::new();
    for i in 0..600 {
        big.push(create(&ledger, new_job("big", &format!("big-{i}"), json!(i))).await);
    }
    let submitted = std::time::Instant::now();
    let mut small = Vec::new();
    for i in 0..10 {
        small.push(create(&ledger, new_job("small", &format!("small-{i}"), json!(i))).await);
    }
    let mut small_done = None;
    let until = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut done_small = 0;
        for id in &small {
            done_small += usize::from(ledger.job(id).await.unwrap().unwrap().state.is_terminal());
        }
        if done_small == small.len() && small_done.is_none() {
            small_done = Some(submitted.elapsed());
        }
        let big_left = ledger
            .count_by_state(Some("big"), fenceline::ledger::Drills::Counted)
            .await
            .unwrap()
            .iter()
            .filter(|(state, _)| !state.is_terminal())
            .map(|(_, n)| *n)
            .sum::<i64>();
        if small_done.is_some() && big_left == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "big has {big_left} jobs left"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let small_took = small_done.unwrap();
    let big_took = submitted.elapsed();
    // At 160 jobs a second big's run lasts about four seconds; small's ten wait behind at
    // most the queue's 32 messages.
    assert!(
        small_took < Duration::from_millis(1500) && small_took * 3 < big_took,
        "small's jobs took {small_took:?}, big's {big_took:?}"
    );
    for id in small.iter().chain(&big) {
        assert_eq!(
            ledger.job(id).await.unwrap().unwrap().state,
            JobState::Succeeded
        );
    }
    stop.cancel();
    while tasks.join_next().await.is_some() {}
}
