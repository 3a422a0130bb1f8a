//! Store benchmarks (DESIGN.md §6): persisting a long streamed answer through the batched writer, and
//! loading a session of 10 000 parts. Before the timed runs it prints the database size of 1 000 typical
//! tool parts.
//!
//! Run: `cargo bench -p codeloop-store -- --warm-up-time 1 --measurement-time 3`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;

use codeloop_store::{Page, SqliteStore, Store, StoreWriter, Write};
use codeloop_types::{
    AssistantMessage, Finish, Message, MessageId, MessagePath, MessageTime, ModelRef, Part, PartKind,
    PartTime, Session, SessionId, StepFinishPart, StepStartPart, TextPart, Tokens, ToolPart, ToolState,
    UserMessage, now_ms,
};
use criterion::{Criterion, Throughput};
use serde_json::json;

/// Text deltas in the streamed answer.
const DELTAS: usize = 20_000;
/// Deltas per coalesced flush: ~200 ms of a fast model (≈ 500 deltas/s) at the engine's flush interval.
const DELTAS_PER_FLUSH: usize = 100;
/// Tool calls in the streamed answer, each written pending → running → completed.
const TOOL_CALLS: usize = 50;
/// Parts of the session loaded by the load benchmark.
const HISTORY_PARTS: usize = 10_000;

fn model() -> ModelRef {
    ModelRef::new("openai", "gpt-4.1")
}

fn user(session: &SessionId) -> Message {
    Message::User(UserMessage {
        id: MessageId::new(),
        session_id: session.clone(),
        time: MessageTime { created: now_ms(), completed: None },
        agent: "build".into(),
        model: model(),
        system: None,
        format: None,
        command: None,
        effort: None,
        allowed_tools: Vec::new(),
    })
}

fn assistant(session: &SessionId, parent: &Message) -> AssistantMessage {
    AssistantMessage::new(
        session.clone(),
        parent.id().clone(),
        "build",
        model(),
        MessagePath { cwd: "/work/project".into(), root: "/work/project".into() },
    )
}

/// About 1 KiB of typical tool output (a file listing / test log).
fn tool_output(seed: usize) -> String {
    let mut out = String::with_capacity(1100);
    let mut line = 0;
    while out.len() < 1000 {
        out.push_str(&format!(
            "{:>4}: src/module_{seed}/file_{line}.rs | fn item_{line}() -> Result<()>\n",
            line
        ));
        line += 1;
    }
    out
}

fn tool_states(seed: usize) -> [ToolState; 3] {
    let mut pending = ToolState::default();
    pending.append_raw("{\"command\": \"cargo test --workspace\"}").unwrap();
    let mut running = ToolState::default();
    running.start(json!({"command": "cargo test --workspace", "timeout": 120000}), now_ms()).unwrap();
    running.progress(Some("cargo test".into()), Some(json!({"output": "running"}))).unwrap();
    let mut completed = running.clone();
    completed
        .complete(
            tool_output(seed),
            "cargo test --workspace".into(),
            json!({"exit": 0, "truncated": false}),
            vec![],
            now_ms(),
        )
        .unwrap();
    [pending, running, completed]
}

fn tool_part(message: &Message, state: ToolState) -> Part {
    let kind = PartKind::Tool(ToolPart {
        call_id: format!("call_{}", &MessageId::new().as_str()[4..]),
        tool: "bash".into(),
        state,
        metadata: None,
        ignored: false,
    });
    Part::new(message.session_id().clone(), message.id().clone(), kind)
}

fn store() -> (tempfile::TempDir, Arc<SqliteStore>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path()).unwrap());
    (dir, store)
}

/// One streamed answer: text deltas coalesced into periodic text-part writes, tool calls written at each
/// state change, step parts, the message updated at the start and the end; then a flush.
fn stream_answer(writer: &StoreWriter, session: &SessionId) {
    let question = user(session);
    writer.send(Write::Message(question.clone()));
    writer.send(Write::Part(Part::user_text(session.clone(), question.id().clone(), "explain the code")));
    let mut answer = assistant(session, &question);
    writer.send(Write::Message(Message::Assistant(answer.clone())));
    let message = Message::Assistant(answer.clone());
    writer.send(Write::Part(Part::new(
        session.clone(),
        answer.id.clone(),
        PartKind::StepStart(StepStartPart { snapshot: None }),
    )));

    let mut text = Part::new(
        session.clone(),
        answer.id.clone(),
        PartKind::Text(TextPart { time: PartTime { start: now_ms(), end: None }, ..Default::default() }),
    );
    let tool_every = DELTAS / TOOL_CALLS;
    for delta in 0..DELTAS {
        if let PartKind::Text(t) = &mut text.kind {
            t.text.push_str(black_box("tok "));
        }
        if delta % DELTAS_PER_FLUSH == DELTAS_PER_FLUSH - 1 {
            writer.send(Write::Part(text.clone()));
        }
        if delta % tool_every == 0 {
            let [pending, running, completed] = tool_states(delta);
            let mut call = tool_part(&message, pending);
            writer.send(Write::Part(call.clone()));
            call.as_tool_mut().unwrap().state = running;
            writer.send(Write::Part(call.clone()));
            call.as_tool_mut().unwrap().state = completed;
            writer.send(Write::Part(call));
        }
    }
    if let PartKind::Text(t) = &mut text.kind {
        t.time.end = Some(now_ms());
    }
    writer.send(Write::Part(text));
    writer.send(Write::Part(Part::new(
        session.clone(),
        answer.id.clone(),
        PartKind::StepFinish(StepFinishPart {
            reason: Finish::Stop,
            snapshot: None,
            tokens: Tokens::default(),
            cost: 0.0,
        }),
    )));
    answer.finish = Some(Finish::Stop);
    answer.time.completed = Some(now_ms());
    writer.send(Write::Message(Message::Assistant(answer)));
    writer.flush().wait().unwrap();
}

/// A session of `parts` parts: turns of one user text and an assistant answer with step parts, a text and
/// three completed tool calls (~1 KiB output each); 10 parts a turn.
fn populate(store: &SqliteStore, parts: usize) -> SessionId {
    let session = Session::new("/work/project", "build", Some(model()));
    let mut batch = vec![Write::Session(session.clone())];
    let mut written = 0;
    let mut turn = 0;
    while written < parts {
        let question = user(&session.id);
        batch.push(Write::Message(question.clone()));
        batch.push(Write::Part(Part::user_text(
            session.id.clone(),
            question.id().clone(),
            "next step please",
        )));
        let mut answer = assistant(&session.id, &question);
        answer.finish = Some(Finish::ToolCalls);
        answer.time.completed = Some(now_ms());
        let message = Message::Assistant(answer);
        batch.push(Write::Message(message.clone()));
        let step_start = PartKind::StepStart(StepStartPart { snapshot: Some("4b825dc6".into()) });
        batch.push(Write::Part(Part::new(session.id.clone(), message.id().clone(), step_start)));
        let text =
            PartKind::Text(TextPart { text: "Let me check the tests. ".repeat(8), ..Default::default() });
        batch.push(Write::Part(Part::new(session.id.clone(), message.id().clone(), text)));
        for call in 0..6 {
            let [_, _, completed] = tool_states(turn * 10 + call);
            batch.push(Write::Part(tool_part(&message, completed)));
        }
        let finish = PartKind::StepFinish(StepFinishPart {
            reason: Finish::ToolCalls,
            snapshot: Some("9daeafb9".into()),
            tokens: Tokens { input: 12_000, output: 300, ..Tokens::default() },
            cost: 0.01,
        });
        batch.push(Write::Part(Part::new(session.id.clone(), message.id().clone(), finish)));
        written += 10;
        turn += 1;
    }
    store.apply(&batch).unwrap();
    session.id
}

/// Database bytes taken by 1 000 completed tool parts of ~1 KiB output, printed once.
fn report_bytes_per_thousand_parts() {
    let (_dir, store) = store();
    let session = Session::new("/work/project", "build", Some(model()));
    let question = user(&session.id);
    let answer = Message::Assistant(assistant(&session.id, &question));
    store
        .apply(&[Write::Session(session), Write::Message(question), Write::Message(answer.clone())])
        .unwrap();
    store.checkpoint().unwrap();
    let before = store.disk_usage().unwrap();
    let parts: Vec<Write> = (0..1000)
        .map(|i| {
            let [_, _, completed] = tool_states(i);
            Write::Part(tool_part(&answer, completed))
        })
        .collect();
    let json: usize = parts
        .iter()
        .map(|w| match w {
            Write::Part(p) => serde_json::to_string(&p.kind).unwrap().len(),
            _ => 0,
        })
        .sum();
    store.apply(&parts).unwrap();
    store.checkpoint().unwrap();
    let after = store.disk_usage().unwrap();
    let bytes = after.used_bytes() - before.used_bytes();
    println!(
        "store size: 1000 tool parts (~1 KiB output each) take {bytes} bytes of database \
         ({:.0} bytes/part; part JSON is {:.0} bytes/part)",
        bytes as f64 / 1000.0,
        json as f64 / 1000.0
    );
}

fn bench_persist(c: &mut Criterion) {
    let (_dir, store) = store();
    let writer = StoreWriter::new(store.clone()).unwrap();
    let session = Session::new("/work/project", "build", Some(model()));
    writer.send(Write::Session(session.clone()));
    let mut group = c.benchmark_group("persist");
    group.sample_size(10);
    group.throughput(Throughput::Elements(DELTAS as u64));
    group.bench_function("streamed_answer_20k_deltas", |b| b.iter(|| stream_answer(&writer, &session.id)));

    // Single tool-part updates, each flushed: the per-write floor of the writer (one transaction each).
    let question = user(&session.id);
    let message = Message::Assistant(assistant(&session.id, &question));
    writer.send(Write::Message(question));
    writer.send(Write::Message(message.clone()));
    let [_, running, _] = tool_states(0);
    let mut call = tool_part(&message, running);
    group.throughput(Throughput::Elements(1));
    group.sample_size(50);
    group.bench_function("tool_part_update_flushed", |b| {
        let mut tick = 0u64;
        b.iter(|| {
            tick += 1;
            call.as_tool_mut().unwrap().state.progress(None, Some(json!({"tick": tick}))).unwrap();
            writer.send(Write::Part(call.clone()));
            writer.flush().wait().unwrap();
        })
    });
    group.finish();
}

fn bench_load(c: &mut Criterion) {
    let (_dir, store) = store();
    let session = populate(&store, HISTORY_PARTS);
    store.checkpoint().unwrap();
    let mut group = c.benchmark_group("load");
    group.sample_size(20);
    group.throughput(Throughput::Elements(HISTORY_PARTS as u64));
    group.bench_function("load_history_10k_parts", |b| {
        b.iter(|| {
            let history = store.load_history(&session).unwrap();
            assert_eq!(history.iter().map(|m| m.parts.len()).sum::<usize>(), HISTORY_PARTS);
            black_box(history)
        })
    });
    group.throughput(Throughput::Elements(50));
    group.sample_size(50);
    group.bench_function("list_messages_newest_50_of_2k", |b| {
        b.iter(|| {
            black_box(
                store.list_messages(&session, &Page { before: None, limit: 50, max_parts: None }).unwrap(),
            )
        })
    });
    group.finish();
}

fn main() {
    report_bytes_per_thousand_parts();
    let mut criterion = Criterion::default().configure_from_args();
    bench_persist(&mut criterion);
    bench_load(&mut criterion);
    criterion.final_summary();
}
