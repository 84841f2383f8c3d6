//! Flow control: a refusal the provider confirms it never ran spends no budget, and the
//! outbox sends tenants' jobs in fair turns.

use std::time::Duration;

use fenceline::job::{detail, JobState};
use fenceline::ledger::{AttemptOutcome, Failure, Ledger, LedgerError, Refusal, Throttle};
use serde_json::json;

use crate::helpers::{as_owner, create, fresh_ledger, kinds, new_job, rig, Db, QueueKind};
use crate::{on_both_backends, on_every_queue};

on_both_backends!(
    the_ledgers_own_queue_takes_a_round_whole_in_fair_turns_within_caps,
    two_dispatchers_into_the_ledgers_own_queue_never_send_a_row_twice,
    a_refusal_is_recorded_but_spends_none_of_the_budget,
    a_job_refused_until_its_deadline_expires_with_the_refusal_as_its_last_error,
    the_outbox_sends_tenants_in_fair_turns_whatever_one_has_waiting,
);

on_both_backends!(
    a_quiet_tenants_jobs_start_at_once_behind_another_tenants_backlog,
    a_tenants_cap_holds_its_jobs_in_the_ledger_while_others_pass,
    the_fleet_shares_a_limits_pause_through_the_ledger,
    the_console_shows_refusals_what_a_job_waits_for_and_each_provider_limit,
    a_provider_that_refuses_forever_lets_the_job_expire_at_its_deadline_with_no_attempt_spent,
);

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
        fallback: None,
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
            .record_throttle(&as_owner(&job_id, epoch, "a"), attempt_no, &throttle(500))
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
    assert_eq!(
        expired
            .detail_as::<detail::DeadlineExpired>()
            .unwrap()
            .last_error
            .as_deref(),
        Some("rate_limited")
    );
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
    // Big's backlog arrives at once, from concurrent callers.
    let mut creating = tokio::task::JoinSet::new();
    for c in 0..16 {
        let ledger = ledger.clone();
        creating.spawn(async move {
            let mut ids = Vec::new();
            for i in (c..600).step_by(16) {
                ids.push(create(&ledger, new_job("big", &format!("big-{i}"), json!(i))).await);
            }
            ids
        });
    }
    let mut big = Vec::new();
    while let Some(ids) = creating.join_next().await {
        big.extend(ids.unwrap());
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
    // At 160 jobs a second big's backlog takes about four seconds; small's ten wait behind at
    // most the queue's 32 messages.
    assert!(
        small_took < Duration::from_millis(1500) && small_took * 2 < big_took,
        "small's jobs took {small_took:?}, the rest of big's {big_took:?}"
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

/// Tenant `capped` may have at most 3 jobs sent or running: its rows wait in the outbox (counted
/// per tenant), while `free`'s pass them.
async fn a_tenants_cap_holds_its_jobs_in_the_ledger_while_others_pass(db: Db) {
    use fenceline::ledger::TenantShare;
    let (ledger, _db) = fresh_ledger(db).await;
    ledger
        .set_tenant_shares(&[TenantShare {
            tenant: "capped".into(),
            weight: 1,
            max_in_flight: Some(3),
        }])
        .await
        .unwrap();
    for i in 0..10 {
        create(&ledger, new_job("capped", &format!("c-{i}"), json!(i))).await;
    }
    for i in 0..5 {
        create(&ledger, new_job("free", &format!("f-{i}"), json!(i))).await;
    }
    let caps = std::collections::HashMap::from([(
        "capped".to_owned(),
        3 - ledger.tenant_in_flight("capped").await.unwrap(),
    )]);
    let sent = ledger
        .claim_outbox_capped(20, LONG, "", &caps)
        .await
        .unwrap();
    let capped = sent.iter().filter(|i| i.tenant == "capped").count();
    let free = sent.iter().filter(|i| i.tenant == "free").count();
    assert_eq!((capped, free), (3, 5), "{sent:?}");
    let items: Vec<_> = sent
        .iter()
        .map(|item| (item.clone(), format!("m-{}", item.id)))
        .collect();
    ledger.mark_dispatched(&items, "test", "").await.unwrap();
    // Sent and not yet claimed, they count against the cap.
    assert_eq!(ledger.tenant_in_flight("capped").await.unwrap(), 3);
    let flow = ledger.tenant_flow(None).await.unwrap();
    let capped_flow = flow.iter().find(|f| f.tenant == "capped").unwrap();
    assert_eq!((capped_flow.waiting, capped_flow.due), (7, 7));
    // What the queue may hold follows what the live workers say they can hold now.
    for (worker, capacity) in [("w1", 6), ("w2", 64)] {
        ledger
            .report_worker(&fenceline::ledger::WorkerReport {
                worker_id: worker.into(),
                queue: "embedded:jobs".into(),
                provider: "stub".into(),
                max_in_flight: 64,
                capacity,
            })
            .await
            .unwrap();
    }
    let silent_after = fenceline::worker::presence::SILENT_AFTER;
    assert_eq!(
        ledger
            .fleet_capacity("embedded:jobs", silent_after)
            .await
            .unwrap(),
        70
    );
}

/// One process is refused with a long wait named: another, told by the ledger, stops calling
/// that limit too, and nothing that process learned echoes back.
async fn the_fleet_shares_a_limits_pause_through_the_ledger(db: Db) {
    use fenceline::provider::limits::{Answer, Key, Limits};
    use fenceline::provider::RateLimits;
    use fenceline::worker::flow::exchange;
    let (ledger, _db) = fresh_ledger(db).await;
    let (first, second) = (Limits::new(8), Limits::new(8));
    let key = Key::new("openai", "gpt-4o-mini");
    let named = RateLimits {
        retry_after: Some(Duration::from_secs(20)),
        ..Default::default()
    };
    first.acquire(&key).await.answered(Answer::Refused, &named);
    exchange(&ledger, &first, "w1", &["openai"], false)
        .await
        .unwrap();
    assert_eq!(second.capacity(), 8, "nothing learned yet");
    exchange(&ledger, &second, "w2", &["openai"], false)
        .await
        .unwrap();
    assert_eq!(second.capacity(), 0, "paused by the fleet");
    let view = &second.views()[0];
    assert!(
        view.paused_for.unwrap() > Duration::from_secs(15),
        "{view:?}"
    );
    let limits = ledger.provider_limits().await.unwrap();
    assert_eq!(limits.len(), 1);
    assert_eq!(limits[0].refusals, 1);
    assert_eq!(limits[0].recent_refusals, 1);
    assert!(limits[0].limited_until.is_some());
    assert_eq!(limits[0].limit_name.as_deref(), Some("retry-after"));
    // The second process adds nothing of its own: the fleet's count stays.
    exchange(&ledger, &second, "w2", &["openai"], true)
        .await
        .unwrap();
    assert_eq!(ledger.provider_limits().await.unwrap()[0].refusals, 1);
}

/// A job refused three times, then waiting: its page folds the refusal cycles into one row,
/// says what it waits for and that no budget was spent; `/workers` shows the provider limit,
/// the overview the refusals and the tenants' turns.
async fn the_console_shows_refusals_what_a_job_waits_for_and_each_provider_limit(db: Db) {
    use fenceline::job::EventKind;
    use fenceline::ledger::{DeliveryRef, LimitReport, NewEvent};
    use fenceline::operators::Role;
    let app = crate::helpers::spawn_app(db).await;
    let ledger = &app.ledger;
    let job_id = create(ledger, new_job("acme", "refused", json!(1))).await;
    for cycle in 1..=3 {
        let (epoch, attempt_no) = claim_when_due(ledger, &job_id, "w1").await;
        let wait = if cycle == 3 { 600_000 } else { 10 };
        ledger
            .record_throttle(&as_owner(&job_id, epoch, "w1"), attempt_no, &throttle(wait))
            .await
            .unwrap();
        // The cycle's delete, send and next receive, as the worker and dispatcher write them.
        let actor = fenceline::job::Actor::Worker("w1".into());
        for kind in [EventKind::MessageDeleted, EventKind::Dispatched] {
            ledger
                .record_event(&job_id, &NewEvent::new(kind, &actor))
                .await
                .unwrap();
        }
        if cycle < 3 {
            let received =
                NewEvent::new(EventKind::DeliveryReceived, &actor).delivery(DeliveryRef {
                    message_id: format!("m-{cycle}"),
                    receive_count: 1,
                    handle_hash: "0123abcd".into(),
                });
            ledger.record_event(&job_id, &received).await.unwrap();
        }
    }
    ledger
        .report_limits(
            "w1",
            &[LimitReport {
                provider: "openai".into(),
                model: "gpt-4o-mini".into(),
                refusals: 3,
                paused_for_us: Some(600_000_000),
                limit_name: Some("requests".into()),
                limited_us: 1_000_000,
                concurrency: 4,
                rate_per_s: Some(20.0),
            }],
        )
        .await
        .unwrap();
    let mut browser = app.signed_in(Role::Viewer).await;
    let page = browser.page(&format!("/jobs/{job_id}")).await;
    assert!(page.contains("throttled ×3"), "{page}");
    assert!(
        page.contains("no attempt of the budget was spent"),
        "{page}"
    );
    assert!(
        page.contains("0 of 3, and 3 the provider never ran (refused, or held back for its limit), which spend none"),
        "{page}"
    );
    assert!(
        page.contains("the provider&#x27;s rate limit until")
            || page.contains("the provider's rate limit until"),
        "{page}"
    );
    let workers = browser.page("/workers").await;
    assert!(workers.contains("limited until"), "{workers}");
    assert!(workers.contains("gpt-4o-mini"), "{workers}");
    assert!(workers.contains("20.0/s"), "{workers}");
    let overview = browser.page("/").await;
    assert!(
        overview.contains("Throttled calls: refused by a provider or held for its limit"),
        "{overview}"
    );
    assert!(
        overview.contains("href=\"/jobs?tenant=acme\""),
        "{overview}"
    );
}

/// A model that refuses every call, naming a short wait each time.
#[derive(Clone)]
struct AlwaysRefuses;

impl fenceline::provider::Provider for AlwaysRefuses {
    fn name(&self) -> &str {
        "refuses"
    }

    fn default_model(&self) -> &str {
        "m"
    }

    async fn call(
        &self,
        _: fenceline::provider::ProviderRequest,
        _: fenceline::provider::Progress,
    ) -> fenceline::provider::ProviderOutcome {
        fenceline::provider::ProviderOutcome::Throttled {
            code: "rate_limited".into(),
            request_id: None,
            limits: fenceline::provider::RateLimits {
                retry_after: Some(Duration::from_millis(100)),
                ..Default::default()
            },
        }
    }

    async fn retrieve(&self, _: &str) -> fenceline::provider::Retrieval {
        fenceline::provider::Retrieval::Unsupported
    }
}

async fn a_provider_that_refuses_forever_lets_the_job_expire_at_its_deadline_with_no_attempt_spent(
    db: Db,
) {
    use fenceline::ledger::LedgerOptions;
    use fenceline::queue::embedded::EmbeddedQueue;
    use fenceline::worker::{dispatcher, reaper, Timings, Worker, WorkerConfig};
    let name = format!("q{}", uuid::Uuid::now_v7().simple());
    let options = LedgerOptions {
        direct_queue: Some(name.clone()),
        ..crate::helpers::options()
    };
    let (ledger, _db) = crate::helpers::fresh_ledger_with(db, &options).await;
    let queue = EmbeddedQueue::new(ledger.clone(), &name, 5);
    let stop = tokio_util::sync::CancellationToken::new();
    let mut config = WorkerConfig::new("w-refused");
    config.timings = Timings::compressed();
    let worker = Worker::new(ledger.clone(), queue.clone(), AlwaysRefuses, config);
    let mut tasks = tokio::task::JoinSet::new();
    let s = stop.clone();
    tasks.spawn(async move { worker.run(s).await });
    let (l, q, s) = (ledger.clone(), queue.clone(), stop.clone());
    tasks.spawn(async move {
        let lane = dispatcher::Lane::metered(dispatcher::Meter::Fixed(20));
        dispatcher::run_lane(l, q, Duration::from_millis(20), Default::default(), lane, s).await
    });
    let (l, s) = (ledger.clone(), stop.clone());
    tasks.spawn(async move {
        reaper::run(
            l,
            AlwaysRefuses,
            Duration::from_millis(100),
            Duration::from_secs(600),
            s,
        )
        .await
    });
    let mut new = new_job("acme", "refused-forever", json!(1));
    new.deadline = Duration::from_millis(2000);
    new.max_attempts = 1;
    let job_id = create(&ledger, new).await;
    let until = std::time::Instant::now() + Duration::from_secs(15);
    let job = loop {
        let job = ledger.job(&job_id).await.unwrap().unwrap();
        if job.state.is_terminal() {
            break job;
        }
        assert!(
            std::time::Instant::now() < until,
            "{:?}",
            kinds(&ledger, &job_id).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    stop.cancel();
    while tasks.join_next().await.is_some() {}
    assert_eq!(
        job.state,
        JobState::Expired,
        "{:?}",
        kinds(&ledger, &job_id).await
    );
    assert_eq!(job.budget_used, 0, "no refusal spent an attempt");
    assert!(
        job.attempt_count > 1,
        "refused more times than its budget: {}",
        job.attempt_count
    );
    // The last error is the provider's limit: its refusal, or the worker holding the job back
    // for it as the deadline came.
    let limited = ["rate_limited", fenceline::worker::HELD_BY_LIMIT];
    assert!(
        limited.contains(&job.error_code.as_deref().unwrap_or("")),
        "{:?}",
        job.error_code
    );
    let events = ledger.events(&job_id, 0, 1000).await.unwrap();
    let expired = events
        .iter()
        .find(|e| e.kind == "deadline_expired")
        .unwrap();
    assert_eq!(
        expired
            .detail_as::<detail::DeadlineExpired>()
            .unwrap()
            .last_error,
        job.error_code
    );
    assert!(
        events
            .iter()
            .filter_map(|e| e.detail_as::<detail::AttemptFinished>())
            .any(|d| d.error_code.as_deref() == Some("rate_limited")),
        "the provider's refusals are on the timeline"
    );
    assert!(ledger
        .attempts(&job_id)
        .await
        .unwrap()
        .iter()
        .all(|a| a.outcome == AttemptOutcome::Throttled));
}

/// A round into the embedded queue, kept in the ledger, is one transaction of it: each row sent
/// once with its message in the queue and `dispatched` on its job, in the tenants' turns, a
/// capped tenant within its cap.
async fn the_ledgers_own_queue_takes_a_round_whole_in_fair_turns_within_caps(db: Db) {
    use fenceline::ledger::TenantShare;
    use fenceline::queue::{embedded::EmbeddedQueue, Queue};
    let (ledger, _db) = fresh_ledger(db).await;
    ledger
        .set_tenant_shares(&[TenantShare {
            tenant: "capped".into(),
            weight: 1,
            max_in_flight: Some(2),
        }])
        .await
        .unwrap();
    for i in 0..20 {
        create(&ledger, new_job("big", &format!("big-{i}"), json!(i))).await;
    }
    for i in 0..5 {
        create(&ledger, new_job("capped", &format!("c-{i}"), json!(i))).await;
    }
    for i in 0..3 {
        create(&ledger, new_job("small", &format!("s-{i}"), json!(i))).await;
    }
    let queue = EmbeddedQueue::new(ledger.clone(), "kept", 5);
    let (name, _) = queue
        .kept_in(&ledger)
        .expect("the embedded queue is kept in its ledger");
    let caps = std::collections::HashMap::from([("capped".to_owned(), 2)]);
    let sent = ledger
        .dispatch_into(&name, &queue.describe(), 16, &caps)
        .await
        .unwrap();
    let count = |tenant: &str| sent.iter().filter(|(i, _)| i.tenant == tenant).count();
    assert_eq!(
        (count("small"), count("capped"), count("big")),
        (3, 2, 11),
        "{sent:?}"
    );
    assert!(sent.iter().all(|(item, _)| item.send_attempts == 1));
    // Each message is in the queue, naming its job, and on the job's timeline.
    let mut deliveries = Vec::new();
    loop {
        let more = queue
            .receive(10, Duration::from_secs(60), Duration::ZERO)
            .await
            .unwrap();
        if more.is_empty() {
            break;
        }
        deliveries.extend(more);
    }
    let mut received: Vec<(String, String)> = deliveries
        .iter()
        .map(|d| {
            let job = fenceline::job::message::parse(&d.body).unwrap();
            (d.message_id.clone(), job.job_id)
        })
        .collect();
    let mut expected: Vec<(String, String)> = sent
        .iter()
        .map(|(item, message_id)| (message_id.clone(), item.job_id.clone()))
        .collect();
    received.sort();
    expected.sort();
    assert_eq!(received, expected);
    for (item, message_id) in &sent {
        let events = ledger.events(&item.job_id, 0, 100).await.unwrap();
        let dispatched: Vec<_> = events.iter().filter(|e| e.kind == "dispatched").collect();
        assert_eq!(dispatched.len(), 1, "{}", item.job_id);
        let sent = dispatched[0].detail_as::<detail::Dispatched>().unwrap();
        assert_eq!(&sent.message_id, message_id);
        assert_eq!(sent.queue, queue.describe());
    }
    // What is left waits its turn: big's nine and capped's three, none sent again.
    let rest = ledger.claim_outbox(50, LONG, "").await.unwrap();
    let left: Vec<&str> = rest.iter().map(|i| i.tenant.as_str()).collect();
    assert_eq!(left.len(), 12, "{left:?}");
    assert!(rest
        .iter()
        .all(|item| sent.iter().all(|(s, _)| s.job_id != item.job_id)));
}

/// Two dispatchers sending into the ledger's own queue at once share the backlog: every row
/// sent exactly once, with one message and one `dispatched` each.
async fn two_dispatchers_into_the_ledgers_own_queue_never_send_a_row_twice(db: Db) {
    use fenceline::queue::{embedded::EmbeddedQueue, Queue};
    let (ledger, _db) = fresh_ledger(db).await;
    let mut jobs = Vec::new();
    for i in 0..120 {
        let tenant = ["a", "b", "c"][i % 3];
        jobs.push(create(&ledger, new_job(tenant, &format!("j-{i}"), json!(i))).await);
    }
    let queue = EmbeddedQueue::new(ledger.clone(), "kept", 5);
    let described = queue.describe();
    let none = std::collections::HashMap::new();
    let mut sent = Vec::new();
    loop {
        let (one, two) = tokio::join!(
            ledger.dispatch_into("kept", &described, 25, &none),
            ledger.dispatch_into("kept", &described, 25, &none),
        );
        let (one, two) = (one.unwrap(), two.unwrap());
        if one.is_empty() && two.is_empty() {
            break;
        }
        sent.extend(one.into_iter().chain(two));
    }
    let mut sent_jobs: Vec<String> = sent.iter().map(|(i, _)| i.job_id.clone()).collect();
    sent_jobs.sort();
    jobs.sort();
    assert_eq!(sent_jobs, jobs, "every job sent exactly once");
    let depth = queue.depth().await.unwrap();
    assert_eq!(depth.visible, 120);
    for job in &jobs {
        let events = ledger.events(job, 0, 100).await.unwrap();
        let dispatched = events.iter().filter(|e| e.kind == "dispatched").count();
        assert_eq!(dispatched, 1, "{job}");
        let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
        let gap_free: Vec<i64> = (1..=seqs.len() as i64).collect();
        assert_eq!(seqs, gap_free, "{job}");
    }
}
