//! Fault injection as a client sees it: HTTP errors, resets, truncation, malformed data, stalls,
//! in-stream errors, slow streams.

use std::time::{Duration, Instant};

use codeloop_testkit::{FakeProvider, Fault, Reply, Script, Turn};
use futures::StreamExt;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::{Event, collect, names, parse_sse, post, post_sse, request_body};

/// 8 chat events: role, 4 text deltas, finish, usage, [DONE].
fn reply() -> Reply {
    Reply::text("abcdefgh").with_text_chunks(4)
}

async fn start(turns: Vec<Turn>) -> (FakeProvider, String) {
    let provider = FakeProvider::start(Script::new(turns)).await.unwrap();
    let host = format!("http://{}", provider.addr());
    (provider, host)
}

#[tokio::test]
async fn status_faults_expose_status_headers_and_a_body_in_the_request_format() {
    let (_provider, host) = start(vec![
        Fault::rate_limited(2).header("retry-after-ms", "1500").into(),
        Fault::status(500).body("upstream exploded").into(),
        Fault::overloaded().into(),
        Fault::context_overflow().into(),
    ])
    .await;

    let response = post(&format!("{host}/v1/chat/completions"), &request_body(true)).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "2");
    assert_eq!(response.headers()["retry-after-ms"], "1500");
    assert_eq!(response.headers()["content-type"], "application/json");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error");
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");

    let response = post(&format!("{host}/v1/responses"), &request_body(true)).await;
    assert_eq!(response.status(), 500);
    assert_eq!(response.text().await.unwrap(), "upstream exploded");

    let response = post(&format!("{host}/v1/messages"), &request_body(true)).await;
    assert_eq!(response.status(), 529);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );

    let response = post(&format!("{host}/v1/chat/completions"), &request_body(true)).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "context_length_exceeded");
}

#[tokio::test]
async fn reset_aborts_the_connection_after_the_scripted_chunks() {
    let (_provider, host) = start(vec![Fault::reset(reply(), 3).into()]).await;
    let response = post(&format!("{host}/v1/chat/completions"), &request_body(true)).await;
    assert_eq!(response.status(), 200);

    let (text, error) = collect(response).await;
    let error = error.expect("a reset is an error, not a clean end of the body");
    assert!(error.is_body() || error.is_decode(), "unexpected error kind: {error:?}");
    let events = parse_sse(&text);
    assert_eq!(events.len(), 3, "role + 2 deltas before the reset");
    assert_eq!(events[2].json()["choices"][0]["delta"]["content"], "cd");
}

#[tokio::test]
async fn truncated_stream_ends_cleanly_without_finish_or_terminator() {
    let (_provider, host) =
        start(vec![Fault::truncated(reply(), 5).into(), Fault::truncated(reply(), 6).into()]).await;
    let (_, chat) = post_sse(&format!("{host}/v1/chat/completions")).await;
    assert_eq!(chat.len(), 5);
    assert!(chat.iter().all(|e| e.data != "[DONE]" && e.json()["choices"][0]["finish_reason"].is_null()));

    let (_, anthropic) = post_sse(&format!("{host}/v1/messages")).await;
    assert_eq!(
        names(&anthropic),
        vec![
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
        ]
    );
}

#[tokio::test]
async fn malformed_chunk_is_not_json_and_the_stream_goes_on() {
    let (_provider, host) =
        start(vec![Fault::malformed(reply(), 2).into(), Fault::malformed(reply(), 3).into()]).await;

    let (_, chat) = post_sse(&format!("{host}/v1/chat/completions")).await;
    assert_eq!(chat.len(), 9);
    assert!(serde_json::from_str::<Value>(&chat[2].data).is_err(), "{:?}", chat[2]);
    assert!(chat.iter().enumerate().filter(|(i, _)| *i != 2 && *i != 8).all(|(_, e)| e.json().is_object()));
    assert_eq!(chat[8].data, "[DONE]");

    let (_, anthropic) = post_sse(&format!("{host}/v1/messages")).await;
    assert_eq!(anthropic[3].name.as_deref(), Some("content_block_delta"));
    assert!(serde_json::from_str::<Value>(&anthropic[3].data).is_err());
    assert_eq!(anthropic.last().unwrap().name.as_deref(), Some("message_stop"));
}

#[tokio::test]
async fn stall_sends_nothing_more_until_the_server_stops() {
    let (provider, host) = start(vec![Fault::stall(reply(), 2).into()]).await;
    let response = post(&format!("{host}/v1/chat/completions"), &request_body(true)).await;
    let mut body = response.bytes_stream();
    let mut text = String::new();
    while text.matches("\n\n").count() < 2 {
        let chunk = body.next().await.unwrap().unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert_eq!(parse_sse(&text).len(), 2, "exactly the scripted chunks arrive");

    // A deadline, not a synchronising sleep: nothing may arrive within it.
    let silence = tokio::time::timeout(Duration::from_millis(300), body.next()).await;
    assert!(silence.is_err(), "stalled stream sent {silence:?}");

    provider.shutdown();
    let end =
        tokio::time::timeout(Duration::from_secs(5), body.next()).await.expect("shutdown ends the stall");
    assert!(matches!(end, Some(Err(_))), "a stopped stall is a connection error, got {end:?}");
}

#[tokio::test]
async fn error_events_use_each_format_own_shape() {
    let error = json!({"type": "rate_limit_error", "code": "rate_limit_exceeded", "message": "Slow down"});
    let (_provider, host) = start(vec![
        Fault::error_event(reply(), 2, error.clone()).into(),
        Fault::error_event(reply(), 2, error.clone()).into(),
        Fault::ErrorEvent {
            reply: reply(),
            after_chunks: 3,
            error: json!({"type": "overloaded_error", "message": "Overloaded"}),
        }
        .into(),
    ])
    .await;

    let (_, chat) = post_sse(&format!("{host}/v1/chat/completions")).await;
    assert_eq!(chat.len(), 3, "no [DONE] after the error");
    assert_eq!(chat[2], Event { name: None, data: json!({"error": error}).to_string() });

    let (_, responses) = post_sse(&format!("{host}/v1/responses")).await;
    assert_eq!(
        names(&responses),
        vec!["response.created", "response.in_progress", "error", "response.failed"]
    );
    assert_eq!(
        responses[2].json(),
        json!({
            "type": "error", "sequence_number": 2, "code": "rate_limit_exceeded", "message": "Slow down",
            "param": null, "error": error,
        })
    );
    let failed = responses[3].json();
    assert_eq!(failed["sequence_number"], 3);
    assert_eq!(failed["response"]["status"], "failed");
    assert_eq!(failed["response"]["error"], json!({"code": "rate_limit_exceeded", "message": "Slow down"}));

    let (_, anthropic) = post_sse(&format!("{host}/v1/messages")).await;
    assert_eq!(names(&anthropic), vec!["message_start", "ping", "content_block_start", "error"]);
    assert_eq!(
        anthropic[3].json(),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );
}

#[tokio::test]
async fn chunk_delay_slows_the_stream_down() {
    // 6 events: role, 2 deltas, finish, usage, [DONE] → 5 delays.
    let reply = Reply::text("abcd").with_text_chunks(2).with_chunk_delay_ms(20);
    let (_provider, host) = start(vec![reply.into()]).await;
    let started = Instant::now();
    let (_, events) = post_sse(&format!("{host}/v1/chat/completions")).await;
    assert_eq!(events.len(), 6);
    assert!(started.elapsed() >= Duration::from_millis(100), "took {:?}", started.elapsed());
}

#[tokio::test]
async fn a_reset_deep_into_a_long_stream_still_delivers_every_chunk_before_it() {
    let reply = Reply::text("word ".repeat(20_000)).with_text_chunks(20_000);
    let (_provider, host) = start(vec![Fault::reset(reply, 15_000).into()]).await;
    let response = post(&format!("{host}/v1/chat/completions"), &request_body(true)).await;
    let (text, error) = collect(response).await;
    assert!(error.is_some());
    assert_eq!(parse_sse(&text).len(), 15_000);
}
