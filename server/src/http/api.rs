//! REST API v1: submit jobs idempotently and read them, their attempts and their timelines.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Tenant;
use super::{openapi, ApiError, AppState};
use crate::job::{request_digest, Actor, JobId, JobState};
use crate::ledger::{Attempt, Created, Event, Job, JobFilter, NewJob, ReplayPolicy};
use crate::time::rfc3339_us;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/jobs", get(list_jobs).post(create_job))
        .route("/jobs/{job_id}", get(read_job))
        .route("/jobs/{job_id}/events", get(read_events))
        .route("/jobs/{job_id}/result", get(read_result))
        .route("/openapi.json", get(openapi::document))
}

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
            .map_err(|e| ApiError::InvalidJson(format!("the body is not a valid job request: {e}")))
    }
}

fn default_model() -> Value {
    json!({})
}

fn default_contract() -> String {
    "v1".to_owned()
}

/// `POST /api/v1/jobs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateJobRequest {
    idempotency_key: String,
    input: Value,
    #[serde(default = "default_contract")]
    contract_version: String,
    #[serde(default = "default_model")]
    model: Value,
    deadline_seconds: Option<u64>,
    max_attempts: Option<u32>,
    #[serde(default)]
    replay_policy: ReplayPolicy,
}

pub(super) const MAX_DEADLINE_SECONDS: u64 = 12 * 3600;
pub(super) const MAX_ATTEMPTS: u32 = 20;

fn printable(s: &str) -> bool {
    s.chars().all(|c| !c.is_control())
}

impl CreateJobRequest {
    fn validate(&self) -> Result<(), ApiError> {
        let bad = |m: &str| Err(ApiError::BadRequest(m.to_owned()));
        if self.idempotency_key.is_empty()
            || self.idempotency_key.len() > 200
            || !printable(&self.idempotency_key)
        {
            return bad("idempotency_key must be 1 to 200 printable characters");
        }
        if self.input.is_null() {
            return bad("input is required and must not be null");
        }
        if self.contract_version.is_empty()
            || self.contract_version.len() > 64
            || !printable(&self.contract_version)
        {
            return bad("contract_version must be 1 to 64 printable characters");
        }
        if !self.model.is_object() {
            return bad("model must be a JSON object of model parameters");
        }
        if let Some(d) = self.deadline_seconds {
            if d == 0 || d > MAX_DEADLINE_SECONDS {
                return bad("deadline_seconds must be between 1 and 43200 (12 hours)");
            }
        }
        if let Some(n) = self.max_attempts {
            if n == 0 || n > MAX_ATTEMPTS {
                return bad("max_attempts must be between 1 and 20");
            }
        }
        Ok(())
    }
}

fn time_or_null(us: Option<i64>) -> Value {
    us.map_or(Value::Null, |us| Value::from(rfc3339_us(us)))
}

pub(super) fn job_view(job: &Job) -> Value {
    json!({
        "job_id": job.job_id,
        "state": job.state.as_str(),
        "terminal": job.state.is_terminal(),
        "idempotency_key": job.idempotency_key,
        "request_digest": job.request_digest,
        "contract_version": job.contract_version,
        "owner_epoch": job.owner_epoch,
        "owner_id": job.owner_id,
        "owner_until": time_or_null(job.owner_until),
        "deadline_at": rfc3339_us(job.deadline_at),
        "attempt_count": job.attempt_count,
        "max_attempts": job.max_attempts,
        "retry_at": time_or_null(job.retry_at),
        "result_ref": job.result_ref,
        "error_code": job.error_code,
        "replay_policy": job.replay_policy.as_str(),
        "recovery_reason": job.recovery_reason,
        "created_at": rfc3339_us(job.created_at),
        "updated_at": rfc3339_us(job.updated_at),
        "terminal_at": time_or_null(job.terminal_at),
        "links": {
            "self": format!("/api/v1/jobs/{}", job.job_id),
            "events": format!("/api/v1/jobs/{}/events", job.job_id),
            "result": format!("/api/v1/jobs/{}/result", job.job_id),
            "console": format!("/jobs/{}", job.job_id),
        },
    })
}

fn attempt_view(a: &Attempt) -> Value {
    json!({
        "attempt_no": a.attempt_no,
        "epoch": a.epoch,
        "worker_id": a.worker_id,
        "provider": a.provider,
        "provider_request_id": a.provider_request_id,
        "started_at": rfc3339_us(a.started_at),
        "finished_at": time_or_null(a.finished_at),
        "outcome": a.outcome.as_str(),
        "error_code": a.error_code,
    })
}

fn event_view(e: &Event) -> Value {
    json!({
        "seq": e.seq,
        "at": rfc3339_us(e.at),
        "kind": e.kind,
        "epoch": e.epoch,
        "actor": e.actor,
        "delivery": e.delivery,
        "attempt_no": e.attempt_no,
        "deadline_left_ms": e.deadline_left_ms,
        "detail": e.detail,
        "permalink": format!("/jobs/{}#e{}", e.job_id, e.seq),
    })
}

async fn create_job(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    JsonBody(request): JsonBody<CreateJobRequest>,
) -> Result<Response, ApiError> {
    request.validate()?;
    if let Value::Object(params) = &request.model {
        state
            .model_policy
            .check(&tenant, params)
            .map_err(ApiError::BadRequest)?;
    }
    let digest = request_digest(&request.input, &request.contract_version, &request.model);
    let new = NewJob {
        tenant: tenant.clone(),
        idempotency_key: request.idempotency_key,
        request_digest: digest,
        contract_version: request.contract_version,
        input: request.input,
        model: request.model,
        deadline: Duration::from_secs(request.deadline_seconds.unwrap_or(3600)),
        max_attempts: request.max_attempts.unwrap_or(3),
        replay_policy: request.replay_policy,
    };
    let created = state.ledger.create_job(new, &Actor::Api(tenant)).await?;
    let status = match created {
        Created::New(_) => StatusCode::CREATED,
        Created::Existing(_) => StatusCode::OK,
    };
    let job = created.job();
    let location = format!("/api/v1/jobs/{}", job.job_id);
    Ok((
        status,
        [(axum::http::header::LOCATION, location)],
        Json(job_view(job)),
    )
        .into_response())
}

fn parse_job_id(raw: &str) -> Result<JobId, ApiError> {
    raw.parse::<JobId>()
        .map_err(|e| ApiError::BadRequest(e.to_string()))
}

async fn tenant_job(state: &AppState, tenant: &str, raw_id: &str) -> Result<Job, ApiError> {
    let job_id = parse_job_id(raw_id)?;
    state
        .ledger
        .job_for_tenant(tenant, job_id.as_str())
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no job {job_id} for this tenant")))
}

async fn read_job(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(job_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let job = tenant_job(&state, &tenant, &job_id).await?;
    let attempts = state.ledger.attempts(&job.job_id).await?;
    let mut view = job_view(&job);
    view["attempts"] = attempts.iter().map(attempt_view).collect();
    Ok(Json(view))
}

async fn read_result(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(job_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let job = tenant_job(&state, &tenant, &job_id).await?;
    let Some(result_ref) = job
        .result_ref
        .as_deref()
        .filter(|_| job.state == JobState::Succeeded)
    else {
        return Err(ApiError::NotFound(format!(
            "job {} has no accepted result; it is {}",
            job.job_id, job.state
        )));
    };
    let body = state
        .ledger
        .result_body(result_ref)
        .await?
        .ok_or(ApiError::Internal)?;
    let result: Value = serde_json::from_str(&body).unwrap_or(Value::String(body));
    Ok(Json(json!({
        "job_id": job.job_id,
        "result_ref": result_ref,
        "result": result,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EventsQuery {
    after: Option<i64>,
    limit: Option<u32>,
}

fn query_or_400<T>(
    query: Result<Query<T>, axum::extract::rejection::QueryRejection>,
) -> Result<T, ApiError> {
    query
        .map(|Query(q)| q)
        .map_err(|e| ApiError::BadRequest(e.body_text()))
}

async fn read_events(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(job_id): Path<String>,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let query = query_or_400(query)?;
    let limit = query.limit.unwrap_or(100);
    if limit == 0 || limit > 1000 {
        return Err(ApiError::BadRequest(
            "limit must be between 1 and 1000".into(),
        ));
    }
    let job = tenant_job(&state, &tenant, &job_id).await?;
    let events = state
        .ledger
        .events(&job.job_id, query.after.unwrap_or(0), limit)
        .await?;
    let next_after = (events.len() == limit as usize)
        .then(|| events.last().map(|e| e.seq))
        .flatten();
    Ok(Json(json!({
        "job_id": job.job_id,
        "events": events.iter().map(event_view).collect::<Vec<_>>(),
        "next_after": next_after,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    state: Option<String>,
    before: Option<String>,
    limit: Option<u32>,
}

async fn list_jobs(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
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
            tenant: Some(tenant),
            state: job_state,
            before,
            from_id: None,
            limit,
        })
        .await?;
    Ok(Json(json!({
        "jobs": page.jobs.iter().map(job_view).collect::<Vec<_>>(),
        "next": page.next,
    })))
}
