//! What a server sends, and our side of its stdio: the writer task (our messages in order), the reader
//! task (responses to their waiters, the server's own requests answered, diagnostics and progress
//! kept) and the last lines of its stderr.
//!
//! Must not: start or stop the server (the server module does).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use codeloop_types::LockExt as _;
use lsp_types::PublishDiagnosticsParams;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;
use tokio::sync::mpsc;

use crate::rpc::{self, Incoming};
use crate::server::{Published, Shared};

/// Lines of a server's stderr kept for its error messages.
const STDERR_LINES: usize = 20;

pub(crate) async fn write_all(
    mut stdin: tokio::process::ChildStdin,
    mut outgoing: mpsc::UnboundedReceiver<Vec<u8>>,
    shared: Arc<Shared>,
) {
    while let Some(bytes) = outgoing.recv().await {
        if let Err(e) = async {
            stdin.write_all(&bytes).await?;
            stdin.flush().await
        }
        .await
        {
            shared.end(format!("writing to it failed: {e}"));
            return;
        }
    }
}

pub(crate) async fn read_all(
    stdout: tokio::process::ChildStdout,
    out: mpsc::UnboundedSender<Vec<u8>>,
    shared: Arc<Shared>,
) {
    let mut reader = tokio::io::BufReader::new(stdout);
    let reason = loop {
        match rpc::read_frame(&mut reader).await {
            Ok(Some(body)) => match serde_json::from_slice::<Value>(&body) {
                Ok(message) => handle(rpc::classify(message), &out, &shared),
                Err(e) => {
                    shared.malformed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!("a language server sent a message that is not JSON: {e}");
                }
            },
            Ok(None) => break "it exited".to_owned(),
            Err(e) => break format!("it sent malformed JSON-RPC: {e}"),
        }
    };
    shared.end(reason);
}

fn handle(incoming: Incoming, out: &mpsc::UnboundedSender<Vec<u8>>, shared: &Shared) {
    match incoming {
        Incoming::Response { id, result } => {
            if let Some(waiter) = shared.pending.locked().remove(&id) {
                let _ = waiter.send(result);
            }
        }
        Incoming::Request { id, method, params } => {
            let answer = match answer(&method, &params, shared) {
                Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                Err(message) => {
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": rpc::METHOD_NOT_FOUND, "message": message}})
                }
            };
            let _ = out.send(rpc::frame(&answer));
        }
        Incoming::Notification { method, params } => notified(&method, params, shared),
        Incoming::Stray => {
            shared.malformed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What we answer the server's own requests with.
fn answer(method: &str, params: &Value, shared: &Shared) -> Result<Value, String> {
    match method {
        "workspace/configuration" => {
            let items = params.get("items").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
            Ok(Value::Array(
                items
                    .iter()
                    .map(|item| {
                        let section = item.get("section").and_then(Value::as_str).unwrap_or_default();
                        section_of(shared.settings.as_ref(), section)
                    })
                    .collect(),
            ))
        }
        "workspace/workspaceFolders" => {
            let uri = crate::uri::from_path(&shared.root).map(|u| u.as_str().to_owned());
            Ok(
                json!([{"uri": uri, "name": shared.root.file_name().map(|n| n.to_string_lossy().into_owned())}]),
            )
        }
        "window/workDoneProgress/create" | "client/registerCapability" | "client/unregisterCapability" => {
            Ok(Value::Null)
        }
        // Edits go through codeloop's own tools and permissions, never straight from a server.
        "workspace/applyEdit" => {
            Ok(json!({"applied": false, "failureReason": "codeloop applies edits itself"}))
        }
        "window/showMessageRequest" => Ok(Value::Null),
        _ => Err(format!("codeloop does not handle {method}")),
    }
}

/// `a.b` of the settings (`null` when absent); the empty section is all of them.
fn section_of(settings: Option<&Value>, section: &str) -> Value {
    let Some(mut value) = settings else { return Value::Null };
    for key in section.split('.').filter(|k| !k.is_empty()) {
        match value.get(key) {
            Some(inner) => value = inner,
            None => return Value::Null,
        }
    }
    value.clone()
}

fn notified(method: &str, params: Value, shared: &Shared) {
    match method {
        "textDocument/publishDiagnostics" => {
            let Ok(published) = serde_json::from_value::<PublishDiagnosticsParams>(params) else {
                shared.malformed.fetch_add(1, Ordering::Relaxed);
                return;
            };
            let Some(path) = crate::uri::to_path(&published.uri) else { return };
            shared.publishes.send_modify(|n| {
                *n += 1;
                shared.diagnostics.locked().insert(path, Published { items: published.diagnostics, seq: *n });
            });
        }
        "$/progress" => {
            let token = match params.get("token") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => return,
            };
            match params.pointer("/value/kind").and_then(Value::as_str) {
                Some("begin") => {
                    shared.working.locked().insert(token);
                }
                Some("end") => {
                    shared.working.locked().remove(&token);
                }
                _ => {}
            }
        }
        "window/logMessage" | "window/showMessage" => {
            let text = params.get("message").and_then(Value::as_str).unwrap_or_default();
            tracing::debug!("language server: {}", codeloop_types::escape_controls(text));
        }
        _ => {}
    }
}

pub(crate) async fn keep_stderr(stderr: tokio::process::ChildStderr, shared: Arc<Shared>) {
    use tokio::io::AsyncBufReadExt as _;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim().is_empty() {
            continue;
        }
        let mut kept = shared.stderr.locked();
        if kept.len() == STDERR_LINES {
            kept.pop_front();
        }
        kept.push_back(line);
    }
}
