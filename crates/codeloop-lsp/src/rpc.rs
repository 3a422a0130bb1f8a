//! JSON-RPC 2.0 over a language server's stdio: `Content-Length` framing both ways, and the sorting of
//! what arrives into responses, requests and notifications.
//!
//! Must not: know any LSP method (the server module does).

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt as _, AsyncReadExt as _};

/// A message larger than this is refused (a flooding or broken server), and the connection with it.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Why reading a frame failed.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("the server sent a frame without Content-Length")]
    NoLength,
    #[error("the server sent a {0}-byte message (more than 64 MiB)")]
    TooLarge(usize),
    #[error("the server sent a malformed header: {0}")]
    BadHeader(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The next message body; `Ok(None)` at end of stream.
pub async fn read_frame<R: AsyncBufRead + Unpin>(reader: &mut R) -> Result<Option<Vec<u8>>, FrameError> {
    let mut length = None;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(None);
        }
        let header = line.trim_end_matches(['\r', '\n']);
        if header.is_empty() {
            if length.is_some() {
                break;
            }
            // Blank lines before a header (some servers print a stray newline): skip.
            continue;
        }
        let Some((name, value)) = header.split_once(':') else {
            return Err(FrameError::BadHeader(
                codeloop_types::escape_controls(header).chars().take(80).collect(),
            ));
        };
        if name.trim().eq_ignore_ascii_case("content-length") {
            let value = value.trim();
            length = Some(value.parse::<usize>().map_err(|_| FrameError::BadHeader(value.to_owned()))?);
        }
    }
    let length = length.ok_or(FrameError::NoLength)?;
    if length > MAX_MESSAGE_BYTES {
        return Err(FrameError::TooLarge(length));
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await?;
    Ok(Some(body))
}

/// A message with its framing header.
pub fn frame(message: &Value) -> Vec<u8> {
    let body = message.to_string();
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// What arrived.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    Response {
        id: i64,
        result: Result<Value, RpcError>,
    },
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// Valid JSON that is none of the above (or a response to an id we never sent).
    Stray,
}

/// An error answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message} (code {code})")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

/// JSON-RPC's "method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;

pub fn classify(mut message: Value) -> Incoming {
    let method = message.get("method").and_then(Value::as_str).map(str::to_owned);
    let params = message.get_mut("params").map(Value::take).unwrap_or(Value::Null);
    match (method, message.get("id").cloned()) {
        (Some(method), Some(id)) if !id.is_null() => Incoming::Request { id, method, params },
        (Some(method), _) => Incoming::Notification { method, params },
        (None, Some(id)) => {
            let Some(id) = id.as_i64() else { return Incoming::Stray };
            let result = match message.get_mut("error").map(Value::take) {
                Some(error) if !error.is_null() => Err(RpcError {
                    code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                    message: error.get("message").and_then(Value::as_str).unwrap_or("").to_owned(),
                }),
                _ => Ok(message.get_mut("result").map(Value::take).unwrap_or(Value::Null)),
            };
            Incoming::Response { id, result }
        }
        (None, None) => Incoming::Stray,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn frames_round_trip_and_bad_ones_are_refused() {
        let mut bytes = frame(&json!({"jsonrpc": "2.0", "id": 1, "result": null}));
        bytes.extend(frame(&json!({"jsonrpc": "2.0", "method": "x"})));
        let mut reader = tokio::io::BufReader::new(bytes.as_slice());
        let first = read_frame(&mut reader).await.unwrap().unwrap();
        assert_eq!(
            classify(serde_json::from_slice(&first).unwrap()),
            Incoming::Response { id: 1, result: Ok(Value::Null) }
        );
        assert!(read_frame(&mut reader).await.unwrap().is_some());
        assert!(read_frame(&mut reader).await.unwrap().is_none());

        let mut reader = tokio::io::BufReader::new(&b"hello world\r\n\r\n"[..]);
        assert!(matches!(read_frame(&mut reader).await, Err(FrameError::BadHeader(_))));
        let mut reader = tokio::io::BufReader::new(&b"Content-Length: 999999999999\r\n\r\n"[..]);
        assert!(matches!(read_frame(&mut reader).await, Err(FrameError::TooLarge(_))));
    }

    #[test]
    fn requests_notifications_and_errors_are_told_apart() {
        assert!(matches!(
            classify(json!({"id": "a", "method": "workspace/configuration", "params": {}})),
            Incoming::Request { .. }
        ));
        assert!(matches!(
            classify(json!({"method": "textDocument/publishDiagnostics"})),
            Incoming::Notification { .. }
        ));
        assert_eq!(
            classify(json!({"id": 3, "error": {"code": -32601, "message": "no"}})),
            Incoming::Response { id: 3, result: Err(RpcError { code: -32601, message: "no".into() }) }
        );
    }
}
