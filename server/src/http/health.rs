//! Liveness and readiness.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;

use super::AppState;
use crate::ledger::Drills;
use crate::metrics::LedgerGauges;

/// The process is up.
pub(super) async fn healthz() -> &'static str {
    "ok"
}

/// `/readyz`'s answer.
#[derive(Debug, serde::Serialize)]
struct Readiness {
    ready: bool,
    database: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
}

/// Ready only while the ledger database answers, within two seconds.
pub(super) async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    readiness(&state.ledger).await
}

/// `/healthz` and `/readyz` alone, for a process without the API (`fenceline worker
/// --health-bind`): what a process manager or Kubernetes probes.
pub fn probes(ledger: crate::ledger::Ledger) -> axum::Router {
    axum::Router::new()
        .route("/healthz", axum::routing::get(healthz))
        .route(
            "/readyz",
            axum::routing::get(|State(ledger): State<crate::ledger::Ledger>| async move {
                readiness(&ledger).await
            }),
        )
        .with_state(ledger)
}

async fn readiness(ledger: &crate::ledger::Ledger) -> impl IntoResponse {
    let database = ledger.backend().as_str();
    match tokio::time::timeout(Duration::from_secs(2), ledger.ping()).await {
        Ok(Ok(())) => (
            StatusCode::OK,
            Json(Readiness {
                ready: true,
                database,
                reason: None,
            }),
        ),
        _ => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Readiness {
                ready: false,
                database,
                reason: Some("the ledger database does not answer"),
            }),
        ),
    }
}

/// `/metrics`: this process's counters and the ledger's gauges, in the OpenMetrics text format.
/// Label values are bounded (states, outcomes, reasons): never job ids, tenants or handles.
/// Served only with `Authorization: Bearer <--metrics-token>`: the counts cross tenants.
pub(super) async fn metrics(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    let Some(expected) = &state.access.metrics_token else {
        return (
            StatusCode::NOT_FOUND,
            "metrics are not served: start fenceline with --metrics-token \
             (FENCELINE_METRICS_TOKEN) and scrape with that bearer token\n",
        )
            .into_response();
    };
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .unwrap_or_default();
    if !super::sessions::token_matches(Some(expected.expose()), given.trim()) {
        return (
            StatusCode::UNAUTHORIZED,
            [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
            "send the metrics token as `Authorization: Bearer <token>`\n",
        )
            .into_response();
    }
    let ledger = &state.ledger;
    let counts = tokio::time::timeout(
        Duration::from_secs(5),
        ledger.count_by_state(None, Drills::Apart),
    )
    .await;
    let gauges = match counts {
        Ok(Ok(jobs_by_state)) => Some(LedgerGauges {
            jobs_by_state,
            outbox_pending: ledger.outbox_pending().await.ok(),
            oldest_ready_seconds: oldest_ready_seconds(ledger).await,
            rejected_by_reason: ledger.rejected_message_counts().await.unwrap_or_default(),
            workers: workers_by_status(ledger).await,
            provider_limits: ledger.provider_limits().await.unwrap_or_default(),
            spend_last_hour: match ledger.now_us().await {
                Ok(now) => ledger
                    .spend_by_model_since(now - crate::ledger::HOUR)
                    .await
                    .unwrap_or_default(),
                Err(_) => Vec::new(),
            },
        }),
        _ => None,
    };
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(gauges.as_ref()),
    )
        .into_response()
}

/// Worker processes that reported in the last day by status, judged as `/workers` judges them.
async fn workers_by_status(ledger: &crate::ledger::Ledger) -> Option<(i64, i64, i64)> {
    use crate::worker::presence::{listed_since, quiet_since};
    let now = ledger.now_us().await.ok()?;
    ledger
        .worker_statuses(listed_since(now), quiet_since(now))
        .await
        .ok()
}

/// How long the oldest ready job has waited, by the database clock (0 when none waits).
async fn oldest_ready_seconds(ledger: &crate::ledger::Ledger) -> Option<f64> {
    let oldest = ledger.oldest_ready(None).await.ok()?;
    Some(oldest.map_or(0.0, |(_, waited)| waited.max(0) as f64 / 1e6))
}
