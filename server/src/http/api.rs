//! REST API v1: submit jobs idempotently and read them, their attempts and their timelines.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::auth::{JobReader, Tenant};
use super::contract::{
    AttemptView, BatchItem, BatchResponse, CreateJobRequest, CreateJobsRequest, ErrorBody,
    EventPage, EventView, EventsQuery, JobIdPath, JobPage, JobResult, JobView, ListQuery,
    MAX_BATCH,
};
use super::{ApiError, AppState};
use crate::job::{request_digest, Actor, JobId, JobState};
use crate::ledger::{Created, Job, JobFilter, NewJob};

/// A JSON body whose every failure is a 4xx with a message, never axum's plain-text rejection.
pub(super) struct JsonBody<T>(pub(super) T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let is_json = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"));
        if !is_json {
            return Err(ApiError::UnsupportedMediaType);
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge(state.max_body_bytes)
            } else {
                ApiError::BadRequest(rejection.body_text())
            }
        })?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::InvalidJson(format!("the body is not a valid request: {e}")))
    }
}

/// The trace context a new job keeps: this request's span when traces are on here, else the
/// submitting service's own `traceparent` (well formed), else none.
pub(super) struct KeptTrace(Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for KeptTrace {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let own = crate::telemetry::traceparent_of(&tracing::Span::current());
        let theirs = parts
            .headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .and_then(crate::telemetry::valid_traceparent)
            .map(str::to_owned);
        Ok(KeptTrace(own.or(theirs)))
    }
}

pub(super) const MAX_DEADLINE_SECONDS: u64 = 12 * 3600;
pub(super) const MAX_ATTEMPTS: u32 = 20;

/// What an operator's re-run adds to its source's key (`ledger::write::rerun`): no tenant's key
/// may hold it, so that none can take a re-run's key first.
const RERUN_MARK: &str = "~rerun-";

fn printable(s: &str) -> bool {
    s.chars().all(|c| !c.is_control())
}

fn validate(request: &CreateJobRequest) -> Result<(), ApiError> {
    let bad = |m: &str| Err(ApiError::BadRequest(m.to_owned()));
    if request.idempotency_key.is_empty()
        || request.idempotency_key.len() > 200
        || !printable(&request.idempotency_key)
    {
        return bad("idempotency_key must be 1 to 200 printable characters");
    }
    if request.idempotency_key.contains(RERUN_MARK) {
        return bad(
            "idempotency_key may not contain \"~rerun-\": keys with it name an operator's \
             re-runs of a job",
        );
    }
    if request.input.is_null() {
        return bad("input is required and must not be null");
    }
    if request.contract_version.is_empty()
        || request.contract_version.len() > 64
        || !printable(&request.contract_version)
    {
        return bad("contract_version must be 1 to 64 printable characters");
    }
    if !request.model.is_object() {
        return bad("model must be a JSON object of model parameters");
    }
    if let Some(d) = request.deadline_seconds {
        if d == 0 || d > MAX_DEADLINE_SECONDS {
            return bad("deadline_seconds must be between 1 and 43200 (12 hours)");
        }
    }
    if let Some(n) = request.max_attempts {
        if n == 0 || n > MAX_ATTEMPTS {
            return bad("max_attempts must be between 1 and 20");
        }
    }
    Ok(())
}

/// Create a job, idempotently per tenant and idempotency key.
#[utoipa::path(
    post,
    path = "/jobs",
    operation_id = "createJob",
    params(("traceparent" = Option<String>, Header, description = "The caller's W3C trace context (`00-<trace id>-<span id>-<flags>`): the job keeps it, and the workers' spans continue that trace. Anything else is ignored.")),
    request_body = CreateJobRequest,
    responses(
        (status = 201, description = "Created", body = JobView),
        (status = 200, description = "The same key and request made this job before", body = JobView),
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 409, description = "Key already used for a different request", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Body is not application/json", body = ErrorBody),
        (status = 503, description = "Ledger database unavailable", body = ErrorBody)
    )
)]
pub(super) async fn create_job(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    KeptTrace(trace): KeptTrace,
    JsonBody(request): JsonBody<CreateJobRequest>,
) -> Result<Response, ApiError> {
    let (status, job) = create_one(&state, &tenant, request, trace).await?;
    let span = tracing::Span::current();
    span.record("job_id", job.job_id.as_str());
    span.record("epoch", job.owner_epoch);
    Ok(made(status, &job))
}

/// Check one job's request and make it, idempotently: 201 and the new job, or 200 and the one
/// the same key and request made before.
async fn create_one(
    state: &AppState,
    tenant: &str,
    request: CreateJobRequest,
    traceparent: Option<String>,
) -> Result<(StatusCode, Job), ApiError> {
    validate(&request)?;
    if let Value::Object(params) = &request.model {
        state
            .model_policy
            .check(tenant, params)
            .map_err(ApiError::BadRequest)?;
    }
    let digest = request_digest(&request.input, &request.contract_version, &request.model);
    let new = NewJob {
        tenant: tenant.to_owned(),
        idempotency_key: request.idempotency_key,
        request_digest: digest,
        contract_version: request.contract_version,
        input: request.input,
        model: request.model,
        deadline: Duration::from_secs(request.deadline_seconds.unwrap_or(3600)),
        max_attempts: request.max_attempts.unwrap_or(3),
        replay_policy: request
            .replay_policy
            .unwrap_or_else(|| state.tenant_replay.get(tenant).copied().unwrap_or_default()),
        drill_run: None,
        traceparent,
    };
    let created = state
        .ledger
        .create_job(new, &Actor::Api(tenant.to_owned()))
        .await?;
    super::count_send_at_creation(state, &created);
    Ok(status_of(created))
}

/// `201` and a job just made, or `200` and the one the same request made before.
pub(super) fn status_of(created: Created) -> (StatusCode, Job) {
    match created {
        Created::New(job) => (StatusCode::CREATED, job),
        Created::Existing(job) => (StatusCode::OK, job),
    }
}

/// The answer for a job made (or found made before), with its address.
pub(super) fn made(status: StatusCode, job: &Job) -> Response {
    let location = format!("/api/v1/jobs/{}", job.job_id);
    (
        status,
        [(axum::http::header::LOCATION, location)],
        Json(JobView::of(job)),
    )
        .into_response()
}

/// Create up to 500 jobs in one request, each idempotently and on its own.
#[utoipa::path(
    post,
    path = "/jobs/batch",
    operation_id = "createJobs",
    params(("traceparent" = Option<String>, Header, description = "The caller's W3C trace context (`00-<trace id>-<span id>-<flags>`): the job keeps it, and the workers' spans continue that trace. Anything else is ignored.")),
    request_body = CreateJobsRequest,
    responses(
        (status = 200, description = "Each job answered on its own, in the order sent", body = BatchResponse),
        (status = 400, description = "Not a batch: no jobs, more than 500, or another shape", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Body is not application/json", body = ErrorBody),
        (status = 503, description = "Ledger database unavailable for every job of the batch", body = ErrorBody)
    )
)]
pub(super) async fn create_jobs(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    KeptTrace(trace): KeptTrace,
    JsonBody(batch): JsonBody<CreateJobsRequest>,
) -> Result<Json<BatchResponse>, ApiError> {
    let n = batch.jobs.len();
    if n == 0 || n > MAX_BATCH {
        return Err(ApiError::BadRequest(format!(
            "jobs must hold 1 to {MAX_BATCH} jobs; it held {n}"
        )));
    }
    let mut answers: Vec<Option<Result<(StatusCode, Job), ApiError>>> =
        std::iter::repeat_with(|| None).take(n).collect();
    // Jobs that share a key are made one after another, in the order sent: the first decides
    // and the later ones find it (the same job, or a conflict). Other jobs go side by side, so
    // the ledger's group commit writes them together.
    let mut lanes: Vec<Vec<(usize, CreateJobRequest)>> = Vec::new();
    let mut lane_of_key = std::collections::HashMap::new();
    for (i, raw) in batch.jobs.into_iter().enumerate() {
        match serde_json::from_value::<CreateJobRequest>(raw) {
            Err(e) => {
                answers[i] = Some(Err(ApiError::InvalidJson(format!(
                    "jobs[{i}] is not a valid job: {e}"
                ))));
            }
            Ok(request) => {
                let lane = *lane_of_key
                    .entry(request.idempotency_key.clone())
                    .or_insert_with(|| {
                        lanes.push(Vec::new());
                        lanes.len() - 1
                    });
                lanes[lane].push((i, request));
            }
        }
    }
    let mut running = tokio::task::JoinSet::new();
    for lane in lanes {
        let state = state.clone();
        let tenant = tenant.clone();
        let trace = trace.clone();
        running.spawn(tracing::Instrument::in_current_span(async move {
            let mut done = Vec::with_capacity(lane.len());
            for (i, request) in lane {
                done.push((i, create_one(&state, &tenant, request, trace.clone()).await));
            }
            done
        }));
    }
    while let Some(lane) = running.join_next().await {
        for (i, answer) in lane.map_err(|_| ApiError::Internal)? {
            answers[i] = Some(answer);
        }
    }
    let answers: Vec<Result<(StatusCode, Job), ApiError>> = answers
        .into_iter()
        .map(|a| a.unwrap_or(Err(ApiError::Internal)))
        .collect();
    if answers
        .iter()
        .all(|a| matches!(a, Err(ApiError::Unavailable)))
    {
        return Err(ApiError::Unavailable);
    }
    let mut response = BatchResponse {
        jobs: Vec::with_capacity(n),
        created: 0,
        existing: 0,
        failed: 0,
    };
    for answer in answers {
        response.jobs.push(match answer {
            Ok((status, job)) => {
                if status == StatusCode::CREATED {
                    response.created += 1;
                } else {
                    response.existing += 1;
                }
                BatchItem {
                    status: status.as_u16(),
                    job: Some(JobView::of(&job)),
                    error: None,
                }
            }
            Err(error) => {
                response.failed += 1;
                let (status, detail) = error.detail();
                BatchItem {
                    status: status.as_u16(),
                    job: None,
                    error: Some(detail),
                }
            }
        });
    }
    Ok(Json(response))
}

fn parse_job_id(raw: &str) -> Result<JobId, ApiError> {
    raw.parse::<JobId>()
        .map_err(|e| ApiError::BadRequest(e.to_string()))
}

/// The job a reader may see: its tenant's own, or one of the operator's tenants'.
pub(super) async fn readable_job(
    state: &AppState,
    reader: &JobReader,
    raw_id: &str,
) -> Result<Job, ApiError> {
    match reader {
        JobReader::Tenant(tenant) => tenant_job(state, tenant, raw_id).await,
        JobReader::Operator(operator) => super::export::covered_job(state, operator, raw_id).await,
    }
}

async fn tenant_job(state: &AppState, tenant: &str, raw_id: &str) -> Result<Job, ApiError> {
    let job_id = parse_job_id(raw_id)?;
    state
        .ledger
        .job_for_tenant(tenant, job_id.as_str())
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no job {job_id} for this tenant")))
}

/// A job with its attempts. A tenant's token reads its own jobs; an operator token (any
/// role) reads the jobs of the operator's tenants.
#[utoipa::path(
    get,
    path = "/jobs/{job_id}",
    operation_id = "readJob",
    params(JobIdPath),
    responses(
        (status = 200, description = "The job", body = JobView),
        (status = 400, description = "Not a job id", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such job for this tenant or operator", body = ErrorBody)
    )
)]
pub(super) async fn read_job(
    State(state): State<AppState>,
    reader: JobReader,
    Path(job_id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    let job = readable_job(&state, &reader, &job_id).await?;
    let attempts = state.ledger.attempts(&job.job_id).await?;
    let mut view = JobView::of(&job);
    view.attempts = Some(attempts.iter().map(AttemptView::of).collect());
    Ok(Json(view))
}

/// The job's one accepted result.
#[utoipa::path(
    get,
    path = "/jobs/{job_id}/result",
    operation_id = "readJobResult",
    params(JobIdPath),
    responses(
        (status = 200, description = "The accepted result", body = JobResult),
        (status = 400, description = "Not a job id", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such job, or no accepted result yet", body = ErrorBody)
    )
)]
pub(super) async fn read_result(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(job_id): Path<String>,
) -> Result<Json<JobResult>, ApiError> {
    let job = tenant_job(&state, &tenant, &job_id).await?;
    let body = super::accepted_result(&state, &job).await?;
    let result: Value = serde_json::from_str(&body).unwrap_or(Value::String(body));
    Ok(Json(JobResult {
        job_id: job.job_id.clone(),
        result_ref: job.result_ref.clone().unwrap_or_default(),
        result,
    }))
}

fn query_or_400<T>(
    query: Result<Query<T>, axum::extract::rejection::QueryRejection>,
) -> Result<T, ApiError> {
    query
        .map(|Query(q)| q)
        .map_err(|e| ApiError::BadRequest(e.body_text()))
}

/// A page of the job's timeline, oldest first. A tenant's token reads its own jobs'; an
/// operator token (any role) those of the operator's tenants.
#[utoipa::path(
    get,
    path = "/jobs/{job_id}/events",
    operation_id = "readJobEvents",
    params(JobIdPath, EventsQuery),
    responses(
        (status = 200, description = "Events", body = EventPage),
        (status = 400, description = "Invalid query", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such job for this tenant or operator", body = ErrorBody)
    )
)]
pub(super) async fn read_events(
    State(state): State<AppState>,
    reader: JobReader,
    Path(job_id): Path<String>,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<EventPage>, ApiError> {
    let query = query_or_400(query)?;
    let limit = query.limit.unwrap_or(100);
    if limit == 0 || limit > 1000 {
        return Err(ApiError::BadRequest(
            "limit must be between 1 and 1000".into(),
        ));
    }
    let job = readable_job(&state, &reader, &job_id).await?;
    let events = state
        .ledger
        .events(&job.job_id, query.after.unwrap_or(0), limit)
        .await?;
    let next_after = (events.len() == limit as usize)
        .then(|| events.last().map(|e| e.seq))
        .flatten();
    Ok(Json(EventPage {
        job_id: job.job_id.clone(),
        events: events.iter().map(EventView::of).collect(),
        next_after,
    }))
}

/// The tenant's jobs, newest first, one keyset page at a time.
#[utoipa::path(
    get,
    path = "/jobs",
    operation_id = "listJobs",
    params(ListQuery),
    responses(
        (status = 200, description = "A page", body = JobPage),
        (status = 400, description = "Invalid query", body = ErrorBody),
        (status = 401, description = "Missing or invalid token", body = ErrorBody)
    )
)]
pub(super) async fn list_jobs(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<JobPage>, ApiError> {
    let query = query_or_400(query)?;
    let job_state = query
        .state
        .as_deref()
        .map(|s| {
            s.parse::<JobState>().map_err(|_| {
                let names: Vec<_> = JobState::ALL.iter().map(|s| s.as_str()).collect();
                ApiError::BadRequest(format!("state must be one of: {}", names.join(", ")))
            })
        })
        .transpose()?;
    let before = query
        .before
        .as_deref()
        .map(parse_job_id)
        .transpose()?
        .map(|id| id.to_string());
    let limit = query.limit.unwrap_or(50);
    if limit == 0 || limit > 500 {
        return Err(ApiError::BadRequest(
            "limit must be between 1 and 500".into(),
        ));
    }
    let page = state
        .ledger
        .list_jobs(&JobFilter {
            tenants: None,
            tenant: Some(tenant),
            state: job_state,
            before,
            from_id: None,
            limit,
            ..Default::default()
        })
        .await?;
    Ok(Json(JobPage {
        jobs: page.jobs.iter().map(JobView::of).collect(),
        next: page.next,
    }))
}
