//! What a compaction carries beside the summary (DESIGN.md §4 "What survives a compaction"), built for a
//! session of 1 000 tool calls over 50 files: the work state, the user's words and the files restored
//! from disk (the model call excluded).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;

use codeloop_core::compaction::{
    RestoreCheck, carried_user_words, files_in_view, restored_files, user_words_block, work_state,
};
use codeloop_store::MessageWithParts;
use codeloop_types::{
    AssistantMessage, Message, MessageId, MessagePath, MessageTime, ModelRef, Part, PartKind, SessionId,
    ToolPart, ToolState, UserMessage, now_ms,
};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

const CALLS: usize = 1_000;
const FILES: usize = 50;

/// Turns of a prompt and 10 calls each: reads and edits of 50 files, and commands, some failing.
fn session(project: &std::path::Path) -> Vec<MessageWithParts> {
    let session = SessionId::new();
    let model = ModelRef::new("fake", "test");
    let mut history = Vec::new();
    for turn in 0..CALLS / 10 {
        let user_id = MessageId::new();
        history.push(MessageWithParts {
            info: Message::User(UserMessage {
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
            }),
            parts: vec![Part::user_text(
                session.clone(),
                user_id.clone(),
                format!("step {turn}: fix the next file"),
            )],
        });
        let assistant = AssistantMessage::new(
            session.clone(),
            user_id,
            "build",
            model.clone(),
            MessagePath { cwd: ".".into(), root: ".".into() },
        );
        let id = assistant.id.clone();
        let mut parts = Vec::new();
        for call in 0..10 {
            let n = turn * 10 + call;
            let file = format!("src/file{}.rs", n % FILES);
            let (tool, input, metadata) = match call % 3 {
                0 => ("read", json!({"filePath": file}), json!({})),
                1 => (
                    "edit",
                    json!({"filePath": file, "oldString": "a", "newString": "b"}),
                    json!({"filediff": {"file": project.join(&file).display().to_string(), "additions": 2, "deletions": 1}}),
                ),
                _ => (
                    "bash",
                    json!({"command": "cargo test"}),
                    json!({"exit": if n % 7 == 0 { 101 } else { 0 }}),
                ),
            };
            let mut state = ToolState::default();
            state.start(input, now_ms()).unwrap();
            state.complete("output\n".repeat(10), tool.into(), metadata, vec![], now_ms()).unwrap();
            parts.push(Part::new(
                session.clone(),
                id.clone(),
                PartKind::Tool(ToolPart {
                    call_id: format!("call_{n}"),
                    tool: tool.into(),
                    state,
                    metadata: None,
                    ignored: false,
                }),
            ));
        }
        history.push(MessageWithParts { info: Message::Assistant(assistant), parts });
    }
    history
}

fn bench(c: &mut Criterion) {
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(project.path().join("src")).unwrap();
    for n in 0..FILES {
        std::fs::write(project.path().join(format!("src/file{n}.rs")), "fn main() {}\n".repeat(40)).unwrap();
    }
    let history = session(project.path());
    let paths = codeloop_tools::ProjectPaths::new(project.path(), project.path());
    let allowed = |_: &str| true;
    c.bench_function("carried parts, 1000 calls over 50 files", |b| {
        b.iter(|| {
            let state = work_state(&history, project.path());
            let words = carried_user_words(&history, &HashSet::new(), 30_000);
            let block = user_words_block(&words, "nonce");
            let head: Vec<&MessageWithParts> = history.iter().collect();
            let named = files_in_view(&head);
            let check = RestoreCheck { project: &paths, allowed: &allowed };
            let files = restored_files(&named, &check, 30_000, "nonce");
            (state.len(), block.map(|b| b.len()), files.map(|f| f.text.len()))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
