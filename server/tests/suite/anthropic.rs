//! Anthropic's Messages adapter against a server written from the API reference: every row of
//! its classification table, one send per attempt, the request's headers, the answer's
//! `request-id`, usage and rate limits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use fenceline::provider::anthropic::{AnthropicProvider, ANTHROPIC_VERSION};
use fenceline::provider::openai::{ApiKey, OpenAiConfig};
use fenceline::provider::{Progress, Provider, ProviderOutcome, ProviderRequest, Retrieval};
use serde_json::{json, Value};

/// What the server saw: sends per scenario, and the headers of the last one.
#[derive(Clone, Default)]
pub(crate) struct Seen {
    pub(crate) sends: Arc<Mutex<HashMap<String, u32>>>,
    headers: Arc<Mutex<Vec<(String, String)>>>,
    bodies: Arc<Mutex<Vec<Value>>>,
}

/// The error type the API reference gives each status.
fn error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        500 => "api_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

async fn messages(
    State(seen): State<Seen>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let scenario = body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    *seen
        .sends
        .lock()
        .unwrap()
        .entry(scenario.clone())
        .or_default() += 1;
    *seen.headers.lock().unwrap() = ["x-api-key", "anthropic-version"]
        .iter()
        .map(|h| {
            let v = headers.get(*h).and_then(|v| v.to_str().ok()).unwrap_or("");
            ((*h).to_owned(), v.to_owned())
        })
        .collect();
    seen.bodies.lock().unwrap().push(body.clone());
    if scenario == "slow" {
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    if let Some(status) = scenario.strip_prefix("status-") {
        let status: u16 = status.parse().unwrap();
        let kind = error_type(status);
        let mut response = (
            StatusCode::from_u16(status).unwrap(),
            [("request-id", "req_err")],
            Json(json!({"type": "error", "error": {"type": kind, "message": "as the reference says"}})),
        )
            .into_response();
        if status == 429 {
            let h = response.headers_mut();
            h.insert("retry-after", "7".parse().unwrap());
            h.insert("anthropic-ratelimit-requests-limit", "50".parse().unwrap());
            h.insert(
                "anthropic-ratelimit-requests-remaining",
                "0".parse().unwrap(),
            );
        }
        return response;
    }
    (
        StatusCode::OK,
        [
            ("request-id", "req_011CKx"),
            ("anthropic-ratelimit-requests-remaining", "49"),
        ],
        Json(json!({
            "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": " there"}],
            "stop_reason": "end_turn",
            "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 6,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 20}
        })),
    )
        .into_response()
}

pub(crate) async fn server() -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/v1/messages", post(messages))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, seen)
}

pub(crate) fn adapter(base: &str, timeout: Duration) -> AnthropicProvider {
    AnthropicProvider::new(OpenAiConfig {
        base_url: base.to_owned(),
        api_key: Some(ApiKey::new("sk-ant-test".into())),
        default_model: "claude-sonnet-4-5".into(),
        timeout,
        retrieval: false,
    })
    .unwrap()
}

fn request(scenario: &str) -> ProviderRequest {
    ProviderRequest {
        job_id: "job_a".into(),
        attempt_no: 1,
        client_request_id: "job_a:1".into(),
        input: json!(scenario),
        model: json!({ "max_tokens": 300, "stop": "END" }),
    }
}

#[tokio::test]
async fn the_anthropic_adapter_classifies_every_row_of_its_table_with_one_send_each() {
    let (base, seen) = server().await;
    let provider = adapter(&base, Duration::from_secs(2));

    let ProviderOutcome::Succeeded {
        answer,
        request_id,
        usage,
        limits,
    } = provider.call(request("ok"), Progress::default()).await
    else {
        panic!("a message is the answer");
    };
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["content"], "Hello there");
    assert_eq!(
        request_id.as_deref(),
        Some("req_011CKx"),
        "the request id is evidence"
    );
    let usage = usage.unwrap();
    assert_eq!((usage.input, usage.output, usage.cached), (32, 6, 20));
    assert_eq!(limits.requests.remaining, Some(49.0));
    assert_eq!(
        seen.headers.lock().unwrap().clone(),
        vec![
            ("x-api-key".to_owned(), "sk-ant-test".to_owned()),
            ("anthropic-version".to_owned(), ANTHROPIC_VERSION.to_owned()),
        ]
    );
    let body = seen.bodies.lock().unwrap()[0].clone();
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert_eq!(body["max_tokens"], 300);
    assert_eq!(body["stop_sequences"], json!(["END"]));

    // (status, class, code) as `docs/providers.md` gives them.
    let rows: [(u16, &str, &str); 10] = [
        (429, "throttled", "rate_limit_error"),
        (529, "throttled", "overloaded_error"),
        (500, "uncertain", "api_error"),
        (504, "uncertain", "timeout_error"),
        (400, "fatal", "invalid_request_error"),
        (401, "fatal", "authentication_error"),
        (402, "fatal", "billing_error"),
        (403, "fatal", "permission_error"),
        (404, "fatal", "not_found_error"),
        (413, "fatal", "request_too_large"),
    ];
    for (status, class, code) in rows {
        let outcome = provider
            .call(request(&format!("status-{status}")), Progress::default())
            .await;
        let (got_class, got_code) = match &outcome {
            ProviderOutcome::Throttled { code, limits, .. } => {
                if status == 429 {
                    assert_eq!(
                        limits.wait(),
                        Some(Duration::from_secs(7)),
                        "retry-after is kept"
                    );
                }
                ("throttled", code)
            }
            ProviderOutcome::Uncertain { code, .. } => ("uncertain", code),
            ProviderOutcome::Fatal { code, .. } => ("fatal", code),
            ProviderOutcome::Retryable { code, .. } => ("retryable", code),
            ProviderOutcome::Succeeded { .. } => ("succeeded", &String::new()),
        };
        assert_eq!(
            (got_class, got_code.as_str()),
            (class, code),
            "status {status}"
        );
    }
    // A timeout after sending: the model may be running.
    assert!(matches!(
        provider.call(request("slow"), Progress::default()).await,
        ProviderOutcome::Uncertain { code, .. } if code == "timeout"
    ));
    // Nothing listens: refused before sending.
    let nowhere = adapter(
        &format!("http://127.0.0.1:{}/v1", crate::helpers::free_port()),
        Duration::from_secs(2),
    );
    assert!(matches!(
        nowhere.call(request("ok"), Progress::default()).await,
        ProviderOutcome::Throttled { code, .. } if code == "connect_failed"
    ));
    // One send per attempt, whatever came back.
    let sends = seen.sends.lock().unwrap().clone();
    assert!(sends.values().all(|n| *n == 1), "{sends:?}");
    assert_eq!(sends.len(), 12);
    // No retrieval: an uncertain attempt waits for a decision.
    assert_eq!(provider.retrieve("job_a:1").await, Retrieval::Unsupported);
}

/// LiteLLM's proxy serves Anthropic's Messages route with its mocked models: a real server
/// for the adapter's request and answer, as it is for chat completions; a wrong key is fatal.
/// (Its mocked delay does not apply on this route: the timeout row is held above.)
#[tokio::test]
async fn litellms_messages_route_answers_the_anthropic_adapter() {
    let Some((url, key)) = crate::helpers::litellm() else {
        return;
    };
    let adapter = |key: &str, timeout: Duration| {
        AnthropicProvider::new(OpenAiConfig {
            base_url: url.clone(),
            api_key: Some(ApiKey::new(key.into())),
            default_model: "fast".into(),
            timeout,
            retrieval: false,
        })
        .unwrap()
    };
    let mut ask = request("hello");
    ask.model = json!({ "max_tokens": 50 });
    match adapter(&key, Duration::from_secs(20))
        .call(ask.clone(), Progress::default())
        .await
    {
        ProviderOutcome::Succeeded { answer, usage, .. } => {
            let answer: Value = serde_json::from_str(&answer).unwrap();
            assert_eq!(answer["content"], "mocked answer");
            assert_eq!(answer["stop_reason"], "end_turn");
            assert!(usage.is_some_and(|u| u.output > 0), "the usage is read");
        }
        other => panic!("expected LiteLLM's answer, got {other:?}"),
    }
    assert!(matches!(
        adapter("sk-wrong", Duration::from_secs(20))
            .call(request("x"), Progress::default())
            .await,
        ProviderOutcome::Fatal { .. }
    ));
}
