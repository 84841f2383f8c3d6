//! Attempts that run in the background under the provider's id (OpenAI's Responses API in
//! background mode), against the stand-in written from its API reference: the adapter row by
//! row, and the worker keeping the id before waiting, adopting an attempt whose owner died,
//! and cancelling upstream what no one waits for.

use std::time::Duration;

use fenceline::job::detail;
use fenceline::job::{Actor, JobState};
use fenceline::ledger::Ledger;
use fenceline::provider::openai::OpenAiConfig;
use fenceline::provider::responses::ResponsesProvider;
use fenceline::provider::stand_in::{self, StandInConfig};
use fenceline::provider::{Progress, Provider, ProviderOutcome, ProviderRequest, Submission};
use fenceline::queue::embedded::EmbeddedQueue;
use fenceline::worker::{reaper, Outcome, Timings, Worker, WorkerConfig};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::helpers::{
    as_owner, create, deliver, fresh_ledger, new_job, skip_postgres, wait_for_event, Db,
};

const LIMIT: Duration = Duration::from_secs(20);

/// A stand-in on a port of its own; its base URL.
pub(crate) async fn stand_in(config: StandInConfig) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(stand_in::serve(listener, config));
    base
}

pub(crate) fn adapter(base: &str) -> ResponsesProvider {
    ResponsesProvider::new(OpenAiConfig {
        base_url: base.to_owned(),
        api_key: None,
        default_model: "stand-in".into(),
        timeout: Duration::from_secs(10),
        retrieval: false,
    })
    .unwrap()
}

fn request(id: &str, model: &str) -> ProviderRequest {
    ProviderRequest {
        job_id: id.into(),
        attempt_no: 1,
        client_request_id: format!("{id}:1"),
        input: json!("Summarise the quarter."),
        model: json!({ "model": model }),
    }
}

/// How many times the stand-in was asked to create a response for `client_request_id`.
async fn creates(base: &str, client_request_id: &str) -> u64 {
    let stats: Value = reqwest::get(base.replace("/v1", "/stand-in/stats"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    stats["creates"][client_request_id].as_u64().unwrap_or(0)
}

async fn cancels(base: &str) -> u64 {
    let stats: Value = reqwest::get(base.replace("/v1", "/stand-in/stats"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    stats["cancels"].as_u64().unwrap()
}

async fn submitted(provider: &ResponsesProvider, request: ProviderRequest) -> String {
    match provider.submit(request, Progress::default()).await {
        Submission::Accepted { provider_id, .. } => provider_id,
        other => panic!("the stand-in took the request: {other:?}"),
    }
}

#[tokio::test]
async fn the_responses_adapter_reads_every_way_a_background_response_ends() {
    let base = stand_in(StandInConfig {
        latency: Duration::from_millis(300),
        lose_rate: 0.0,
        lose_create_rate: 0.0,
    })
    .await;
    let provider = adapter(&base);
    assert!(provider.retains());

    // Created at once, polled to its answer; one create.
    let id = submitted(&provider, request("done", "stand-in")).await;
    assert!(id.starts_with("resp_"), "{id}");
    let ProviderOutcome::Succeeded { answer, .. } = provider.poll(&id, Progress::default()).await
    else {
        panic!("a completed response is the answer");
    };
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert!(answer["content"]
        .as_str()
        .unwrap()
        .starts_with("stand-in answer"));
    assert_eq!(answer["response_id"], id.as_str());
    assert!(answer["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(creates(&base, "done:1").await, 1);

    // The provider says it failed: another attempt may follow.
    let id = submitted(&provider, request("failed", "stand-in-failed")).await;
    assert!(matches!(
        provider.poll(&id, Progress::default()).await,
        ProviderOutcome::Retryable { code, .. } if code == "response_failed_server_error"
    ));
    // Cut short by its output limit: the same request ends the same way.
    let id = submitted(&provider, request("cut", "stand-in-incomplete")).await;
    assert!(matches!(
        provider.poll(&id, Progress::default()).await,
        ProviderOutcome::Fatal { code, .. } if code == "response_incomplete_max_output_tokens"
    ));
    // Cancelled while it runs: it says so when polled.
    let id = submitted(&provider, request("stopped", "stand-in")).await;
    provider.cancel(&id).await.unwrap();
    assert!(matches!(
        provider.poll(&id, Progress::default()).await,
        ProviderOutcome::Retryable { code, .. } if code == "response_cancelled"
    ));
    // A cancel of one already ended is no error: it runs no more either way.
    let id = submitted(&provider, request("late-cancel", "stand-in")).await;
    assert!(matches!(
        provider.poll(&id, Progress::default()).await,
        ProviderOutcome::Succeeded { .. }
    ));
    provider.cancel(&id).await.unwrap();
    // Gone (expired, never stored): it will not answer.
    assert!(matches!(
        provider.poll("resp_missing", Progress::default()).await,
        ProviderOutcome::Retryable { code, .. } if code == "response_expired"
    ));
    // Nothing listens: refused before sending.
    let nowhere = adapter(&format!(
        "http://127.0.0.1:{}/v1",
        crate::helpers::free_port()
    ));
    assert!(matches!(
        nowhere.submit(request("nowhere", "stand-in"), Progress::default()).await,
        Submission::Ended(ProviderOutcome::Throttled { code, .. }) if code == "connect_failed"
    ));
}

#[tokio::test]
async fn polls_that_are_lost_are_asked_again_and_only_a_lost_create_is_uncertain() {
    // Every answer lost: the create ran at the provider and no id came back.
    let base = stand_in(StandInConfig {
        latency: Duration::from_millis(100),
        lose_rate: 1.0,
        lose_create_rate: 1.0,
    })
    .await;
    let provider = adapter(&base);
    assert!(matches!(
        provider.submit(request("lost", "stand-in"), Progress::default()).await,
        Submission::Ended(ProviderOutcome::Uncertain { code, .. }) if code == "submit_http_502"
    ));
    assert_eq!(creates(&base, "lost:1").await, 1, "sent once, never again");

    // Half the answers lost: the id came back at some point, and polling goes on past the
    // lost polls to the answer.
    let base = stand_in(StandInConfig {
        latency: Duration::from_millis(300),
        lose_rate: 0.5,
        lose_create_rate: 0.5,
    })
    .await;
    let provider = adapter(&base);
    let mut answered = 0;
    for n in 0..12 {
        let key = format!("half-{n}");
        if let Submission::Accepted { provider_id, .. } = provider
            .submit(request(&key, "stand-in"), Progress::default())
            .await
        {
            let outcome =
                tokio::time::timeout(LIMIT, provider.poll(&provider_id, Progress::default()))
                    .await
                    .unwrap();
            assert!(
                matches!(outcome, ProviderOutcome::Succeeded { .. }),
                "{outcome:?}"
            );
            answered += 1;
        }
    }
    assert!(answered > 0, "some creates came back");
}

fn worker(
    ledger: &Ledger,
    queue: &EmbeddedQueue,
    base: &str,
    id: &str,
) -> Worker<EmbeddedQueue, ResponsesProvider> {
    let mut config = WorkerConfig::new(id);
    config.timings = Timings::compressed();
    Worker::new(ledger.clone(), queue.clone(), adapter(base), config)
}

/// Worker A keeps the response's id, then dies (its task and heartbeat gone, nothing more
/// written). Returns the job, once A's lease has lapsed.
async fn killed_after_submitting(
    ledger: &Ledger,
    queue: &EmbeddedQueue,
    base: &str,
    key: &str,
) -> String {
    let job_id = create(
        ledger,
        new_job("acme", key, json!("Summarise the quarter.")),
    )
    .await;
    let a = worker(ledger, queue, base, "A");
    let stop = CancellationToken::new();
    let heartbeat = a.spawn_heartbeat(stop.clone());
    let delivery = deliver(queue, &job_id).await;
    let task = tokio::spawn(async move { a.handle_delivery(delivery).await });
    wait_for_event(ledger, &job_id, "attempt_submitted", LIMIT).await;
    task.abort();
    stop.cancel();
    let _ = heartbeat.await;
    // A's lease lapses.
    tokio::time::sleep(Timings::compressed().lease + Duration::from_millis(300)).await;
    job_id
}

/// Worker `name` (with its heartbeat) receives the job's message and handles it to its end.
async fn received_by(
    ledger: &Ledger,
    queue: &EmbeddedQueue,
    base: &str,
    name: &str,
    job_id: &str,
) -> Outcome {
    let w = worker(ledger, queue, base, name);
    let stop = CancellationToken::new();
    let heartbeat = w.spawn_heartbeat(stop.clone());
    let delivery = deliver(queue, job_id).await;
    let outcome = tokio::time::timeout(LIMIT, w.handle_delivery(delivery))
        .await
        .unwrap();
    stop.cancel();
    let _ = heartbeat.await;
    outcome
}

async fn adopted_by_a_receiver(db: Db) {
    let (ledger, _db) = fresh_ledger(db).await;
    let queue = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
    let base = stand_in(StandInConfig {
        latency: Duration::from_secs(3),
        lose_rate: 0.0,
        lose_create_rate: 0.0,
    })
    .await;
    let job_id = killed_after_submitting(&ledger, &queue, &base, "adopt-me").await;
    let outcome = received_by(&ledger, &queue, &base, "B", &job_id).await;
    assert_eq!(outcome, Outcome::Succeeded);

    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Succeeded);
    assert_eq!(job.owner_epoch, 2, "one new owner");
    assert_eq!(job.attempt_count, 1, "the same attempt, adopted");
    assert_eq!(job.budget_used, 1, "no budget spent on the adoption");
    assert_eq!(
        creates(&base, &format!("{job_id}:1")).await,
        1,
        "the model ran once"
    );
    let events = ledger.events(&job_id, 0, 1000).await.unwrap();
    let adoption = events
        .iter()
        .find_map(|e| e.detail_as::<detail::RecoveryClaimed>())
        .expect("the adoption is on the timeline");
    assert_eq!(adoption.adopted_attempt, Some(1));
    assert_eq!(adoption.from_epoch, 1);
    let accepted = events
        .iter()
        .find(|e| e.kind.as_str() == "result_accepted")
        .unwrap();
    assert_eq!((accepted.epoch, accepted.attempt_no), (2, Some(1)));
    crate::helpers::assert_gap_free(&ledger, &job_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_that_dies_mid_call_leaves_its_response_to_be_adopted_on_sqlite() {
    adopted_by_a_receiver(Db::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_that_dies_mid_call_leaves_its_response_to_be_adopted_on_postgres() {
    if skip_postgres() {
        return;
    }
    adopted_by_a_receiver(Db::Postgres).await;
}

/// The owner's answer comes back after its lease lapsed, before anyone recovered the job: the
/// answer is refused and kept as evidence, and the attempt is still the job's. The worker that
/// receives the job next adopts it (the provider still holds the response) rather than finding
/// it impossible to take over; so does the reaper.
async fn late_answer_then_adopted(db: Db, by_reaper: bool) {
    let (ledger, _db) = fresh_ledger(db).await;
    let queue = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
    let base = stand_in(StandInConfig {
        latency: Duration::from_secs(2),
        lose_rate: 0.0,
        lose_create_rate: 0.0,
    })
    .await;
    let job_id = killed_after_submitting(&ledger, &queue, &base, "late-answer").await;
    let late = ledger
        .accept_result(&as_owner(&job_id, 1, "A"), 1, "\"late\"")
        .await;
    assert!(
        matches!(
            late,
            Err(fenceline::ledger::LedgerError::Refused {
                refusal: fenceline::ledger::Refusal::LeaseExpired,
                ..
            })
        ),
        "{late:?}"
    );
    let kinds = crate::helpers::kinds(&ledger, &job_id).await;
    assert!(kinds.iter().any(|k| k == "result_rejected"), "{kinds:?}");
    if by_reaper {
        let round = reaper::reap_once(&ledger, Duration::from_secs(600))
            .await
            .unwrap();
        assert_eq!(round.recovered, 1, "{round:?}");
        let held = ledger.job(&job_id).await.unwrap().unwrap();
        assert_eq!(
            (held.state, held.pending_attempt),
            (JobState::Running, Some(1)),
            "held for adoption"
        );
    }
    let outcome = received_by(&ledger, &queue, &base, "B", &job_id).await;
    assert_eq!(outcome, Outcome::Succeeded);
    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!((job.state, job.attempt_count), (JobState::Succeeded, 1));
    assert_eq!(job.budget_used, 1, "no budget spent on the adoption");
    assert_eq!(
        creates(&base, &format!("{job_id}:1")).await,
        1,
        "the model ran once"
    );
    let attempts = ledger.attempts(&job_id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(
        attempts[0].outcome,
        fenceline::ledger::AttemptOutcome::Succeeded
    );
    crate::helpers::assert_gap_free(&ledger, &job_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_answer_refused_for_a_lapsed_lease_leaves_its_attempt_to_be_adopted_on_sqlite() {
    late_answer_then_adopted(Db::Sqlite, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_answer_refused_for_a_lapsed_lease_leaves_its_attempt_to_be_adopted_on_postgres() {
    if skip_postgres() {
        return;
    }
    late_answer_then_adopted(Db::Postgres, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_reaper_holds_an_attempt_whose_answer_came_too_late_for_adoption() {
    late_answer_then_adopted(Db::Sqlite, true).await;
}

/// The reaper finds the lease lapsed first: it holds the attempt for adoption and sends the
/// job again; the worker that receives it adopts the attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_reaper_holds_an_attempt_with_an_id_for_adoption_and_a_worker_adopts_it() {
    let (ledger, _db) = fresh_ledger(Db::Sqlite).await;
    let queue = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
    let base = stand_in(StandInConfig {
        latency: Duration::from_secs(3),
        lose_rate: 0.0,
        lose_create_rate: 0.0,
    })
    .await;
    let job_id = killed_after_submitting(&ledger, &queue, &base, "reaped").await;
    let round = reaper::reap_once(&ledger, Duration::from_secs(600))
        .await
        .unwrap();
    assert_eq!(round.recovered, 1, "{round:?}");
    let held = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(
        held.state,
        JobState::Running,
        "held for adoption, not unknown"
    );
    assert_eq!(held.pending_attempt, Some(1));
    assert_eq!(held.owner_id.as_deref(), Some("system"));
    // A worker calling another provider cannot poll the response: it does not adopt it.
    let other = ledger
        .adopt(
            &job_id,
            "C",
            (Duration::from_secs(2), "openai"),
            "held_for_adoption",
        )
        .await
        .unwrap();
    assert!(
        other.is_none(),
        "only the provider that ran it can be polled for it"
    );

    let outcome = received_by(&ledger, &queue, &base, "B", &job_id).await;
    assert_eq!(outcome, Outcome::Succeeded);
    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(
        (job.state, job.owner_epoch, job.attempt_count),
        (JobState::Succeeded, 3, 1),
        "held by the reaper, then adopted by B: the same attempt"
    );
    assert_eq!(creates(&base, &format!("{job_id}:1")).await, 1);
}

/// An operator cancels the job while its response runs: the owner, fenced out, cancels the
/// response at the provider and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancelled_job_cancels_its_response_at_the_provider() {
    let (ledger, _db) = fresh_ledger(Db::Sqlite).await;
    let queue = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
    let base = stand_in(StandInConfig {
        latency: Duration::from_secs(30),
        lose_rate: 0.0,
        lose_create_rate: 0.0,
    })
    .await;
    let job_id = create(&ledger, new_job("acme", "cancel", json!("x"))).await;
    let a = worker(&ledger, &queue, &base, "A");
    let stop = CancellationToken::new();
    let heartbeat = a.spawn_heartbeat(stop.clone());
    let delivery = deliver(&queue, &job_id).await;
    let task = tokio::spawn(async move { a.handle_delivery(delivery).await });
    wait_for_event(&ledger, &job_id, "attempt_submitted", LIMIT).await;
    ledger
        .cancel(
            &job_id,
            1,
            JobState::Running,
            &Actor::Operator("olga".into()),
            "wrong document",
        )
        .await
        .unwrap();
    let outcome = tokio::time::timeout(LIMIT, task).await.unwrap().unwrap();
    assert!(matches!(outcome, Outcome::Stopped(_)), "{outcome:?}");
    stop.cancel();
    let _ = heartbeat.await;
    let events = ledger.events(&job_id, 0, 1000).await.unwrap();
    let cancelled = events
        .iter()
        .find_map(|e| e.detail_as::<detail::UpstreamCancelled>())
        .expect("the cancel at the provider is on the timeline");
    assert_eq!(
        (cancelled.why.as_str(), cancelled.answer.as_str()),
        ("cancelled", "cancelled")
    );
    assert_eq!(cancels(&base).await, 1);
}

/// The create's answer is lost: the one window left. The job waits for a decision, and its
/// timeline says the id was never read.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_create_is_the_one_window_that_leaves_a_job_unknown() {
    let (ledger, _db) = fresh_ledger(Db::Sqlite).await;
    let queue = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
    let base = stand_in(StandInConfig {
        latency: Duration::from_millis(200),
        lose_rate: 1.0,
        lose_create_rate: 1.0,
    })
    .await;
    let job_id = create(&ledger, new_job("acme", "lost", json!("x"))).await;
    let a = worker(&ledger, &queue, &base, "A");
    let delivery = deliver(&queue, &job_id).await;
    let outcome = tokio::time::timeout(LIMIT, a.handle_delivery(delivery))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::HandedToLedger(JobState::Unknown));
    let kinds = crate::helpers::kinds(&ledger, &job_id).await;
    assert!(!kinds.iter().any(|k| k == "attempt_submitted"), "{kinds:?}");
    let job = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(
        job.recovery_reason.as_deref(),
        Some("provider_submit_http_502")
    );
}

/// LiteLLM's proxy serves the Responses create route with its mocked models (it runs nothing
/// in the background: the response comes back `completed`). The adapter's request is one a
/// real server takes, and an answer that has ended already is the outcome, with nothing left
/// to poll.
#[tokio::test]
async fn litellms_responses_route_takes_the_request_and_an_ended_response_needs_no_poll() {
    let Some((url, key)) = crate::helpers::litellm() else {
        return;
    };
    let provider = ResponsesProvider::new(OpenAiConfig {
        base_url: url,
        api_key: Some(fenceline::provider::openai::ApiKey::new(key)),
        default_model: "fast".into(),
        timeout: Duration::from_secs(20),
        retrieval: false,
    })
    .unwrap();
    let request = ProviderRequest {
        job_id: "job_r".into(),
        attempt_no: 1,
        client_request_id: "job_r:1".into(),
        input: json!("hello"),
        model: json!({ "max_tokens": 64, "temperature": 0 }),
    };
    match provider.submit(request, Progress::default()).await {
        Submission::Ended(ProviderOutcome::Succeeded { answer, usage, .. }) => {
            let answer: Value = serde_json::from_str(&answer).unwrap();
            assert_eq!(answer["content"], "mocked answer");
            assert!(answer["response_id"]
                .as_str()
                .is_some_and(|id| id.starts_with("resp_")));
            assert!(usage.is_some_and(|u| u.output > 0), "the usage is read");
        }
        other => panic!("expected LiteLLM's completed response, got {other:?}"),
    }
}

/// A response no worker polls any more — held for adoption when its worker died — whose job
/// an operator then cancels is cancelled at the provider by the reaper, once, on the timeline.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_reaper_cancels_a_held_response_whose_job_moved_on() {
    let (ledger, _db) = fresh_ledger(Db::Sqlite).await;
    let queue = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
    let base = stand_in(StandInConfig {
        latency: Duration::from_secs(30),
        lose_rate: 0.0,
        lose_create_rate: 0.0,
    })
    .await;
    let job_id = killed_after_submitting(&ledger, &queue, &base, "orphan").await;
    reaper::reap_once(&ledger, Duration::from_secs(600))
        .await
        .unwrap();
    let held = ledger.job(&job_id).await.unwrap().unwrap();
    assert_eq!(
        held.owner_id.as_deref(),
        Some("system"),
        "held for adoption"
    );
    ledger
        .cancel(
            &job_id,
            held.owner_epoch,
            JobState::Running,
            &Actor::Operator("olga".into()),
            "wrong document",
        )
        .await
        .unwrap();
    let provider = adapter(&base);
    for _ in 0..2 {
        reaper::cancel_orphaned_once(&ledger, &provider)
            .await
            .unwrap();
    }
    assert_eq!(cancels(&base).await, 1, "cancelled at the provider, once");
    let events = ledger.events(&job_id, 0, 1000).await.unwrap();
    let cancelled = events
        .iter()
        .find_map(|e| e.detail_as::<detail::UpstreamCancelled>())
        .expect("the cancel at the provider is on the timeline");
    assert_eq!(cancelled.why, "failed_terminal");
    assert_eq!(cancelled.answer, "cancelled");
}
