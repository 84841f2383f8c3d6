//! API v1 for automation of operators' actions: decisions on `unknown` jobs, cancels and
//! running finished jobs again, with an operator token (`flo_…`), under that operator's role
//! and tenants. The same guarded ledger transitions as the console's forms: fenced by what the
//! caller saw, audited.

use axum::extract::{Path, State};
use axum::response::Response;
use axum::Json;

use super::api::JsonBody;
use super::auth::{ActingOperator, JobReader};
use super::contract::{
    ActionOutcome, BulkConfirm, BulkIdPath, BulkJobView, BulkRequest, BulkView, CancelRequest,
    DecisionRequest, ErrorBody, JobIdPath, JobView, RerunRequest,
};
use super::{ApiError, AppState};
use crate::job::Actor;
use crate::ledger::{Decision, Job, NoEvidence};
use crate::operators::{Operator, Role};

/// The job, if the acting operator may act on it, and the operator as the actor the ledger
/// records.
async fn actionable(
    state: &AppState,
    operator: &Operator,
    raw: &str,
) -> Result<(Job, Actor), ApiError> {
    if !operator.role.allows(Role::Operator) {
        return Err(ApiError::Forbidden(
            "this token's operator is a viewer: viewers read, they do not act",
        ));
    }
    let job = super::api::readable_job(state, &JobReader::Operator(operator.clone()), raw).await?;
    Ok((job, Actor::Operator(operator.name.clone())))
}

async fn outcome(state: &AppState, job_id: &str) -> Result<Json<ActionOutcome>, ApiError> {
    let job = state
        .ledger
        .job(job_id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no job {job_id}")))?;
    Ok(Json(ActionOutcome {
        job_id: job.job_id,
        state: job.state,
        owner_epoch: job.owner_epoch,
    }))
}

/// Record a decision on an `unknown` job (an operator token): authorize a fenced retry, or
/// resolve it as succeeded (with the provider's reference or the result) or as failed.
#[utoipa::path(
    post,
    path = "/jobs/{job_id}/decisions",
    operation_id = "decideJob",
    params(JobIdPath),
    request_body = DecisionRequest,
    responses(
        (status = 200, description = "Recorded; where the job stands now", body = ActionOutcome),
        (status = 400, description = "Invalid request (a missing reason or evidence)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not an operator token, or a viewer's", body = ErrorBody),
        (status = 404, description = "No such job for this operator", body = ErrorBody),
        (status = 409, description = "The job changed since the epoch given (stale_epoch), or the decision does not apply; nothing changed", body = ErrorBody),
        (status = 503, description = "Ledger database unavailable", body = ErrorBody)
    )
)]
pub(super) async fn decide(
    State(state): State<AppState>,
    ActingOperator(operator): ActingOperator,
    Path(job_id): Path<String>,
    JsonBody(request): JsonBody<DecisionRequest>,
) -> Result<Json<ActionOutcome>, ApiError> {
    let (job, actor) = actionable(&state, &operator, &job_id).await?;
    let decision = Decision::by_operator(
        request.decision,
        request.evidence.as_deref().unwrap_or_default(),
        request.result.as_deref().unwrap_or_default(),
    )
    .map_err(|NoEvidence| {
        ApiError::BadRequest(
            "resolve_succeeded needs evidence (the provider's reference) or the result".into(),
        )
    })?;
    state
        .ledger
        .decide(
            &job.job_id,
            request.epoch,
            &decision,
            &actor,
            &request.reason,
        )
        .await?;
    outcome(&state, &job.job_id).await
}

/// Cancel a job that is not finished (an operator token): it fails for good at a new epoch,
/// so an attempt still running can never commit.
#[utoipa::path(
    post,
    path = "/jobs/{job_id}/cancel",
    operation_id = "cancelJob",
    params(JobIdPath),
    request_body = CancelRequest,
    responses(
        (status = 200, description = "Cancelled: failed for good at a new epoch", body = ActionOutcome),
        (status = 400, description = "Invalid request (a missing reason, or a ready job: one fails only after an attempt or a decision)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not an operator token, or a viewer's", body = ErrorBody),
        (status = 404, description = "No such job for this operator", body = ErrorBody),
        (status = 409, description = "The job changed since the epoch and state given, or is terminal; nothing changed", body = ErrorBody),
        (status = 503, description = "Ledger database unavailable", body = ErrorBody)
    )
)]
pub(super) async fn cancel(
    State(state): State<AppState>,
    ActingOperator(operator): ActingOperator,
    Path(job_id): Path<String>,
    JsonBody(request): JsonBody<CancelRequest>,
) -> Result<Json<ActionOutcome>, ApiError> {
    let (job, actor) = actionable(&state, &operator, &job_id).await?;
    state
        .ledger
        .cancel(
            &job.job_id,
            request.epoch,
            request.state,
            &actor,
            &request.reason,
        )
        .await?;
    outcome(&state, &job.job_id).await
}

/// Run a finished job again as a new, linked job (an operator token).
#[utoipa::path(
    post,
    path = "/jobs/{job_id}/rerun",
    operation_id = "rerunJob",
    params(JobIdPath),
    request_body = RerunRequest,
    responses(
        (status = 201, description = "A new job runs the finished one again (same input, model, attempt budget and deadline length; a key derived from its own); the finished job stays as it is", body = JobView),
        (status = 200, description = "This re-run was made before, from the same `seen_events`: the job it made", body = JobView),
        (status = 400, description = "Invalid request (a missing reason)", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not an operator token, or a viewer's", body = ErrorBody),
        (status = 404, description = "No such job for this operator", body = ErrorBody),
        (status = 409, description = "The job has not finished; nothing changed", body = ErrorBody),
        (status = 503, description = "Ledger database unavailable", body = ErrorBody)
    )
)]
pub(super) async fn rerun(
    State(state): State<AppState>,
    ActingOperator(operator): ActingOperator,
    Path(job_id): Path<String>,
    JsonBody(request): JsonBody<RerunRequest>,
) -> Result<Response, ApiError> {
    let (job, actor) = actionable(&state, &operator, &job_id).await?;
    let created = state
        .ledger
        .run_again(&job.job_id, request.seen_events, &actor, &request.reason)
        .await?;
    super::count_send_at_creation(&state, &created);
    let (status, new) = super::api::status_of(created);
    Ok(super::api::made(status, &new))
}

/// Jobs a bulk action's answer lists.
const BULK_LISTED: u32 = 100;

/// A bulk action as the API shows it, if `operator` may see it (theirs, or any for an operator
/// of every tenant).
async fn bulk_view(
    state: &AppState,
    operator: &Operator,
    raw: &str,
) -> Result<Json<BulkView>, ApiError> {
    let bulk_id: i64 = raw
        .parse()
        .map_err(|_| ApiError::NotFound(format!("no bulk action {raw}")))?;
    let bulk = state
        .ledger
        .bulk_action(bulk_id)
        .await?
        .filter(|b| {
            operator.tenants.is_none()
                || b.actor == Actor::Operator(operator.name.clone()).to_string()
        })
        .ok_or_else(|| ApiError::NotFound(format!("no bulk action {bulk_id}")))?;
    let jobs = state.ledger.bulk_jobs(bulk_id, None, BULK_LISTED).await?;
    let valid_until = bulk.created_at + crate::ledger::PREVIEW_VALID.as_micros() as i64;
    Ok(Json(BulkView {
        bulk_id,
        action: bulk.action,
        confirm_before: (bulk.status == "previewed").then(|| crate::time::rfc3339_us(valid_until)),
        status: bulk.status,
        total: bulk.total,
        applied: bulk.applied,
        moved_on: bulk.moved_on,
        refused: bulk.refused,
        reason: bulk.reason,
        jobs: jobs
            .into_iter()
            .map(|j| BulkJobView {
                job_id: j.job_id,
                epoch: j.epoch,
                state: j.state,
                outcome: j.outcome,
            })
            .collect(),
        console: format!("/bulk/{bulk_id}"),
    }))
}

/// Preview an action on every job a filter matches (an operator token): the exact set of jobs
/// is recorded with the epoch and state each has now, and nothing changes until it is
/// confirmed (within 15 minutes).
#[utoipa::path(
    post,
    path = "/bulk",
    operation_id = "previewBulk",
    request_body = BulkRequest,
    responses(
        (status = 201, description = "Previewed: the exact count and the first jobs; nothing changed", body = BulkView),
        (status = 400, description = "An unknown action, a bad filter, a state the action does not apply to, or more jobs than the cap", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not an operator token, or a viewer's", body = ErrorBody),
        (status = 503, description = "Ledger database unavailable", body = ErrorBody)
    )
)]
pub(super) async fn preview_bulk(
    State(state): State<AppState>,
    ActingOperator(operator): ActingOperator,
    JsonBody(request): JsonBody<BulkRequest>,
) -> Result<(axum::http::StatusCode, Json<BulkView>), ApiError> {
    use crate::bulk::{BulkError, BulkKind};
    let kind = request
        .action
        .parse::<BulkKind>()
        .map_err(ApiError::BadRequest)?;
    let f = request.filter;
    let query = fenceline_app::console::JobsQuery {
        state: f.state.map(|s| s.as_str().to_owned()),
        tenant: f.tenant,
        key_prefix: f.key_prefix,
        created_after: f.created_after,
        created_before: f.created_before,
        worker: f.worker,
        error_code: f.error_code,
        with_drills: f.with_drills,
        ..Default::default()
    };
    let filter_text = crate::console::filter_text(&query);
    let console = crate::console::LedgerConsole::new(state.ledger.clone(), state.queue.clone())
        .for_tenants(operator.tenants.clone());
    let filter = console
        .bulk_filter(&query)
        .await?
        .map_err(|bad| ApiError::BadRequest(format!("{} must be {}", bad.name, bad.expected)))?;
    let bulk_id = crate::bulk::preview(
        &state.ledger,
        &operator,
        kind,
        &filter,
        &filter_text,
        state.queue.bulk_cap,
    )
    .await
    .map_err(|e| match e {
        BulkError::NotAllowed => {
            ApiError::Forbidden("this token's operator is a viewer: viewers read, they do not act")
        }
        BulkError::Ledger(e) => e.into(),
        other => ApiError::BadRequest(other.to_string()),
    })?;
    Ok((
        axum::http::StatusCode::CREATED,
        bulk_view(&state, &operator, &bulk_id.to_string()).await?,
    ))
}

/// Confirm a previewed action (the operator token that previewed it), with a reason: one audit
/// entry records it, and the jobs are acted on in the background, each fenced at the epoch and
/// state it was previewed at.
#[utoipa::path(
    post,
    path = "/bulk/{bulk_id}/confirm",
    operation_id = "confirmBulk",
    params(BulkIdPath),
    request_body = BulkConfirm,
    responses(
        (status = 202, description = "Confirmed: running in the background", body = BulkView),
        (status = 400, description = "A missing reason", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not an operator token, or a viewer's", body = ErrorBody),
        (status = 404, description = "No such bulk action for this operator", body = ErrorBody),
        (status = 409, description = "Not a preview of this operator's within 15 minutes (confirmed already, or lapsed); nothing changed", body = ErrorBody),
        (status = 503, description = "Ledger database unavailable", body = ErrorBody)
    )
)]
pub(super) async fn confirm_bulk(
    State(state): State<AppState>,
    ActingOperator(operator): ActingOperator,
    Path(BulkIdPath { bulk_id }): Path<BulkIdPath>,
    JsonBody(request): JsonBody<BulkConfirm>,
) -> Result<(axum::http::StatusCode, Json<BulkView>), ApiError> {
    if !operator.role.allows(Role::Operator) {
        return Err(ApiError::Forbidden(
            "this token's operator is a viewer: viewers read, they do not act",
        ));
    }
    let reason = fenceline_app::action::Reason::parse(&request.reason)
        .map_err(|no| ApiError::BadRequest(format!("a bulk action needs {no}")))?;
    // Not found unless the operator may see it.
    let bulk_id = bulk_view(&state, &operator, &bulk_id).await?.bulk_id;
    let actor = Actor::Operator(operator.name.clone()).to_string();
    if !state
        .ledger
        .confirm_bulk(bulk_id, &actor, reason.as_str())
        .await?
    {
        return Err(ApiError::Refused {
            code: "not_confirmable",
            message: "this bulk action is not a preview of yours made within 15 minutes \
                      (confirmed already, or lapsed): nothing changed"
                .into(),
        });
    }
    Ok((
        axum::http::StatusCode::ACCEPTED,
        bulk_view(&state, &operator, &bulk_id.to_string()).await?,
    ))
}

/// A bulk action: its preview, or how far it has come.
#[utoipa::path(
    get,
    path = "/bulk/{bulk_id}",
    operation_id = "readBulk",
    params(BulkIdPath),
    responses(
        (status = 200, description = "The action and its first jobs", body = BulkView),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "Not an operator token", body = ErrorBody),
        (status = 404, description = "No such bulk action for this operator", body = ErrorBody),
        (status = 503, description = "Ledger database unavailable", body = ErrorBody)
    )
)]
pub(super) async fn read_bulk(
    State(state): State<AppState>,
    ActingOperator(operator): ActingOperator,
    Path(BulkIdPath { bulk_id }): Path<BulkIdPath>,
) -> Result<Json<BulkView>, ApiError> {
    bulk_view(&state, &operator, &bulk_id).await
}
