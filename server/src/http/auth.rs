//! Bearer-token authentication for the API: the token names the tenant.

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
            None => Err(ApiError::Unauthorized("the API token is not valid")),
        }
    }
}
