//! codeloop-testkit: a scripted fake model provider served over real HTTP on loopback, for every crate's
//! tests, the offline demo and the benchmarks. It speaks OpenAI Chat Completions (`/v1/chat/completions`),
//! OpenAI Responses (`/v1/responses`) and Anthropic Messages (`/v1/messages`) as streamed SSE; the request
//! path picks the format and one [`Script`] drives all three. Faults (HTTP errors, connection resets,
//! truncated or malformed streams, stalls, in-stream errors) are injected per turn, and every request is
//! recorded for assertions. It depends on no other codeloop crate, so any crate can dev-depend on it.
//!
//! ```no_run
//! use codeloop_testkit::{FakeProvider, Fault, Reply, Script, Turn};
//! use serde_json::json;
//!
//! # async fn demo() -> std::io::Result<()> {
//! let provider = FakeProvider::start(Script::new([
//!     Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"}))),
//!     Turn::from(Fault::rate_limited(1)),
//!     Turn::from(Reply::text("Done.").with_reasoning("The file says hi.")),
//! ]))
//! .await?;
//! let base_url = provider.base_url(); // http://127.0.0.1:PORT/v1
//! // ... point a client at base_url, run it ...
//! provider.wait_for_requests(3).await;
//! assert_eq!(provider.requests()[0].body["model"], "gpt-test");
//! # Ok(()) }
//! ```
//!
//! Scripts are JSON too (the `codeloop-fake-provider` binary loads them); see [`Script`], [`Turn`],
//! [`Reply`] and [`Fault`] for the format, e.g.
//! `{"turns": [{"reply": {"text": "hi", "text_chunks": 2}}, {"fault": {"kind": "status", "status": 529}}]}`.
//! When the script runs out the server answers HTTP 400 `fake provider: script exhausted after N turns`.

mod anthropic;
mod chat;
mod feed;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "mcp")]
pub mod oauth;
#[cfg(feature = "otlp")]
pub mod otlp;
mod plan;
pub mod postgres;
mod responses;
mod script;
mod server;
mod sse;

#[cfg(feature = "mcp")]
pub use mcp::{McpAuth, McpRequest, McpServerOptions, McpTestServer, Revision};
#[cfg(feature = "mcp")]
pub use oauth::{Iss, OAuthCall, OAuthOptions, OAuthTestServer, Tokens};
pub use script::{Arguments, Fault, Reply, Script, ScriptError, ScriptToolCall, ScriptUsage, Turn};
pub use server::{FakeProvider, RecordedRequest, Recording};
