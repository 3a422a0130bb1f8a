//! Conformance against recorded real-provider streams (`tests/fixtures`, see SOURCES.md): every body is
//! replayed through eventsource-stream and the format's decoder, whole and split into small random
//! chunks, and the result is compared with `expected.json`. Property tests check that no input panics
//! and that chunk boundaries never change the events.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use codeloop_provider::{ProviderError, StreamEvent, Usage, WireApi, decode_sse, parse_arguments};
use futures::StreamExt;
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use serde_json::Value;

type Item = Result<StreamEvent, ProviderError>;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn expected() -> serde_json::Map<String, Value> {
    let text = std::fs::read_to_string(fixtures().join("expected.json")).unwrap();
    let Value::Object(map) = serde_json::from_str(&text).unwrap() else {
        panic!("expected.json is an object")
    };
    map
}

fn api_of(folder: &str) -> WireApi {
    match folder {
        "openai-chat" => WireApi::OpenAiChat,
        "openai-responses" => WireApi::OpenAiResponses,
        "anthropic-messages" => WireApi::Anthropic,
        "gemini" => WireApi::Gemini,
        other => panic!("no decoder for {other}"),
    }
}

/// Decodes a body delivered in the given chunks, collecting every item up to the end of the stream.
fn decode(api: WireApi, chunks: Vec<Bytes>) -> Vec<Item> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let body = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::convert::Infallible>));
    runtime.block_on(decode_sse(body, api.decoder(), Duration::from_secs(60)).collect())
}

/// Splits `bytes` into chunks of 1..=max bytes, deterministically from `seed`.
fn split(bytes: &[u8], seed: u64, max: usize) -> Vec<Bytes> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut chunks = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let len = ((state >> 33) as usize % max + 1).min(rest.len());
        chunks.push(Bytes::copy_from_slice(&rest[..len]));
        rest = &rest[len..];
    }
    chunks
}

#[derive(Debug, Default)]
struct Call {
    id: String,
    name: String,
    input: Option<Result<Value, String>>,
    metadata: Option<Value>,
    streamed: String,
}

/// What a consumer sees in a decoded stream.
#[derive(Debug, Default)]
struct Summary {
    text_parts: Vec<String>,
    refusal: String,
    reasoning_parts: Vec<String>,
    reasoning_metadata: Vec<Value>,
    calls: Vec<Call>,
    raw_finish: Option<String>,
    finish_steps: usize,
    usage: Option<Usage>,
    error: Option<ProviderError>,
}

/// Builds the summary and checks the event grammar on the way: `Start`, `StartStep`, blocks opened
/// before their deltas and closed once, tool inputs started before deltas and ended before their call,
/// `FinishStep` then `Finish` last, and nothing after an error.
fn summarise(items: &[Item]) -> Summary {
    let mut s = Summary::default();
    let mut open_text: HashMap<String, usize> = HashMap::new();
    let mut open_reasoning: HashMap<String, usize> = HashMap::new();
    let mut open_calls: HashMap<String, usize> = HashMap::new();
    let mut finished = false;
    for (n, item) in items.iter().enumerate() {
        assert!(s.error.is_none(), "item after an error: {item:?}");
        assert!(!finished, "item after Finish: {item:?}");
        let event = match item {
            Ok(event) => event,
            Err(e) => {
                s.error = Some(e.clone());
                continue;
            }
        };
        match n {
            0 => assert_eq!(event, &StreamEvent::Start),
            1 => assert_eq!(event, &StreamEvent::StartStep),
            _ => assert!(!matches!(event, StreamEvent::Start | StreamEvent::StartStep), "{event:?} again"),
        }
        match event {
            StreamEvent::Start | StreamEvent::StartStep => {}
            StreamEvent::TextStart { id } => {
                assert!(open_text.insert(id.clone(), s.text_parts.len()).is_none(), "text {id} opened twice");
                s.text_parts.push(String::new());
            }
            StreamEvent::TextDelta { id, text } => {
                let part = open_text[id];
                if id.starts_with("refusal") {
                    s.refusal.push_str(text);
                } else {
                    s.text_parts[part].push_str(text);
                }
            }
            StreamEvent::TextEnd { id } => {
                assert!(open_text.remove(id).is_some(), "text {id} closed but not open");
            }
            StreamEvent::ReasoningStart { id, .. } => {
                assert!(open_reasoning.insert(id.clone(), s.reasoning_parts.len()).is_none());
                s.reasoning_parts.push(String::new());
            }
            StreamEvent::ReasoningDelta { id, text } => s.reasoning_parts[open_reasoning[id]].push_str(text),
            StreamEvent::ReasoningEnd { id, metadata } => {
                assert!(open_reasoning.remove(id).is_some(), "reasoning {id} closed but not open");
                if let Some(metadata) = metadata {
                    s.reasoning_metadata.push(metadata.clone());
                }
            }
            StreamEvent::ToolInputStart { call_id, name } => {
                assert!(open_calls.insert(call_id.clone(), s.calls.len()).is_none(), "call {call_id} twice");
                s.calls.push(Call { id: call_id.clone(), name: name.clone(), ..Call::default() });
            }
            StreamEvent::ToolInputDelta { call_id, delta } => {
                s.calls[open_calls[call_id]].streamed.push_str(delta)
            }
            StreamEvent::ToolInputEnd { call_id } => assert!(open_calls.contains_key(call_id)),
            StreamEvent::ToolCall(call) => {
                let slot = open_calls.remove(&call.call_id).expect("ToolCall after ToolInputStart");
                let entry = &mut s.calls[slot];
                assert_eq!(entry.name, call.name);
                entry.input = Some(call.input.clone().map_err(|e| e.raw));
                entry.metadata = call.metadata.clone();
            }
            StreamEvent::FinishStep { raw_finish, usage, .. } => {
                assert!(open_text.is_empty() && open_reasoning.is_empty(), "blocks open at FinishStep");
                assert!(open_calls.is_empty(), "tool calls open at FinishStep");
                s.finish_steps += 1;
                s.raw_finish = raw_finish.clone();
                s.usage = *usage;
            }
            StreamEvent::Finish => {
                assert_eq!(s.finish_steps, 1, "Finish without FinishStep");
                finished = true;
            }
        }
    }
    assert!(finished || s.error.is_some(), "stream ended without Finish or an error");
    s
}

fn count(usage: &Value, key: &str) -> u64 {
    usage.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// The normalised usage that expected.json's provider-meaning numbers correspond to.
fn expected_usage(api: WireApi, usage: &Value) -> Usage {
    let raw = &usage["raw"];
    match api {
        WireApi::OpenAiChat | WireApi::Azure => {
            let (prompt, completion, reasoning) = (
                count(usage, "input_tokens"),
                count(usage, "output_tokens"),
                count(usage, "reasoning_tokens"),
            );
            let total = usage["total_tokens"].as_u64();
            let cached = count(usage, "cached_input_tokens");
            let cache_write = count(&raw["prompt_tokens_details"], "cache_write_tokens");
            // xAI counts reasoning outside completion_tokens; OpenAI inside.
            let outside = reasoning > 0 && total == Some(prompt + completion + reasoning);
            Usage {
                input: prompt - cached - cache_write,
                output: if outside { completion } else { completion.saturating_sub(reasoning) },
                reasoning,
                cache_read: cached,
                cache_write,
                total,
            }
        }
        WireApi::OpenAiResponses => {
            let cached = count(usage, "cached_input_tokens");
            let reasoning = count(usage, "reasoning_tokens");
            Usage {
                input: count(usage, "input_tokens") - cached,
                output: count(usage, "output_tokens") - reasoning,
                reasoning,
                cache_read: cached,
                cache_write: 0,
                total: usage["total_tokens"].as_u64(),
            }
        }
        WireApi::Anthropic => Usage {
            input: count(usage, "input_tokens"),
            output: count(usage, "output_tokens"),
            reasoning: 0,
            cache_read: count(usage, "cache_read_input_tokens"),
            cache_write: count(usage, "cache_creation_input_tokens"),
            total: None,
        },
        // promptTokenCount includes the cached tokens; candidatesTokenCount excludes thinking.
        WireApi::Gemini => {
            let cached = count(usage, "cached_input_tokens");
            Usage {
                input: count(usage, "input_tokens") - cached,
                output: count(usage, "output_tokens"),
                reasoning: count(usage, "reasoning_tokens"),
                cache_read: cached,
                cache_write: 0,
                total: usage["total_tokens"].as_u64(),
            }
        }
    }
}

fn check(name: &str, api: WireApi, expected: &Value, s: &Summary) {
    let text: String = s.text_parts.concat();
    assert_eq!(text, expected["text"].as_str().unwrap_or(""), "{name}: text");
    if let Some(parts) = expected.get("text_parts").and_then(Value::as_array) {
        let parts: Vec<&str> = parts.iter().filter_map(Value::as_str).collect();
        assert_eq!(s.text_parts, parts, "{name}: text parts");
    }
    assert_eq!(s.refusal, expected.get("refusal").and_then(Value::as_str).unwrap_or(""), "{name}: refusal");

    let parts: Vec<&str> = s.reasoning_parts.iter().map(String::as_str).filter(|p| !p.is_empty()).collect();
    let reasoning = match api {
        WireApi::OpenAiChat | WireApi::Gemini => parts.concat(),
        _ => parts.join("\n\n"),
    };
    assert_eq!(reasoning, expected["reasoning"].as_str().unwrap_or(""), "{name}: reasoning");

    // What must be sent back with reasoning: encrypted content, signatures, redacted data.
    let metadata = |format: &str, key: &str| -> Vec<String> {
        s.reasoning_metadata.iter().filter_map(|m| m[format][key].as_str().map(str::to_owned)).collect()
    };
    if let Some(n) = expected.get("encrypted_reasoning_items").and_then(Value::as_u64) {
        assert_eq!(metadata("openai", "encrypted_content").len() as u64, n, "{name}: encrypted reasoning");
    }
    let strings = |key: &str| -> Vec<String> {
        expected
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    };
    if api == WireApi::Anthropic {
        assert_eq!(metadata("anthropic", "signature"), strings("thinking_signatures"), "{name}: signatures");
        assert_eq!(
            metadata("anthropic", "redacted_data"),
            strings("redacted_thinking_data"),
            "{name}: redacted"
        );
    }
    if api == WireApi::Gemini {
        // Signatures ride on reasoning blocks (thought and text parts) and on tool calls (function-call
        // parts), to be sent back where they came from.
        let on_calls =
            s.calls.iter().filter_map(|c| c.metadata.as_ref()?["gemini"]["thought_signature"].as_str());
        let mut got: Vec<String> =
            metadata("gemini", "thought_signature").into_iter().chain(on_calls.map(str::to_owned)).collect();
        let mut want = strings("thought_signatures");
        got.sort();
        want.sort();
        assert_eq!(got, want, "{name}: thought signatures");
    }

    let calls = expected["tool_calls"].as_array().unwrap();
    assert_eq!(s.calls.len(), calls.len(), "{name}: tool call count {:?}", s.calls);
    for (call, want) in s.calls.iter().zip(calls) {
        if let Some(id) = want["id"].as_str() {
            assert_eq!(call.id, id, "{name}: call id");
            if api == WireApi::Gemini {
                let kept = call.metadata.as_ref().and_then(|m| m["gemini"]["id"].as_str());
                assert_eq!(kept, Some(id), "{name}: Gemini's call id kept for echoing back");
            }
        }
        assert_eq!(call.name, want["name"].as_str().unwrap(), "{name}: call name");
        let raw = want["arguments_raw"].as_str().unwrap_or("");
        if api == WireApi::Gemini {
            // Gemini sends arguments whole, as an object: the one delta is its JSON text.
            let streamed = parse_arguments(&call.streamed).map_err(|e| e.raw);
            assert_eq!(streamed, Ok(want["arguments"].clone()), "{name}: streamed arguments of {}", call.id);
        } else {
            assert_eq!(call.streamed, raw, "{name}: streamed arguments of {}", call.id);
        }
        if let Some(item_id) = want.get("item_id").and_then(Value::as_str) {
            let got = call.metadata.as_ref().and_then(|m| m["openai"]["item_id"].as_str());
            assert_eq!(got, Some(item_id), "{name}: Responses item id kept for echoing back");
        }
        let input = call.input.clone().expect("call completed");
        if want.get("arguments_valid_json") == Some(&Value::Bool(false)) {
            assert_eq!(input, Err(raw.to_owned()), "{name}: invalid arguments are kept raw");
        } else {
            assert_eq!(input, Ok(want["arguments"].clone()), "{name}: arguments");
        }
    }

    let want_error = &expected["error"];
    match (&s.error, want_error.is_null()) {
        (None, true) => {}
        (Some(error), false) => {
            if let Some(message) = want_error["message"].as_str() {
                assert!(error.to_string().contains(message), "{name}: error {error} lacks {message}");
            }
        }
        (got, _) => panic!("{name}: error {got:?}, expected {want_error}"),
    }

    let want_finish = expected["finish_reason"].as_str();
    if s.finish_steps == 0 {
        // A stream that fails before finishing: the error is its end.
        assert!(s.error.is_some(), "{name}: no FinishStep and no error");
        assert!(matches!(want_finish, None | Some("failed")), "{name}: expected finish {want_finish:?}");
        return;
    }
    assert_eq!(s.raw_finish.as_deref(), want_finish, "{name}: finish reason");
    let want_usage = (!expected["usage"].is_null()).then(|| expected_usage(api, &expected["usage"]));
    assert_eq!(s.usage, want_usage, "{name}: usage");
}

fn run_fixture(name: &str, expected: &Value) {
    let (folder, _) = name.split_once('/').unwrap();
    let api = api_of(folder);
    let bytes = std::fs::read(fixtures().join(name)).unwrap();
    let whole = decode(api, vec![Bytes::from(bytes.clone())]);
    let summary = summarise(&whole);
    check(name, api, expected, &summary);
    for seed in 0..4 {
        let split = decode(api, split(&bytes, seed, 1 + seed as usize * 5));
        assert_eq!(split, whole, "{name}: split into chunks (seed {seed}) changes the events");
    }
}

fn run_folder(folder: &str, count: usize) {
    let expected = expected();
    let names: Vec<&String> = expected.keys().filter(|k| k.starts_with(&format!("{folder}/"))).collect();
    assert_eq!(names.len(), count, "fixtures for {folder}");
    for name in names {
        run_fixture(name, &expected[name.as_str()]);
    }
}

#[test]
fn openai_chat_fixtures_match_expected() {
    run_folder("openai-chat", 27);
}

#[test]
fn openai_responses_fixtures_match_expected() {
    run_folder("openai-responses", 11);
}

#[test]
fn anthropic_fixtures_match_expected() {
    run_folder("anthropic-messages", 13);
}

#[test]
fn gemini_fixtures_match_expected() {
    run_folder("gemini", 8);
}

const APIS: [WireApi; 4] =
    [WireApi::OpenAiChat, WireApi::OpenAiResponses, WireApi::Anthropic, WireApi::Gemini];

fn fixture_bytes(name: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(name)).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512), api in 0..4usize) {
        let api = APIS[api];
        let items = decode(api, vec![Bytes::from(bytes)]);
        // Whatever the input, the stream ends with Finish or an error.
        let last = items.last();
        prop_assert!(matches!(last, Some(Ok(StreamEvent::Finish)) | Some(Err(_))), "{last:?}");
    }

    #[test]
    fn sse_shaped_garbage_never_panics(
        lines in proptest::collection::vec(
            prop_oneof![
                Just("data: [DONE]".to_owned()),
                Just(String::new()),
                Just("event: error".to_owned()),
                "data: \\{\"choices\":\\[\\{\"delta\":\\{\"content\":\"[a-z]{0,5}\"\\}\\}\\]\\}",
                "data: \\{\"type\":\"[a-z_.]{0,30}\"\\}",
                "data: [ -~]{0,40}",
            ],
            0..20,
        ),
        api in 0..4usize,
    ) {
        let api = APIS[api];
        let body = lines.join("\n") + "\n\n";
        let items = decode(api, vec![Bytes::from(body)]);
        prop_assert!(matches!(items.last(), Some(Ok(StreamEvent::Finish)) | Some(Err(_))));
    }

    #[test]
    fn chunk_boundaries_do_not_change_events(
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..40),
        fixture in prop::sample::select(vec![
            "openai-chat/openai-gpt-4o-parallel-tool-calls.sse",
            "openai-chat/deepseek-reasoner-reasoning-then-tool-call.sse",
            "openai-chat/openrouter-claude-sonnet-4.5-reasoning-text.sse",
            "openai-chat/anthropic-compat-gateway-tool-call-index-1.sse",
            "openai-responses/openai-o4-mini-reasoning-summary-then-text.sse",
            "openai-responses/lmstudio-glm-4.7-flash-reasoning-text-function-call-no-deltas.sse",
            "anthropic-messages/claude-sonnet-4-thinking-signature-tool-use.sse",
            "anthropic-messages/claude-3-7-sonnet-max-tokens-truncated-tool-json.sse",
            "gemini/gemini-2.5-pro-thoughts-then-long-text.sse",
            "gemini/gemini-2.5-pro-parallel-function-calls.sse",
        ]),
    ) {
        let (folder, _) = fixture.split_once('/').unwrap();
        let api = api_of(folder);
        let bytes = fixture_bytes(fixture);
        let mut positions: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len())).collect();
        positions.sort_unstable();
        positions.dedup();
        let mut chunks = Vec::new();
        let mut start = 0;
        for end in positions.into_iter().chain([bytes.len()]) {
            if end > start {
                chunks.push(Bytes::copy_from_slice(&bytes[start..end]));
                start = end;
            }
        }
        let whole = decode(api, vec![Bytes::from(bytes)]);
        prop_assert_eq!(decode(api, chunks), whole);
    }
}

#[test]
fn a_leading_byte_order_mark_is_skipped() {
    let body = "\u{feff}data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    for chunks in [vec![Bytes::from(body)], split(body.as_bytes(), 7, 2)] {
        let summary = summarise(&decode(WireApi::OpenAiChat, chunks));
        assert_eq!(summary.text_parts, vec!["hi".to_owned()]);
    }
}
