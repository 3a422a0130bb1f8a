//! Server behaviour: request recording, turn order across paths, exhaustion, waiting, pushing, scripts.

use std::time::Duration;

use codeloop_testkit::{Arguments, FakeProvider, Fault, Reply, Script, ScriptToolCall, ScriptUsage, Turn};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::{chat_text, post, post_sse, request_body};

#[tokio::test]
async fn requests_are_recorded_with_path_lowercased_headers_and_exact_json() {
    let provider = FakeProvider::start(Script::new([Reply::text("a"), Reply::text("b")])).await.unwrap();
    let first = json!({"model": "claude-test", "max_tokens": 64, "messages": [{"role": "user", "content": "é\n\"q\""}]});
    let response = reqwest::Client::new()
        .post(format!("{}/messages", provider.base_url()))
        .header("X-Api-Key", "sk-ant-test")
        .header("Anthropic-Version", "2023-06-01")
        .json(&first)
        .send()
        .await
        .unwrap();
    response.text().await.unwrap();
    post(&format!("{}/chat/completions", provider.base_url()), &request_body(true))
        .await
        .text()
        .await
        .unwrap();

    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(provider.request_count(), 2);
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].body, first);
    assert_eq!(requests[0].header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(requests[0].header("ANTHROPIC-VERSION"), Some("2023-06-01"));
    assert!(requests[0].headers.iter().all(|(name, _)| *name == name.to_lowercase()));
    assert_eq!(requests[1].path, "/v1/chat/completions");
    assert_eq!(requests[1].body, request_body(true));
    assert_eq!(requests[1].header("authorization"), Some("Bearer sk-test"));
    assert_eq!(provider.last_request(), Some(requests[1].clone()));
}

#[tokio::test]
async fn a_non_json_body_is_recorded_as_text() {
    let provider = FakeProvider::start(Script::new([Reply::text("a")])).await.unwrap();
    let response = reqwest::Client::new()
        .post(format!("{}/chat/completions", provider.base_url()))
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(provider.requests()[0].body, json!("not json"));
}

#[tokio::test]
async fn turns_are_served_in_order_across_paths() {
    let provider =
        FakeProvider::start(Script::new([Reply::text("one"), Reply::text("two"), Reply::text("three")]))
            .await
            .unwrap();
    let base = provider.base_url();
    let (_, chat) = post_sse(&format!("{base}/chat/completions")).await;
    assert_eq!(chat_text(&chat), "one");
    let (_, anthropic) = post_sse(&format!("{base}/messages")).await;
    assert_eq!(anthropic[0].json()["message"]["id"], "msg_fake_2");
    assert_eq!(anthropic[3].json()["delta"]["text"], "two");
    let (_, responses) = post_sse(&format!("{base}/responses")).await;
    assert_eq!(responses.last().unwrap().json()["response"]["output"][0]["content"][0]["text"], "three");
}

#[tokio::test]
async fn an_exhausted_script_answers_400_with_a_clear_message() {
    let provider = FakeProvider::start(Script::new([Reply::text("only")])).await.unwrap();
    post_sse(&format!("{}/chat/completions", provider.base_url())).await;
    let response = post(&format!("{}/chat/completions", provider.base_url()), &request_body(true)).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({"error": {"message": "fake provider: script exhausted after 1 turns", "type": "invalid_request_error"}})
    );
    assert_eq!(provider.request_count(), 2, "the extra request is still recorded");
}

#[tokio::test]
async fn an_unknown_path_is_404_and_uses_no_turn() {
    let provider = FakeProvider::start(Script::new([Reply::text("kept")])).await.unwrap();
    let response = post(&format!("{}/completions", provider.base_url()), &request_body(true)).await;
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("unknown path /v1/completions"));
    let (_, events) = post_sse(&format!("{}/chat/completions", provider.base_url())).await;
    assert_eq!(chat_text(&events), "kept");
}

#[tokio::test]
async fn wait_for_requests_resolves_when_the_requests_have_arrived() {
    let provider = FakeProvider::start(Script::new([Reply::text("a"), Reply::text("b")])).await.unwrap();
    provider.wait_for_requests(0).await;
    let not_yet = tokio::time::timeout(Duration::from_millis(50), provider.wait_for_requests(1)).await;
    assert!(not_yet.is_err(), "no request was sent yet");

    let url = format!("{}/chat/completions", provider.base_url());
    let client = tokio::spawn(async move {
        for _ in 0..2 {
            post(&url, &request_body(true)).await.text().await.unwrap();
        }
    });
    tokio::time::timeout(Duration::from_secs(10), provider.wait_for_requests(2))
        .await
        .expect("two requests arrive");
    assert_eq!(provider.requests().len(), 2, "recorded before the wait resolves");
    client.await.unwrap();
}

#[tokio::test]
async fn pushed_turns_are_served_after_the_script() {
    let provider = FakeProvider::start(Script::default()).await.unwrap();
    provider.push(Reply::text("pushed"));
    provider.push(Turn::fault(Fault::status(503)));
    let (_, events) = post_sse(&format!("{}/chat/completions", provider.base_url())).await;
    assert_eq!(chat_text(&events), "pushed");
    let response = post(&format!("{}/chat/completions", provider.base_url()), &request_body(true)).await;
    assert_eq!(response.status(), 503);
}

#[tokio::test]
async fn a_repeating_script_starts_over() {
    let provider =
        FakeProvider::start(Script::new([Reply::text("a"), Reply::text("b")]).repeating()).await.unwrap();
    let mut texts = Vec::new();
    for _ in 0..3 {
        let (_, events) = post_sse(&format!("{}/chat/completions", provider.base_url())).await;
        texts.push(chat_text(&events));
    }
    assert_eq!(texts, vec!["a", "b", "a"]);
}

#[tokio::test]
async fn raw_arguments_are_sent_verbatim() {
    let call = ScriptToolCall::new("bash", Arguments::raw("{\"command\": \"ls")).with_fragments(2);
    let provider = FakeProvider::start(Script::new([Reply::default().with_call(call)])).await.unwrap();
    let (_, events) = post_sse(&format!("{}/chat/completions", provider.base_url())).await;
    let args: String = events[2..4]
        .iter()
        .map(|e| {
            e.json()["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(args, "{\"command\": \"ls");
}

#[test]
fn the_example_script_parses_to_the_builder_form() {
    let parsed = Script::from_json(include_str!("../../scripts/example.json")).unwrap();
    let expected = Script::new([
        Turn::from(
            Reply::text("Let me read it.")
                .with_reasoning("The user wants the file read.")
                .with_call(ScriptToolCall::new("read", json!({"filePath": "a.txt"})).with_fragments(3))
                .with_call(
                    ScriptToolCall::new("bash", Arguments::raw("{\"command\": \"ls"))
                        .with_id("call_custom")
                        .with_fragments(2),
                )
                .with_usage(ScriptUsage::new(1200, 40).with_reasoning(8).with_cached(1000)),
        ),
        Fault::rate_limited(1).into(),
        Fault::reset(Reply::text("partial answer"), 3).into(),
        Fault::truncated(Reply::text("cut short"), 4).into(),
        Fault::malformed(Reply::text("garbled"), 2).into(),
        Fault::stall(Reply::text("never finishes"), 2).into(),
        Fault::error_event(
            Reply::text("overloaded"),
            2,
            json!({"type": "overloaded_error", "message": "Overloaded"}),
        )
        .into(),
        Reply::text("Done: a.txt says hello.")
            .with_text_chunks(4)
            .with_finish("stop")
            .with_chunk_delay_ms(5)
            .into(),
    ]);
    assert_eq!(parsed, expected);

    let round_trip = Script::from_json(&serde_json::to_string(&expected).unwrap()).unwrap();
    assert_eq!(round_trip, expected);
    let map_headers = r#"[{"fault": {"kind": "status", "status": 429, "headers": {"retry-after": "1"}}}]"#;
    assert_eq!(Script::from_json(map_headers).unwrap(), Script::new([Fault::rate_limited(1)]));
    let bare = Script::from_json(r#"[{"reply": {"text": "hi"}}]"#).unwrap();
    assert_eq!(bare, Script::new([Reply::text("hi")]));
    let error = Script::from_json(r#"{"turns": [{"answer": {}}]}"#).unwrap_err();
    assert!(error.to_string().starts_with("invalid script: unknown variant `answer`"), "{error}");
}
