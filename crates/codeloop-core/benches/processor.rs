//! Streamed text deltas through the processor and the store: the per-delta cost of the hot path
//! (part update, bus delta event, coalesced persistence), without HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use codeloop_core::ToolGate;
use codeloop_core::doom_loop::DoomLoopGuard;
use codeloop_core::models::ModelPricing;
use codeloop_core::processor::{Processor, TurnContext};
use codeloop_provider::{EventStream, Provider, ProviderError, ProviderRequest, StreamEvent, Usage};
use codeloop_tools::ProjectPaths;
use codeloop_types::{AssistantMessage, Finish, MessageId, MessagePath, ModelRef};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

const DELTAS: usize = 20_000;

struct Replay(std::sync::Mutex<Option<Vec<StreamEvent>>>);

impl Provider for Replay {
    fn stream(&self, _request: Arc<ProviderRequest>) -> BoxFuture<'_, Result<EventStream, ProviderError>> {
        let events = self.0.lock().unwrap().take().unwrap_or_default();
        Box::pin(
            async move { Ok(Box::pin(futures::stream::iter(events.into_iter().map(Ok))) as EventStream) },
        )
    }
}

fn events() -> Vec<StreamEvent> {
    let mut events =
        vec![StreamEvent::Start, StreamEvent::StartStep, StreamEvent::TextStart { id: "t".into() }];
    for i in 0..DELTAS {
        events.push(StreamEvent::TextDelta { id: "t".into(), text: format!("word{} ", i % 10) });
    }
    events.push(StreamEvent::TextEnd { id: "t".into() });
    events.push(StreamEvent::FinishStep {
        finish: Finish::Stop,
        raw_finish: None,
        usage: Some(Usage::default()),
    });
    events.push(StreamEvent::Finish);
    events
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let data = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let engine = common::engine(data.path(), "http://127.0.0.1:9/v1");
    let session = runtime.block_on(engine.create_session(project.path(), None, None, None)).unwrap();
    let ctx = Arc::new(TurnContext {
        journal: engine.services().journal.clone(),
        gate: Arc::new(ToolGate::new(
            engine.services().clone(),
            std::sync::Arc::new(engine.coordinator().clone()),
            session.id.clone(),
            None,
            Arc::new(Vec::new()),
            Arc::new(Vec::new()),
            project.path().display().to_string(),
        )),
        project: ProjectPaths::new(project.path(), project.path()),
        tool_output_dir: engine.services().tool_output_dir.clone(),
        limits: engine.services().limits(),
        pricing: ModelPricing::default(),
        overflow_at: None,
        tools_enabled: true,
        summary: false,
        estimated_input_tokens: 0,
        tools: engine.services().tools.clone(),
        offered: engine.services().tools.names().iter().map(|n| n.to_string()).collect(),
        continue_on_reject: false,
        walls: None,
        seen: None,
    });
    let template = events();
    let mut group = c.benchmark_group("processor");
    group.throughput(Throughput::Elements(DELTAS as u64));
    group.sample_size(20);
    group.bench_function("text_deltas_20k_with_store", |b| {
        b.iter_batched(
            || Replay(std::sync::Mutex::new(Some(template.clone()))),
            |provider| {
                runtime.block_on(async {
                    let message = AssistantMessage::new(
                        session.id.clone(),
                        MessageId::new(),
                        "build",
                        ModelRef::new("fake", "test"),
                        MessagePath { cwd: String::new(), root: String::new() },
                    );
                    let mut processor = Processor::new(ctx.clone(), message);
                    let cancel = CancellationToken::new();
                    let mut doom = DoomLoopGuard::default();
                    processor.attempt(&provider, Arc::default(), &cancel, &mut doom).await;
                    processor.finish(None, None);
                    engine.flush().await.unwrap();
                })
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
