//! The adapters over real HTTP on 127.0.0.1: a one-shot server captures the request and answers with a
//! canned response, so headers, bodies, status classification, timeouts and broken bodies are
//! exercised end to end.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::time::Duration;

use codeloop_provider::{
    ChatMessage, ProviderConfig, ProviderError, ProviderRequest, StreamEvent, UserContent, WireApi, connect,
};
use futures::StreamExt;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// What the server does once it has written its response.
#[derive(Clone, Copy)]
enum Then {
    Close,
    /// Keep the connection open without writing anything more.
    Stall,
    /// Write nothing at all and keep the connection open.
    NeverAnswer,
}

struct Captured {
    head: String,
    body: Value,
}

async fn serve(response: Vec<u8>, then: Then) -> (String, oneshot::Receiver<Captured>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            let n = socket.read(&mut chunk).await.unwrap();
            assert!(n > 0, "client closed before sending headers");
            buf.extend_from_slice(&chunk[..n]);
            if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break pos + 4;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map(|v| v.trim().parse().unwrap())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            let n = socket.read(&mut chunk).await.unwrap();
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = serde_json::from_slice(&buf[head_end..head_end + length]).unwrap_or(Value::Null);
        let _ = tx.send(Captured { head, body });
        match then {
            Then::NeverAnswer => std::future::pending::<()>().await,
            Then::Close => {
                socket.write_all(&response).await.unwrap();
                socket.shutdown().await.ok();
            }
            Then::Stall => {
                socket.write_all(&response).await.unwrap();
                std::future::pending::<()>().await;
            }
        }
    });
    (format!("http://{addr}/v1"), rx)
}

fn sse_response(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn response(status: &str, headers: &str, body: &str) -> Vec<u8> {
    format!("HTTP/1.1 {status}\r\n{headers}content-length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

fn config(api: WireApi, base_url: &str) -> ProviderConfig {
    let mut config = ProviderConfig::new("test", api, base_url);
    config.api_key = Some("sk-test".into());
    config.api_key_env = Some("TEST_API_KEY".into());
    config.headers = vec![("x-extra".into(), "yes".into())];
    config
}

fn request() -> ProviderRequest {
    ProviderRequest {
        model: "gpt-4o-mini".into(),
        system: vec!["Be brief.".into()],
        messages: vec![ChatMessage::User(vec![UserContent::Text("Hi".into())])],
        max_output_tokens: Some(100),
        ..Default::default()
    }
}

async fn collect(
    api: WireApi,
    base_url: &str,
) -> Result<Vec<Result<StreamEvent, ProviderError>>, ProviderError> {
    let provider = connect(config(api, base_url))?;
    let stream = provider.stream(std::sync::Arc::new(request())).await?;
    Ok(stream.collect().await)
}

const CHAT_BODY: &str = concat!(
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Ol\"}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"á!\"},\"finish_reason\":\"stop\"}]}\n\n",
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":2,\"total_tokens\":22}}\n\n",
    "data: [DONE]\n\n",
);

#[tokio::test]
async fn chat_request_carries_bearer_key_extra_headers_and_streams_text() {
    let (base, captured) = serve(sse_response(CHAT_BODY), Then::Close).await;
    let items = collect(WireApi::OpenAiChat, &base).await.unwrap();
    let captured = captured.await.unwrap();
    assert!(captured.head.starts_with("post /v1/chat/completions "), "{}", captured.head);
    assert!(captured.head.contains("authorization: bearer sk-test"));
    assert!(captured.head.contains("x-extra: yes"));
    assert!(captured.head.contains("accept: text/event-stream"));
    assert!(captured.head.contains("user-agent: codeloop/"));
    assert_eq!(captured.body["model"], "gpt-4o-mini");
    assert_eq!(captured.body["stream"], true);
    let text: String = items
        .iter()
        .filter_map(|i| match i {
            Ok(StreamEvent::TextDelta { text, .. }) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Olá!");
    assert_eq!(items.last(), Some(&Ok(StreamEvent::Finish)));
}

#[tokio::test]
async fn anthropic_request_carries_api_key_and_version_headers() {
    let (base, captured) = serve(response("500 Internal Server Error", "", ""), Then::Close).await;
    let _ = collect(WireApi::Anthropic, &base).await;
    let captured = captured.await.unwrap();
    assert!(captured.head.starts_with("post /v1/messages "), "{}", captured.head);
    assert!(captured.head.contains("x-api-key: sk-test"));
    assert!(captured.head.contains("anthropic-version: 2023-06-01"));
    assert!(!captured.head.contains("authorization:"));
}

#[tokio::test]
async fn rate_limit_status_is_retryable_with_its_retry_after() {
    let body = r#"{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}"#;
    let (base, _captured) = serve(
        response("429 Too Many Requests", "retry-after: 7\r\ncontent-type: application/json\r\n", body),
        Then::Close,
    )
    .await;
    let error = collect(WireApi::OpenAiChat, &base).await.unwrap_err();
    assert!(error.retryable(), "{error:?}");
    assert_eq!(error.retry_after(), Some(Duration::from_secs(7)));
    assert!(error.to_string().contains("Rate limit reached"), "{error}");
}

#[tokio::test]
async fn unauthorized_status_is_an_auth_error_naming_the_variable() {
    let (base, _captured) =
        serve(response("401 Unauthorized", "", r#"{"error":{"message":"bad key"}}"#), Then::Close).await;
    let error = collect(WireApi::OpenAiChat, &base).await.unwrap_err();
    assert!(matches!(error, ProviderError::Auth { .. }), "{error:?}");
    assert!(error.to_string().contains("TEST_API_KEY"), "{error}");
}

#[tokio::test]
async fn overflow_status_is_a_context_overflow() {
    let body = r#"{"error":{"message":"This model's maximum context length is 128000 tokens.","code":"context_length_exceeded"}}"#;
    let (base, _captured) = serve(response("400 Bad Request", "", body), Then::Close).await;
    let error = collect(WireApi::OpenAiChat, &base).await.unwrap_err();
    assert!(error.is_context_overflow(), "{error:?}");
}

#[tokio::test]
async fn json_error_on_a_200_is_classified() {
    let body = r#"{"error":{"message":"Provider is overloaded","code":"server_is_overloaded"}}"#;
    let (base, _captured) =
        serve(response("200 OK", "content-type: application/json\r\n", body), Then::Close).await;
    let error = collect(WireApi::OpenAiChat, &base).await.unwrap_err();
    assert!(error.retryable(), "{error:?}");
}

#[tokio::test]
async fn missing_key_fails_before_sending() {
    let mut config = config(WireApi::OpenAiChat, "http://127.0.0.1:9/v1");
    config.api_key = None;
    let provider = connect(config).unwrap();
    let error = provider.stream(std::sync::Arc::new(request())).await.err().unwrap();
    assert!(matches!(error, ProviderError::Auth { .. }));
    assert!(error.to_string().contains("API key missing: set TEST_API_KEY"), "{error}");
}

#[test]
fn bad_base_url_or_header_is_a_config_error() {
    let error = connect(ProviderConfig::new("x", WireApi::OpenAiChat, "api.openai.com/v1")).err().unwrap();
    assert!(matches!(error, ProviderError::Config { .. }), "{error:?}");
    let mut config = ProviderConfig::new("x", WireApi::OpenAiChat, "http://127.0.0.1:9");
    config.headers = vec![("bad header".into(), "v".into())];
    assert!(matches!(connect(config).err().unwrap(), ProviderError::Config { .. }));
}

#[tokio::test]
async fn a_refused_connection_is_unreachable_and_not_retried() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    let error = collect(WireApi::OpenAiChat, &base).await.unwrap_err();
    assert!(matches!(error, ProviderError::Unreachable { .. }), "{error:?}");
    assert!(!error.retryable(), "nothing listens there: retrying only delays the error");
    assert!(error.to_string().contains("Is the server running"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn silent_server_is_a_headers_timeout() {
    let (base, _captured) = serve(Vec::new(), Then::NeverAnswer).await;
    let mut config = config(WireApi::OpenAiChat, &base);
    config.headers_timeout = Duration::from_secs(30);
    let provider = connect(config).unwrap();
    let error = provider.stream(std::sync::Arc::new(request())).await.err().unwrap();
    assert_eq!(error, ProviderError::HeadersTimeout(Duration::from_secs(30)));
    assert!(error.retryable());
}

#[tokio::test]
async fn body_cut_mid_stream_is_a_connection_error() {
    let first = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    let partial = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{first}\r\n",
        first.len()
    );
    let (base, _captured) = serve(partial.into_bytes(), Then::Close).await;
    let items = collect(WireApi::OpenAiChat, &base).await.unwrap();
    assert!(items.iter().any(|i| matches!(i, Ok(StreamEvent::TextDelta { text, .. }) if text == "Hel")));
    let last = items.last().unwrap();
    assert!(matches!(last, Err(ProviderError::Connection { .. })), "{last:?}");
    assert!(last.as_ref().unwrap_err().retryable());
}

#[tokio::test]
async fn body_ending_before_the_finish_is_a_retryable_stream_error() {
    let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    let (base, _captured) = serve(sse_response(body), Then::Close).await;
    let items = collect(WireApi::OpenAiChat, &base).await.unwrap();
    let last = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(last, &ProviderError::Stream { message: "stream ended before the provider finished".into() });
    assert!(last.retryable());
}

#[tokio::test]
async fn stream_error_event_ends_the_stream_with_the_classified_error() {
    let body = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n",
        "event: error\ndata: {\"error\":{\"message\":\"Overloaded\",\"type\":\"overloaded_error\"}}\n\n",
    );
    let (base, _captured) = serve(sse_response(body), Then::Stall).await;
    let items = collect(WireApi::OpenAiChat, &base).await.unwrap();
    let last = items.last().unwrap().as_ref().unwrap_err();
    assert!(last.retryable(), "{last:?}");
}

#[tokio::test]
async fn responses_request_is_stateless_and_streams_a_tool_call() {
    let body = concat!(
        "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"status\":\"in_progress\"}}\n\n",
        "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"item\":{\"id\":\"fc_1\",\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"read\",\"arguments\":\"\"}}\n\n",
        "event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"item_id\":\"fc_1\",\"delta\":\"{\\\"path\\\":\\\"a\\\"}\"}\n\n",
        "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"item\":{\"id\":\"fc_1\",\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"read\",\"arguments\":\"{\\\"path\\\":\\\"a\\\"}\"}}\n\n",
        "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":10,\"output_tokens\":5,\"total_tokens\":15}}}\n\n",
    );
    let (base, captured) = serve(sse_response(body), Then::Close).await;
    let items = collect(WireApi::OpenAiResponses, &base).await.unwrap();
    let captured = captured.await.unwrap();
    assert!(captured.head.starts_with("post /v1/responses "), "{}", captured.head);
    assert_eq!(captured.body["store"], false);
    assert_eq!(captured.body["instructions"], "Be brief.");
    let call = items.iter().find_map(|i| match i {
        Ok(StreamEvent::ToolCall(call)) => Some(call.clone()),
        _ => None,
    });
    assert_eq!(
        call.map(|c| (c.call_id, c.input)),
        Some(("call_1".into(), Ok(serde_json::json!({"path": "a"}))))
    );
    assert_eq!(items.last(), Some(&Ok(StreamEvent::Finish)));
}

#[tokio::test]
async fn anthropic_stream_over_http_ends_with_usage() {
    let body = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":12,\"cache_read_input_tokens\":100,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    let (base, captured) = serve(sse_response(body), Then::Stall).await;
    // The stream ends at message_stop even though the server keeps the connection open.
    let items = collect(WireApi::Anthropic, &base).await.unwrap();
    let captured = captured.await.unwrap();
    assert_eq!(captured.body["max_tokens"], 100);
    assert_eq!(captured.body["system"][0]["cache_control"]["type"], "ephemeral");
    let usage = items.iter().find_map(|i| match i {
        Ok(StreamEvent::FinishStep { usage, .. }) => *usage,
        _ => None,
    });
    assert_eq!(
        usage,
        Some(codeloop_provider::Usage {
            input: 12,
            output: 3,
            reasoning: 0,
            cache_read: 100,
            cache_write: 0,
            total: None
        })
    );
    assert_eq!(items.last(), Some(&Ok(StreamEvent::Finish)));
}

#[tokio::test]
async fn gemini_request_names_the_model_in_the_path_and_sends_the_key_header() {
    let body = concat!(
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Ol\"}],\"role\": \"model\"}}]}\r\n\r\n",
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"á!\"}],\"role\": \"model\"},\"finishReason\": \"STOP\"}],",
        "\"usageMetadata\": {\"promptTokenCount\": 11,\"cachedContentTokenCount\": 4,\"candidatesTokenCount\": 2,",
        "\"thoughtsTokenCount\": 21,\"totalTokenCount\": 34}}\r\n\r\n",
    );
    // The connection stays open: the finish reason ends the stream.
    let (base, captured) = serve(sse_response(body), Then::Stall).await;
    let items = collect(WireApi::Gemini, &base).await.unwrap();
    let captured = captured.await.unwrap();
    assert!(
        captured.head.starts_with("post /v1/models/gpt-4o-mini:streamgeneratecontent?alt=sse "),
        "{}",
        captured.head
    );
    assert!(captured.head.contains("x-goog-api-key: sk-test"));
    assert!(!captured.head.contains("authorization:"));
    assert_eq!(captured.body["systemInstruction"]["parts"][0]["text"], "Be brief.");
    assert_eq!(captured.body["contents"][0]["role"], "user");
    assert_eq!(captured.body["generationConfig"]["maxOutputTokens"], 100);
    let usage = items.iter().find_map(|i| match i {
        Ok(StreamEvent::FinishStep { usage, .. }) => *usage,
        _ => None,
    });
    assert_eq!(
        usage,
        Some(codeloop_provider::Usage {
            input: 7,
            output: 2,
            reasoning: 21,
            cache_read: 4,
            cache_write: 0,
            total: Some(34)
        })
    );
    assert_eq!(items.last(), Some(&Ok(StreamEvent::Finish)));
}
