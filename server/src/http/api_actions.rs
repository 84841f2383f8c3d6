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
    ActionOutcome, CancelRequest, DecisionRequest, ErrorBody, JobIdPath, JobView, RerunRequest,
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
