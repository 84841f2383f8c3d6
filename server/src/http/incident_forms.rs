//! The console's incident forms and downloads: open an incident, pin jobs to it (from a job's
//! page, a list of ids, or every job a jobs-list filter matches), close it with its bundle
//! frozen, and download the bundle's stored bytes.

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use serde::Deserialize;
use tower_sessions::Session;

use super::actions::may_act;
use super::bulk_forms::FilterFields;
use super::gate::{flash, forbidden, SignedIn};
use super::{ApiError, AppState};
use crate::console::{BundleContext, LedgerConsole};
use crate::job::Actor;
use crate::ledger::{LedgerError, MAX_PINNED};
use crate::operators::Operator;
use fenceline_app::action::Reason;

const TITLE_MAX: usize = 200;
const EXTERNAL_MAX: usize = 100;

fn console(state: &AppState, operator: &Operator) -> LedgerConsole {
    LedgerConsole::new(state.ledger.clone(), state.queue.clone())
        .for_tenants(operator.tenants.clone())
}

async fn unavailable(session: &Session, error: &LedgerError) {
    tracing::error!(%error, "an incident form failed");
    flash(
        session,
        false,
        "The ledger database is unavailable; nothing was changed.",
    )
    .await;
}

#[derive(Debug, Deserialize)]
pub(super) struct OpenForm {
    csrf: String,
    title: String,
    #[serde(default)]
    external_id: String,
}

/// `POST /incidents`: opens an incident and shows it.
pub(super) async fn open(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Form(form): Form<OpenForm>,
) -> Response {
    if let Err(refused) = may_act(&session, &operator, &form.csrf).await {
        return refused;
    }
    let back = Redirect::to("/incidents").into_response();
    let title = form.title.trim();
    let external = form.external_id.trim();
    if title.is_empty() || title.chars().count() > TITLE_MAX {
        flash(
            &session,
            false,
            format!(
                "An incident needs a title of 1 to {TITLE_MAX} characters. Nothing was opened."
            ),
        )
        .await;
        return back;
    }
    if title.chars().chain(external.chars()).any(char::is_control) {
        flash(
            &session,
            false,
            "A title or external id is one line of text. Nothing was opened.",
        )
        .await;
        return back;
    }
    if external.chars().count() > EXTERNAL_MAX {
        flash(
            &session,
            false,
            format!("The external id is at most {EXTERNAL_MAX} characters. Nothing was opened."),
        )
        .await;
        return back;
    }
    let actor = Actor::Operator(operator.name.clone());
    match state
        .ledger
        .open_incident(title, (!external.is_empty()).then_some(external), &actor)
        .await
    {
        Ok(id) => {
            flash(&session, true, format!("Incident {id} opened.")).await;
            Redirect::to(&format!("/incidents/{id}")).into_response()
        }
        Err(error) => {
            unavailable(&session, &error).await;
            back
        }
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct PinForm {
    csrf: String,
    incident: String,
    /// Job ids, separated by spaces, commas or lines.
    #[serde(default)]
    job_ids: String,
    /// Where to go after: `job` (the one job's page), else the incident's.
    #[serde(default)]
    back: String,
}

/// `POST /incidents/pin`: pins the jobs named (those of the operator's tenants) to an open
/// incident.
pub(super) async fn pin(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Form(form): Form<PinForm>,
) -> Response {
    if let Err(refused) = may_act(&session, &operator, &form.csrf).await {
        return refused;
    }
    let asked: Vec<String> = form
        .job_ids
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let back = match (form.back.as_str(), asked.first()) {
        ("job", Some(job_id)) if job_id.parse::<crate::job::JobId>().is_ok() => {
            format!("/jobs/{job_id}")
        }
        _ => match form.incident.parse::<i64>() {
            Ok(id) => format!("/incidents/{id}"),
            Err(_) => "/incidents".to_owned(),
        },
    };
    let back = Redirect::to(&back).into_response();
    let Ok(incident_id) = form.incident.parse::<i64>() else {
        flash(
            &session,
            false,
            "Choose an incident to pin to. Nothing was pinned.",
        )
        .await;
        return back;
    };
    if asked.is_empty() {
        flash(
            &session,
            false,
            "Name at least one job id. Nothing was pinned.",
        )
        .await;
        return back;
    }
    let mut ids = Vec::new();
    for raw in &asked {
        match super::export::covered_job(&state, &operator, raw).await {
            Ok(job) => ids.push(job.job_id),
            Err(ApiError::NotFound(_) | ApiError::BadRequest(_)) => {
                flash(
                    &session,
                    false,
                    format!("There is no job {raw} you can see. Nothing was pinned."),
                )
                .await;
                return back;
            }
            Err(_) => {
                flash(
                    &session,
                    false,
                    "The ledger database is unavailable; nothing was changed.",
                )
                .await;
                return back;
            }
        }
    }
    pinned(&state, &session, &operator, incident_id, &ids).await;
    back
}

/// Pins `ids` and tells the operator what came of it.
pub(super) async fn pinned(
    state: &AppState,
    session: &Session,
    operator: &Operator,
    incident_id: i64,
    ids: &[String],
) {
    let actor = Actor::Operator(operator.name.clone());
    match state.ledger.pin_jobs(incident_id, ids, &actor).await {
        Ok(0) => {
            flash(
                session,
                true,
                format!("Every job named was pinned to incident {incident_id} already."),
            )
            .await
        }
        Ok(n) => {
            flash(
                session,
                true,
                format!(
                    "Pinned {} to incident {incident_id}: kept from retention while it is \
                     open, and after it closes for the configured time.",
                    if n == 1 {
                        "1 job".to_owned()
                    } else {
                        format!("{n} jobs")
                    }
                ),
            )
            .await
        }
        Err(LedgerError::Invalid(why)) => {
            flash(
                session,
                false,
                format!("{}. Nothing was pinned.", super::error::capitalized(&why)),
            )
            .await
        }
        Err(error) => unavailable(session, &error).await,
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct PinFilterForm {
    csrf: String,
    incident: String,
    #[serde(flatten)]
    filter: FilterFields,
}

/// `POST /incidents/pin-filter`: pins every job a jobs-list filter matches (within the
/// operator's tenants), at most what the incident still holds.
pub(super) async fn pin_filter(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    Form(form): Form<PinFilterForm>,
) -> Response {
    if let Err(refused) = may_act(&session, &operator, &form.csrf).await {
        return refused;
    }
    let query = form.filter.query();
    let filter_text = crate::console::filter_text(&query);
    let list = Redirect::to(&format!("/jobs?{filter_text}")).into_response();
    let Ok(incident_id) = form.incident.parse::<i64>() else {
        flash(
            &session,
            false,
            "Choose an incident to pin to. Nothing was pinned.",
        )
        .await;
        return list;
    };
    let filter = match console(&state, &operator).bulk_filter(&query).await {
        Ok(Ok(filter)) => filter,
        Ok(Err(bad)) => {
            flash(
                &session,
                false,
                format!("{} must be {}. Nothing was pinned.", bad.name, bad.expected),
            )
            .await;
            return list;
        }
        Err(error) => {
            unavailable(&session, &error).await;
            return list;
        }
    };
    let matching = state
        .ledger
        .matching_jobs(&filter, MAX_PINNED as usize)
        .await
        .map(|found| found.map(|jobs| jobs.into_iter().map(|j| j.job_id).collect::<Vec<_>>()));
    match matching {
        Ok(Some(ids)) if ids.is_empty() => {
            flash(
                &session,
                false,
                "No job matches this filter. Nothing was pinned.",
            )
            .await;
            list
        }
        Ok(Some(ids)) => {
            pinned(&state, &session, &operator, incident_id, &ids).await;
            Redirect::to(&format!("/incidents/{incident_id}")).into_response()
        }
        Ok(None) => {
            flash(
                &session,
                false,
                format!(
                    "This filter matches more than the {MAX_PINNED} jobs an incident holds: \
                     narrow it. Nothing was pinned."
                ),
            )
            .await;
            list
        }
        Err(error) => {
            unavailable(&session, &error).await;
            list
        }
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct CloseForm {
    csrf: String,
    reason: String,
}

/// `POST /incidents/{id}/close`: freezes the incident's bundle (its bytes made once, stored,
/// their SHA-256 written to the audit) and closes it; its jobs stay kept for the configured
/// time after. Only an operator who sees every one of its jobs closes it.
pub(super) async fn close(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    session: Session,
    headers: axum::http::HeaderMap,
    Path(incident_id): Path<i64>,
    Form(form): Form<CloseForm>,
) -> Response {
    if let Err(refused) = may_act(&session, &operator, &form.csrf).await {
        return refused;
    }
    let back = Redirect::to(&format!("/incidents/{incident_id}")).into_response();
    let reason = match Reason::parse(&form.reason) {
        Ok(reason) => reason,
        Err(no) => {
            flash(
                &session,
                false,
                format!("Closing an incident needs {no}. Nothing was changed."),
            )
            .await;
            return back;
        }
    };
    let console = console(&state, &operator);
    match console.covers_incident(incident_id).await {
        Ok(true) => {}
        Ok(false) => {
            return forbidden(
                "this incident holds jobs of tenants you do not see: an operator who sees \
                 them all closes it",
            )
        }
        Err(error) => {
            unavailable(&session, &error).await;
            return back;
        }
    }
    let ctx = BundleContext {
        origin: state.access.origin(&headers),
        closed_by: operator.name.clone(),
        reason: reason.as_str().to_owned(),
        stylesheet: super::STYLESHEET,
    };
    let actor = Actor::Operator(operator.name.clone());
    let keep = state.queue.incident_keep.as_micros() as i64;
    /// What one try at closing came to.
    enum Closing {
        Closed,
        ClosedBefore,
        Gone,
        /// A job was pinned while the bundle was made.
        Stale,
        /// It holds a job of a tenant the closer does not see (pinned meanwhile).
        Uncovered,
    }
    // A pin that lands while the bundle is made leaves it stale: made again, a few times.
    for _ in 0..3 {
        let closed = async {
            let Some(incident) = state.ledger.incident(incident_id).await? else {
                return Ok(Closing::Gone);
            };
            if incident.closed_at.is_some() {
                return Ok(Closing::ClosedBefore);
            }
            if !console.covers_incident(incident_id).await? {
                return Ok(Closing::Uncovered);
            }
            let bundle = console.incident_bundle(&incident, &ctx).await?;
            let now = state.ledger.now_us().await?;
            let done = state
                .ledger
                .close_incident(
                    incident_id,
                    &actor,
                    (reason.as_str(), incident.jobs),
                    &bundle,
                    now + keep,
                )
                .await?;
            Ok::<_, LedgerError>(if done {
                Closing::Closed
            } else {
                Closing::Stale
            })
        }
        .await;
        match closed {
            Ok(Closing::Stale) => continue,
            Ok(Closing::Uncovered) => {
                return forbidden(
                    "this incident holds jobs of tenants you do not see: an operator who sees \
                     them all closes it",
                )
            }
            Ok(Closing::Closed) => {
                flash(
                    &session,
                    true,
                    "Closed: its bundle is frozen, and its SHA-256 is in the audit.",
                )
                .await;
                return back;
            }
            Ok(Closing::ClosedBefore) => {
                flash(&session, false, "This incident was closed already.").await;
                return back;
            }
            Ok(Closing::Gone) => return back,
            Err(error) => {
                unavailable(&session, &error).await;
                return back;
            }
        }
    }
    flash(
        &session,
        false,
        "Jobs were being pinned while the bundle was made; nothing was changed. Close again.",
    )
    .await;
    back
}

/// `GET /incidents/{id}/bundle.{md,json,html}`: the frozen bundle's stored bytes, the same on
/// every download.
pub(super) async fn bundle(
    State(state): State<AppState>,
    Extension(SignedIn(operator)): Extension<SignedIn>,
    Path((incident_id, file)): Path<(i64, String)>,
) -> Result<Response, ApiError> {
    let (content_type, pick): (&str, fn(crate::ledger::Bundle) -> String) = match file.as_str() {
        "bundle.md" => ("text/markdown; charset=utf-8", |b| b.markdown),
        "bundle.json" => ("application/json", |b| b.json),
        "bundle.html" => ("text/html; charset=utf-8", |b| b.html),
        _ => return Err(ApiError::NotFound(format!("no file {file}"))),
    };
    if !console(&state, &operator)
        .covers_incident(incident_id)
        .await?
    {
        return Err(ApiError::NotFound(format!("no incident {incident_id}")));
    }
    let Some(bundle) = state.ledger.incident_bundle(incident_id).await? else {
        return Err(ApiError::NotFound(format!(
            "incident {incident_id} has no frozen bundle: it is made when the incident closes"
        )));
    };
    let extension = file.trim_start_matches("bundle.");
    Ok((
        [
            (header::CONTENT_TYPE, content_type.to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"incident-{incident_id}.{extension}\""),
            ),
        ],
        pick(bundle),
    )
        .into_response())
}
