//! The three wire formats: text and tool-call turns, finish reasons, usage.

use codeloop_testkit::{FakeProvider, Reply, Script, ScriptToolCall, ScriptUsage};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::{Event, names, post_sse, request_body};

fn usage() -> ScriptUsage {
    ScriptUsage::new(10, 5).with_cached(2).with_reasoning(1)
}

/// A reasoning + two tool calls reply: one generated id, one given.
fn tool_reply() -> Reply {
    Reply::default()
        .with_reasoning("Let me look.")
        .with_reasoning_chunks(2)
        .with_call(ScriptToolCall::new("read", json!({"filePath": "a.txt"})).with_fragments(4))
        .with_call(
            ScriptToolCall::new("glob", json!({"pattern": "*.rs"})).with_id("call_custom").with_fragments(2),
        )
}

async fn serve_one(reply: Reply, path: &str) -> Vec<Event> {
    let provider = FakeProvider::start(Script::new([reply])).await.unwrap();
    // `path` is absolute, to cover both `/v1/...` and the bare routes.
    let (headers, events) = post_sse(&format!("http://{}{path}", provider.addr())).await;
    assert_eq!(headers["content-type"], "text/event-stream");
    events
}

fn strs<'a>(values: impl IntoIterator<Item = &'a Value>) -> Vec<&'a str> {
    values.into_iter().map(|v| v.as_str().unwrap()).collect()
}

#[tokio::test]
async fn chat_text_turn_streams_role_text_finish_usage_and_done() {
    let reply = Reply::text("Hello, world!").with_text_chunks(3).with_usage(usage());
    let events = serve_one(reply, "/chat/completions").await;

    assert_eq!(events.len(), 7, "role, 3 text, finish, usage, [DONE]: {events:#?}");
    assert!(events.iter().all(|e| e.name.is_none()));
    let chunks: Vec<Value> = events[..6].iter().map(Event::json).collect();
    for chunk in &chunks {
        assert_eq!(chunk["id"], "chatcmpl-fake-1");
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["model"], "gpt-test");
    }
    assert_eq!(chunks[0]["choices"][0]["delta"], json!({"role": "assistant", "content": ""}));
    let text = strs(chunks[1..4].iter().map(|c| &c["choices"][0]["delta"]["content"]));
    assert_eq!(text, vec!["Hell", "o, w", "orld!"]);
    assert_eq!(
        chunks[4]["choices"],
        json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": "stop"}])
    );
    assert_eq!(chunks[5]["choices"], json!([]));
    assert_eq!(
        chunks[5]["usage"],
        json!({
            "prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
            "prompt_tokens_details": {"cached_tokens": 2},
            "completion_tokens_details": {"reasoning_tokens": 1},
        })
    );
    assert_eq!(events[6].data, "[DONE]");
}

#[tokio::test]
async fn chat_tool_calls_send_id_and_name_once_then_argument_fragments() {
    let events = serve_one(tool_reply(), "/v1/chat/completions").await;

    assert_eq!(events.len(), 14, "role, 2 reasoning, 1+4 and 1+2 call chunks, finish, usage, done");
    let deltas: Vec<Value> = events[..11].iter().map(|e| e.json()["choices"][0]["delta"].clone()).collect();
    assert_eq!(strs(deltas[1..3].iter().map(|d| &d["reasoning_content"])).concat(), "Let me look.");
    let calls: Vec<&Value> = deltas[3..].iter().map(|d| &d["tool_calls"][0]).collect();
    assert_eq!(
        *calls[0],
        json!({"index": 0, "id": "call_1_0", "type": "function", "function": {"name": "read", "arguments": ""}})
    );
    assert_eq!(
        *calls[5],
        json!({"index": 1, "id": "call_custom", "type": "function", "function": {"name": "glob", "arguments": ""}})
    );
    for fragment in calls[1..5].iter().chain(&calls[6..]) {
        let keys: Vec<&String> = fragment.as_object().unwrap().keys().collect();
        assert_eq!(keys, vec!["function", "index"], "only index and arguments after the first chunk");
    }
    let args = strs(calls[1..5].iter().map(|c| &c["function"]["arguments"]));
    assert_eq!(args.len(), 4);
    assert_eq!(serde_json::from_str::<Value>(&args.concat()).unwrap(), json!({"filePath": "a.txt"}));
    let args = strs(calls[6..].iter().map(|c| &c["function"]["arguments"]));
    assert_eq!(args.concat(), r#"{"pattern":"*.rs"}"#);

    assert_eq!(events[11].json()["choices"][0]["finish_reason"], "tool_calls");
    let usage = &events[12].json()["usage"];
    let request_len = serde_json::to_vec(&request_body(true)).unwrap().len() as u64;
    assert_eq!(usage["prompt_tokens"], request_len.div_ceil(4), "estimated from the request size");
    assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 3, "12 reasoning chars / 4");
    assert_eq!(events[13].data, "[DONE]");
}

#[tokio::test]
async fn responses_text_turn_streams_items_deltas_and_completed_usage() {
    let reply = Reply::text("Hello, world!").with_text_chunks(2).with_usage(usage());
    let events = serve_one(reply, "/v1/responses").await;

    assert_eq!(
        names(&events),
        vec![
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let data: Vec<Value> = events.iter().map(Event::json).collect();
    for (i, (event, data)) in events.iter().zip(&data).enumerate() {
        assert_eq!(data["type"], event.name.as_deref().unwrap());
        assert_eq!(data["sequence_number"], i);
    }
    assert_eq!(data[0]["response"]["status"], "in_progress");
    assert_eq!(data[0]["response"]["model"], "gpt-test");
    assert_eq!(data[2]["item"]["type"], "message");
    assert_eq!(
        data[4],
        json!({
            "type": "response.output_text.delta", "content_index": 0, "delta": "Hello,",
            "item_id": "msg_fake_1", "logprobs": [], "output_index": 0, "sequence_number": 4,
        })
    );
    assert_eq!(data[5]["delta"], " world!");
    assert_eq!(data[6]["text"], "Hello, world!");
    let response = &data[9]["response"];
    assert_eq!(response["status"], "completed");
    assert_eq!(response["id"], "resp_fake_1");
    assert_eq!(response["output"][0]["content"][0]["text"], "Hello, world!");
    assert_eq!(
        response["usage"],
        json!({
            "input_tokens": 10, "input_tokens_details": {"cached_tokens": 2},
            "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 1},
            "total_tokens": 15,
        })
    );
}

#[tokio::test]
async fn responses_tool_calls_stream_reasoning_summary_and_function_call_arguments() {
    let events = serve_one(tool_reply(), "/responses").await;
    let data: Vec<Value> = events.iter().map(Event::json).collect();
    let of = |kind: &str| -> Vec<&Value> { data.iter().filter(|d| d["type"] == kind).collect() };

    let summary = of("response.reasoning_summary_text.delta");
    assert_eq!(strs(summary.iter().map(|d| &d["delta"])), vec!["Let me", " look."]);
    assert_eq!(summary[0]["item_id"], "rs_fake_1");
    assert_eq!(of("response.reasoning_summary_text.done")[0]["text"], "Let me look.");

    let added = of("response.output_item.added");
    assert_eq!(added.len(), 3);
    assert_eq!(
        added[1]["item"],
        json!({
            "id": "fc_fake_1_0", "type": "function_call", "status": "in_progress",
            "arguments": "", "call_id": "call_1_0", "name": "read",
        })
    );
    assert_eq!(added[2]["item"]["call_id"], "call_custom");
    let deltas = of("response.function_call_arguments.delta");
    assert_eq!(deltas.len(), 6);
    let first: Vec<&str> = strs(deltas.iter().filter(|d| d["output_index"] == 1).map(|d| &d["delta"]));
    assert_eq!(first.len(), 4);
    assert_eq!(first.concat(), r#"{"filePath":"a.txt"}"#);
    let done = of("response.function_call_arguments.done");
    assert_eq!(
        strs(done.iter().map(|d| &d["arguments"])),
        vec![r#"{"filePath":"a.txt"}"#, r#"{"pattern":"*.rs"}"#]
    );

    let completed = data.last().unwrap();
    assert_eq!(completed["type"], "response.completed");
    let types = strs(completed["response"]["output"].as_array().unwrap().iter().map(|o| &o["type"]));
    assert_eq!(types, vec!["reasoning", "function_call", "function_call"]);
    assert_eq!(completed["response"]["output"][1]["status"], "completed");
}

#[tokio::test]
async fn anthropic_text_turn_streams_message_start_block_and_stop() {
    let reply = Reply::text("Hello, world!").with_text_chunks(2).with_usage(usage().with_cache_write(3));
    let events = serve_one(reply, "/v1/messages").await;

    assert_eq!(
        names(&events),
        vec![
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    let data: Vec<Value> = events.iter().map(Event::json).collect();
    for (event, data) in events.iter().zip(&data) {
        assert_eq!(data["type"], event.name.as_deref().unwrap());
    }
    let message = &data[0]["message"];
    assert_eq!(message["id"], "msg_fake_1");
    assert_eq!(message["model"], "gpt-test");
    assert_eq!(
        message["usage"],
        json!({"input_tokens": 5, "cache_creation_input_tokens": 3, "cache_read_input_tokens": 2, "output_tokens": 1})
    );
    assert_eq!(data[2]["content_block"], json!({"type": "text", "text": ""}));
    assert_eq!(
        data[3],
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello,"}})
    );
    assert_eq!(data[4]["delta"]["text"], " world!");
    assert_eq!(data[5], json!({"type": "content_block_stop", "index": 0}));
    assert_eq!(
        data[6],
        json!({
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": null},
            "usage": {"output_tokens": 5},
        })
    );
}

#[tokio::test]
async fn anthropic_tool_use_follows_a_signed_thinking_block() {
    let events = serve_one(tool_reply(), "/messages").await;
    let data: Vec<Value> = events.iter().map(Event::json).collect();
    let block = |index: u64| -> Vec<&Value> { data.iter().filter(|d| d["index"] == index).collect() };

    let thinking = block(0);
    assert_eq!(thinking[0]["content_block"], json!({"type": "thinking", "thinking": "", "signature": ""}));
    assert_eq!(strs(thinking[1..3].iter().map(|d| &d["delta"]["thinking"])).concat(), "Let me look.");
    assert_eq!(thinking[3]["delta"], json!({"type": "signature_delta", "signature": "fake-signature-1"}));
    assert_eq!(thinking[4]["type"], "content_block_stop");

    let read = block(1);
    assert_eq!(
        read[0]["content_block"],
        json!({"type": "tool_use", "id": "toolu_1_0", "name": "read", "input": {}})
    );
    let partial = strs(read[1..read.len() - 1].iter().map(|d| &d["delta"]["partial_json"]));
    assert_eq!(partial.len(), 4);
    assert_eq!(partial.concat(), r#"{"filePath":"a.txt"}"#);
    assert!(read[1..read.len() - 1].iter().all(|d| d["delta"]["type"] == "input_json_delta"));
    assert_eq!(block(2)[0]["content_block"]["id"], "call_custom");

    let message_delta = data.iter().find(|d| d["type"] == "message_delta").unwrap();
    assert_eq!(message_delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(data.last().unwrap()["type"], "message_stop");
}

#[tokio::test]
async fn finish_overrides_are_translated_per_format() {
    let length = || Reply::text("cut off").with_finish("length");
    let script =
        Script::new([Reply::tool_call("read", json!({})).with_finish("stop"), length(), length(), length()]);
    let provider = FakeProvider::start(script).await.unwrap();
    let base = provider.base_url();

    let (_, chat) = post_sse(&format!("{base}/chat/completions")).await;
    let finish = chat.iter().rev().nth(2).unwrap().json();
    assert_eq!(finish["choices"][0]["finish_reason"], "stop", "OpenAI quirk: stop with tool calls");
    let (_, chat) = post_sse(&format!("{base}/chat/completions")).await;
    assert_eq!(chat.iter().rev().nth(2).unwrap().json()["choices"][0]["finish_reason"], "length");

    let (_, anthropic) = post_sse(&format!("{base}/messages")).await;
    let message_delta = anthropic.iter().find(|e| e.name.as_deref() == Some("message_delta")).unwrap();
    assert_eq!(message_delta.json()["delta"]["stop_reason"], "max_tokens");

    let (_, responses) = post_sse(&format!("{base}/responses")).await;
    let last = responses.last().unwrap();
    assert_eq!(last.name.as_deref(), Some("response.incomplete"));
    assert_eq!(last.json()["response"]["status"], "incomplete");
    assert_eq!(last.json()["response"]["incomplete_details"], json!({"reason": "max_output_tokens"}));
}

#[tokio::test]
async fn twenty_thousand_deltas_arrive_complete() {
    let text = "word ".repeat(20_000);
    let provider =
        FakeProvider::start(Script::new([Reply::text(text.clone()).with_text_chunks(20_000)])).await.unwrap();
    let (_, events) = post_sse(&format!("{}/chat/completions", provider.base_url())).await;
    assert_eq!(events.len(), 20_004);
    let streamed: String = events[1..20_001]
        .iter()
        .map(|e| e.json()["choices"][0]["delta"]["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(streamed, text);
}
