//! JSON errors (`{"error": {"code": "not_found", "message": "session ses_… not found"}}`) and the
//! extractors that turn axum's rejections into them, so every failure a client sees has the same shape.
//!
//! Owns: the mapping from engine, run and permission errors to HTTP statuses (one status per
//! [`ErrorKind`]).
//! Must not: decide anything about sessions; it only translates errors the engine reports.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use codeloop_core::permission::ReplyError;
use codeloop_core::{EngineError, ErrorKind, RunError};
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

/// The status every error of a kind gets: the one place HTTP statuses are chosen (an internal fault is
/// never the caller's 400).
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Conflict | ErrorKind::Busy => StatusCode::CONFLICT,
        ErrorKind::Refused => StatusCode::FORBIDDEN,
        ErrorKind::Config => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorKind::Upstream => StatusCode::BAD_GATEWAY,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The stable code of a kind, where the error has none more precise.
fn code_of(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Invalid => "invalid_request",
        ErrorKind::NotFound => "not_found",
        ErrorKind::Conflict => "conflict",
        ErrorKind::Busy => "busy",
        ErrorKind::Refused => "refused",
        ErrorKind::Config => "config",
        ErrorKind::Upstream => "upstream",
        ErrorKind::Internal => "internal",
    }
}

impl From<RunError> for ApiError {
    fn from(error: RunError) -> Self {
        let kind = error.kind();
        let code = match (&error, kind) {
            (RunError::Model(_), ErrorKind::Invalid) => "invalid_model",
            _ => code_of(kind),
        };
        Self::new(status_of(kind), code, error.to_string())
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        let kind = error.kind();
        let code = match (&error, kind) {
            (EngineError::Run(run), _) => return run.clone().into(),
            (EngineError::Model(_), ErrorKind::Invalid) => "invalid_model",
            (EngineError::UnknownCommand { .. }, _) => "unknown_command",
            (EngineError::JobElsewhere { .. }, _) => "elsewhere",
            (EngineError::Reply(_) | EngineError::Question(_), ErrorKind::Conflict) => "not_pending",
            (EngineError::PromptRefused(_), _) => "prompt_refused",
            _ => code_of(kind),
        };
        Self::new(status_of(kind), code, error.to_string())
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

    /// Every kind of fault through the one mapping: the caller's are 4xx, the configuration's 422, a
    /// server's 502, codeloop's own 500 — an internal fault is never a 400.
    #[test]
    fn every_error_says_whose_fault_it_is() {
        use codeloop_core::models::ModelError;
        let missing_key = ModelError::MissingKey { provider: "p".into(), env: "P_KEY".into() };
        let cases: Vec<(EngineError, u16, &str)> = vec![
            (EngineError::Invalid("empty".into()), 400, "invalid_request"),
            (EngineError::Model(ModelError::UnknownProvider("x".into())), 400, "invalid_model"),
            (
                EngineError::UnknownCommand { name: "n".into(), available: String::new() },
                400,
                "unknown_command",
            ),
            (EngineError::SnapshotsOff, 400, "invalid_request"),
            (EngineError::SessionNotFound("ses_x".into()), 404, "not_found"),
            (EngineError::Busy { session: "ses_x".into(), action: "x" }, 409, "busy"),
            (EngineError::JobElsewhere { job: "job_x".into(), owner: "o".into() }, 409, "elsewhere"),
            (EngineError::PromptRefused("no".into()), 403, "prompt_refused"),
            (EngineError::Model(missing_key), 422, "config"),
            (EngineError::Config { origin: "codeloop.toml".into(), reason: "bad".into() }, 422, "config"),
            (EngineError::Run(RunError::Config("bad".into())), 422, "config"),
            (EngineError::Upstream("the MCP server failed".into()), 502, "upstream"),
            (EngineError::Internal("lost".into()), 500, "internal"),
            (EngineError::Run(RunError::Lost), 500, "internal"),
            (EngineError::Run(RunError::Internal("x".into())), 500, "internal"),
            (EngineError::Store(codeloop_store::StoreError::Interrupted("disk".into())), 500, "internal"),
            (EngineError::Run(RunError::Input("empty".into())), 400, "invalid_request"),
        ];
        for (error, status, code) in cases {
            let kind = error.kind();
            let answered = ApiError::from(error);
            assert_eq!(
                (answered.status.as_u16(), answered.code),
                (status, code),
                "{kind:?}: {}",
                answered.message
            );
            if kind == ErrorKind::Internal {
                assert!(answered.status.is_server_error());
            }
        }
    }
}
