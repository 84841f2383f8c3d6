//! Amazon Bedrock's Converse adapter, the AWS SDK pointed at a server written from the Bedrock
//! Runtime API reference (`POST /model/{modelId}/converse`, restJson1 errors named by
//! `x-amzn-ErrorType`): every row of its classification table, one send per attempt (the
//! SDK's own retries off), the signed request, the answer's `x-amzn-RequestId` and usage.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_bedrockruntime::config::{Credentials, Region};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use fenceline::provider::bedrock::{BedrockConfig, BedrockProvider};
use fenceline::provider::{Progress, Provider, ProviderOutcome, ProviderRequest, Retrieval};
use serde_json::{json, Value};

/// What the server saw: sends per scenario, and each request's model, signature and body.
#[derive(Clone, Default)]
pub(crate) struct Seen {
    pub(crate) sends: Arc<Mutex<HashMap<String, u32>>>,
    requests: Arc<Mutex<Vec<(String, String, Value)>>>,
}

/// The status the API reference gives each of Converse's errors.
fn status_of(error: &str) -> u16 {
    match error {
        "AccessDeniedException" => 403,
        "InternalServerException" => 500,
        "ModelErrorException" => 424,
        "ModelNotReadyException" => 429,
        "ModelTimeoutException" => 408,
        "ResourceNotFoundException" => 404,
        "ServiceUnavailableException" => 503,
        "ThrottlingException" => 429,
        "ValidationException" => 400,
        _ => 500,
    }
}

async fn converse(
    State(seen): State<Seen>,
    Path(model): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let scenario = body["messages"][0]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    *seen
        .sends
        .lock()
        .unwrap()
        .entry(scenario.clone())
        .or_default() += 1;
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    seen.requests
        .lock()
        .unwrap()
        .push((model.clone(), authorization, body.clone()));
    if scenario == "slow" {
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    if let Some(error) = scenario.strip_prefix("error-") {
        return (
            StatusCode::from_u16(status_of(error)).unwrap(),
            [
                ("x-amzn-RequestId", "3f2c-err"),
                ("x-amzn-ErrorType", error),
            ],
            Json(json!({ "message": "as the reference says" })),
        )
            .into_response();
    }
    (
        StatusCode::OK,
        [("x-amzn-RequestId", "7b1e5c3a-0d2f-4a8e-9c61-2f5d8e0b4a17")],
        Json(json!({
            "output": {"message": {"role": "assistant",
                                   "content": [{"text": "Hello"}, {"text": " there"}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 12, "outputTokens": 6, "totalTokens": 38,
                      "cacheReadInputTokens": 20, "cacheWriteInputTokens": 0},
            "metrics": {"latencyMs": 312}
        })),
    )
        .into_response()
}

pub(crate) async fn server() -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/model/{model}/converse", post(converse))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, seen)
}

pub(crate) async fn adapter(endpoint: &str, timeout: Duration) -> BedrockProvider {
    adapter_in("us-east-1", Some(endpoint), timeout).await
}

/// The adapter on a configuration of its own: `region`, a key of the test's, and `endpoint`
/// (else the region's).
async fn adapter_in(region: &str, endpoint: Option<&str>, timeout: Duration) -> BedrockProvider {
    let sdk = fenceline::aws::loader()
        .region(Region::new(region.to_owned()))
        .credentials_provider(Credentials::new(
            "AKIDEXAMPLE",
            "secret",
            None,
            None,
            "test",
        ))
        .load()
        .await;
    BedrockProvider::with_sdk_config(
        BedrockConfig {
            endpoint: endpoint.map(str::to_owned),
            default_model: "anthropic.claude-3-5-haiku-20241022-v1:0".into(),
            timeout,
        },
        &sdk,
    )
}

fn request(scenario: &str) -> ProviderRequest {
    ProviderRequest {
        job_id: "job_b".into(),
        attempt_no: 1,
        client_request_id: "job_b:1".into(),
        input: json!({"messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": scenario},
        ]}),
        model: json!({ "max_tokens": 300, "stop": "END", "temperature": 0.5 }),
    }
}

#[tokio::test]
async fn the_bedrock_adapter_classifies_every_row_of_its_table_with_one_send_each() {
    let (base, seen) = server().await;
    let provider = adapter(&base, Duration::from_secs(2)).await;

    let ProviderOutcome::Succeeded {
        answer,
        request_id,
        usage,
        ..
    } = provider.call(request("ok"), Progress::default()).await
    else {
        panic!("a message is the answer");
    };
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["content"], "Hello there");
    assert_eq!(answer["stop_reason"], "end_turn");
    assert_eq!(
        request_id.as_deref(),
        Some("7b1e5c3a-0d2f-4a8e-9c61-2f5d8e0b4a17"),
        "x-amzn-RequestId is evidence"
    );
    // Cache reads and writes are input the model read, apart from `inputTokens`.
    let usage = usage.unwrap();
    assert_eq!((usage.input, usage.output, usage.cached), (32, 6, 20));
    let (model, authorization, body) = seen.requests.lock().unwrap()[0].clone();
    assert_eq!(model, "anthropic.claude-3-5-haiku-20241022-v1:0");
    assert!(
        authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"),
        "signed with the credential chain's key: {authorization}"
    );
    assert_eq!(body["system"], json!([{"text": "Be brief."}]));
    assert_eq!(body["messages"][0]["role"], "user");
    assert_eq!(body["inferenceConfig"]["maxTokens"], 300);
    assert_eq!(body["inferenceConfig"]["stopSequences"], json!(["END"]));

    // (error, class) as `docs/providers.md` gives them.
    let rows: [(&str, &str); 9] = [
        ("ThrottlingException", "throttled"),
        ("ModelNotReadyException", "throttled"),
        ("ServiceUnavailableException", "throttled"),
        ("ModelTimeoutException", "uncertain"),
        ("InternalServerException", "uncertain"),
        ("ModelErrorException", "uncertain"),
        ("ValidationException", "fatal"),
        ("AccessDeniedException", "fatal"),
        ("ResourceNotFoundException", "fatal"),
    ];
    for (error, class) in rows {
        let outcome = provider
            .call(request(&format!("error-{error}")), Progress::default())
            .await;
        let (got_class, got_code, got_id) = match &outcome {
            ProviderOutcome::Throttled {
                code, request_id, ..
            } => ("throttled", code, request_id),
            ProviderOutcome::Uncertain { code, request_id } => ("uncertain", code, request_id),
            ProviderOutcome::Fatal { code, request_id } => ("fatal", code, request_id),
            other => panic!("{error}: {other:?}"),
        };
        assert_eq!((got_class, got_code.as_str()), (class, error));
        assert_eq!(got_id.as_deref(), Some("3f2c-err"), "{error}");
    }
    // A timeout after sending: the model may be running.
    assert!(matches!(
        provider.call(request("slow"), Progress::default()).await,
        ProviderOutcome::Uncertain { code, .. } if code == "timeout"
    ));
    // Nothing listens: refused before sending.
    let nowhere = adapter(
        &format!("http://127.0.0.1:{}", crate::helpers::free_port()),
        Duration::from_secs(2),
    )
    .await;
    assert!(matches!(
        nowhere.call(request("ok"), Progress::default()).await,
        ProviderOutcome::Throttled { code, .. } if code == "connect_failed"
    ));
    // A call that failed before it was handed to the HTTP client (here no endpoint can be
    // made for the region named) was never sent: refused, not uncertain.
    let unsendable = adapter_in("not a region!", None, Duration::from_secs(2)).await;
    let outcome = unsendable.call(request("ok"), Progress::default()).await;
    assert!(
        matches!(&outcome, ProviderOutcome::Throttled { code, .. } if code == "not_sent"),
        "{outcome:?}"
    );
    // One send per attempt, whatever came back: the SDK re-sent nothing, not even on
    // throttling, a model not ready, a 500 or a timeout.
    let sends = seen.sends.lock().unwrap().clone();
    assert!(sends.values().all(|n| *n == 1), "{sends:?}");
    assert_eq!(sends.len(), 11);
    // No retrieval: an uncertain attempt waits for a decision.
    assert_eq!(provider.retrieve("job_b:1").await, Retrieval::Unsupported);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_a_job_on_bedrock_and_keeps_its_usage() {
    use fenceline::job::JobState;
    let (base, _seen) = server().await;
    let (job, body, attempts) = crate::providers::run_one_job(
        adapter(&base, Duration::from_secs(5)).await,
        json!({ "model": "amazon.nova-lite-v1:0" }),
    )
    .await;
    assert_eq!(job.state, JobState::Succeeded);
    assert!(body.unwrap().contains("Hello there"));
    assert_eq!(attempts.len(), 1);
    assert_eq!(
        attempts[0].provider_request_id.as_deref(),
        Some("7b1e5c3a-0d2f-4a8e-9c61-2f5d8e0b4a17"),
        "the answer's x-amzn-RequestId is kept on its attempt"
    );
    let spend = attempts[0].spend().expect("the answer's usage is kept");
    assert_eq!(spend.model, "amazon.nova-lite-v1:0");
    assert_eq!((spend.usage.input, spend.usage.output), (32, 6));
}
