//! Fallback between providers: a job its first pair refuses for longer than the routes allow
//! moves on to the next pair, within its deadline and budget, with the reason on its timeline;
//! an uncertain attempt never moves on by itself. Anthropic's and Bedrock's adapters against
//! their servers written from the API references, through a worker on the embedded queue.

use std::collections::HashMap;
use std::time::Duration;

use fenceline::job::{EventKind, JobState};
use fenceline::ledger::Ledger;
use fenceline::provider::limits::Limits;
use fenceline::provider::route::{Pair, Routes};
use fenceline::provider::AnyProvider;
use fenceline::queue::embedded::EmbeddedQueue;
use fenceline::worker::{dispatcher, Timings, Worker, WorkerConfig};
use serde_json::{json, Value};

const NOVA: &str = "amazon.nova-lite-v1:0";

/// A worker calling Anthropic first, with Bedrock to fall back to after `after`: `acme`'s
/// route moves on to Bedrock's Nova Lite.
async fn routed_worker(
    ledger: &Ledger,
    anthropic: &str,
    bedrock: &str,
    after: Duration,
) -> tokio_util::sync::CancellationToken {
    let fallbacks = vec![AnyProvider::Bedrock(
        crate::bedrock::adapter(bedrock, Duration::from_secs(5)).await,
    )];
    worker_with(ledger, anthropic, fallbacks, after).await
}

/// A worker calling Anthropic first, with `fallbacks` to move jobs on to.
async fn worker_with(
    ledger: &Ledger,
    anthropic: &str,
    fallbacks: Vec<AnyProvider>,
    after: Duration,
) -> tokio_util::sync::CancellationToken {
    let queue = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
    let mut config = WorkerConfig::new("w");
    config.timings = Timings::compressed();
    config.routes = std::sync::Arc::new(Routes {
        by_tenant: HashMap::from([(
            "acme".to_owned(),
            vec![Pair {
                provider: "bedrock".into(),
                model: NOVA.into(),
            }],
        )]),
        after,
    });
    let providers = (
        AnyProvider::Anthropic(crate::anthropic::adapter(anthropic, Duration::from_secs(5))),
        fallbacks,
    );
    let limits = Limits::new(config.max_in_flight);
    let worker = Worker::routed(ledger.clone(), queue.clone(), providers, config, limits);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move { worker.run(stop).await }
    });
    tokio::spawn(dispatcher::run(
        ledger.clone(),
        queue,
        Duration::from_millis(20),
        Default::default(),
        stop.clone(),
    ));
    stop
}

/// Waits until the job is in one of `states`.
async fn wait_for(ledger: &Ledger, job_id: &str, states: &[JobState]) -> fenceline::ledger::Job {
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let job = ledger.job(job_id).await.unwrap().unwrap();
        if states.contains(&job.state) {
            return job;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "{job_id} stayed {:?}:\n{}",
            job.state,
            crate::helpers::timeline(ledger, job_id).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

crate::on_both_backends!(a_job_refused_past_the_wait_falls_back_within_its_deadline_and_budget);

async fn a_job_refused_past_the_wait_falls_back_within_its_deadline_and_budget(
    db: crate::helpers::Db,
) {
    let app = crate::helpers::spawn_app(db).await;
    let ledger = app.ledger.clone();
    let (anthropic, refused) = crate::anthropic::server().await;
    let (bedrock, answered) = crate::bedrock::server().await;
    // Anthropic asks for 7 s (`retry-after`); the route waits at most 3 s for a pair.
    let stop = routed_worker(&ledger, &anthropic, &bedrock, Duration::from_secs(3)).await;
    let mut new = crate::helpers::new_job("acme", "fb", json!("status-429"));
    new.model = json!({ "model": "claude-haiku-4-5", "max_tokens": 64 });
    let job_id = crate::helpers::create(&ledger, new).await;
    let created = ledger.job(&job_id).await.unwrap().unwrap();

    let job = wait_for(&ledger, &job_id, &[JobState::Succeeded]).await;
    stop.cancel();
    assert_eq!(
        job.deadline_at, created.deadline_at,
        "the same fixed deadline"
    );
    assert_eq!(job.budget_used, 1, "the refusal spent none of the budget");
    assert_eq!(job.route.step, 1);
    assert_eq!(job.route.provider.as_deref(), Some("bedrock"));

    let attempts = ledger.attempts(&job_id).await.unwrap();
    let tried: Vec<(&str, &str)> = attempts
        .iter()
        .map(|a| (a.provider.as_str(), a.outcome.as_str()))
        .collect();
    assert_eq!(
        tried,
        [("anthropic", "throttled"), ("bedrock", "succeeded")],
        "one refusal, then the next pair"
    );
    let spend = attempts[1].spend().expect("Bedrock's usage is kept");
    assert_eq!(spend.model, NOVA, "the route's model, priced as such");
    assert_eq!(refused.sends.lock().unwrap().get("status-429"), Some(&1));
    assert_eq!(answered.sends.lock().unwrap().get("status-429"), Some(&1));

    // Why it moved on, on the timeline.
    let events = ledger.events(&job_id, 0, 100).await.unwrap();
    let moved: Vec<&Value> = events
        .iter()
        .filter(|e| e.kind == EventKind::ProviderFallback)
        .map(|e| &e.detail)
        .collect();
    assert_eq!(moved.len(), 1, "{events:?}");
    let moved = moved[0];
    assert_eq!(moved["from_provider"], "anthropic");
    assert_eq!(moved["from_model"], "claude-haiku-4-5");
    assert_eq!(moved["to_provider"], "bedrock");
    assert_eq!(moved["to_model"], NOVA);
    assert_eq!(moved["reason"], "waited_past");
    assert_eq!(moved["error_code"], "rate_limit_error");
    assert!(moved["retry_in_ms"].as_i64().unwrap() >= 7_000, "{moved}");
    assert_eq!(moved["after_ms"], 3_000);

    // The job page says where the job stands, and what each provider's attempts spent.
    let mut browser = app.signed_in(fenceline::operators::Role::Viewer).await;
    let page = browser.page(&format!("/jobs/{job_id}")).await;
    assert!(
        page.contains(&format!(
            "bedrock · {NOVA} (moved on once along its fallback route)"
        )),
        "{page}"
    );
    assert!(
        page.contains("By provider: anthropic: no usage · bedrock: 38 tokens"),
        "{page}"
    );
    assert!(
        page.contains("moved on from anthropic · claude-haiku-4-5 to bedrock"),
        "the swimlane marks the move"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_refusal_waits_for_the_same_pair_and_an_uncertain_attempt_never_moves_on() {
    let (ledger, _db) = crate::helpers::fresh_ledger(crate::helpers::Db::Sqlite).await;
    let (anthropic, _) = crate::anthropic::server().await;
    let (bedrock, answered) = crate::bedrock::server().await;
    // A pair may refuse for a minute before the job moves on.
    let stop = routed_worker(&ledger, &anthropic, &bedrock, Duration::from_secs(60)).await;

    // 500 api_error: the model may have run. The job waits for a decision, on its pair.
    let uncertain = crate::helpers::create(
        &ledger,
        crate::helpers::new_job("acme", "uncertain", json!("status-500")),
    )
    .await;
    let job = wait_for(&ledger, &uncertain, &[JobState::Unknown]).await;
    assert_eq!(job.route.step, 0, "no fallback without a decision");

    // A refusal asking for 7 s when the route allows a minute: the job waits for Anthropic.
    let refused = crate::helpers::create(
        &ledger,
        crate::helpers::new_job("acme", "refused", json!("status-429")),
    )
    .await;
    let job = wait_for(&ledger, &refused, &[JobState::RetryAuthorized]).await;
    assert_eq!(job.route.step, 0);
    assert!(
        job.route.since.is_some(),
        "the pair's first refusal is kept"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.cancel();
    assert!(
        answered.sends.lock().unwrap().is_empty(),
        "Bedrock was never called"
    );
    for job_id in [&uncertain, &refused] {
        assert_eq!(
            crate::helpers::count_kind(&ledger, job_id, "provider_fallback").await,
            0
        );
    }
}

/// A job's own `fallback` parameter replaces its tenant's route, and a pair that runs requests
/// in the background keeps its id as the worker's own provider would: the job moves on to the
/// Responses stand-in, whose response id is on the attempt before any waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_own_route_moves_it_on_to_a_provider_that_keeps_its_id() {
    let (ledger, _db) = crate::helpers::fresh_ledger(crate::helpers::Db::Sqlite).await;
    let (anthropic, _) = crate::anthropic::server().await;
    let responses = crate::background::stand_in(fenceline::provider::stand_in::StandInConfig {
        latency: Duration::from_millis(300),
        lose_rate: 0.0,
        lose_create_rate: 0.0,
    })
    .await;
    let fallbacks = vec![AnyProvider::Responses(crate::background::adapter(
        &responses,
    ))];
    let stop = worker_with(&ledger, &anthropic, fallbacks, Duration::from_secs(3)).await;
    let mut new = crate::helpers::new_job("other", "own-route", json!("status-429"));
    new.model = json!({ "max_tokens": 64, "fallback": ["openai-responses:stand-in"] });
    let job_id = crate::helpers::create(&ledger, new).await;
    let job = wait_for(&ledger, &job_id, &[JobState::Succeeded]).await;
    stop.cancel();
    assert_eq!(job.route.provider.as_deref(), Some("openai-responses"));
    let attempts = ledger.attempts(&job_id).await.unwrap();
    assert_eq!(attempts[1].provider, "openai-responses");
    assert!(
        attempts[1].submitted_id.is_some(),
        "the response id was kept on the attempt"
    );
    assert_eq!(
        crate::helpers::count_kind(&ledger, &job_id, "attempt_submitted").await,
        1
    );
}
