//! Drills from the console: `POST /drills` starts a run in the background of this server
//! (operator role without a tenant limit, form token, audited) and goes to its report;
//! `/drills/{run}/report.json` and `/drills/{run}/report.md` export a report for incident
//! reviews, with absolute links to the events that prove each check. Runs are read, as they
//! are started, only by operators without a tenant limit: to others none exists.

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form, Json};
use serde::Deserialize;
use tower_sessions::Session;

use super::gate::{check_form_token, flash, forbidden, SignedIn};
use super::{ApiError, AppState};
use crate::console::cell;
use crate::console::drill_view;
use crate::drill::{DrillKind, DrillProvider, DrillQueue, DrillRequest, DrillTimings, Report};
use crate::operators::Role;

#[derive(Deserialize)]
pub(super) struct DrillForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    queue: String,
    #[serde(default)]
    timings: String,
    #[serde(default)]
    model: String,
}

/// `POST /drills`: runs one scenario or all of them, then shows the run's live report.
pub(super) async fn start(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Form(form): Form<DrillForm>,
) -> Response {
    if let Err(refused) = check_form_token(&session, &form.csrf).await {
        return refused;
    }
    if !operator.role.allows(Role::Operator) {
        return forbidden("your role (viewer) can read drill reports but not run drills");
    }
    if !operator.sees_drills() {
        return forbidden(
            "a drill creates jobs of its own tenant (drill): running one needs an operator \
             without a tenant limit",
        );
    }
    let back = |text: String| async {
        flash(&session, false, text).await;
        Redirect::to("/drills").into_response()
    };
    let kinds = match form.kind.trim() {
        "all" => DrillKind::ALL.to_vec(),
        other => match DrillKind::parse(other) {
            Some(kind) => vec![kind],
            None => {
                return back(format!(
                    "There is no drill called {other:?}. Nothing was started."
                ))
                .await
            }
        },
    };
    let queue = match form.queue.trim() {
        "" | "embedded" => DrillQueue::Embedded,
        "sqs" if state.queue.drills.sqs => DrillQueue::Sqs,
        other => {
            return back(format!(
                "Drills cannot run on a queue called {other:?} here. Nothing was started."
            ))
            .await
        }
    };
    let timings = match form.timings.trim() {
        "" | "compressed" => DrillTimings::Compressed,
        "production" => DrillTimings::Production,
        other => {
            return back(format!(
                "Timings must be compressed or production, not {other:?}. Nothing was started."
            ))
            .await
        }
    };
    let provider = match (form.model.trim(), &state.drill_provider) {
        ("" | "stub", _) => DrillProvider::Stub,
        ("configured", Some(built)) => match built {
            Ok(provider) => DrillProvider::Configured(provider.clone()),
            Err(error) => {
                return back(format!(
                    "The configured provider cannot be used: {error}. Nothing was started."
                ))
                .await
            }
        },
        (other, _) => {
            return back(format!(
                "Drills cannot call a model called {other:?} here. Nothing was started."
            ))
            .await
        }
    };
    let actor = format!("operator:{}", operator.name);
    let asked = if kinds.len() == DrillKind::ALL.len() {
        "all".to_owned()
    } else {
        kinds[0].as_str().to_owned()
    };
    let request = DrillRequest {
        kinds,
        queue,
        timings,
        requested_by: actor.clone(),
        provider,
    };
    match crate::drill::start(&state.ledger, state.queue.drills.environment, request).await {
        Ok(run_id) => {
            if let Err(error) = state
                .ledger
                .audit_drill_started(
                    &actor,
                    &run_id,
                    &format!("{asked} on {} ({})", queue.as_str(), timings.as_str()),
                )
                .await
            {
                tracing::warn!(%error, "could not audit a drill start");
            }
            tracing::info!(operator = %operator.name, run = %run_id, "drill started");
            Redirect::to(&format!("/drills/{run_id}")).into_response()
        }
        Err(error) => back(format!("The drill did not start: {error}.")).await,
    }
}

/// A run's report and status, for an operator who may read drill runs; to anyone else, as to
/// a run that does not exist, 404.
async fn report(
    state: &AppState,
    operator: &crate::operators::Operator,
    run_id: &str,
) -> Result<(Report, String, RunTimes), ApiError> {
    let no_run = || ApiError::NotFound(format!("no drill run {run_id}"));
    if !operator.sees_drills() {
        return Err(no_run());
    }
    let row = state.ledger.drill_run(run_id).await?.ok_or_else(no_run)?;
    let now = state.ledger.now_us().await?;
    let status = drill_view::status(&row, now);
    let report = drill_view::report_of(&row)
        .ok_or_else(|| ApiError::NotFound(format!("drill run {run_id} has no readable report")))?;
    let times = RunTimes {
        started_at: row.started_at,
        finished_at: row.finished_at,
    };
    Ok((report, status, times))
}

/// When a run started and finished (microseconds, the database's clock).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunTimes {
    pub(crate) started_at: i64,
    pub(crate) finished_at: Option<i64>,
}

impl RunTimes {
    fn took_ms(&self) -> Option<i64> {
        self.finished_at.map(|f| (f - self.started_at) / 1000)
    }
}

/// `GET /drills/{run}/report.json`.
pub(super) async fn report_json(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    headers: HeaderMap,
    Path(run_id): Path<String>,
) -> Result<Response, ApiError> {
    let (report, status, times) = report(&state, &operator, &run_id).await?;
    let base = state.access.origin(&headers);
    let mut body = serde_json::to_value(&report).map_err(|_| ApiError::Internal)?;
    body["status"] = status.into();
    body["started_at"] = crate::time::rfc3339_us(times.started_at).into();
    body["finished_at"] = times.finished_at.map(crate::time::rfc3339_us).into();
    body["duration_ms"] = times.took_ms().into();
    body["verdict"] = if report.passed() { "PASS" } else { "FAIL" }.into();
    body["permalink"] = format!("{base}/drills/{run_id}").into();
    if let Some(scenarios) = body["scenarios"].as_array_mut() {
        for scenario in scenarios {
            for check in scenario["checks"].as_array_mut().into_iter().flatten() {
                for e in check["evidence"].as_array_mut().into_iter().flatten() {
                    let link = format!(
                        "{base}/jobs/{}#e{}",
                        e["job_id"].as_str().unwrap_or_default(),
                        e["seq"]
                    );
                    e["permalink"] = link.into();
                }
            }
        }
    }
    Ok(Json(body).into_response())
}

/// `GET /drills/{run}/report.md`.
pub(super) async fn report_markdown(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    headers: HeaderMap,
    Path(run_id): Path<String>,
) -> Result<Response, ApiError> {
    let (report, status, times) = report(&state, &operator, &run_id).await?;
    let base = state.access.origin(&headers);
    let body = markdown(&report, &status, times, &base);
    Ok((
        [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
        body,
    )
        .into_response())
}

pub(crate) fn markdown(report: &Report, status: &str, times: RunTimes, base: &str) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let verdict = if report.passed() { "PASS" } else { "FAIL" };
    let _ = writeln!(out, "# Drill {} — {verdict}\n", report.run_id);
    let finished = times
        .finished_at
        .map_or_else(|| "not yet".to_owned(), crate::time::rfc3339_us);
    let took = times
        .took_ms()
        .map_or_else(|| "still running".to_owned(), |ms| format!("{ms} ms"));
    let version = if report.version.is_empty() {
        "not recorded".to_owned()
    } else {
        format!("fenceline {}", report.version)
    };
    let _ = writeln!(
        out,
        "- Status: {status}\n- Started: {}\n- Finished: {finished}\n- Took: {took}\n- Queue: {}\n- Timings: {}\n- Model: {}\n- Requested by: {}\n- Ran on: {version}\n- Report: {base}/drills/{}\n",
        crate::time::rfc3339_us(times.started_at),
        report.queue, report.timings, report.provider, report.requested_by, report.run_id
    );
    for s in &report.scenarios {
        let _ = writeln!(
            out,
            "## {} — {}\n\n{}\n\n**Proves:** {}\n",
            s.kind.as_str(),
            s.status.as_str().to_uppercase(),
            s.kind.setup(),
            s.kind.proves()
        );
        for note in &s.notes {
            let _ = writeln!(out, "> {note}\n");
        }
        for c in &s.checks {
            let links: Vec<String> = c
                .evidence
                .iter()
                .map(|e| format!("[#{} {}]({base}{})", e.seq, e.kind, e.path()))
                .collect();
            let _ = writeln!(
                out,
                "- {} {} — {}{}",
                if c.passed { "✅" } else { "❌" },
                c.name,
                c.detail,
                if links.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", links.join(", "))
                }
            );
        }
        if !s.jobs.is_empty() {
            let _ = writeln!(
                out,
                "\n| Job | Role | State | Deliveries | Epoch | Deadline left (ms) | Renewals | Attempts | Recovery | Result | Message |\n|---|---|---|---|---|---|---|---|---|---|---|"
            );
            for j in &s.jobs {
                let _ = writeln!(
                    out,
                    "| [{id}]({base}/jobs/{id}) | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    cell(&j.role),
                    j.state,
                    j.delivery_count,
                    j.owner_epoch,
                    j.deadline_left_ms,
                    cell(&j.renewals),
                    j.attempt_count,
                    j.recovery_reason.as_deref().unwrap_or("—"),
                    cell(&j.result_transition),
                    cell(&j.deletion),
                    id = j.job_id,
                );
            }
        }
        let _ = writeln!(out);
    }
    out
}
