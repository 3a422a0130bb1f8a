//! codeloop's HTTP API and SSE event stream (DESIGN.md §2, §4 "Event stream", §5): sessions, messages,
//! prompts (blocking and async), abort, compaction, permission replies, config and models, the
//! OpenAPI document at `/doc`, `GET /event`, and the web page at `/` (a client of all of these).
//!
//! Owns: HTTP — routing, validation, JSON errors, auth, CORS, body limits, SSE delivery.
//! Must not: hold business rules; every decision (one run per session, steer/queue, permissions,
//! compaction) is the engine's. Handlers translate requests into engine calls and results into JSON.

pub mod api;
mod conn;
mod doc;
mod error;
mod events;
mod frames;

mod routes;
mod security;
mod web;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use codeloop_core::Engine;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use error::ApiError;
pub use security::{BindError, check_bind, check_cors, is_open_path};
pub use web::{CONTENT_SECURITY_POLICY, page_size};

/// Default request body limit.
pub const DEFAULT_BODY_LIMIT: usize = 10 * 1024 * 1024;
/// Default interval of `server.heartbeat` events.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(10);
/// Default time a client has to send a complete request head, on a new or idle kept-alive connection;
/// then the connection is closed (see `conn`).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default window in which a busy event stream gathers events into one write.
pub const DEFAULT_COALESCE: Duration = Duration::from_millis(10);

#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Required as `Authorization: Bearer <token>` on every route when set.
    pub token: Option<String>,
    /// Origins allowed by CORS (`*` for any); empty turns CORS off. Needs a token ([`check_cors`]).
    pub cors_origins: Vec<String>,
    /// Largest accepted request body, in bytes (larger → 413).
    pub body_limit: usize,
    pub heartbeat: Duration,
    /// After writing to an event stream, events arriving within this window are sent together (one
    /// wake-up and one write per window instead of per event). Adds at most this much latency.
    pub coalesce: Duration,
    /// Time a client has to send a request head before its connection is closed.
    pub header_timeout: Duration,
    /// Where new sessions live when `POST /session` names no directory; relative directories resolve
    /// against it.
    pub directory: PathBuf,
}

impl ServerOptions {
    pub fn new(directory: impl Into<PathBuf>) -> Self {
        Self {
            token: None,
            cors_origins: Vec::new(),
            body_limit: DEFAULT_BODY_LIMIT,
            heartbeat: DEFAULT_HEARTBEAT,
            coalesce: DEFAULT_COALESCE,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            directory: directory.into(),
        }
    }

    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into()).filter(|t: &String| !t.is_empty());
        self
    }
}

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    engine: Engine,
    options: Arc<ServerOptions>,
    /// Cancelled when the server shuts down: event streams end.
    shutdown: CancellationToken,
    frames: Arc<frames::FrameCache>,
    metrics: codeloop_telemetry::Metrics,
}

impl AppState {
    /// Needs a tokio runtime: the metrics start watching the engine's events.
    pub fn new(engine: Engine, options: ServerOptions) -> Self {
        let shutdown = CancellationToken::new();
        let tools = engine.clone();
        let known: codeloop_telemetry::KnownTool = Arc::new(move |name| tools.is_known_tool(name));
        let metrics = codeloop_telemetry::Metrics::watch(engine.bus(), shutdown.clone(), known);
        Self {
            engine,
            options: Arc::new(options),
            shutdown,
            frames: Arc::new(frames::FrameCache::default()),
            metrics,
        }
    }

    /// Cancel to end every open event stream (done by [`serve`] on shutdown).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }
}

/// The application: every route, the web page, the auth guard, the body limit and (when configured) CORS.
pub fn router(state: AppState) -> Router {
    let (routes, _) = routes::api().finish();
    let mut app = routes
        .merge(web::routes())
        .fallback(route_not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(state.options.body_limit))
        .layer(axum::middleware::from_fn_with_state(state.clone(), security::guard))
        .with_state(state.clone());
    if let Err(e) = check_cors(&state.options.cors_origins, state.options.token.as_deref()) {
        // `serve` refuses this; a caller building the router itself gets no CORS rather than an open API.
        tracing::warn!("CORS stays off: {e}");
        return app;
    }
    match security::cors(&state.options.cors_origins) {
        Ok(Some(cors)) => app = app.layer(cors),
        Ok(None) => {}
        Err(e) => tracing::warn!("CORS stays off: {e}"),
    }
    app
}

/// `(method, path)` of every registered route, as documented at `/doc`.
pub fn routes() -> Vec<(&'static str, &'static str)> {
    routes::api().finish().1.iter().map(|op| (op.verb.as_str(), op.path)).collect()
}

async fn route_not_found() -> impl IntoResponse {
    ApiError::new(StatusCode::NOT_FOUND, "route_not_found", "no such route; see GET /doc for the API")
}

async fn method_not_allowed() -> impl IntoResponse {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not accept that method; see GET /doc",
    )
}

/// Serves until `shutdown` resolves, then aborts active runs (waiting for their cleanup), ends the event
/// streams and lets open requests finish. Refuses a non-loopback listener, or CORS, without a token.
pub async fn serve(
    engine: Engine,
    listener: TcpListener,
    options: ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    check_bind(addr, options.token.as_deref())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::PermissionDenied, e.to_string()))?;
    check_cors(&options.cors_origins, options.token.as_deref())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::PermissionDenied, e.to_string()))?;
    security::cors(&options.cors_origins)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    let header_timeout = options.header_timeout;
    let state = AppState::new(engine.clone(), options);
    let streams = state.shutdown_token();
    let app = router(state);
    let signal = async move {
        shutdown.await;
        engine.abort_all().await;
        engine.end_jobs().await;
        if let Err(e) = engine.flush().await {
            tracing::warn!("could not persist everything at shutdown: {e}");
        }
        streams.cancel();
    };
    conn::serve(listener, app, header_timeout, signal).await
}
