//! The OpenAI-compatible provider against a local fake server, and through the worker.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use fenceline::provider::openai::{ApiKey, OpenAiConfig, OpenAiProvider};
use fenceline::provider::{Progress, Provider, ProviderOutcome, ProviderRequest, Retrieval};
use serde_json::{json, Value};

#[derive(Clone, Default)]
struct Fake {
    stored: Arc<Mutex<Vec<Value>>>,
    seen_keys: Arc<Mutex<Vec<String>>>,
}

fn completion(id: &str, content: &str, metadata: &Value) -> Value {
    json!({
        "id": id,
        "object": "chat.completion",
        "model": "fake-model",
        "metadata": metadata,
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": content } }],
        "usage": { "prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5 }
    })
}

async fn completions(
    State(fake): State<Fake>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if let Some(auth) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
        fake.seen_keys.lock().unwrap().push(auth.to_owned());
    }
    let prompt = body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let metadata = body.get("metadata").cloned().unwrap_or(Value::Null);
    let headers = [("x-request-id", "req-fake-1")];
    match prompt.as_str() {
        "rate" => (
            StatusCode::TOO_MANY_REQUESTS,
            [
                ("x-request-id", "req-fake-1"),
                ("retry-after-ms", "250"),
                ("x-ratelimit-limit-requests", "20"),
                ("x-ratelimit-remaining-requests", "0"),
                ("x-ratelimit-reset-requests", "1s"),
            ],
            "slow down",
        )
            .into_response(),
        "bad" => (StatusCode::BAD_REQUEST, headers, "bad request").into_response(),
        "gateway" => (StatusCode::BAD_GATEWAY, headers, "upstream").into_response(),
        "garbled" => (StatusCode::OK, headers, "{not json").into_response(),
        "hang" => {
            // Executed and stored, but the answer never arrives in time.
            fake.stored
                .lock()
                .unwrap()
                .push(completion("cmpl-hang", "late answer", &metadata));
            tokio::time::sleep(Duration::from_secs(5)).await;
            (StatusCode::OK, headers, "{}").into_response()
        }
        _ => {
            let c = completion("cmpl-1", &format!("echo: {prompt}"), &metadata);
            fake.stored.lock().unwrap().push(c.clone());
            (StatusCode::OK, headers, Json(c)).into_response()
        }
    }
}

async fn list(State(fake): State<Fake>, Query(q): Query<Vec<(String, String)>>) -> Json<Value> {
    let wanted = q
        .iter()
        .find(|(k, _)| k == "metadata[fenceline_request]")
        .map(|(_, v)| v.clone());
    let data: Vec<Value> = fake
        .stored
        .lock()
        .unwrap()
        .iter()
        .filter(|c| {
            wanted
                .as_deref()
                .is_some_and(|w| c["metadata"]["fenceline_request"] == w)
        })
        .cloned()
        .collect();
    Json(json!({ "object": "list", "data": data }))
}

async fn fake_server() -> (String, Fake) {
    let fake = Fake::default();
    let app = Router::new()
        .route("/v1/chat/completions", post(completions).get(list))
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/v1"), fake)
}

fn provider(base_url: &str) -> OpenAiProvider {
    OpenAiProvider::new(OpenAiConfig {
        base_url: base_url.into(),
        api_key: Some(ApiKey::new("sk-test-key".into())),
        default_model: "fake-model".into(),
        timeout: Duration::from_millis(800),
        retrieval: true,
    })
    .unwrap()
}

fn request(prompt: &str, id: &str) -> ProviderRequest {
    ProviderRequest {
        job_id: "job_x".into(),
        attempt_no: 1,
        client_request_id: id.into(),
        input: json!(prompt),
        model: json!({ "temperature": 0 }),
    }
}

#[tokio::test]
async fn an_openai_compatible_server_is_called_and_its_failures_are_classified() {
    let (url, fake) = fake_server().await;
    let p = provider(&url);
    let ok = p
        .call(request("hello", "job_x:1"), Progress::default())
        .await;
    let ProviderOutcome::Succeeded {
        answer, request_id, ..
    } = ok
    else {
        panic!("expected success, got {ok:?}");
    };
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["content"], "echo: hello");
    assert_eq!(answer["usage"]["total_tokens"], 5);
    assert_eq!(request_id.as_deref(), Some("req-fake-1"));
    assert_eq!(fake.seen_keys.lock().unwrap()[0], "Bearer sk-test-key");

    let outcome = |prompt: &'static str| {
        let p = p.clone();
        async move {
            p.call(request(prompt, "job_x:2"), Progress::default())
                .await
        }
    };
    // Refused before it ran: throttled, with the limits the answer stated.
    let ProviderOutcome::Throttled { code, limits, .. } = outcome("rate").await else {
        panic!("a 429 is a refusal");
    };
    assert_eq!(code, "rate_limited");
    assert_eq!(limits.wait(), Some(Duration::from_millis(250)));
    assert_eq!(limits.requests.limit, Some(20.0));
    assert_eq!(limits.spent(), Some("requests"));
    assert!(
        matches!(outcome("bad").await, ProviderOutcome::Fatal { code, .. } if code == "http_400")
    );
    assert!(matches!(
        outcome("gateway").await,
        ProviderOutcome::Uncertain { .. }
    ));
    assert!(
        matches!(outcome("garbled").await, ProviderOutcome::Uncertain { code, .. } if code == "unreadable_response")
    );
    assert!(
        matches!(outcome("hang").await, ProviderOutcome::Uncertain { code, .. } if code == "timeout")
    );

    let nowhere = provider("http://127.0.0.1:9/v1");
    assert!(matches!(
        nowhere.call(request("x", "job_x:3"), Progress::default()).await,
        ProviderOutcome::Throttled { code, .. } if code == "connect_failed"
    ));
}

#[tokio::test]
async fn an_uncertain_call_is_retrieved_by_fenceline_request_id() {
    let (url, _fake) = fake_server().await;
    let p = provider(&url);
    let lost = p
        .call(request("hang", "job_y:1"), Progress::default())
        .await;
    assert!(matches!(lost, ProviderOutcome::Uncertain { .. }));
    match p.retrieve("job_y:1").await {
        Retrieval::Found(answer) => assert!(answer.contains("late answer")),
        other => panic!("expected the stored completion, got {other:?}"),
    }
    assert_eq!(
        p.retrieve("job_y:9").await,
        Retrieval::Inconclusive,
        "absence proves nothing"
    );
}

/// Runs one job whose model parameters are `model` through a worker (embedded queue, SQLite)
/// on `provider`, and returns the finished job with its result body and its attempts.
pub(crate) async fn run_one_job<P: Provider + Clone>(
    provider: P,
    model: Value,
) -> (
    fenceline::ledger::Job,
    Option<String>,
    Vec<fenceline::ledger::Attempt>,
) {
    use fenceline::queue::embedded::EmbeddedQueue;
    use fenceline::worker::{dispatcher, Timings, Worker, WorkerConfig};

    let (ledger, _db) = crate::helpers::fresh_ledger(crate::helpers::Db::Sqlite).await;
    let queue = EmbeddedQueue::new(ledger.clone(), "jobs", 5);
    let mut config = WorkerConfig::new("w");
    config.timings = Timings::compressed();
    let name = provider.name().to_owned();
    let worker = Worker::new(ledger.clone(), queue.clone(), provider, config);
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn({
        let stop = stop.clone();
        async move { worker.run(stop).await }
    });
    let dispatching = tokio::spawn(dispatcher::run(
        ledger.clone(),
        queue,
        Duration::from_millis(20),
        Default::default(),
        stop.clone(),
    ));
    let mut job = crate::helpers::new_job("acme", "oa", json!("summarise this"));
    job.model = model;
    let job_id = crate::helpers::create(&ledger, job).await;
    let until = tokio::time::Instant::now() + Duration::from_secs(40);
    let job = loop {
        let job = ledger.job(&job_id).await.unwrap().unwrap();
        if job.state.is_terminal() {
            break job;
        }
        assert!(tokio::time::Instant::now() < until);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let body = match job.result_ref.as_deref() {
        Some(r) => ledger.result_body(r).await.unwrap(),
        None => None,
    };
    let attempts = ledger.attempts(&job_id).await.unwrap();
    assert_eq!(attempts[0].provider, name);
    stop.cancel();
    let _ = tokio::join!(running, dispatching);
    (job, body, attempts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_a_job_on_an_openai_compatible_server() {
    use fenceline::job::JobState;
    let (url, _fake) = fake_server().await;
    let (job, body, _) = run_one_job(provider(&url), json!({ "temperature": 0 })).await;
    assert_eq!(job.state, JobState::Succeeded);
    assert!(body.unwrap().contains("echo: summarise this"));
}

fn litellm_provider(url: &str, key: &str, timeout: Duration) -> OpenAiProvider {
    OpenAiProvider::new(OpenAiConfig {
        base_url: url.into(),
        api_key: Some(ApiKey::new(key.into())),
        default_model: "fast".into(),
        timeout,
        retrieval: true,
    })
    .unwrap()
}

/// LiteLLM's proxy stands in for a real OpenAI-compatible server (as moto does for SQS):
/// answers come through the adapter and a worker, a call that outlives the timeout is
/// uncertain, and the proxy's missing stored-completions listing is recognised once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn litellms_proxy_answers_jobs_and_a_slow_call_is_uncertain_with_no_retrieval() {
    use fenceline::job::JobState;
    let Some((url, key)) = crate::helpers::litellm() else {
        return;
    };
    // Generous for an answer on a busy machine; short for the call that takes 4 s.
    let p = litellm_provider(&url, &key, Duration::from_secs(20));
    let impatient = litellm_provider(&url, &key, Duration::from_millis(2000));
    let mut fast = request("hello", "job_l:1");
    fast.model = json!({ "model": "fast" });
    match p.call(fast, Progress::default()).await {
        ProviderOutcome::Succeeded { answer, .. } => {
            let answer: Value = serde_json::from_str(&answer).unwrap();
            assert_eq!(answer["content"], "mocked answer");
        }
        other => panic!("expected LiteLLM's answer, got {other:?}"),
    }
    let mut slow = request("hello", "job_l:2");
    slow.model = json!({ "model": "slow" });
    assert!(
        matches!(
            impatient.call(slow, Progress::default()).await,
            ProviderOutcome::Uncertain { code, .. } if code == "timeout"
        ),
        "the model may have run: uncertain, not retryable"
    );
    assert_eq!(p.retrieve("job_l:2").await, Retrieval::Unsupported);
    let wrong_key = litellm_provider(&url, "sk-wrong", Duration::from_secs(20));
    assert!(matches!(
        wrong_key
            .call(request("x", "job_l:3"), Progress::default())
            .await,
        ProviderOutcome::Fatal { .. }
    ));

    let (job, body, _) = run_one_job(
        litellm_provider(&url, &key, Duration::from_secs(20)),
        json!({ "model": "fast", "temperature": 0 }),
    )
    .await;
    assert_eq!(job.state, JobState::Succeeded);
    assert!(body.unwrap().contains("mocked answer"));
}

/// A server that answers every completion with the HTTP status named by the prompt
/// (`status:503`), or resets the connection after reading the request (`reset`).
async fn status_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                // Read the head and the whole body (Content-Length).
                loop {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&request);
                    if let Some(head_end) = text.find("\r\n\r\n") {
                        let length = text[..head_end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if request.len() >= head_end + 4 + length {
                            break;
                        }
                    }
                }
                let text = String::from_utf8_lossy(&request).into_owned();
                if text.contains("\"reset\"") {
                    // The request arrived; the connection dies before any answer.
                    drop(socket);
                    return;
                }
                let status: u16 = text
                    .split("status:")
                    .nth(1)
                    .and_then(|rest| rest.get(..3))
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(200);
                let body = "{\"error\": {\"message\": \"from the status server\"}}";
                let response = format!(
                    "HTTP/1.1 {status} Status\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}/v1")
}

#[derive(Debug, PartialEq, Eq)]
enum Class {
    Throttled,
    Retryable,
    Fatal,
    Uncertain,
}

/// The classification table of `docs/providers.md`, row by row, against a real HTTP server.
#[tokio::test]
async fn every_row_of_the_provider_error_table_is_classified_as_documented() {
    let url = status_server().await;
    let p = provider(&url);
    let table: &[(&str, Class)] = &[
        ("status:400", Class::Fatal),
        ("status:401", Class::Fatal),
        ("status:403", Class::Fatal),
        ("status:404", Class::Fatal),
        ("status:408", Class::Retryable),
        ("status:409", Class::Fatal),
        ("status:413", Class::Fatal),
        ("status:422", Class::Fatal),
        ("status:429", Class::Throttled),
        ("status:500", Class::Uncertain),
        ("status:501", Class::Fatal),
        ("status:502", Class::Uncertain),
        ("status:503", Class::Throttled),
        ("status:504", Class::Uncertain),
        ("status:520", Class::Uncertain),
        ("status:524", Class::Uncertain),
        ("status:529", Class::Throttled),
        ("status:599", Class::Uncertain),
        ("reset", Class::Uncertain),
    ];
    let mut wrong = Vec::new();
    for (prompt, expected) in table {
        let outcome = p
            .call(request(prompt, "job_t:1"), Progress::default())
            .await;
        let got = match &outcome {
            ProviderOutcome::Throttled { .. } => Class::Throttled,
            ProviderOutcome::Retryable { .. } => Class::Retryable,
            ProviderOutcome::Fatal { .. } => Class::Fatal,
            ProviderOutcome::Uncertain { .. } => Class::Uncertain,
            ProviderOutcome::Succeeded { .. } => panic!("{prompt}: {outcome:?}"),
        };
        if got != *expected {
            wrong.push(format!("{prompt}: expected {expected:?}, got {outcome:?}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // Nothing listens: the request was never sent, so the model cannot have run.
    let nowhere = provider("http://127.0.0.1:9/v1");
    assert!(matches!(
        nowhere.call(request("x", "job_t:2"), Progress::default()).await,
        ProviderOutcome::Throttled { code, .. } if code == "connect_failed"
    ));
}

/// A compatible server that ignores the metadata filter and lists someone else's completion:
/// retrieval must not hand that answer to this attempt.
#[tokio::test]
async fn retrieval_accepts_only_a_completion_tagged_with_this_attempts_request_id() {
    async fn list_everything(State(fake): State<Fake>) -> Json<Value> {
        Json(json!({ "object": "list", "data": fake.stored.lock().unwrap().clone() }))
    }
    let fake = Fake::default();
    let app = Router::new()
        .route(
            "/v1/chat/completions",
            post(completions).get(list_everything),
        )
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let p = provider(&format!("http://{addr}/v1"));
    let other = p
        .call(
            request("someone else's", "job_other:1"),
            Progress::default(),
        )
        .await;
    assert!(matches!(other, ProviderOutcome::Succeeded { .. }));
    assert_eq!(
        p.retrieve("job_mine:1").await,
        Retrieval::Inconclusive,
        "another attempt's completion is not this one's answer"
    );
    match p.retrieve("job_other:1").await {
        Retrieval::Found(answer) => assert!(answer.contains("someone else's")),
        other => panic!("its own completion is found: {other:?}"),
    }
}

/// A server without the stored-completions listing answers 405: retrieval is unsupported,
/// said once, and never asked again.
#[tokio::test]
async fn a_server_without_retrieval_is_recognised_and_not_polled_again() {
    #[derive(Clone, Default)]
    struct Count(Arc<Mutex<u32>>);
    async fn no_listing(State(count): State<Count>) -> StatusCode {
        *count.0.lock().unwrap() += 1;
        StatusCode::METHOD_NOT_ALLOWED
    }
    let count = Count::default();
    let app = Router::new()
        .route("/v1/chat/completions", axum::routing::get(no_listing))
        .with_state(count.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let p = provider(&format!("http://{addr}/v1"));
    assert_eq!(p.retrieve("job_z:1").await, Retrieval::Unsupported);
    assert_eq!(p.retrieve("job_z:2").await, Retrieval::Unsupported);
    assert_eq!(p.retrieve("job_q:1").await, Retrieval::Unsupported);
    assert_eq!(*count.0.lock().unwrap(), 1, "asked once, then remembered");
}
