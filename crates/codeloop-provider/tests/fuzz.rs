//! Fuzzing the SSE decoder and the four adapters beyond what `conformance.rs` covers (its properties
//! take arbitrary bytes in one chunk, SSE-shaped garbage, and chunk boundaries of ten fixtures):
//!
//! - every recorded fixture, cut at arbitrary byte boundaries, decodes to the same events as whole;
//! - arbitrary bytes cut at arbitrary boundaries never panic and decode as they do whole;
//! - recorded streams mutated the way broken servers and proxies break them (events dropped,
//!   repeated, swapped, cut, or with a JSON value of the wrong type) never panic, end exactly once
//!   with `Finish` or an error, and never name a tool call twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use codeloop_provider::{ProviderError, StreamEvent, WireApi, decode_sse};
use futures::StreamExt;
use proptest::prelude::*;
use proptest::sample::Index;

type Item = Result<StreamEvent, ProviderError>;

const FOLDERS: [(&str, WireApi); 4] = [
    ("openai-chat", WireApi::OpenAiChat),
    ("openai-responses", WireApi::OpenAiResponses),
    ("anthropic-messages", WireApi::Anthropic),
    ("gemini", WireApi::Gemini),
];

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Every recorded stream with the adapter that reads it.
fn fixtures() -> Vec<(String, WireApi, Vec<u8>)> {
    let mut all = Vec::new();
    for (folder, api) in FOLDERS {
        let Ok(entries) = std::fs::read_dir(fixtures_dir().join(folder)) else { continue };
        let mut paths: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
        paths.sort();
        for path in paths.into_iter().filter(|p| p.extension().is_some_and(|e| e == "sse")) {
            let name = format!("{folder}/{}", path.file_name().unwrap().to_string_lossy());
            all.push((name, api, std::fs::read(&path).unwrap()));
        }
    }
    assert!(all.len() >= 20, "the recorded fixtures are missing: {}", all.len());
    all
}

thread_local! {
    static RUNTIME: tokio::runtime::Runtime =
        tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
}

fn decode(api: WireApi, chunks: Vec<Bytes>) -> Vec<Item> {
    let body = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::convert::Infallible>));
    RUNTIME
        .with(|runtime| runtime.block_on(decode_sse(body, api.decoder(), Duration::from_secs(60)).collect()))
}

/// `bytes` cut at the given positions (deduplicated, in order).
fn cut(bytes: &[u8], cuts: &[Index]) -> Vec<Bytes> {
    let mut positions: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len().max(1))).collect();
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
    chunks
}

/// The stream's grammar at its ends: exactly one terminal item (`Finish` or an error), last; and no
/// tool call id completed twice.
fn assert_well_ended(name: &str, items: &[Item]) {
    assert_ends_once(name, items);
    assert_calls_once(name, items);
}

fn assert_ends_once(name: &str, items: &[Item]) {
    let terminal: Vec<usize> = items
        .iter()
        .enumerate()
        .filter(|(_, i)| matches!(i, Ok(StreamEvent::Finish) | Err(_)))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(terminal, vec![items.len() - 1], "{name}: one terminal item, last: {items:?}");
}

fn assert_calls_once(name: &str, items: &[Item]) {
    let mut calls = HashSet::new();
    for item in items {
        if let Ok(StreamEvent::ToolCall(call)) = item {
            assert!(calls.insert(call.call_id.clone()), "{name}: call {} completed twice", call.call_id);
        }
    }
}

/// The SSE events of a body (`event:`/`data:` blocks), without their blank-line separators.
fn sse_events(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes).replace("\r\n", "\n");
    text.split("\n\n").filter(|e| !e.trim().is_empty()).map(str::to_owned).collect()
}

fn join(events: &[String]) -> Vec<u8> {
    let mut body = String::new();
    for event in events {
        body.push_str(event);
        body.push_str("\n\n");
    }
    body.into_bytes()
}

/// A way broken servers and proxies damage a stream.
#[derive(Debug, Clone)]
enum Mutation {
    Drop(Index),
    Repeat(Index),
    Swap(Index, Index),
    CutAt(Index),
    /// Replaces the first number or string value in an event's JSON by one of the wrong type.
    WrongType(Index, bool),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<Index>().prop_map(Mutation::Drop),
        any::<Index>().prop_map(Mutation::Repeat),
        (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        any::<Index>().prop_map(Mutation::CutAt),
        (any::<Index>(), any::<bool>()).prop_map(|(i, b)| Mutation::WrongType(i, b)),
    ]
}

fn wrong_type(event: &str, number_to_string: bool) -> String {
    let Some((head, data)) = event.split_once("data: ") else { return event.to_owned() };
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(data) else { return event.to_owned() };
    fn flip(value: &mut serde_json::Value, number_to_string: bool) -> bool {
        match value {
            serde_json::Value::Number(n) if number_to_string => {
                *value = serde_json::Value::String(n.to_string());
                true
            }
            serde_json::Value::String(_) if !number_to_string => {
                *value = serde_json::json!(7);
                true
            }
            serde_json::Value::Object(map) => map.values_mut().any(|v| flip(v, number_to_string)),
            serde_json::Value::Array(items) => items.iter_mut().any(|v| flip(v, number_to_string)),
            _ => false,
        }
    }
    flip(&mut value, number_to_string);
    format!("{head}data: {value}")
}

fn mutate(mut events: Vec<String>, mutations: &[Mutation]) -> Vec<String> {
    for m in mutations {
        if events.is_empty() {
            break;
        }
        let n = events.len();
        match m {
            Mutation::Drop(i) => {
                events.remove(i.index(n));
            }
            Mutation::Repeat(i) => {
                let at = i.index(n);
                events.insert(at, events[at].clone());
            }
            Mutation::Swap(a, b) => events.swap(a.index(n), b.index(n)),
            Mutation::CutAt(i) => events.truncate(i.index(n)),
            Mutation::WrongType(i, flip) => {
                let at = i.index(n);
                events[at] = wrong_type(&events[at], *flip);
            }
        }
    }
    events
}

/// 24 cases per property; `CODELOOP_FUZZ_CASES=N` for a longer hunt.
fn cases() -> u32 {
    std::env::var("CODELOOP_FUZZ_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(24)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_fixture_cut_anywhere_decodes_as_it_does_whole(cuts in prop::collection::vec(any::<Index>(), 1..48)) {
        for (name, api, bytes) in fixtures() {
            let whole = decode(api, vec![Bytes::from(bytes.clone())]);
            let pieces = decode(api, cut(&bytes, &cuts));
            prop_assert_eq!(&pieces, &whole, "{}", name);
            assert_well_ended(&name, &whole);
        }
    }

    #[test]
    fn arbitrary_bytes_cut_anywhere_decode_as_they_do_whole(
        bytes in prop::collection::vec(
            prop_oneof![
                4 => any::<u8>(),
                2 => Just(b'\n'),
                1 => Just(b'\r'),
                1 => Just(b':'),
                1 => Just(0xEF_u8),
            ],
            0..400,
        ),
        cuts in prop::collection::vec(any::<Index>(), 0..24),
        api in 0..4usize,
    ) {
        let api = FOLDERS[api].1;
        let whole = decode(api, vec![Bytes::from(bytes.clone())]);
        assert_well_ended("arbitrary bytes", &whole);
        let pieces = decode(api, cut(&bytes, &cuts));
        prop_assert_eq!(pieces, whole);
    }

    #[test]
    fn mutated_recordings_never_panic_and_end_exactly_once(
        fixture in any::<Index>(),
        mutations in prop::collection::vec(mutation(), 1..5),
        cuts in prop::collection::vec(any::<Index>(), 0..8),
    ) {
        let all = fixtures();
        let (name, api, bytes) = &all[fixture.index(all.len())];
        let body = join(&mutate(sse_events(bytes), &mutations));
        let items = decode(*api, cut(&body, &cuts));
        assert_well_ended(&format!("{name} after {mutations:?}"), &items);
    }
}

#[test]
fn a_byte_order_mark_split_over_three_chunks_is_skipped() {
    let body = b"\xEF\xBB\xBFdata: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let whole = decode(WireApi::OpenAiChat, vec![Bytes::from_static(body)]);
    let split = decode(
        WireApi::OpenAiChat,
        vec![Bytes::from_static(&body[..1]), Bytes::from_static(&body[1..2]), Bytes::from_static(&body[2..])],
    );
    assert_eq!(split, whole);
    assert!(whole.iter().any(|i| matches!(i, Ok(StreamEvent::TextDelta { text, .. }) if text == "hi")));
}

/// Events other than plain text or reasoning deltas (those only append; repeating each of the hundreds
/// in the long fixtures tells nothing new and costs seconds).
fn structural(event: &str) -> bool {
    let text_delta = event.contains("_text.delta\"")
        || event.contains("\"text_delta\"")
        || event.contains("\"thinking_delta\"")
        || event.contains("\"delta\":{\"content\"")
        || event.contains("\"delta\":{\"reasoning");
    !text_delta
}

/// Every fixture of `apis` with each single event repeated (a proxy replaying an event): whatever the
/// adapter makes of it, the stream ends once and no call completes twice. Returns what broke.
fn repeated_event_failures(apis: &[WireApi]) -> Vec<String> {
    let mut failures = Vec::new();
    for (name, api, bytes) in fixtures().into_iter().filter(|f| apis.contains(&f.1)) {
        let events = sse_events(&bytes);
        for at in (0..events.len()).filter(|at| structural(&events[*at])) {
            let mut repeated = events.clone();
            repeated.insert(at, events[at].clone());
            let items = decode(api, vec![Bytes::from(join(&repeated))]);
            let outcome = std::panic::catch_unwind(|| assert_well_ended(&name, &items));
            if outcome.is_err() {
                let kind = events[at].lines().next().unwrap_or_default().to_owned();
                failures.push(format!("{name}: event {at} ({kind})"));
            }
        }
    }
    failures
}

#[test]
fn repeating_any_single_structural_event_never_completes_a_call_twice() {
    let failures = repeated_event_failures(&FOLDERS.map(|(_, api)| api));
    assert!(
        failures.is_empty(),
        "{} repeated events broke a stream:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
