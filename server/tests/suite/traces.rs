//! Traces over OTLP/HTTP: the real binary sends its spans to a receiver here that decodes the
//! protocol (`opentelemetry-proto`), and one job's trace is read back whole.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;

use fenceline::ledger::Ledger;

use crate::helpers::{fresh_ledger, Browser, Db};

/// What the receiver was sent: every request's bytes as they came, and the spans decoded.
#[derive(Default)]
struct Received {
    raw: Vec<Vec<u8>>,
    spans: Vec<Span>,
}

/// An OTLP/HTTP trace receiver on a free port: `POST /v1/traces`, protobuf.
async fn receiver() -> (String, Arc<Mutex<Received>>) {
    let received = Arc::new(Mutex::new(Received::default()));
    let kept = Arc::clone(&received);
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |headers: axum::http::HeaderMap, body: Bytes| {
            let kept = Arc::clone(&kept);
            async move {
                assert_eq!(
                    headers.get("content-type").and_then(|v| v.to_str().ok()),
                    Some("application/x-protobuf"),
                    "OTLP over HTTP with protobuf"
                );
                let request = ExportTraceServiceRequest::decode(body.as_ref())
                    .expect("a valid ExportTraceServiceRequest");
                let mut kept = kept.lock().unwrap();
                kept.raw.push(body.to_vec());
                for resource in request.resource_spans {
                    for scope in resource.scope_spans {
                        kept.spans.extend(scope.spans);
                    }
                }
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), received)
}

fn attr(span: &Span, key: &str) -> Option<String> {
    let value = span
        .attributes
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .as_ref()?
        .value
        .as_ref()?;
    Some(match value {
        Any::StringValue(s) => s.clone(),
        Any::IntValue(i) => i.to_string(),
        Any::BoolValue(b) => b.to_string(),
        Any::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    })
}

fn of_job<'a>(spans: &'a [Span], job_id: &str, name: &str) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.name == name && attr(s, "job_id").as_deref() == Some(job_id))
        .collect()
}

/// With `OTEL_EXPORTER_OTLP_ENDPOINT` set, one job submitted with a `traceparent` yields one
/// trace: the API request (a child of the caller's span), the delivery (under the request, from
/// the job's kept context), the provider attempt and the fenced transitions (claim, accept),
/// each with `job_id` and `epoch`, the transitions with the timeline's sequence numbers. No
/// token, input, answer or password is in what was sent. The job page links the attempt to its
/// span in the configured trace viewer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_job_yields_one_trace_from_its_request_to_its_commit() {
    let (otlp, received) = receiver().await;
    let (ledger, db) = fresh_ledger(Db::Sqlite).await;
    let token = crate::helpers::cli_token(&db.url, "acme").await;
    let password = "correct horse battery staple 7";
    ledger
        .add_operator(
            "olga",
            fenceline::operators::Role::Admin,
            None,
            &fenceline::operators::hash_password(password).unwrap(),
        )
        .await
        .unwrap();
    let port = crate::helpers::free_port();
    let _serve = tokio::process::Command::new(env!("CARGO_BIN_EXE_fenceline"))
        .args(["serve", "--database-url", &db.url])
        .args(["--bind", &format!("127.0.0.1:{port}")])
        .args(["--timings", "compressed", "--stub-latency-ms", "200"])
        .env("FENCELINE_LOG", "error")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("OTEL_SERVICE_NAME", "fenceline-under-test")
        .env(
            "FENCELINE_TRACE_URL",
            "https://traces.example/trace/{trace_id}?span={span_id}",
        )
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start fenceline serve");
    let base = format!("http://127.0.0.1:{port}");
    crate::helpers::wait_ready(&base).await;

    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let secret = format!("confidential-{}", uuid::Uuid::now_v7().simple());
    let client = reqwest::Client::new();
    let created: serde_json::Value = client
        .post(format!("{base}/api/v1/jobs"))
        .bearer_auth(&token)
        .header("traceparent", format!("00-{caller_trace}-{caller_span}-01"))
        .json(&json!({"idempotency_key": "traced-1", "input": {"document": secret}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let job_id = created["job_id"].as_str().expect("a job id").to_owned();
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let job: serde_json::Value = client
            .get(format!("{base}/api/v1/jobs/{job_id}"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if job["state"] == "succeeded" {
            break;
        }
        assert!(tokio::time::Instant::now() < until, "not done: {job}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answer = client
        .get(format!("{base}/api/v1/jobs/{job_id}/result"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();

    // The spans arrive in batches: wait for the commit's.
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    let spans = loop {
        let spans = received.lock().unwrap().spans.clone();
        let committed = of_job(&spans, &job_id, "ledger.transition")
            .iter()
            .any(|s| attr(s, "transition").as_deref() == Some("accept"));
        if committed && !of_job(&spans, &job_id, "provider.attempt").is_empty() {
            break spans;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "no whole trace arrived: {:?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let by_id: HashMap<&[u8], &Span> = spans.iter().map(|s| (s.span_id.as_slice(), s)).collect();
    let hex_of = |bytes: &[u8]| hex::encode(bytes);
    let one = |name: &str| -> &Span {
        let found = of_job(&spans, &job_id, name);
        assert_eq!(found.len(), 1, "one {name} span of the job: {found:?}");
        found[0]
    };
    let request = spans
        .iter()
        .find(|s| s.name == "POST /api/v1/jobs" && attr(s, "job_id").as_deref() == Some(&job_id))
        .unwrap_or_else(|| {
            panic!(
                "the API request's span: {:?}",
                spans
                    .iter()
                    .map(|s| (
                        &s.name,
                        s.attributes.iter().map(|a| &a.key).collect::<Vec<_>>()
                    ))
                    .collect::<Vec<_>>()
            )
        });
    let delivery = one("delivery");
    let attempt = one("provider.attempt");
    let transitions = of_job(&spans, &job_id, "ledger.transition");
    let accept = transitions
        .iter()
        .find(|s| attr(s, "transition").as_deref() == Some("accept"))
        .unwrap();
    let claim = transitions
        .iter()
        .find(|s| attr(s, "transition").as_deref() == Some("claim"))
        .expect("the claim's transition span");

    // One trace, the caller's, from the request to the commit.
    for span in [request, delivery, attempt, *accept, *claim] {
        assert_eq!(
            hex_of(&span.trace_id),
            caller_trace,
            "{} is in the caller's trace",
            span.name
        );
        assert_eq!(attr(span, "job_id").as_deref(), Some(job_id.as_str()));
    }
    assert_eq!(hex_of(&request.parent_span_id), caller_span);
    assert_eq!(attr(request, "http.route").as_deref(), Some("/api/v1/jobs"));
    assert_eq!(attr(request, "tenant").as_deref(), Some("acme"));
    assert_eq!(attr(request, "epoch").as_deref(), Some("0"));
    assert_eq!(
        delivery.parent_span_id, request.span_id,
        "the delivery continues from the request that submitted the job"
    );
    assert_eq!(attempt.parent_span_id, delivery.span_id);
    // Every span under the delivery descends from it.
    let under_delivery = |span: &Span| {
        let mut at = span;
        while let Some(parent) = by_id.get(at.parent_span_id.as_slice()) {
            if parent.span_id == delivery.span_id {
                return true;
            }
            at = parent;
        }
        false
    };
    assert!(under_delivery(accept) && under_delivery(claim));
    let epoch = attr(delivery, "epoch").expect("the delivery's epoch");
    assert_eq!(epoch, "1", "the first claim's epoch");
    for span in [attempt, *accept, *claim] {
        assert_eq!(
            attr(span, "epoch").as_deref(),
            Some(epoch.as_str()),
            "{}",
            span.name
        );
    }
    assert_eq!(attr(attempt, "attempt").as_deref(), Some("1"));
    assert_eq!(attr(attempt, "outcome").as_deref(), Some("succeeded"));
    assert_eq!(attr(attempt, "tenant").as_deref(), Some("acme"));
    // The transitions name the timeline events they wrote, as the timeline has them.
    let events = ledger.events(&job_id, 0, 1000).await.unwrap();
    for transition in [*claim, *accept] {
        let seqs = attr(transition, "event_seqs").expect("event_seqs");
        for seq in seqs.split(',') {
            let seq: i64 = seq.parse().unwrap();
            assert!(
                events.iter().any(|e| e.seq == seq),
                "event {seq} of {} is on the timeline",
                attr(transition, "transition").unwrap()
            );
        }
    }
    let accepted_seqs = attr(accept, "event_seqs").unwrap();
    let result_event = events
        .iter()
        .find(|e| e.kind.as_str() == "result_accepted")
        .expect("the result's event");
    assert!(
        accepted_seqs
            .split(',')
            .any(|s| s == result_event.seq.to_string()),
        "the accept names its result_accepted event: {accepted_seqs}"
    );

    // The job page links the attempt to its own span.
    let mut browser = Browser::new(&base);
    assert_eq!(
        crate::helpers::location(&browser.sign_in("olga", password).await),
        "/"
    );
    let page = browser.page(&format!("/jobs/{job_id}")).await;
    let link = format!(
        "https://traces.example/trace/{caller_trace}?span={}",
        hex_of(&attempt.span_id)
    );
    assert!(page.contains(&link), "the attempt's trace link {link}");

    // Nothing secret was sent.
    let raw = received.lock().unwrap().raw.concat();
    let sent = String::from_utf8_lossy(&raw);
    assert!(!sent.contains(&secret), "the input never leaves in a span");
    assert!(!sent.contains(&token), "nor the tenant's token");
    assert!(!sent.contains(password), "nor a password");
    let summary = serde_json::from_str::<serde_json::Value>(&answer).unwrap()["result"]["summary"]
        .as_str()
        .expect("the stub's answer")
        .to_owned();
    assert!(!sent.contains(&summary), "nor the answer");
    assert!(
        sent.contains("fenceline-under-test"),
        "the service is named"
    );
}

/// Where this process sends no traces, a job still keeps the submitting service's own
/// `traceparent` (a well-formed one only), for workers that do; a batch's jobs keep it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_keeps_its_callers_trace_context_when_traces_are_off_here() {
    let app = crate::helpers::spawn_app(Db::Sqlite).await;
    let token = app.token("acme").await;
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let made = |key: &str, header: Option<&str>| {
        let mut request = app
            .client
            .post(format!("{}/api/v1/jobs", app.base))
            .bearer_auth(&token)
            .json(&json!({"idempotency_key": key, "input": {"n": 1}}));
        if let Some(header) = header {
            request = request.header("traceparent", header);
        }
        request.send()
    };
    let id_of = |body: serde_json::Value| body["job_id"].as_str().unwrap().to_owned();
    let kept = id_of(
        made("k1", Some(traceparent))
            .await
            .unwrap()
            .json()
            .await
            .unwrap(),
    );
    let malformed = id_of(
        made("k2", Some("00-0af7651916cd43dd8448eb211c80319c-zz-01"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap(),
    );
    let none = id_of(made("k3", None).await.unwrap().json().await.unwrap());
    assert_eq!(
        app.ledger.job_traceparent(&kept).await.unwrap().as_deref(),
        Some(traceparent)
    );
    assert_eq!(app.ledger.job_traceparent(&malformed).await.unwrap(), None);
    assert_eq!(app.ledger.job_traceparent(&none).await.unwrap(), None);

    let batch: serde_json::Value = app
        .client
        .post(format!("{}/api/v1/jobs/batch", app.base))
        .bearer_auth(&token)
        .header("traceparent", traceparent)
        .json(&json!({"jobs": [
            {"idempotency_key": "b1", "input": {"n": 1}},
            {"idempotency_key": "b2", "input": {"n": 2}},
        ]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for job in batch["jobs"].as_array().unwrap() {
        let id = job["job"]["job_id"]
            .as_str()
            .or(job["job_id"].as_str())
            .expect("a job id");
        assert_eq!(
            app.ledger.job_traceparent(id).await.unwrap().as_deref(),
            Some(traceparent)
        );
    }
}

/// `fenceline doctor` says whether the collector the environment names takes traces, and fails
/// when none answers there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_checks_the_trace_collector() {
    let (otlp, received) = receiver().await;
    let db = crate::helpers::fresh_db(Db::Sqlite).await;
    Ledger::connect(&db.url, &crate::helpers::options())
        .await
        .unwrap()
        .migrate()
        .await
        .unwrap();
    let doctor = |endpoint: String| {
        let url = db.url.clone();
        async move {
            let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_fenceline"))
                .arg("doctor")
                .env("DATABASE_URL", url)
                .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
                .env_remove("FENCELINE_QUEUE")
                .env_remove("FENCELINE_PROVIDER")
                .output()
                .await
                .unwrap();
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            )
        }
    };
    let (_, printed) = doctor(otlp.clone()).await;
    assert!(
        printed.lines().any(|l| l.starts_with("ok")
            && l.contains(&format!(
                "the collector at {otlp}/v1/traces takes OTLP/HTTP"
            ))),
        "{printed}"
    );
    assert!(
        !received.lock().unwrap().raw.is_empty(),
        "the probe arrived"
    );
    let closed = format!("http://127.0.0.1:{}", crate::helpers::free_port());
    let (passed, printed) = doctor(closed).await;
    assert!(!passed, "{printed}");
    assert!(
        printed.lines().any(|l| l.starts_with("FAIL")
            && l.contains("traces")
            && l.contains("no collector answers")),
        "{printed}"
    );
}
