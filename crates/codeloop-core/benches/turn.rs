//! Per-turn overhead as the session grows: one prompt → one text answer from the fake provider over HTTP,
//! on sessions holding 10, 100, 1 000 and 10 000 stored parts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use codeloop_core::{Delivery, PromptInput};
use codeloop_store::Write;
use codeloop_testkit::{FakeProvider, Recording, Reply, Script, Turn};
use codeloop_types::{
    AssistantMessage, Finish, Message, MessageId, MessagePath, MessageTime, ModelRef, Part, PartKind,
    SessionId, TextPart, ToolPart, ToolState, UserMessage, now_ms,
};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use serde_json::json;

/// Fills a session with `parts` parts: turns of a user text, and an assistant text + a completed read call.
fn populate(engine: &codeloop_core::Engine, session: &SessionId, parts: usize) {
    let model = ModelRef::new("fake", "test");
    let mut batch = Vec::new();
    let mut written = 0;
    while written < parts {
        let user_id = MessageId::new();
        batch.push(Write::Message(Message::User(UserMessage {
            id: user_id.clone(),
            session_id: session.clone(),
            time: MessageTime { created: now_ms(), completed: None },
            agent: "build".into(),
            model: model.clone(),
            system: None,
            format: None,
            command: None,
            effort: None,
            allowed_tools: Vec::new(),
        })));
        batch.push(Write::Part(Part::user_text(
            session.clone(),
            user_id.clone(),
            "please look at src/lib.rs",
        )));
        let mut assistant = AssistantMessage::new(
            session.clone(),
            user_id,
            "build",
            model.clone(),
            MessagePath { cwd: ".".into(), root: ".".into() },
        );
        assistant.finish = Some(Finish::Stop);
        assistant.time.completed = Some(now_ms());
        let id = assistant.id.clone();
        batch.push(Write::Message(Message::Assistant(assistant)));
        batch.push(Write::Part(Part::new(
            session.clone(),
            id.clone(),
            PartKind::Text(TextPart {
                text: "Reading the file to check the function.".into(),
                ..Default::default()
            }),
        )));
        let mut state = ToolState::default();
        state.start(json!({"filePath": "src/lib.rs"}), now_ms()).unwrap();
        state
            .complete("1: fn main() {}\n".repeat(20), "src/lib.rs".into(), json!({}), vec![], now_ms())
            .unwrap();
        batch.push(Write::Part(Part::new(
            session.clone(),
            id,
            PartKind::Tool(ToolPart {
                call_id: format!("call_{written}"),
                tool: "read".into(),
                state,
                metadata: None,
                ignored: false,
            }),
        )));
        written += 3;
    }
    engine.store().apply(&batch).unwrap();
}

const STEPS: usize = 5;

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let one_step = runtime
        .block_on(FakeProvider::start_with(
            "127.0.0.1:0".parse().unwrap(),
            Script::new([Turn::from(Reply::text("ok"))]).repeating(),
            Recording::CountOnly,
        ))
        .unwrap();
    // Four tool steps then an answer: the difference to one step is the cost of four more steps inside a
    // run, where history is already in memory.
    let mut turns: Vec<Turn> = (0..STEPS - 1)
        .map(|i| Turn::from(Reply::tool_call("read", json!({"filePath": format!("f{i}.txt")}))))
        .collect();
    turns.push(Turn::from(Reply::text("done")));
    let five_steps = runtime
        .block_on(FakeProvider::start_with(
            "127.0.0.1:0".parse().unwrap(),
            Script::new(turns).repeating(),
            Recording::CountOnly,
        ))
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    for i in 0..STEPS {
        std::fs::write(project.path().join(format!("f{i}.txt")), "x\n").unwrap();
    }
    let mut group = c.benchmark_group("turn");
    group.sample_size(10);
    for (name, fake) in
        [("one_step_run_at_stored_parts", &one_step), ("five_step_run_at_stored_parts", &five_steps)]
    {
        let engine = common::engine(&data.path().join(name), &fake.base_url());
        for parts in [10usize, 100, 1_000, 10_000] {
            // A fresh session per iteration, so the measured run always starts with exactly `parts` parts.
            group.bench_with_input(BenchmarkId::new(name, parts), &parts, |b, &parts| {
                b.iter_batched(
                    || {
                        let session = runtime
                            .block_on(engine.create_session(project.path(), None, None, None))
                            .unwrap();
                        populate(&engine, &session.id, parts);
                        session.id
                    },
                    |session| {
                        runtime.block_on(async {
                            engine
                                .prompt(&session, PromptInput::text("next"), Delivery::Queue)
                                .await
                                .unwrap();
                        })
                    },
                    criterion::BatchSize::PerIteration,
                )
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
