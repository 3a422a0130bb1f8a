//! JSON errors (`{"error": {"code": "not_found", "message": "session ses_… not found"}}`) and the
//! extractors that turn axum's rejections into them, so every failure a client sees has the same shape.
//!
//! Owns: the mapping from engine, run and permission errors to HTTP statuses.
//! Must not: decide anything about sessions; it only translates errors the engine reports.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use codeloop_core::permission::ReplyError;
use codeloop_core::{EngineError, RunError};
use serde::de::DeserializeOwned;

use crate::api::{ErrorBody, ErrorDetail};

/// An error answered as JSON with a status and a stable code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into() }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong token: send `Authorization: Bearer <token>` (the token given to `codeloop serve`)",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!("{} {}: {}", self.status, self.code, self.message);
        }
        let body = ErrorBody { error: ErrorDetail { code: self.code.to_owned(), message: self.message } };
        (self.status, axum::Json(body)).into_response()
    }
}

impl From<RunError> for ApiError {
    fn from(error: RunError) -> Self {
        let message = error.to_string();
        match error {
            RunError::SessionNotFound(_) => Self::not_found(message),
            RunError::Busy(_) => Self::conflict("busy", message),
            RunError::Input(_) | RunError::UnknownAgent(_) => Self::invalid(message),
            RunError::Model(_) => Self::new(StatusCode::BAD_REQUEST, "invalid_model", message),
            RunError::Store(_) | RunError::Lost => Self::internal(message),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        let message = error.to_string();
        match error {
            EngineError::SessionNotFound(_) | EngineError::JobNotFound { .. } => Self::not_found(message),
            EngineError::JobElsewhere { .. } => Self::conflict("elsewhere", message),
            EngineError::Invalid(_) | EngineError::Agent(_) | EngineError::SnapshotsOff => {
                Self::invalid(message)
            }
            EngineError::Model(_) => Self::new(StatusCode::BAD_REQUEST, "invalid_model", message),
            EngineError::UnknownCommand { .. } => {
                Self::new(StatusCode::BAD_REQUEST, "unknown_command", message)
            }
            EngineError::Busy { .. } => Self::conflict("busy", message),
            EngineError::Run(run) => run.into(),
            EngineError::Store(_) | EngineError::Snapshot(_) => Self::internal(message),
            EngineError::Reply(reply) => reply.into(),
            EngineError::Question(_) => Self::conflict("not_pending", message),
            EngineError::PromptRefused(_) => Self::new(StatusCode::FORBIDDEN, "prompt_refused", message),
        }
    }
}

impl From<codeloop_store::StoreError> for ApiError {
    fn from(error: codeloop_store::StoreError) -> Self {
        Self::internal(error.to_string())
    }
}

impl From<ReplyError> for ApiError {
    fn from(error: ReplyError) -> Self {
        match error {
            ReplyError::AlreadyAnswered(_) => Self::conflict("not_pending", error.to_string()),
            ReplyError::Unknown(_) => Self::not_found(error.to_string()),
        }
    }
}

fn rejection(status: StatusCode, what: &str, text: String) -> ApiError {
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::new(status, "payload_too_large", format!("the request body is too large: {text}"))
        }
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(
            status,
            "unsupported_media_type",
            format!("{text}: send the body as JSON with `Content-Type: application/json`"),
        ),
        s if s.is_server_error() => ApiError::internal(text),
        _ => ApiError::invalid(format!("invalid {what}: {text}")),
    }
}

/// `axum::Json` whose rejections are JSON errors (400 with what is wrong, 413, 415).
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(ApiJson(value)),
            Err(e) => Err(rejection(e.status(), "body", e.body_text())),
        }
    }
}

/// `axum::extract::Query` with JSON rejections.
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| ApiQuery(q.0))
            .map_err(|e: QueryRejection| rejection(e.status(), "query", e.body_text()))
    }
}

/// `axum::extract::Path` with JSON rejections.
pub struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| ApiPath(p.0))
            .map_err(|e: PathRejection| rejection(e.status(), "path", e.body_text()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_errors_map_to_statuses() {
        assert_eq!(ApiError::from(RunError::SessionNotFound("ses_x".into())).status, StatusCode::NOT_FOUND);
        assert_eq!(ApiError::from(RunError::Busy("busy".into())).status, StatusCode::CONFLICT);
        assert_eq!(ApiError::from(RunError::Input("empty".into())).status, StatusCode::BAD_REQUEST);
        assert_eq!(
            ApiError::from(RunError::from(codeloop_store::StoreError::Interrupted("disk".into()))).status,
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
