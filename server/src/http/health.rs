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

/// `/metrics`: this process's counters and the ledger's gauges, in the Prometheus text format.
/// Label values are bounded (states, outcomes, reasons): never job ids, tenants or handles.
pub(super) async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    use std::fmt::Write;
    let mut out = String::new();
    crate::metrics::METRICS.render(&mut out);
    let ledger = &state.ledger;
    let counts = tokio::time::timeout(Duration::from_secs(5), ledger.count_by_state(None)).await;
    let up = matches!(counts, Ok(Ok(_)));
    out.push_str("# HELP fenceline_ledger_up Whether the ledger database answered this scrape.\n");
    out.push_str("# TYPE fenceline_ledger_up gauge\n");
    let _ = writeln!(out, "fenceline_ledger_up {}", u8::from(up));
    if let Ok(Ok(counts)) = counts {
        out.push_str("# HELP fenceline_jobs Jobs in the ledger, by state.\n");
        out.push_str("# TYPE fenceline_jobs gauge\n");
        for (job_state, n) in counts {
            let _ = writeln!(
                out,
                "fenceline_jobs{{state=\"{}\"}} {n}",
                job_state.as_str()
            );
        }
        if let Ok(pending) = ledger.outbox_pending().await {
            out.push_str(
                "# HELP fenceline_outbox_pending Outbox rows not yet sent to the queue.\n",
            );
            out.push_str("# TYPE fenceline_outbox_pending gauge\n");
            let _ = writeln!(out, "fenceline_outbox_pending {pending}");
        }
        if let Ok(rejected) = ledger.rejected_message_counts().await {
            out.push_str("# HELP fenceline_rejected_messages Queue messages refused, by reason.\n");
            out.push_str("# TYPE fenceline_rejected_messages gauge\n");
            for (reason, n) in rejected {
                let _ = writeln!(
                    out,
                    "fenceline_rejected_messages{{reason=\"{reason}\"}} {n}"
                );
            }
        }
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
}
