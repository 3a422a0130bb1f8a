//! Decoding throughput: a recorded-style OpenAI Chat stream with 20 000 text deltas, built in memory and
//! delivered in 16 KiB reads, through eventsource-stream and the Chat decoder.

#![allow(clippy::unwrap_used)] // a benchmark, not library code

use std::time::Duration;

use bytes::Bytes;
use codeloop_provider::{WireApi, decode_sse};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures::StreamExt;

const DELTAS: usize = 20_000;
const READ_SIZE: usize = 16 * 1024;

/// A body shaped like OpenAI's: every chunk repeats id, model and fingerprint, with an obfuscation pad.
fn chat_body() -> Vec<u8> {
    let mut body = String::new();
    let head = r#""id":"chatcmpl-BENCH0000000000000000000000","object":"chat.completion.chunk","created":1754000000,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_560af6e559""#;
    body.push_str(&format!(
        "data: {{{head},\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null}},\"logprobs\":null,\"finish_reason\":null}}],\"obfuscation\":\"x1\"}}\n\n"
    ));
    for i in 0..DELTAS {
        let word = match i % 4 {
            0 => " the",
            1 => " quick\\n",
            2 => " \\\"fox\\\"",
            _ => " jumps",
        };
        body.push_str(&format!(
            "data: {{{head},\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{word}\"}},\"logprobs\":null,\"finish_reason\":null}}],\"obfuscation\":\"Ab3dE\"}}\n\n"
        ));
    }
    body.push_str(&format!(
        "data: {{{head},\"choices\":[{{\"index\":0,\"delta\":{{}},\"logprobs\":null,\"finish_reason\":\"stop\"}}],\"obfuscation\":\"q\"}}\n\n"
    ));
    body.push_str(&format!(
        "data: {{{head},\"choices\":[],\"usage\":{{\"prompt_tokens\":20,\"completion_tokens\":{DELTAS},\"total_tokens\":{},\"prompt_tokens_details\":{{\"cached_tokens\":0}},\"completion_tokens_details\":{{\"reasoning_tokens\":0}}}}}}\n\n",
        DELTAS + 20
    ));
    body.push_str("data: [DONE]\n\n");
    body.into_bytes()
}

fn decode(runtime: &tokio::runtime::Runtime, chunks: Vec<Bytes>) -> usize {
    let body = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::convert::Infallible>));
    let events = decode_sse(body, WireApi::OpenAiChat.decoder(), Duration::from_secs(120));
    runtime.block_on(events.fold(0, |n, item| async move {
        assert!(item.is_ok(), "{item:?}");
        n + 1
    }))
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let body = chat_body();
    let chunks: Vec<Bytes> = body.chunks(READ_SIZE).map(Bytes::copy_from_slice).collect();
    // Start, StartStep, TextStart, deltas, TextEnd, FinishStep, Finish.
    assert_eq!(decode(&runtime, chunks.clone()), DELTAS + 6);

    let mut group = c.benchmark_group("decode/openai-chat-20k-deltas");
    group.sample_size(20);
    group.throughput(Throughput::Elements(DELTAS as u64));
    group.bench_function("events", |b| b.iter(|| decode(&runtime, chunks.clone())));
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("bytes", |b| b.iter(|| decode(&runtime, chunks.clone())));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
