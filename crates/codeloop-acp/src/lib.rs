//! codeloop-acp: codeloop as an Agent Client Protocol (v1) agent — editors (Zed, JetBrains, Neovim…)
//! drive the engine over JSON-RPC 2.0 on stdin/stdout (DESIGN.md §5, `codeloop acp`).
//!
//! Owns: the ACP wire types codeloop speaks ([`protocol`]), a thin JSON-RPC transport ([`rpc`]), and the
//! mapping between ACP methods and engine operations: sessions, prompt turns streamed as
//! `session/update`, permission asks bridged to `session/request_permission`, cancel, modes.
//! Must not: re-implement engine rules (permissions, runs, recovery) or read the environment: the
//! program hands in a [`Host`] that opens engines the way the CLI does.
//!
//! Why not the official SDK: `agent-client-protocol` changes major versions often and brings its own
//! connection runtime; the schema crate would switch on serde_json's `preserve_order` for the whole
//! binary (changing the key order of every JSON map codeloop writes). The subset here follows the
//! schema's field names and tags; the transport is one small module.

pub mod agent;
pub mod protocol;
pub mod rpc;
mod side;
mod stream;
mod tools;
mod turn;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use codeloop_core::Engine;
use codeloop_core::mcp::McpSettings;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};

pub use agent::Agent;

/// How long a permission request may wait for the client's answer before it counts as rejected.
pub const DEFAULT_PERMISSION_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a cancelled turn waits for the engine's cleanup before it answers `cancelled` anyway.
pub const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(5);

/// What the program provides: engines opened the way its other commands open them.
pub trait Host: Send + Sync + 'static {
    /// An engine for sessions in `directory`, with config and trust resolved for that directory and
    /// `mcp` (servers the client asked for) added to the configured MCP servers.
    fn open(&self, directory: &Path, mcp: BTreeMap<String, McpSettings>) -> anyhow::Result<Opened>;
}

/// An engine and the config warnings a person should see (ignored keys of an untrusted project…).
pub struct Opened {
    pub engine: Engine,
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct AcpOptions {
    pub permission_timeout: Duration,
    pub cancel_grace: Duration,
}

impl Default for AcpOptions {
    fn default() -> Self {
        Self { permission_timeout: DEFAULT_PERMISSION_TIMEOUT, cancel_grace: DEFAULT_CANCEL_GRACE }
    }
}

/// Serves one client on `input`/`output` until the input ends; then stops running turns (with the
/// engine's cleanup) and returns.
pub async fn serve<R, W>(host: Arc<dyn Host>, options: AcpOptions, input: R, output: W) -> anyhow::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (peer, writer) = rpc::Peer::new(output);
    let agent = Arc::new(Agent::new(peer.clone(), host, options));
    let mut requests = tokio::task::JoinSet::new();
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line).await? == 0 {
            break;
        }
        while requests.try_join_next().is_some() {}
        let text = match std::str::from_utf8(&line) {
            Ok(text) => text.trim(),
            Err(_) => {
                let error =
                    rpc::RpcError::new(protocol::code::PARSE_ERROR, "Parse error: input is not UTF-8");
                peer.respond(serde_json::Value::Null, Err(error)).await;
                continue;
            }
        };
        if text.is_empty() {
            continue;
        }
        match rpc::parse(text) {
            rpc::Incoming::Request { id, method, params } => {
                let agent = agent.clone();
                let peer = peer.clone();
                requests.spawn(async move {
                    let opens = side::opens_session(&method, &params);
                    let result = side::dispatch(&agent, &id, &method, params).await;
                    let opened = opens.filter(|_| result.is_ok()).or_else(|| {
                        let id = result.as_ref().ok()?.get("sessionId")?.as_str()?;
                        side::opens_session(&method, &serde_json::json!({ "sessionId": id }))
                    });
                    peer.respond(id, result).await;
                    // After the answer, so the client knows the session the update is for.
                    if let Some(session) = opened {
                        agent.announce_commands(&session).await;
                    }
                });
            }
            rpc::Incoming::Notification { method, params } => side::notify(&agent, &method, params).await,
            rpc::Incoming::Response { id, result } => peer.resolve(&id, result),
            rpc::Incoming::Invalid { id, error } => {
                tracing::debug!("invalid message: {error}");
                peer.respond(id, Err(error)).await;
            }
        }
    }
    agent.shutdown().await;
    while requests.join_next().await.is_some() {}
    agent.flush().await;
    peer.close().await;
    let _ = writer.await;
    Ok(())
}
