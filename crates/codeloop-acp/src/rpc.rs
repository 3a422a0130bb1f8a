//! A thin JSON-RPC 2.0 transport over newline-delimited JSON (ACP's stdio framing).
//!
//! Owns: classifying each incoming line (request, notification, response, or something invalid), ids of
//! the requests the agent sends and the routing of their answers, and the single writer that keeps
//! every outgoing message on its own line, in the order it was sent.
//! Must not: know any ACP method; [`crate::agent`] gives them meaning.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::{Value, json};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use crate::protocol::{code, method};
use codeloop_types::LockExt;

/// Messages waiting for the writer; a client that stops reading makes senders wait, never memory grow.
const OUTGOING_CAPACITY: usize = 1_024;

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message} (code {code})")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: None }
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(code::INVALID_PARAMS, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(code::INTERNAL_ERROR, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(code::RESOURCE_NOT_FOUND, message)
    }

    fn to_value(&self) -> Value {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }
}

/// One line from the client, classified.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    Response {
        id: Value,
        result: Result<Value, RpcError>,
    },
    /// Not a JSON-RPC message: answer with this error (`id` is null when none could be read).
    Invalid {
        id: Value,
        error: RpcError,
    },
}

/// Classifies one line of input.
pub fn parse(line: &str) -> Incoming {
    let value: Value = match serde_json::from_str(line) {
        Ok(value) => value,
        Err(e) => {
            return Incoming::Invalid {
                id: Value::Null,
                error: RpcError::new(code::PARSE_ERROR, format!("Parse error: {e}")),
            };
        }
    };
    let Value::Object(mut object) = value else {
        let what = if value.is_array() { "batches are not supported" } else { "expected an object" };
        return Incoming::Invalid {
            id: Value::Null,
            error: RpcError::new(code::INVALID_REQUEST, format!("Invalid Request: {what}")),
        };
    };
    let id = object.remove("id");
    let invalid = |id: Option<Value>, why: &str| Incoming::Invalid {
        id: id.unwrap_or(Value::Null),
        error: RpcError::new(code::INVALID_REQUEST, format!("Invalid Request: {why}")),
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(id, "\"jsonrpc\" must be \"2.0\"");
    }
    if let Some(id) = &id
        && !(id.is_string() || id.is_number() || id.is_null())
    {
        return invalid(None, "\"id\" must be a string or a number");
    }
    match object.remove("method") {
        Some(Value::String(method)) => {
            let params = object.remove("params").unwrap_or(Value::Null);
            if !(params.is_object() || params.is_array() || params.is_null()) {
                return invalid(id, "\"params\" must be an object or an array");
            }
            match id {
                Some(id) => Incoming::Request { id, method, params },
                None => Incoming::Notification { method, params },
            }
        }
        Some(_) => invalid(id, "\"method\" must be a string"),
        None => match (id, object.remove("result"), object.remove("error")) {
            (Some(id), Some(result), None) => Incoming::Response { id, result: Ok(result) },
            (Some(id), None, Some(error)) => {
                let code = error.get("code").and_then(Value::as_i64).unwrap_or(code::INTERNAL_ERROR);
                let message = error.get("message").and_then(Value::as_str).unwrap_or("").to_owned();
                let data = error.get("data").cloned();
                Incoming::Response { id, result: Err(RpcError { code, message, data }) }
            }
            (id, _, _) => invalid(id, "expected \"method\", or exactly one of \"result\" and \"error\""),
        },
    }
}

enum Outgoing {
    Line(String),
    Close,
}

type Waiters = HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>;

/// The agent's side of the connection: send notifications, requests and responses.
#[derive(Clone)]
pub struct Peer {
    out: mpsc::Sender<Outgoing>,
    waiting: Arc<Mutex<Waiters>>,
    next_id: Arc<AtomicU64>,
}

/// An answer to a request the agent sent, not yet arrived.
pub struct PendingRequest {
    pub id: u64,
    rx: oneshot::Receiver<Result<Value, RpcError>>,
}

impl PendingRequest {
    /// The client's answer; an error when the connection closed first.
    pub async fn answer(self) -> Result<Value, RpcError> {
        self.rx.await.unwrap_or_else(|_| Err(RpcError::internal("the connection closed before the answer")))
    }
}

impl Peer {
    /// A peer writing to `writer`, and the task that does the writing (ends after [`Peer::close`]).
    pub fn new<W>(writer: W) -> (Peer, tokio::task::JoinHandle<()>)
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (out, rx) = mpsc::channel(OUTGOING_CAPACITY);
        let task = tokio::spawn(write_lines(writer, rx));
        let peer = Peer { out, waiting: Default::default(), next_id: Arc::new(AtomicU64::new(0)) };
        (peer, task)
    }

    async fn send(&self, message: Value) {
        match serde_json::to_string(&message) {
            Ok(line) => {
                if self.out.send(Outgoing::Line(line)).await.is_err() {
                    tracing::debug!("the client connection is closed; message dropped");
                }
            }
            Err(e) => tracing::error!("cannot serialise an outgoing message: {e}"),
        }
    }

    pub async fn notify(&self, method: &str, params: impl Serialize) {
        let params = serde_json::to_value(params).unwrap_or(Value::Null);
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params})).await;
    }

    pub async fn respond(&self, id: Value, result: Result<Value, RpcError>) {
        let message = match result {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error.to_value()}),
        };
        self.send(message).await;
    }

    /// Sends a request; the answer arrives through the returned handle.
    pub async fn request(&self, method: &str, params: impl Serialize) -> PendingRequest {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiting.locked().insert(id, tx);
        let params = serde_json::to_value(params).unwrap_or(Value::Null);
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        PendingRequest { id, rx }
    }

    /// The answer to request `id` is no longer needed: a late one is ignored, and the client is told
    /// (`$/cancel_request`) so it can close whatever it shows for it.
    pub async fn forget(&self, id: u64) {
        let was_waiting = self.waiting.locked().remove(&id).is_some();
        if was_waiting {
            self.notify(method::CANCEL_REQUEST, json!({"requestId": id})).await;
        }
    }

    /// Routes a response to the request that waits for it. Unknown or repeated ids are ignored: each
    /// answer is delivered at most once.
    pub fn resolve(&self, id: &Value, result: Result<Value, RpcError>) {
        let waiter = id.as_u64().and_then(|id| self.waiting.locked().remove(&id));
        match waiter {
            Some(waiter) => {
                let _ = waiter.send(result);
            }
            None => tracing::debug!("ignoring a response to {id}: no request of ours waits for it"),
        }
    }

    /// Flushes what was sent so far and stops the writer.
    pub async fn close(&self) {
        let _ = self.out.send(Outgoing::Close).await;
    }
}

async fn write_lines<W: AsyncWrite + Unpin>(mut writer: W, mut rx: mpsc::Receiver<Outgoing>) {
    while let Some(message) = rx.recv().await {
        let Outgoing::Line(mut line) = message else { break };
        line.push('\n');
        if let Err(e) = writer.write_all(line.as_bytes()).await {
            tracing::warn!("cannot write to the client: {e}");
            break;
        }
        // Flush when nothing else is queued: a burst goes out in one write, a lone message at once.
        if rx.is_empty()
            && let Err(e) = writer.flush().await
        {
            tracing::warn!("cannot write to the client: {e}");
            break;
        }
    }
    let _ = writer.flush().await;
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn lines_are_classified() {
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}"#),
            Incoming::Request {
                id: json!(1),
                method: "initialize".into(),
                params: json!({"protocolVersion": 1})
            }
        );
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}"#),
            Incoming::Notification { method: "session/cancel".into(), params: json!({"sessionId": "s"}) }
        );
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","id":3,"result":{"outcome":{"outcome":"cancelled"}}}"#),
            Incoming::Response { id: json!(3), result: Ok(json!({"outcome": {"outcome": "cancelled"}})) }
        );
        assert!(matches!(
            parse(r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32603,"message":"boom"}}"#),
            Incoming::Response { result: Err(RpcError { code: -32603, .. }), .. }
        ));
    }

    #[test]
    fn malformed_lines_get_the_right_error_codes() {
        let code_of = |line: &str| match parse(line) {
            Incoming::Invalid { error, id } => (error.code, id),
            other => panic!("expected invalid, got {other:?}"),
        };
        assert_eq!(code_of("{not json"), (code::PARSE_ERROR, Value::Null));
        assert_eq!(code_of("[1,2]"), (code::INVALID_REQUEST, Value::Null));
        assert_eq!(code_of(r#"{"id":7,"method":"x"}"#), (code::INVALID_REQUEST, json!(7)));
        assert_eq!(code_of(r#"{"jsonrpc":"2.0","id":8,"method":5}"#), (code::INVALID_REQUEST, json!(8)));
        assert_eq!(code_of(r#"{"jsonrpc":"2.0","id":9}"#), (code::INVALID_REQUEST, json!(9)));
        assert_eq!(
            code_of(r#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#),
            (code::INVALID_REQUEST, Value::Null)
        );
    }

    #[tokio::test]
    async fn answers_reach_their_request_once_and_lines_stay_whole() {
        let (client, agent) = tokio::io::duplex(1 << 16);
        let (peer, writer) = Peer::new(agent);
        let pending = peer.request("session/request_permission", json!({"x": 1})).await;
        peer.resolve(&json!(pending.id), Ok(json!("first")));
        peer.resolve(&json!(pending.id), Ok(json!("second")));
        assert_eq!(pending.answer().await, Ok(json!("first")));
        peer.notify("session/update", json!({"y": "a\nb"})).await;
        peer.close().await;
        writer.await.unwrap();
        drop(peer);
        let mut text = String::new();
        let mut client = client;
        tokio::io::AsyncReadExt::read_to_string(&mut client, &mut text).await.unwrap();
        let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["method"], "session/request_permission");
        assert_eq!(lines[1]["params"]["y"], "a\nb");
    }
}
