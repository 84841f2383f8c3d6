//! The HTTP boundary's one error type: a status, a stable code and a message a client can act
//! on. Internals are hidden; their full cause chain is logged once, here.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::contract::{ErrorBody, ErrorDetail};
use crate::ledger::{LedgerError, Refusal};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    InvalidJson(String),
    #[error("send the body as application/json")]
    UnsupportedMediaType,
    #[error("the request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    #[error("{0}")]
    Unauthorized(&'static str),
    #[error("{0}")]
    Forbidden(&'static str),
    #[error("{0}")]
    NotFound(String),
    #[error("this method is not allowed here")]
    MethodNotAllowed,
    #[error("the idempotency key was already used for a different request")]
    IdempotencyConflict { existing: String },
    #[error("{message}")]
    Refused { code: &'static str, message: String },
    #[error("the ledger database is unavailable; retry later")]
    Unavailable,
    #[error("internal error")]
    Internal,
}

impl ApiError {
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::InvalidJson(_) => (StatusCode::BAD_REQUEST, "invalid_json"),
            ApiError::UnsupportedMediaType => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            ApiError::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::IdempotencyConflict { .. } => (StatusCode::CONFLICT, "idempotency_conflict"),
            ApiError::Refused { code, .. } => (StatusCode::CONFLICT, code),
            ApiError::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl ApiError {
    /// The status and the error as the body carries it.
    pub(super) fn detail(&self) -> (StatusCode, ErrorDetail) {
        let (status, code) = self.status_and_code();
        let detail = ErrorDetail {
            code: code.to_owned(),
            message: self.to_string(),
            job_id: match self {
                ApiError::IdempotencyConflict { existing } => Some(existing.clone()),
                _ => None,
            },
        };
        (status, detail)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, error) = self.detail();
        let body = ErrorBody { error };
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                "Bearer".parse().expect("static header"),
            );
        }
        response
    }
}

fn log_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

impl From<LedgerError> for ApiError {
    fn from(error: LedgerError) -> Self {
        match error {
            LedgerError::Refused { refusal, .. } => match refusal {
                Refusal::NotFound => ApiError::NotFound("no such job".into()),
                other => ApiError::Refused {
                    code: other.code(),
                    message: other.to_string(),
                },
            },
            LedgerError::IdempotencyConflict { existing } => {
                ApiError::IdempotencyConflict { existing }
            }
            LedgerError::Invalid(message) => ApiError::BadRequest(message),
            unavailable if unavailable.is_unavailable() => {
                tracing::warn!(error = %log_chain(&unavailable), "ledger unavailable");
                ApiError::Unavailable
            }
            other => {
                tracing::error!(error = %log_chain(&other), "ledger error");
                ApiError::Internal
            }
        }
    }
}

/// A message (which the ledger words in lower case, to be put in a sentence) as a sentence's
/// start.
pub(super) fn capitalized(message: &str) -> String {
    let mut chars = message.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}
