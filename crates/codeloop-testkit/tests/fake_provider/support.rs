//! Helpers: post a request, collect the streamed body, split it into SSE events.

use futures::StreamExt;
use serde_json::{Value, json};

/// One SSE event: its `event:` name (if any) and `data:` payload.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub name: Option<String>,
    pub data: String,
}

impl Event {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.data))
    }
}

pub fn request_body(stream: bool) -> Value {
    json!({
        "model": "gpt-test",
        "stream": stream,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "hi"}],
    })
}

pub async fn post(url: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .header("Authorization", "Bearer sk-test")
        .json(body)
        .send()
        .await
        .unwrap()
}

/// Posts a streaming request and collects the whole body; panics on a non-200 status or a failed body.
pub async fn post_sse(url: &str) -> (reqwest::header::HeaderMap, Vec<Event>) {
    let response = post(url, &request_body(true)).await;
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    let (text, error) = collect(response).await;
    assert!(error.is_none(), "body failed: {error:?}");
    (headers, parse_sse(&text))
}

/// The body text received before the body ended, and the error that ended it (if any).
pub async fn collect(response: reqwest::Response) -> (String, Option<reqwest::Error>) {
    let mut stream = response.bytes_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(err) => return (String::from_utf8(bytes).unwrap(), Some(err)),
        }
    }
    (String::from_utf8(bytes).unwrap(), None)
}

/// Splits an SSE body into events (blank-line separated; `event:` and `data:` lines).
pub fn parse_sse(text: &str) -> Vec<Event> {
    assert!(text.is_empty() || text.ends_with("\n\n"), "body does not end an event: {text:?}");
    text.split_terminator("\n\n")
        .map(|record| {
            let mut name = None;
            let mut data = None;
            for line in record.lines() {
                if let Some(value) = line.strip_prefix("event: ") {
                    name = Some(value.to_owned());
                } else if let Some(value) = line.strip_prefix("data: ") {
                    data = Some(value.to_owned());
                } else {
                    panic!("unexpected SSE line {line:?} in {record:?}");
                }
            }
            Event { name, data: data.unwrap_or_else(|| panic!("event without data: {record:?}")) }
        })
        .collect()
}

/// The `event:` names in order.
pub fn names(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.name.as_deref().unwrap_or("")).collect()
}

/// The text streamed in a chat answer.
pub fn chat_text(events: &[Event]) -> String {
    events
        .iter()
        .filter(|e| e.data != "[DONE]")
        .filter_map(|e| e.json()["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect()
}
