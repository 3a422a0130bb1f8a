//! Provider failures, classified once here so the run loop only asks `retryable()` and
//! `is_context_overflow()`.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProviderError {
    /// 401/403 or a missing key. `env` names the variable the key is read from.
    #[error("authentication failed for provider `{provider}`: {message}{}", env_hint(.env))]
    Auth { provider: String, message: String, env: Option<String> },

    /// The request does not fit the model's context window (413, `context_length_exceeded`, or one of the
    /// usual provider phrasings).
    #[error("context overflow: {message}")]
    ContextOverflow { message: String, body: Option<String> },

    /// An HTTP error status or an error event inside the stream.
    #[error("{}", api_message(*.status, .message))]
    Api {
        status: Option<u16>,
        message: String,
        body: Option<String>,
        retryable: bool,
        /// From `retry-after-ms` / `retry-after`.
        retry_after: Option<Duration>,
    },

    /// The connection failed or was reset.
    #[error("connection error: {message}")]
    Connection { message: String },

    /// Nothing listens at the provider's address (connection refused). Not retried: retrying only delays
    /// the obvious.
    #[error(
        "cannot connect to provider `{provider}` at {url}: connection refused. Is the server running, and is base_url in [provider.{provider}] right?"
    )]
    Unreachable { provider: String, url: String, message: String },

    /// No response headers in time.
    #[error("no response from the provider within {0:?}")]
    HeadersTimeout(Duration),

    /// The stream went silent.
    #[error("the provider stream was idle for {0:?}")]
    IdleTimeout(Duration),

    /// The body could not be decoded: malformed JSON, or a stream cut before its end.
    #[error("bad provider stream: {message}")]
    Stream { message: String },

    /// The provider refused to answer.
    #[error("the response was blocked by the provider's content filter: {message}")]
    ContentFilter { message: String },

    /// Configuration problem found when building the request (unknown model, bad URL…).
    #[error("{message}")]
    Config { message: String },
}

fn env_hint(env: &Option<String>) -> String {
    match env {
        Some(var) => format!(" (check your API key in ${var})"),
        None => String::new(),
    }
}

fn api_message(status: Option<u16>, message: &str) -> String {
    match status {
        Some(status) => format!("provider error (HTTP {status}): {message}"),
        None => format!("provider error: {message}"),
    }
}

impl ProviderError {
    /// Whether another attempt may succeed (DESIGN.md §4 "Retry"). Every kind is listed so a new one
    /// forces a decision.
    pub fn retryable(&self) -> bool {
        match self {
            ProviderError::Auth { .. } => false,
            ProviderError::ContextOverflow { .. } => false,
            ProviderError::Api { retryable, .. } => *retryable,
            ProviderError::Connection { .. } => true,
            ProviderError::Unreachable { .. } => false,
            ProviderError::HeadersTimeout(_) => true,
            ProviderError::IdleTimeout(_) => true,
            ProviderError::Stream { .. } => true,
            ProviderError::ContentFilter { .. } => false,
            ProviderError::Config { .. } => false,
        }
    }

    pub fn is_context_overflow(&self) -> bool {
        matches!(self, ProviderError::ContextOverflow { .. })
    }

    /// The wait the server asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::Api { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A short reason for status lines: "rate limited", "provider overloaded", "HTTP 500".
    pub fn short_reason(&self) -> String {
        match self {
            ProviderError::Api { status: Some(429), .. } => "rate limited".into(),
            ProviderError::Api { status: Some(529), .. } => "provider overloaded".into(),
            ProviderError::Api { message, .. } if message.to_lowercase().contains("overloaded") => {
                "provider overloaded".into()
            }
            ProviderError::Api { message, .. } if message.to_lowercase().contains("rate limit") => {
                "rate limited".into()
            }
            ProviderError::Api { status: Some(status), .. } => format!("HTTP {status}"),
            ProviderError::Api { message, .. } => message.clone(),
            // Refused connections are `Unreachable`; what is left is a connection dropped or reset.
            ProviderError::Connection { .. } => "connection reset".into(),
            ProviderError::HeadersTimeout(_) => "no response".into(),
            ProviderError::IdleTimeout(_) => "stream stalled".into(),
            ProviderError::Stream { .. } => "bad stream".into(),
            other => other.to_string(),
        }
    }
}

/// Phrasings providers use for "the prompt is too long" (reference §3.6), lower-case.
const OVERFLOW_PHRASES: &[&str] = &[
    "prompt is too long",
    "input is too long",
    "exceeds the context window",
    "exceeds the maximum context",
    "maximum context length",
    "context_length_exceeded",
    "context length exceeded",
    "context window exceeded",
    "request entity too large",
    "too many tokens",
    "token limit exceeded",
    "exceeds context length",
    "reduce the length of the messages",
    "input tokens exceed",
    "prompt too long",
    "model_context_window_exceeded",
    "maximum prompt length",
    "exceeds the limit of",
    "context size has been exceeded",
    "greater than the context length",
    // Gemini: "The input token count (N) exceeds the maximum number of tokens allowed (M)."
    "exceeds the maximum number of tokens",
];

/// Error codes for a request or answer blocked by a content policy (OpenAI, Azure).
const CONTENT_FILTER_CODES: &[&str] = &["\"content_filter\"", "\"content_policy_violation\""];

/// True when an error text says the request did not fit, and is not really throttling.
pub fn looks_like_context_overflow(text: &str) -> bool {
    let lower = text.to_lowercase();
    if lower.contains("rate limit") || lower.contains("too many requests") {
        return false;
    }
    OVERFLOW_PHRASES.iter().any(|p| lower.contains(p))
}

/// Whether an HTTP status is worth another attempt: 408, 409, 429, 5xx (including 529 overloaded).
pub fn status_is_retryable(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || (500..=599).contains(&status)
}

/// Reads `retry-after-ms` (float milliseconds), then `retry-after` (seconds or an HTTP date).
pub fn retry_after_from_headers(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    if let Some(ms) = headers.get("retry-after-ms").and_then(|v| v.to_str().ok())
        && let Ok(ms) = ms.trim().parse::<f64>()
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = headers.get("retry-after").and_then(|v| v.to_str().ok())?.trim();
    if let Ok(secs) = value.parse::<f64>()
        && secs.is_finite()
        && secs >= 0.0
    {
        return Some(Duration::from_millis((secs * 1000.0).ceil() as u64));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    date.duration_since(std::time::SystemTime::now()).ok()
}

/// Classifies an HTTP error response into the right kind.
pub fn classify_http_error(
    provider: &str,
    api_key_env: Option<&str>,
    status: u16,
    headers: &reqwest::header::HeaderMap,
    body: &str,
) -> ProviderError {
    let message = error_message_from_body(body).unwrap_or_else(|| {
        if body.trim().is_empty() { format!("HTTP {status} with an empty body") } else { truncate(body, 500) }
    });
    if status == 401 || status == 403 {
        return ProviderError::Auth {
            provider: provider.to_owned(),
            message,
            env: api_key_env.map(str::to_owned),
        };
    }
    let code_overflow = body.contains("context_length_exceeded");
    if status == 413 || code_overflow || looks_like_context_overflow(&message) {
        return ProviderError::ContextOverflow { message, body: non_empty(body) };
    }
    if status == 400 && CONTENT_FILTER_CODES.iter().any(|c| body.contains(c)) {
        return ProviderError::ContentFilter { message };
    }
    ProviderError::Api {
        status: Some(status),
        message,
        body: non_empty(body),
        retryable: status_is_retryable(status),
        retry_after: retry_after_from_headers(headers),
    }
}

/// Classifies an error object carried inside a stream (`{"error": {...}}`, an `error` event,
/// `response.failed`).
pub fn classify_stream_error(error: &serde_json::Value) -> ProviderError {
    let message =
        error.get("message").and_then(|m| m.as_str()).map(str::to_owned).unwrap_or_else(|| error.to_string());
    let code = ["code", "type"]
        .iter()
        .filter_map(|k| error.get(*k).and_then(|c| c.as_str()))
        .collect::<Vec<_>>()
        .join(" ");
    let status = error.get("code").and_then(|c| c.as_u64()).map(|c| c as u16);
    if code.contains("context_length_exceeded") || looks_like_context_overflow(&message) {
        return ProviderError::ContextOverflow { message, body: Some(error.to_string()) };
    }
    if code.split(' ').any(|c| c == "content_filter" || c == "content_policy_violation") {
        return ProviderError::ContentFilter { message };
    }
    let non_retryable_code =
        ["insufficient_quota", "usage_not_included", "invalid_prompt", "invalid_request"]
            .iter()
            .any(|c| code.contains(c));
    let retryable_code =
        ["server_error", "server_is_overloaded", "overloaded", "rate_limit", "too_many_requests", "timeout"]
            .iter()
            .any(|c| code.contains(c));
    let lower = message.to_lowercase();
    let retryable_text = lower.contains("overloaded")
        || lower.contains("rate limit")
        || lower.contains("too many requests")
        || lower.contains("try again");
    let retryable =
        !non_retryable_code && (retryable_code || retryable_text || status.is_some_and(status_is_retryable));
    ProviderError::Api { status, message, body: Some(error.to_string()), retryable, retry_after: None }
}

fn error_message_from_body(body: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    // Gemini sometimes wraps the error object in a one-element array.
    let value = value.get(0).unwrap_or(&value);
    let error = value.get("error").unwrap_or(value);
    if let Some(text) = error.as_str() {
        return Some(text.to_owned());
    }
    error.get("message").and_then(|m| m.as_str()).map(str::to_owned)
}

fn non_empty(body: &str) -> Option<String> {
    if body.is_empty() { None } else { Some(truncate(body, 4000)) }
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue};

    #[test]
    fn classifies_statuses() {
        let h = HeaderMap::new();
        assert!(matches!(classify_http_error("p", Some("KEY"), 401, &h, ""), ProviderError::Auth { .. }));
        assert!(classify_http_error("p", None, 429, &h, "{}").retryable());
        assert!(classify_http_error("p", None, 529, &h, "").retryable());
        assert!(!classify_http_error("p", None, 400, &h, "{\"error\":{\"message\":\"bad\"}}").retryable());
        let overflow = classify_http_error(
            "p",
            None,
            400,
            &h,
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens","code":"context_length_exceeded"}}"#,
        );
        assert!(overflow.is_context_overflow());
        assert!(classify_http_error("p", None, 413, &h, "").is_context_overflow());
    }

    #[test]
    fn content_policy_errors_are_content_filter() {
        let body =
            r#"{"error":{"message":"The response was filtered","code":"content_filter","status":400}}"#;
        let e = classify_http_error("azure", None, 400, &HeaderMap::new(), body);
        assert!(matches!(e, ProviderError::ContentFilter { .. }), "{e:?}");
        assert!(!e.retryable());
        let e = classify_stream_error(&serde_json::json!({"code": "content_filter", "message": "blocked"}));
        assert!(matches!(e, ProviderError::ContentFilter { .. }), "{e:?}");
    }

    #[test]
    fn gemini_error_bodies_are_read() {
        let h = HeaderMap::new();
        let body = r#"[{"error":{"code":429,"message":"Quota exceeded","status":"RESOURCE_EXHAUSTED"}}]"#;
        let e = classify_http_error("google", None, 429, &h, body);
        assert!(e.retryable() && e.to_string().contains("Quota exceeded"), "{e}");
        let body = r#"{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#;
        assert!(classify_http_error("google", None, 400, &h, body).is_context_overflow());
    }

    #[test]
    fn auth_error_names_the_env_var() {
        let e = classify_http_error("openai", Some("OPENAI_API_KEY"), 401, &HeaderMap::new(), "");
        assert!(e.to_string().contains("check your API key in $OPENAI_API_KEY"), "{e}");
    }

    #[test]
    fn reads_retry_after_headers() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(retry_after_from_headers(&h), Some(Duration::from_secs(3)));
        h.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(retry_after_from_headers(&h), Some(Duration::from_millis(1500)));
    }

    #[test]
    fn rate_limit_text_is_not_overflow() {
        assert!(!looks_like_context_overflow("Rate limit: too many tokens per minute"));
        assert!(looks_like_context_overflow("prompt is too long: 210000 tokens > 200000 maximum"));
    }
}
