//! The HTTP side: [`FakeProvider`] binds a loopback port, records every request, hands each provider call
//! the next script turn (in arrival order, whatever the path) and answers in the format the path names.

use codeloop_types::LockExt;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use axum::routing::post;
use axum::serve::ListenerExt;
use bytes::Bytes;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::feed;
use crate::plan::{self, Answer, Format, RequestInfo};
use crate::script::{Script, Turn};

/// One request as the fake provider received it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    pub method: String,
    /// The request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The query string without `?` (empty when none), e.g. `api-version=2024-10-21`.
    pub query: String,
    /// Headers in arrival order, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The JSON body; a body that is not JSON is kept as a string (empty body: `Null`).
    pub body: Value,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }
}

/// What the server keeps of each request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Recording {
    /// Keep every request (tests).
    #[default]
    Full,
    /// Only count requests: long benchmark runs with large histories must not grow memory.
    CountOnly,
}

/// A scripted model provider serving all three wire formats over HTTP on a local port.
/// Dropping it (or [`FakeProvider::shutdown`]) stops the server and ends any stalled or slow stream.
pub struct FakeProvider {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
}

struct Shared {
    state: Mutex<ScriptState>,
    /// Number of requests received so far.
    arrived: watch::Sender<usize>,
    shutdown: watch::Receiver<bool>,
    recording: Recording,
    /// The key Azure requests must carry in `api-key` (`None`: any non-empty one).
    azure_key: Mutex<Option<String>>,
}

struct ScriptState {
    turns: Vec<Arc<Turn>>,
    next: usize,
    served: usize,
    repeat: bool,
    requests: Vec<RecordedRequest>,
}

impl FakeProvider {
    /// Starts on `127.0.0.1` with a free port.
    pub async fn start(script: Script) -> std::io::Result<FakeProvider> {
        Self::start_on(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), script).await
    }

    /// Starts on `addr`, recording every request.
    pub async fn start_on(addr: SocketAddr, script: Script) -> std::io::Result<FakeProvider> {
        Self::start_with(addr, script, Recording::Full).await
    }

    /// Starts on `addr` with the given recording mode.
    pub async fn start_with(
        addr: SocketAddr,
        script: Script,
        recording: Recording,
    ) -> std::io::Result<FakeProvider> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            state: Mutex::new(ScriptState {
                turns: script.turns.into_iter().map(Arc::new).collect(),
                next: 0,
                served: 0,
                repeat: script.repeat,
                requests: Vec::new(),
            }),
            arrived: watch::Sender::new(0),
            shutdown: shutdown_rx.clone(),
            recording,
            azure_key: Mutex::new(None),
        });
        let app = router(shared.clone());
        let listener = listener.tap_io(|tcp| {
            // Deltas are small writes; Nagle would batch them and distort latency measurements.
            if let Err(err) = tcp.set_nodelay(true) {
                tracing::debug!("fake provider: cannot set TCP_NODELAY: {err}");
            }
        });
        let mut stop = shutdown_rx;
        tokio::spawn(async move {
            let signal = async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            };
            if let Err(err) = axum::serve(listener, app).with_graceful_shutdown(signal).await {
                tracing::warn!("fake provider stopped with an error: {err}");
            }
        });
        Ok(FakeProvider { addr, shared, shutdown })
    }

    /// `http://127.0.0.1:PORT/v1`: append `/chat/completions`, `/responses` or `/messages`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Appends a turn to the script while the server runs.
    pub fn push(&self, turn: impl Into<Turn>) {
        self.shared.lock().turns.push(Arc::new(turn.into()));
    }

    /// Every request received, in arrival order (empty with [`Recording::CountOnly`]).
    /// Azure requests (`/openai/…`) are refused 401, as Azure does, unless `api-key` is this key.
    pub fn require_azure_key(&self, key: &str) {
        *self.shared.azure_key.locked() = Some(key.to_owned());
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// The most recent request, if any.
    pub fn last_request(&self) -> Option<RecordedRequest> {
        self.shared.lock().requests.last().cloned()
    }

    pub fn request_count(&self) -> usize {
        *self.shared.arrived.borrow()
    }

    /// Resolves once at least `n` requests have arrived (recorded before this resolves).
    pub async fn wait_for_requests(&self, n: usize) {
        let mut arrived = self.shared.arrived.subscribe();
        // The sender lives in `self.shared`, so the channel cannot close while we wait.
        let _ = arrived.wait_for(|count| *count >= n).await;
    }

    /// Stops the server; streams still running end with a connection error.
    pub fn shutdown(self) {
        drop(self);
    }
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, ScriptState> {
        self.state.locked()
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/chat/completions", post(chat))
        .route("/v1/responses", post(responses))
        .route("/responses", post(responses))
        .route("/v1/messages", post(messages))
        .route("/messages", post(messages))
        .route("/openai/deployments/{deployment}/chat/completions", post(azure))
        .route("/openai/v1/chat/completions", post(azure))
        .fallback(unknown)
        .layer(DefaultBodyLimit::disable())
        .with_state(shared)
}

type AppState = State<Arc<Shared>>;

async fn chat(State(shared): AppState, request: Request) -> Response {
    handle(&shared, Some(Format::Chat), request).await
}

async fn responses(State(shared): AppState, request: Request) -> Response {
    handle(&shared, Some(Format::Responses), request).await
}

async fn messages(State(shared): AppState, request: Request) -> Response {
    handle(&shared, Some(Format::Anthropic), request).await
}

/// Azure OpenAI: OpenAI Chat behind the `api-key` header; a deployment path needs `api-version` (Azure
/// answers 404 "Resource not found" without it).
async fn azure(State(shared): AppState, request: Request) -> Response {
    let key = request.headers().get("api-key").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let wanted = shared.azure_key.locked().clone();
    if key.is_empty() || wanted.is_some_and(|w| w != key) {
        let body = serde_json::json!({"error": {"code": "401", "message": "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}});
        return json_response(401, body.to_string());
    }
    let deployment = request.uri().path().starts_with("/openai/deployments/");
    let versioned = request
        .uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .any(|p| p.starts_with("api-version=") && p.len() > 12);
    if deployment && !versioned {
        let body = serde_json::json!({"error": {"code": "404", "message": "Resource not found"}});
        return json_response(404, body.to_string());
    }
    handle(&shared, Some(Format::Chat), request).await
}

async fn unknown(State(shared): AppState, request: Request) -> Response {
    handle(&shared, None, request).await
}

/// Records the request, takes the next turn and answers it. `format` is `None` for unknown paths,
/// which are recorded but answered 404 without using a turn.
async fn handle(shared: &Shared, format: Option<Format>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(body) => body,
        Err(err) => {
            let message = format!("fake provider: cannot read the request body: {err}");
            return json_response(400, own_error_body(&message));
        }
    };
    let (method, uri, headers) = (parts.method, parts.uri, parts.headers);
    let path = uri.path().to_owned();
    let query = uri.query().unwrap_or_default().to_owned();
    let (model, recorded) = match shared.recording {
        Recording::Full => {
            let json = parse_body(&body);
            let model = json.get("model").and_then(Value::as_str).map(str::to_owned);
            (model, Some(record(&method, &path, &query, &headers, json)))
        }
        Recording::CountOnly => (model_only(&body), None),
    };
    let model = model.unwrap_or_else(|| "fake-model".to_owned());
    let taken = {
        let mut state = shared.lock();
        state.requests.extend(recorded);
        format.map(|format| (format, state.take_turn()))
    };
    shared.arrived.send_modify(|count| *count += 1);

    let Some((format, taken)) = taken else {
        let message = format!(
            "fake provider: unknown path {path} (use /v1/chat/completions, /v1/responses or /v1/messages)"
        );
        return json_response(404, plan::error_body(Format::Chat, "not_found_error", "not_found", &message));
    };
    let (turn, number) = match taken {
        Ok(taken) => taken,
        Err(served) => {
            let message = format!("fake provider: script exhausted after {served} turns");
            return json_response(400, own_error_body(&message));
        }
    };
    let info = RequestInfo { format, turn: number, model: &model, body_len: body.len() };
    match plan::answer(&turn, &info) {
        Answer::Status { status, headers, body } => status_response(status, &headers, body),
        Answer::Stream(plan) => stream_response(feed::body(plan, shared.shutdown.clone())),
    }
}

impl ScriptState {
    /// The next turn and its 1-based number, or the number of turns served if the script is exhausted.
    fn take_turn(&mut self) -> Result<(Arc<Turn>, usize), usize> {
        if self.next >= self.turns.len() && self.repeat {
            self.next = 0;
        }
        let turn = self.turns.get(self.next).cloned().ok_or(self.served)?;
        self.next += 1;
        self.served += 1;
        Ok((turn, self.served))
    }
}

fn parse_body(body: &Bytes) -> Value {
    if body.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

/// The `model` field without building the whole JSON tree.
fn model_only(body: &Bytes) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct ModelOnly {
        model: Option<String>,
    }
    serde_json::from_slice::<ModelOnly>(body).ok()?.model
}

fn record(method: &Method, path: &str, query: &str, headers: &HeaderMap, body: Value) -> RecordedRequest {
    RecordedRequest {
        method: method.as_str().to_owned(),
        path: path.to_owned(),
        query: query.to_owned(),
        headers: headers
            .iter()
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.as_str().to_owned(), value)
            })
            .collect(),
        body,
    }
}

/// OpenAI's error shape without a code: what the fake provider says about itself.
fn own_error_body(message: &str) -> String {
    serde_json::json!({"error": {"message": message, "type": "invalid_request_error"}}).to_string()
}

fn json_response(status: u16, body: String) -> Response {
    status_response(status, &[], body)
}

/// A plain response; a bad scripted status or header becomes a 500 that says what is wrong.
fn status_response(status: u16, headers: &[(String, String)], body: String) -> Response {
    let built = (|| {
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = StatusCode::from_u16(status).map_err(|e| e.to_string())?;
        let map = response.headers_mut();
        for (name, value) in headers {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| format!("{name}: {e}"))?;
            let value = HeaderValue::from_str(value).map_err(|e| format!("{value}: {e}"))?;
            map.append(name, value);
        }
        if !map.contains_key(header::CONTENT_TYPE) {
            map.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        Ok::<_, String>(response)
    })();
    built.unwrap_or_else(|problem| {
        let mut response =
            Response::new(Body::from(format!("fake provider: invalid scripted status fault ({problem})")));
        *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        response
    })
}

fn stream_response(body: Body) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
