//! The legacy HTTP+SSE transport of MCP 2024-11-05 (DESIGN.md §5o), for servers that speak only it:
//! a GET opens an event stream whose first `endpoint` event names where to POST; every message from
//! the server (answers included) comes on that stream.
//!
//! Owns: opening the stream (the configured headers, and a saved sign-in's token), the endpoint (same
//! origin as the stream only: a server cannot send codeloop's headers elsewhere), the bounded read of
//! events, and the POSTs. Must not: retry, or decide when to use it (the connector falls back to it).

use std::collections::HashMap;
use std::time::Duration;

use eventsource_stream::Eventsource as _;
use futures::StreamExt as _;
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The largest event the stream takes (a server's answer with many tools fits well within).
const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;
/// Messages read ahead of the client.
const INBOX: usize = 256;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct LegacySseError(String);

pub(crate) struct LegacySse {
    client: reqwest_mcp::Client,
    endpoint: reqwest_mcp::Url,
    headers: reqwest_mcp::header::HeaderMap,
    inbox: mpsc::Receiver<RxJsonRpcMessage<RoleClient>>,
    stop: CancellationToken,
}

/// Why the stream could not be opened.
pub(crate) enum OpenFailure {
    /// 401: the server wants a sign-in.
    Unauthorized,
    Failed(String),
}

impl LegacySse {
    /// Opens the stream at `url` and waits (up to `wait`) for the endpoint.
    pub async fn open(
        client: reqwest_mcp::Client,
        url: &str,
        headers: HashMap<http::HeaderName, http::HeaderValue>,
        wait: Duration,
    ) -> Result<Self, OpenFailure> {
        let failed = |why: String| OpenFailure::Failed(why);
        let base = reqwest_mcp::Url::parse(url).map_err(|e| failed(format!("`{url}` is not a URL: {e}")))?;
        let headers: reqwest_mcp::header::HeaderMap = headers.into_iter().collect();
        let response = client
            .get(base.clone())
            .headers(headers.clone())
            .header(reqwest_mcp::header::ACCEPT, "text/event-stream")
            .send()
            .await
            .map_err(|e| failed(format!("cannot open its event stream: {e}")))?;
        let status = response.status();
        if status == reqwest_mcp::StatusCode::UNAUTHORIZED {
            return Err(OpenFailure::Unauthorized);
        }
        let is_stream = response
            .headers()
            .get(reqwest_mcp::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        if !status.is_success() || !is_stream {
            return Err(failed(format!(
                "its GET answered HTTP {} {}, not an event stream (neither Streamable HTTP nor the legacy HTTP+SSE \
                 transport)",
                status.as_u16(),
                status.canonical_reason().unwrap_or("")
            )));
        }
        let mut events = response.bytes_stream().eventsource();
        let endpoint = tokio::time::timeout(wait, async {
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) if event.event == "endpoint" => return Ok(event.data),
                    Ok(_) => continue,
                    Err(e) => return Err(format!("its event stream broke before naming an endpoint: {e}")),
                }
            }
            Err("its event stream ended before naming an endpoint".to_owned())
        })
        .await
        .map_err(|_| failed(format!("its event stream named no endpoint within {} ms", wait.as_millis())))?
        .map_err(failed)?;
        let endpoint = base
            .join(endpoint.trim())
            .map_err(|e| failed(format!("its endpoint `{}` is not a URL: {e}", endpoint.trim())))?;
        if endpoint.origin() != base.origin() {
            return Err(failed(format!(
                "its endpoint `{endpoint}` is on another origin than `{base}`: refused (codeloop's headers go \
                 to the server's own origin only)"
            )));
        }
        let (tx, inbox) = mpsc::channel(INBOX);
        let stop = CancellationToken::new();
        let reading = stop.clone();
        tokio::spawn(async move {
            loop {
                let event = tokio::select! {
                    event = events.next() => event,
                    _ = reading.cancelled() => return,
                };
                let event = match event {
                    Some(Ok(event)) => event,
                    Some(Err(e)) => {
                        tracing::debug!("legacy MCP event stream broke: {e}");
                        return;
                    }
                    None => return,
                };
                if event.event != "message" && !event.event.is_empty() {
                    continue;
                }
                if event.data.len() > MAX_EVENT_BYTES {
                    tracing::warn!("a legacy MCP server sent a {} byte event: dropped", event.data.len());
                    continue;
                }
                match serde_json::from_str::<RxJsonRpcMessage<RoleClient>>(&event.data) {
                    Ok(message) => {
                        if tx.send(message).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => tracing::debug!("a legacy MCP server sent what is not JSON-RPC: {e}"),
                }
            }
        });
        Ok(Self { client, endpoint, headers, inbox, stop })
    }
}

impl Transport<RoleClient> for LegacySse {
    type Error = LegacySseError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let request = self.client.post(self.endpoint.clone()).headers(self.headers.clone()).json(&item);
        async move {
            let response =
                request.send().await.map_err(|e| LegacySseError(format!("cannot POST to it: {e}")))?;
            let status = response.status();
            if status.is_success() {
                Ok(())
            } else {
                Err(LegacySseError(format!(
                    "its endpoint answered HTTP {} {}",
                    status.as_u16(),
                    status.canonical_reason().unwrap_or("")
                )))
            }
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.inbox.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.stop.cancel();
        Ok(())
    }
}

impl Drop for LegacySse {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
