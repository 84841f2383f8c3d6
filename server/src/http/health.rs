//! Liveness and readiness.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;

use super::AppState;

/// The process is up.
pub(super) async fn healthz() -> &'static str {
    "ok"
}

/// Ready only while the ledger database answers, within two seconds.
pub(super) async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let backend = state.ledger.backend().as_str();
    match tokio::time::timeout(Duration::from_secs(2), state.ledger.ping()).await {
        Ok(Ok(())) => (
            StatusCode::OK,
            Json(json!({ "ready": true, "database": backend })),
        ),
        _ => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(
                json!({ "ready": false, "database": backend, "reason": "the ledger database does not answer" }),
            ),
        ),
    }
}
