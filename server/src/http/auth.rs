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
        let header = parts
            .headers
            .get(AUTHORIZATION)
            .ok_or(ApiError::Unauthorized(
                "send an API token as `Authorization: Bearer <token>`",
            ))?;
        let token = header
            .to_str()
            .ok()
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or(ApiError::Unauthorized(
                "the Authorization header must be `Bearer <token>`",
            ))?;
        match state.ledger.tenant_for_token(token).await? {
            Some(tenant) => Ok(Tenant(tenant)),
            None if state.ledger.operator_for_token(token).await?.is_some() => {
                Err(ApiError::Forbidden(
                    "an operator token reads one job and its events and acts on jobs; \
                     submitting, listing jobs and reading results take a tenant's token \
                     (fenceline token add <tenant>)",
                ))
            }
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

impl FromRequestParts<AppState> for JobReader {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or(ApiError::Unauthorized(
                "send an API token as `Authorization: Bearer <token>`",
            ))?;
        if let Some(tenant) = state.ledger.tenant_for_token(token).await? {
            return Ok(JobReader::Tenant(tenant));
        }
        match state.ledger.operator_for_token(token).await? {
            Some(operator) => Ok(JobReader::Operator(operator)),
            None => Err(ApiError::Unauthorized("the API token is not valid")),
        }
    }
}

/// The operator an operator token (`flo_…`) acts as: their role and tenants apply. Tenant
/// tokens cannot act on jobs.
#[derive(Debug, Clone)]
pub(super) struct ActingOperator(pub(super) crate::operators::Operator);

impl FromRequestParts<AppState> for ActingOperator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or(ApiError::Unauthorized(
                "send an operator token as `Authorization: Bearer <token>`",
            ))?;
        if let Some(operator) = state.ledger.operator_for_token(token).await? {
            return Ok(ActingOperator(operator));
        }
        if state.ledger.tenant_for_token(token).await?.is_some() {
            return Err(ApiError::Forbidden(
                "a tenant's token submits and reads jobs; acting on them needs an operator \
                 token (fenceline operator token <name>)",
            ));
        }
        Err(ApiError::Unauthorized("the operator token is not valid"))
    }
}
