//! Bearer-token authentication for the API: a tenant's token names the tenant; an operator
//! token (`flo_…`) names the operator, whose role and tenants apply.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use super::{ApiError, AppState};

/// The tenant the request's token stands for. Never read from a request body.
#[derive(Debug, Clone)]
pub(super) struct Tenant(pub(super) String);

impl FromRequestParts<AppState> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        match JobReader::of(
            parts,
            state,
            "send an API token as `Authorization: Bearer <token>`",
        )
        .await?
        {
            Some(JobReader::Tenant(tenant)) => {
                tracing::Span::current().record("tenant", tenant.as_str());
                Ok(Tenant(tenant))
            }
            Some(JobReader::Operator(_)) => Err(ApiError::Forbidden(
                "an operator token reads one job and its events and acts on jobs; submitting, \
                 listing jobs and reading results take a tenant's token (fenceline token add \
                 <tenant>)",
            )),
            None => Err(ApiError::Unauthorized("the API token is not valid")),
        }
    }
}

/// Who reads one job: a tenant's token (that tenant's jobs), or an operator token of any role
/// (the jobs of the operator's tenants), so that automation can see the epoch and the timeline
/// it then acts on.
#[derive(Debug, Clone)]
pub(super) enum JobReader {
    Tenant(String),
    Operator(crate::operators::Operator),
}

impl JobReader {
    /// Whom the request's bearer token stands for; `None` for a token of nobody. `missing` is
    /// the answer when the request has no token at all.
    async fn of(
        parts: &Parts,
        state: &AppState,
        missing: &'static str,
    ) -> Result<Option<Self>, ApiError> {
        let header = parts
            .headers
            .get(AUTHORIZATION)
            .ok_or(ApiError::Unauthorized(missing))?;
        let token = header
            .to_str()
            .ok()
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or(ApiError::Unauthorized(
                "the Authorization header must be `Bearer <token>`",
            ))?;
        if let Some(tenant) = state.ledger.tenant_for_token(token).await? {
            return Ok(Some(JobReader::Tenant(tenant)));
        }
        Ok(state
            .ledger
            .operator_for_token(token)
            .await?
            .map(JobReader::Operator))
    }
}

impl FromRequestParts<AppState> for JobReader {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        JobReader::of(
            parts,
            state,
            "send an API token as `Authorization: Bearer <token>`",
        )
        .await?
        .ok_or(ApiError::Unauthorized("the API token is not valid"))
    }
}

/// The operator an operator token (`flo_…`) acts as: their role and tenants apply. Tenant
/// tokens cannot act on jobs.
#[derive(Debug, Clone)]
pub(super) struct ActingOperator(pub(super) crate::operators::Operator);

impl FromRequestParts<AppState> for ActingOperator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let missing = "send an operator token as `Authorization: Bearer <token>`";
        match JobReader::of(parts, state, missing).await? {
            Some(JobReader::Operator(operator)) => Ok(ActingOperator(operator)),
            Some(JobReader::Tenant(_)) => Err(ApiError::Forbidden(
                "a tenant's token submits and reads jobs; acting on them needs an operator \
                 token (fenceline operator token <name>)",
            )),
            None => Err(ApiError::Unauthorized("the operator token is not valid")),
        }
    }
}
