//! Builders for the store tests: sessions, messages and one part of every kind, with realistic contents.
//! Must not: hide what a test asserts; builders only fill in fields a test does not care about.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use codeloop_store::{PgStore, RecoveryReport, SqliteStore, Store, Write};
use codeloop_types::{
    AgentPart, AssistantError, AssistantMessage, CompactionPart, FilePart, Finish, Message, MessageId,
    MessagePath, MessageTime, ModelRef, Part, PartId, PartKind, PartTime, PatchPart, ReasoningPart,
    RetryPart, Session, SessionId, StepFinishPart, StepStartPart, SubtaskPart, TextPart, Tokens, ToolPart,
    ToolState, UserMessage,
};
use serde_json::json;

pub fn open(dir: &Path) -> Arc<SqliteStore> {
    Arc::new(SqliteStore::open(dir).expect("open store"))
}

/// Which store a test that runs on both is running on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// Where a test's store lives: a data dir, or a fresh database on the test cluster. Opening it again is
/// what another process (or worker) would see.
pub enum Place {
    Sqlite(tempfile::TempDir),
    Postgres(String),
}

/// Lease length of the PostgreSQL stores the tests open: short, so expiry tests stay quick.
pub const TEST_LEASE: Duration = Duration::from_secs(2);

impl Place {
    /// `None` when the PostgreSQL binaries are missing (the skip was announced).
    pub fn new(kind: Kind) -> Option<Place> {
        match kind {
            Kind::Sqlite => Some(Place::Sqlite(tempfile::tempdir().expect("temp dir"))),
            Kind::Postgres => codeloop_testkit::postgres::database().map(Place::Postgres),
        }
    }

    pub fn open(&self) -> Opened {
        match self {
            Place::Sqlite(dir) => {
                let store = SqliteStore::open(dir.path()).expect("open SQLite store");
                let last = store.last_recovery().clone();
                Opened { store: Arc::new(store), last }
            }
            Place::Postgres(url) => {
                let store = PgStore::open(url, TEST_LEASE).expect("open PostgreSQL store");
                let last = store.last_recovery().clone();
                Opened { store: Arc::new(store), last }
            }
        }
    }
}

/// An opened store of either kind, with what its opening recovered.
#[derive(Clone)]
pub struct Opened {
    store: Arc<dyn Store>,
    last: RecoveryReport,
}

impl Opened {
    pub fn last_recovery(&self) -> &RecoveryReport {
        &self.last
    }

    pub fn arc(&self) -> Arc<dyn Store> {
        self.store.clone()
    }
}

impl std::ops::Deref for Opened {
    type Target = dyn Store;

    fn deref(&self) -> &(dyn Store + 'static) {
        &*self.store
    }
}

pub fn model() -> ModelRef {
    ModelRef::new("openai", "gpt-4.1")
}

pub fn session(directory: &str) -> Session {
    Session::new(directory, "build", Some(model()))
}

pub fn child_session(parent: &Session) -> Session {
    let mut child = session(&parent.directory);
    child.parent_id = Some(parent.id.clone());
    child
}

pub fn user(session: &SessionId) -> Message {
    Message::User(UserMessage {
        id: MessageId::new(),
        session_id: session.clone(),
        time: MessageTime { created: 1_700_000_000_000, completed: None },
        agent: "build".into(),
        model: model(),
        system: Some("Be brief.".into()),
        format: None,
        command: None,
        effort: None,
        allowed_tools: Vec::new(),
    })
}

pub fn assistant(session: &SessionId, parent: &MessageId) -> AssistantMessage {
    AssistantMessage::new(
        session.clone(),
        parent.clone(),
        "build",
        model(),
        MessagePath { cwd: "/work/project".into(), root: "/work/project".into() },
    )
}

/// A settled assistant message: finish, tokens, cost and an error, every optional field set.
pub fn finished_assistant(session: &SessionId, parent: &MessageId) -> Message {
    let mut m = assistant(session, parent);
    m.cost = 0.012_345;
    m.tokens = Tokens { input: 1200, output: 340, reasoning: 50, total: Some(1600), ..Tokens::default() };
    m.tokens.cache.read = 10;
    m.finish = Some(Finish::ToolCalls);
    m.error = Some(AssistantError::Api {
        message: "overloaded".into(),
        status: Some(529),
        retryable: true,
        body: Some("{}".into()),
    });
    m.summary = true;
    m.time.completed = Some(m.time.created + 1500);
    Message::Assistant(m)
}

pub fn part(message: &Message, kind: PartKind) -> Part {
    Part::new(message.session_id().clone(), message.id().clone(), kind)
}

pub fn text_kind(text: &str) -> PartKind {
    PartKind::Text(TextPart {
        text: text.into(),
        synthetic: false,
        ignored: false,
        time: PartTime { start: 1, end: None },
        metadata: None,
    })
}

/// A tool part in `state` with a fresh call id.
pub fn tool_kind(tool: &str, state: ToolState) -> PartKind {
    let call_id = format!("call_{}", &PartId::new().as_str()[4..]);
    PartKind::Tool(ToolPart {
        call_id,
        tool: tool.into(),
        state,
        metadata: Some(json!({"provider_executed": false})),
        ignored: false,
    })
}

pub fn pending() -> ToolState {
    let mut state = ToolState::default();
    state.append_raw("{\"command\": \"ca").unwrap();
    state
}

pub fn running(start: i64) -> ToolState {
    let mut state = ToolState::default();
    state.start(json!({"command": "cargo test", "timeout": 120}), start).unwrap();
    state
        .progress(Some("cargo test".into()), Some(json!({"output": "running 3 tests\n", "pid": 42})))
        .unwrap();
    state
}

pub fn completed(output: &str) -> ToolState {
    let mut state = running(10);
    state
        .complete(
            output.into(),
            "cargo test".into(),
            json!({"exit": 0, "truncated": false, "nested": {"a": [1, 2.5, null, "x"]}}),
            vec![FilePart {
                mime: "image/png".into(),
                filename: Some("shot.png".into()),
                url: "data:image/png;base64,AAAA".into(),
                source: Some(json!({"type": "file", "path": "/tmp/shot.png"})),
            }],
            20,
        )
        .unwrap();
    state.mark_compacted(30).unwrap();
    state
}

pub fn failed() -> ToolState {
    let mut state = running(10);
    state.fail("exit status 101".into(), 25).unwrap();
    state
}

/// One part of every kind (tool parts in all four states) for `message`.
pub fn every_part_kind(message: &Message) -> Vec<Part> {
    let retry: RetryPart = serde_json::from_value(json!({
        "attempt": 2,
        "error": {"name": "Api", "message": "rate limited", "status": 429, "retryable": true},
        "time": {"created": 1_700_000_000_500i64}
    }))
    .unwrap();
    let kinds = vec![
        PartKind::StepStart(StepStartPart { snapshot: Some("4b825dc6".into()) }),
        PartKind::Reasoning(ReasoningPart {
            text: "Let me think… ünïcödé ✓".into(),
            metadata: Some(json!({"signature": "sig=="})),
            time: PartTime { start: 5, end: Some(9) },
            ignored: false,
        }),
        PartKind::Text(TextPart {
            text: "Here is the plan.\n\n```rust\nfn main() {}\n```".into(),
            synthetic: true,
            ignored: true,
            time: PartTime { start: 10, end: Some(12) },
            metadata: Some(json!({"openai": {"item_id": "msg_abc"}})),
        }),
        PartKind::File(FilePart {
            mime: "text/plain".into(),
            filename: Some("notes.txt".into()),
            url: "file:///work/project/notes.txt".into(),
            source: None,
        }),
        tool_kind("bash", pending()),
        tool_kind("bash", running(11)),
        tool_kind("bash", completed("test result: ok. 3 passed")),
        tool_kind("edit", failed()),
        PartKind::StepFinish(StepFinishPart {
            reason: Finish::Stop,
            snapshot: Some("9daeafb9".into()),
            tokens: Tokens { input: 10, output: 20, reasoning: 3, total: None, ..Tokens::default() },
            cost: 0.1 + 0.2,
        }),
        PartKind::Patch(PatchPart {
            hash: "abc123".into(),
            files: vec!["src/main.rs".into(), "Cargo.toml".into()],
        }),
        PartKind::Compaction(CompactionPart {
            auto: true,
            overflow: true,
            tail_start_id: Some(message.id().clone()),
            tail: vec![message.id().clone()],
            focus: Some("the parser".into()),
        }),
        PartKind::Subtask(SubtaskPart {
            prompt: "find the bug".into(),
            description: "search".into(),
            agent: "explore".into(),
            model: Some(model()),
        }),
        PartKind::Agent(AgentPart { name: "explore".into() }),
        PartKind::Retry(retry),
    ];
    kinds.into_iter().map(|kind| part(message, kind)).collect()
}

/// Writes a session with `turns` user/assistant pairs of `parts_per_answer` parts each; returns the messages.
pub fn seed(store: &dyn Store, session: &Session, turns: usize, parts_per_answer: usize) -> Vec<Message> {
    let mut batch = vec![Write::Session(session.clone())];
    let mut messages = Vec::new();
    for turn in 0..turns {
        let question = user(&session.id);
        batch.push(Write::Message(question.clone()));
        batch.push(Write::Part(part(&question, text_kind(&format!("question {turn}")))));
        let answer = finished_assistant(&session.id, question.id());
        batch.push(Write::Message(answer.clone()));
        for index in 0..parts_per_answer {
            batch.push(Write::Part(part(&answer, text_kind(&format!("answer {turn}.{index}")))));
        }
        messages.push(question);
        messages.push(answer);
    }
    store.apply(&batch).unwrap();
    messages
}
