//! Provider adapters (DESIGN.md §2): turn a provider-neutral [`ProviderRequest`] into a wire-format HTTP
//! request, and the SSE response into normalised [`StreamEvent`]s.
//!
//! Owns: wire formats (OpenAI Chat Completions and every compatible server, OpenAI Responses, Anthropic
//! Messages, Google Gemini `streamGenerateContent`), SSE decoding, tool-argument assembly, usage
//! normalisation, error classification, and the model catalogue (limits and prices).
//! Must not: know about sessions, storage, tools or the run loop; retry (the run loop decides that).
//!
//! Use: [`connect`] a [`ProviderConfig`], then [`Provider::stream`] a request; price a step with
//! [`catalogue::Catalogue::resolve`] and [`catalogue::cost`]. Recorded bodies can be replayed without
//! HTTP through [`decode_sse`] with [`WireApi::decoder`] (see `tests/conformance.rs`).

pub mod anthropic;
mod assemble;
pub mod catalogue;
mod encode;
mod endpoint;
mod error;
mod event;
pub mod families;
pub mod gemini;
mod http;
mod json;
mod media;
pub mod openai_chat;
pub mod openai_responses;
mod request;
mod stream;
mod text_calls;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use futures::future::BoxFuture;

pub use encode::EncodeCache;
pub use endpoint::Endpoint;
pub use error::{
    ProviderError, classify_http_error, classify_stream_error, looks_like_context_overflow,
    retry_after_from_headers, status_is_retryable,
};
pub use event::{InvalidArguments, StreamEvent, ToolCall, Usage, parse_arguments};
pub use request::{
    AssistantContent, ChatMessage, FileContent, ProviderRequest, Reasoning, ToolChoice, ToolResult, ToolSpec,
    UserContent,
};
pub use stream::{Decoder, decode_sse};
pub use text_calls::{TextCall, ToolCallText, text_tool_call, text_tool_call_inside};

/// The events of one provider call. An `Err` item ends the stream.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<StreamEvent, ProviderError>> + Send>>;

/// One configured model endpoint.
pub trait Provider: Send + Sync {
    /// Sends the request. Resolves once response headers arrived (HTTP errors are returned here); the
    /// stream then yields events until `Finish` or an error. Dropping the stream cancels the request.
    /// Shared, not owned: a retried attempt sends the same request again without copying the history.
    fn stream(
        &self,
        request: std::sync::Arc<ProviderRequest>,
    ) -> BoxFuture<'_, Result<EventStream, ProviderError>>;
}

/// The wire format a provider speaks (`api` in `[provider.NAME]`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
pub enum WireApi {
    #[serde(rename = "openai-chat")]
    #[strum(serialize = "openai-chat")]
    OpenAiChat,
    #[serde(rename = "openai-responses")]
    #[strum(serialize = "openai-responses")]
    OpenAiResponses,
    #[serde(rename = "anthropic")]
    #[strum(serialize = "anthropic")]
    Anthropic,
    #[serde(rename = "gemini")]
    #[strum(serialize = "gemini")]
    Gemini,
    /// Azure OpenAI / Azure AI Foundry: OpenAI Chat Completions behind a deployment path, an
    /// `api-version` and the `api-key` header (DESIGN.md §5l).
    #[serde(rename = "azure")]
    #[strum(serialize = "azure")]
    Azure,
}

impl WireApi {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The wire format behind a service: what bodies, streams and model options follow (Azure speaks
    /// OpenAI Chat Completions).
    pub fn format(self) -> WireApi {
        match self {
            WireApi::Azure => WireApi::OpenAiChat,
            other => other,
        }
    }

    /// The endpoint path appended to `base_url`; Gemini names the model in the path rather than the body.
    pub fn path(self, model: &str) -> String {
        match self {
            WireApi::OpenAiChat | WireApi::Azure => "/chat/completions".into(),
            WireApi::OpenAiResponses => "/responses".into(),
            WireApi::Anthropic => "/messages".into(),
            WireApi::Gemini => gemini::path(model),
        }
    }

    /// The JSON body this format sends for `request` (`base_url` picks OpenAI-only fields).
    pub fn body(self, request: &ProviderRequest, base_url: &str) -> serde_json::Value {
        match self {
            WireApi::OpenAiChat | WireApi::Azure => openai_chat::build_body(request, Endpoint::of(base_url)),
            WireApi::OpenAiResponses => openai_responses::build_body(request, Endpoint::of(base_url)),
            WireApi::Anthropic => anthropic::build_body(request),
            WireApi::Gemini => gemini::build_body(request),
        }
    }

    /// The body this format sends for `request`, as bytes: `serde_json::to_vec(&self.body(..))`, built
    /// faster when the request carries an [`EncodeCache`] that earlier requests of its run filled.
    pub fn encode(self, request: &ProviderRequest, base_url: &str) -> Result<Vec<u8>, serde_json::Error> {
        let Some(cache) = &request.cache else { return serde_json::to_vec(&self.body(request, base_url)) };
        let owner = (self, request.model.as_str(), base_url);
        let endpoint = Endpoint::of(base_url);
        let bytes = match self {
            WireApi::OpenAiChat | WireApi::Azure => {
                openai_chat::encode(request, endpoint, &mut cache.lock(), owner)?
            }
            WireApi::OpenAiResponses => {
                openai_responses::encode(request, endpoint, &mut cache.lock(), owner)?
            }
            WireApi::Anthropic => anthropic::encode(request, &mut cache.lock(), owner)?,
            WireApi::Gemini => gemini::encode(request, &mut cache.lock(), owner)?,
        };
        // Debug builds (every test) check the memo against encoding from scratch.
        debug_assert!(
            bytes == serde_json::to_vec(&self.body(request, base_url))?,
            "the memoised {} body differs from the body built from scratch",
            self.as_str()
        );
        Ok(bytes)
    }

    /// A fresh decoder for one response body in this format.
    pub fn decoder(self) -> Box<dyn Decoder> {
        match self {
            WireApi::OpenAiChat | WireApi::Azure => Box::new(openai_chat::ChatDecoder::new()),
            WireApi::OpenAiResponses => Box::new(openai_responses::ResponsesDecoder::new()),
            WireApi::Anthropic => Box::new(anthropic::AnthropicDecoder::new()),
            WireApi::Gemini => Box::new(gemini::GeminiDecoder::new()),
        }
    }
}

/// Default time allowed for response headers.
pub const DEFAULT_HEADERS_TIMEOUT: Duration = Duration::from_secs(300);
/// Default time a stream may stay silent between chunks (DESIGN.md §4 "Retry").
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Everything an adapter needs to reach one endpoint. The API key is resolved by the caller (from the
/// environment variable named in config) and is never logged.
#[derive(Clone)]
pub struct ProviderConfig {
    /// The name in `[provider.NAME]`, used in messages.
    pub name: String,
    pub api: WireApi,
    /// e.g. `https://api.openai.com/v1`, `http://127.0.0.1:8080/v1`, `https://api.anthropic.com/v1`,
    /// `https://generativelanguage.googleapis.com/v1beta`.
    pub base_url: String,
    pub api_key: Option<String>,
    /// The variable the key comes from, named in authentication errors.
    pub api_key_env: Option<String>,
    /// Extra headers sent with every request (e.g. `anthropic-beta`, OpenRouter's `HTTP-Referer`).
    pub headers: Vec<(String, String)>,
    pub headers_timeout: Duration,
    pub idle_timeout: Duration,
    /// Azure: the deployment the requests go to (`None`: the v1 path, with the model in the body).
    pub deployment: Option<String>,
    /// Azure: the `api-version` of a deployment path (default [`AZURE_API_VERSION`]).
    pub api_version: Option<String>,
}

/// The Azure OpenAI `api-version` sent when config names none (the latest GA data-plane version).
pub const AZURE_API_VERSION: &str = "2024-10-21";

impl std::fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("name", &self.name)
            .field("api", &self.api)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("api_key_env", &self.api_key_env)
            .field("headers", &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("headers_timeout", &self.headers_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("deployment", &self.deployment)
            .field("api_version", &self.api_version)
            .finish()
    }
}

impl ProviderConfig {
    pub fn new(name: impl Into<String>, api: WireApi, base_url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            api,
            base_url: base_url.into(),
            api_key: None,
            api_key_env: None,
            headers: Vec::new(),
            headers_timeout: DEFAULT_HEADERS_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            deployment: None,
            api_version: None,
        }
    }
}

/// Builds the adapter for a configured provider. Fails on a bad `base_url` or header; a missing API key
/// is reported by the first request (so unused providers never fail start-up).
pub fn connect(config: ProviderConfig) -> Result<Arc<dyn Provider>, ProviderError> {
    Ok(Arc::new(http::HttpProvider::new(config)?))
}

#[cfg(test)]
mod wireapi_text {
    use super::WireApi;
    use strum::VariantArray as _;

    #[test]
    fn the_text_is_the_serialized_name() {
        for value in WireApi::VARIANTS {
            assert_eq!(serde_json::to_value(value).ok(), Some(serde_json::json!(value.as_str())));
        }
    }
}
