//! `fenceline doctor`: it passes on a healthy embedded default and on PostgreSQL with SQS
//! (moto), and fails naming the cause with a stopped PostgreSQL, a missing SQS queue, or a key
//! the provider refuses (a server answering `401`, as OpenAI does).

use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use fenceline::doctor::{examine, Finding, Verdict};
use fenceline::ledger::Ledger;
use fenceline::settings::{QueueKind, Settings};
use serde_json::json;

use crate::helpers::{fresh_db, options, Db};

/// A migrated ledger at `url` with an admin, as `serve` leaves it.
async fn healthy(url: &str) {
    let ledger = Ledger::connect(url, &options()).await.unwrap();
    ledger.migrate().await.unwrap();
    let hash = fenceline::operators::hash_password("doctor's own password").unwrap();
    ledger
        .add_operator("root", fenceline::operators::Role::Admin, None, &hash)
        .await
        .unwrap();
    ledger.close().await;
}

fn verdict_of<'a>(found: &'a [Finding], check: &str) -> &'a Finding {
    found
        .iter()
        .find(|f| f.check == check)
        .unwrap_or_else(|| panic!("no {check} check in {found:#?}"))
}

fn failures(found: &[Finding]) -> Vec<&Finding> {
    found
        .iter()
        .filter(|f| f.verdict == Verdict::Fail)
        .collect()
}

#[tokio::test]
async fn doctor_passes_on_a_healthy_embedded_default() {
    let db = fresh_db(Db::Sqlite).await;
    healthy(&db.url).await;
    let settings = Settings::for_database(&db.url).unwrap();
    let found = examine(&settings).await;
    assert!(failures(&found).is_empty(), "{found:#?}");
    for check in [
        "database",
        "migrations",
        "clock",
        "operators",
        "timings",
        "queue",
    ] {
        assert_eq!(verdict_of(&found, check).verdict, Verdict::Ok, "{found:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_passes_on_postgres_with_sqs() {
    if crate::helpers::skip_postgres() || crate::helpers::skip_sqs() {
        return;
    }
    let db = fresh_db(Db::Postgres).await;
    healthy(&db.url).await;
    let name = format!("doc{}", uuid::Uuid::now_v7().simple());
    let client = fenceline::queue::sqs::SqsQueue::client_from_env().await;
    fenceline::queue::sqs::SqsQueue::create(client, &name, 5, Duration::from_secs(10))
        .await
        .unwrap();
    let mut settings = Settings::for_database(&db.url).unwrap();
    settings.queue.kind = QueueKind::Sqs;
    settings.queue.name = name;
    let found = examine(&settings).await;
    assert!(failures(&found).is_empty(), "{found:#?}");
    assert_eq!(verdict_of(&found, "queue").verdict, Verdict::Ok);
    assert_eq!(verdict_of(&found, "dead letters").verdict, Verdict::Ok);
    assert_eq!(
        verdict_of(&found, "queue rights").verdict,
        Verdict::Ok,
        "{found:#?}"
    );
}

/// A server that refuses every key, as OpenAI answers a wrong one.
async fn refusing_server() -> String {
    let app = Router::new().route(
        "/v1/models",
        get(|| async {
            (
                StatusCode::UNAUTHORIZED,
                Json(json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}})),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_fails_naming_the_cause() {
    // A stopped PostgreSQL: nothing listens where it was.
    let stopped = format!(
        "postgres://postgres@127.0.0.1:{}/postgres",
        crate::helpers::free_port()
    );
    let found = examine(&Settings::for_database(&stopped).unwrap()).await;
    let database = verdict_of(&found, "database");
    assert_eq!(database.verdict, Verdict::Fail);
    assert!(database.detail.contains("postgres"), "{database:?}");

    // A missing SQS queue.
    if !crate::helpers::skip_sqs() {
        let db = fresh_db(Db::Sqlite).await;
        healthy(&db.url).await;
        let mut settings = Settings::for_database(&db.url).unwrap();
        settings.queue.kind = QueueKind::Sqs;
        settings.queue.name = "no-such-queue".into();
        let found = examine(&settings).await;
        let queue = verdict_of(&found, "queue");
        assert_eq!(queue.verdict, Verdict::Fail);
        assert!(
            queue.detail.contains("`no-such-queue` cannot be found"),
            "{queue:?}"
        );
    }

    // A wrong key for the OpenAI adapter, through the command itself: a line naming the
    // cause, a non-zero exit, and the key nowhere in what it printed.
    let db = fresh_db(Db::Sqlite).await;
    healthy(&db.url).await;
    let base = refusing_server().await;
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_fenceline"))
        .args(["doctor", "--provider", "openai", "--provider-url", &base])
        .env("DATABASE_URL", &db.url)
        .env("FENCELINE_PROVIDER_API_KEY", "sk-wrong-key-4242")
        .env_remove("FENCELINE_QUEUE")
        .env_remove("FENCELINE_PROVIDER")
        .output()
        .await
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{printed}");
    assert!(
        printed.contains("FAIL  provider") && printed.contains("refuses the key (HTTP 401)"),
        "{printed}"
    );
    assert!(printed.contains("ok    database"), "{printed}");
    assert!(
        !printed.contains("sk-wrong-key-4242"),
        "the key is never printed"
    );
}
