//! The HTTP side of every adapter: one POST with a JSON body and the format's auth headers, a timeout
//! on the response headers, error statuses classified with their body and retry-after headers, and the
//! body handed to [`decode_sse`].
//!
//! Owns: reqwest. Must not: know a wire format beyond what [`WireApi`] tells it.

use std::error::Error as _;

use futures::TryStreamExt;
use futures::future::BoxFuture;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, USER_AGENT};

use crate::stream::decode_sse;
use crate::{
    EventStream, Provider, ProviderConfig, ProviderError, ProviderRequest, ToolCallText, ToolChoice, WireApi,
    classify_http_error,
};

/// Anthropic's API version header value.
pub(crate) const ANTHROPIC_VERSION: &str = "2023-06-01";

pub(crate) struct HttpProvider {
    config: ProviderConfig,
    client: reqwest::Client,
    /// `base_url` without its trailing slash; the format's path (which may name the model) is appended
    /// per request.
    base: String,
    headers: HeaderMap,
}

impl HttpProvider {
    pub(crate) fn new(config: ProviderConfig) -> Result<Self, ProviderError> {
        let base = config.base_url.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(config_error(
                &config,
                format!("base_url must start with http:// or https://, got `{base}`"),
            ));
        }
        let base = base.to_owned();
        let headers = headers(&config)?;
        let client = reqwest::Client::builder()
            .build()
            .map_err(|e| config_error(&config, format!("cannot build the HTTP client: {}", chain(&e))))?;
        Ok(Self { config, client, base, headers })
    }

    async fn send(&self, request: std::sync::Arc<ProviderRequest>) -> Result<EventStream, ProviderError> {
        let config = &self.config;
        if config.api_key.is_none()
            && let Some(env) = &config.api_key_env
        {
            return Err(ProviderError::Auth {
                provider: config.name.clone(),
                message: format!("API key missing: set {env} or `api_key_env` in [provider.{}]", config.name),
                env: Some(env.clone()),
            });
        }
        let body = config
            .api
            .encode(&request, &config.base_url)
            .map_err(|e| config_error(config, format!("cannot encode the request: {e}")))?;
        let url = match config.api {
            WireApi::Azure => azure_url(&self.base, config),
            api => format!("{}{}", self.base, api.path(&request.model)),
        };
        let mut headers = self.headers.clone();
        if config.api == WireApi::Anthropic
            && let Some(beta) = crate::anthropic::beta(&request)
        {
            add_beta(&mut headers, beta);
        }
        let send = self.client.post(&url).headers(headers).body(body).send();
        let response = match tokio::time::timeout(config.headers_timeout, send).await {
            Err(_) => return Err(ProviderError::HeadersTimeout(config.headers_timeout)),
            Ok(Err(e)) if refused(&e) => {
                return Err(ProviderError::Unreachable {
                    provider: config.name.clone(),
                    url,
                    message: chain(&e),
                });
            }
            Ok(Err(e)) => return Err(ProviderError::Connection { message: chain(&e) }),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if !status.is_success() {
            let headers = response.headers().clone();
            let body = self.read_body(response).await?;
            return Err(classify_http_error(
                &config.name,
                config.api_key_env.as_deref(),
                status.as_u16(),
                &headers,
                &body,
            ));
        }
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("application/json"));
        if is_json {
            // Some servers answer a streaming request with a plain JSON error and status 200.
            let body = self.read_body(response).await?;
            return Err(json_instead_of_stream(&body));
        }
        let bytes = response.bytes_stream().map_err(|e| chain(&e));
        let events = decode_sse(bytes, config.api.decoder(), config.idle_timeout);
        let calls_allowed = request.tool_choice != ToolChoice::None && !request.tools.is_empty();
        Ok(match request.tool_call_text {
            ToolCallText::Parse if calls_allowed => {
                crate::text_calls::parse_calls(events, request.tools.iter().map(|t| t.name.clone()).collect())
            }
            ToolCallText::Parse | ToolCallText::Warn | ToolCallText::Off => events,
        })
    }

    async fn read_body(&self, response: reqwest::Response) -> Result<String, ProviderError> {
        match tokio::time::timeout(self.config.idle_timeout, response.text()).await {
            Err(_) => Err(ProviderError::IdleTimeout(self.config.idle_timeout)),
            Ok(Err(e)) => Err(ProviderError::Connection { message: chain(&e) }),
            Ok(Ok(body)) => Ok(body),
        }
    }
}

impl Provider for HttpProvider {
    fn stream(
        &self,
        request: std::sync::Arc<ProviderRequest>,
    ) -> BoxFuture<'_, Result<EventStream, ProviderError>> {
        Box::pin(self.send(request))
    }
}

fn json_instead_of_stream(body: &str) -> ProviderError {
    let value: serde_json::Value = match serde_json::from_str(body) {
        Ok(value) => value,
        Err(_) => {
            return ProviderError::Stream { message: "expected an event stream, got malformed JSON".into() };
        }
    };
    match value.get("error") {
        Some(serde_json::Value::String(message)) => {
            crate::classify_stream_error(&serde_json::json!({ "message": message }))
        }
        Some(error) => crate::classify_stream_error(error),
        None => ProviderError::Stream { message: "expected an event stream, got a JSON response".into() },
    }
}

/// Content type, accept, user agent, the format's auth headers, then the configured extra headers (which may
/// override them).
fn headers(config: &ProviderConfig) -> Result<HeaderMap, ProviderError> {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
    headers.insert(USER_AGENT, HeaderValue::from_static(concat!("codeloop/", env!("CARGO_PKG_VERSION"))));
    let secret = |value: String| {
        let mut value = HeaderValue::try_from(value).map_err(|_| {
            config_error(config, "the API key contains characters not allowed in a header".into())
        })?;
        value.set_sensitive(true);
        Ok::<_, ProviderError>(value)
    };
    match config.api {
        WireApi::OpenAiChat | WireApi::OpenAiResponses => {
            if let Some(key) = &config.api_key {
                headers.insert("authorization", secret(format!("Bearer {key}"))?);
            }
        }
        WireApi::Anthropic => {
            if let Some(key) = &config.api_key {
                headers.insert("x-api-key", secret(key.clone())?);
            }
            headers.insert("anthropic-version", HeaderValue::from_static(ANTHROPIC_VERSION));
        }
        WireApi::Gemini => {
            if let Some(key) = &config.api_key {
                headers.insert("x-goog-api-key", secret(key.clone())?);
            }
        }
        WireApi::Azure => {
            if let Some(key) = &config.api_key {
                headers.insert("api-key", secret(key.clone())?);
            }
        }
    }
    for (name, value) in &config.headers {
        let name = HeaderName::try_from(name.as_str())
            .map_err(|_| config_error(config, format!("invalid header name `{name}`")))?;
        let value = HeaderValue::try_from(value.as_str())
            .map_err(|_| config_error(config, format!("invalid value for header `{name}`")))?;
        headers.insert(name, value);
    }
    Ok(headers)
}

/// Where an Azure request goes (DESIGN.md §5l): `base` is the resource's origin
/// (`https://NAME.openai.azure.com`); a deployment adds `/openai/deployments/{deployment}/chat/completions
/// ?api-version=…`, no deployment the v1 path `/openai/v1/chat/completions` (model in the body). A base that
/// already ends in `/openai/v1` (a Foundry project endpoint) gets only `/chat/completions`.
fn azure_url(base: &str, config: &ProviderConfig) -> String {
    // RFC 3986's unreserved characters stay as they are.
    const SEGMENT: &percent_encoding::AsciiSet =
        &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');
    let encode = |s: &str| percent_encoding::utf8_percent_encode(s, SEGMENT).to_string();
    match &config.deployment {
        Some(deployment) => {
            let version = config.api_version.as_deref().unwrap_or(crate::AZURE_API_VERSION);
            let root = base.strip_suffix("/openai").unwrap_or(base);
            format!(
                "{root}/openai/deployments/{}/chat/completions?api-version={}",
                encode(deployment),
                encode(version)
            )
        }
        None => {
            let root =
                if base.ends_with("/openai/v1") { base.to_owned() } else { format!("{base}/openai/v1") };
            match &config.api_version {
                Some(version) => format!("{root}/chat/completions?api-version={}", encode(version)),
                None => format!("{root}/chat/completions"),
            }
        }
    }
}

/// Adds a value to `anthropic-beta`, keeping the betas config already sends.
fn add_beta(headers: &mut HeaderMap, beta: &'static str) {
    let value = match headers.get("anthropic-beta").and_then(|v| v.to_str().ok()) {
        Some(existing) if existing.split(',').any(|b| b.trim() == beta) => return,
        Some(existing) => HeaderValue::try_from(format!("{existing},{beta}")),
        None => Ok(HeaderValue::from_static(beta)),
    };
    if let Ok(value) = value {
        headers.insert("anthropic-beta", value);
    }
}

fn config_error(config: &ProviderConfig, message: String) -> ProviderError {
    ProviderError::Config { message: format!("[provider.{}]: {message}", config.name) }
}

/// An error with its causes ("error sending request: … : Connection refused"): reqwest's own message
/// alone rarely says what went wrong.
fn chain(error: &reqwest::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// True when nothing listens at the address (as opposed to a network that failed on the way).
fn refused(error: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        source = e.source();
    }
    false
}
