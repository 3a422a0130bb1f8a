//! Rendering of the UI with ratatui's `TestBackend`: a streamed Markdown answer, every tool state, a
//! permission prompt, the status line and a narrow terminal, pinned as text snapshots.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use codeloop_tui::{App, Kept, Outcome, View, draw};
use codeloop_types::MessageWithParts;
use codeloop_types::{EventPayload, Message, Part, PermissionRequest, Session, SessionStatus};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use serde_json::{Value, json};

const SESSION: &str = "ses_0000000000000000000000test";

fn session() -> Session {
    let mut session = Session::new("/work/project", "build", Some("fake/test".parse().unwrap()));
    session.id = SESSION.into();
    session.title = "a test".into();
    session.cost = 0.0123;
    session
}

fn user(id: &str, text: &str) -> MessageWithParts {
    let info: Message = serde_json::from_value(json!({
        "role": "user", "id": id, "session_id": SESSION, "time": {"created": 0},
        "agent": "build", "model": {"provider_id": "fake", "model_id": "test"}
    }))
    .unwrap();
    let part = part(id, &format!("{id}_text"), json!({"type": "text", "text": text}));
    MessageWithParts { info, parts: vec![part] }
}

fn assistant(id: &str, input_tokens: u64) -> Message {
    serde_json::from_value(json!({
        "role": "assistant", "id": id, "session_id": SESSION, "parent_id": "msg_0001", "agent": "build",
        "model": {"provider_id": "fake", "model_id": "test"}, "path": {"cwd": "/work/project", "root": "/work/project"},
        "cost": 0.01, "tokens": {"input": input_tokens, "output": 100, "reasoning": 0, "cache": {"read": 0, "write": 0}},
        "time": {"created": 0}
    }))
    .unwrap()
}

fn part(message: &str, id: &str, kind: Value) -> Part {
    let mut value = json!({"id": id, "session_id": SESSION, "message_id": message});
    for (k, v) in kind.as_object().unwrap() {
        value[k] = v.clone();
    }
    serde_json::from_value(value).unwrap()
}

fn tool(message: &str, id: &str, tool: &str, state: Value) -> Part {
    part(message, id, json!({"type": "tool", "call_id": id, "tool": tool, "state": state}))
}

fn app(history: Vec<MessageWithParts>) -> App {
    let mut app = App::new(PathBuf::from("/work/project"), None, None);
    app.outcome(Outcome::Opened {
        session: session(),
        history: history.into_iter().map(Kept::new).collect(),
        permissions: Vec::new(),
        questions: Vec::new(),
        elicitations: Vec::new(),
        status: SessionStatus::Idle,
        created: false,
    });
    app.outcome(Outcome::Window("fake/test".parse().unwrap(), Some(128_000)));
    app
}

fn screen(app: &mut App, width: u16, height: u16) -> String {
    screen_in(app, &mut View::default(), width, height)
}

/// The screen drawn by a view that lives on between draws (as the UI's does: it holds the scrolling).
fn screen_in(app: &mut App, view: &mut View, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|frame| draw(frame, app, view)).unwrap();
    let buffer = terminal.backend().buffer();
    let mut out = String::new();
    for y in 0..buffer.area.height {
        let row: String = (0..buffer.area.width).map(|x| buffer[(x, y)].symbol().to_owned()).collect();
        out.push_str(row.trim_end());
        out.push('\n');
    }
    out
}

const ANSWER: &str = "## Plan\n\nThe bug is in `greet.sh`: it prints **Helo**.\n\n1. fix the typo\n2. run the test\n\n```bash\nbash test.sh\n```\n\nDone.";

/// A run streamed through bus events: the answer arrives in deltas, reasoning stays folded.
fn streamed(app: &mut App) {
    let events = [
        EventPayload::MessageUpdated { session_id: SESSION.into(), info: assistant("msg_0002", 32_000) },
        EventPayload::SessionStatus { session_id: SESSION.into(), status: SessionStatus::Busy },
        EventPayload::PartUpdated {
            session_id: SESSION.into(),
            part: part(
                "msg_0002",
                "prt_0001",
                json!({"type": "reasoning", "text": "The user wants the test to pass.\nFirst read it."}),
            ),
        },
        EventPayload::PartUpdated {
            session_id: SESSION.into(),
            part: part("msg_0002", "prt_0002", json!({"type": "text", "text": ""})),
        },
    ];
    for event in events {
        app.event(event);
    }
    for chunk in ANSWER.as_bytes().chunks(7) {
        app.event(EventPayload::PartDelta {
            session_id: SESSION.into(),
            message_id: "msg_0002".into(),
            part_id: "prt_0002".into(),
            field: "text".into(),
            delta: String::from_utf8(chunk.to_vec()).unwrap(),
        });
    }
}

#[test]
fn a_streamed_answer_renders_as_markdown_with_reasoning_folded() {
    let mut app = app(vec![user("msg_0001", "make the test pass")]);
    streamed(&mut app);
    insta::assert_snapshot!(screen(&mut app, 70, 26));
}

#[test]
fn a_narrow_terminal_wraps_everything_inside_its_width() {
    let mut app = app(vec![user("msg_0001", "make the failing test in test.sh pass please")]);
    streamed(&mut app);
    let text = screen(&mut app, 28, 30);
    for line in text.lines() {
        assert!(unicode_width::UnicodeWidthStr::width(line) <= 28, "{line:?}");
    }
    insta::assert_snapshot!(text);
}

#[test]
fn every_tool_state_has_its_card() {
    let mut history = vec![user("msg_0001", "go")];
    let message = "msg_0002";
    let parts = vec![
        tool(message, "prt_0001", "read", json!({"status": "pending", "input": {}, "raw": "{\"filePa"})),
        tool(
            message,
            "prt_0002",
            "bash",
            json!({"status": "running", "input": {"command": "cargo test"}, "time": {"start": 0},
            "metadata": {"output": "Compiling a v0.1.0\nCompiling b v0.1.0\nRunning tests"}}),
        ),
        tool(
            message,
            "prt_0003",
            "read",
            json!({"status": "completed", "input": {"filePath": "src/main.rs"},
            "output": "1: fn main() {\n2:     println!(\"hi\");\n3: }", "title": "src/main.rs", "metadata": {},
            "time": {"start": 0, "end": 1}}),
        ),
        tool(
            message,
            "prt_0004",
            "edit",
            json!({"status": "completed", "input": {"filePath": "greet.sh"},
            "output": "Edit applied", "title": "greet.sh", "time": {"start": 0, "end": 1},
            "metadata": {"diff": "--- greet.sh\n+++ greet.sh\n@@ -1,2 +1,2 @@\n #!/usr/bin/env bash\n-echo \"Helo\"\n+echo \"Hello\"\n"}}),
        ),
        tool(
            message,
            "prt_0005",
            "bash",
            json!({"status": "error", "input": {"command": "false"},
            "error": "exit status 1", "time": {"start": 0, "end": 1}}),
        ),
        tool(
            message,
            "prt_0006",
            "bash",
            json!({"status": "error", "input": {"command": "sleep 60"},
            "error": "Tool execution aborted", "metadata": {"interrupted": true}, "time": {"start": 0, "end": 1}}),
        ),
    ];
    history.push(MessageWithParts { info: assistant(message, 1000), parts });
    let mut app = app(history);
    insta::assert_snapshot!(screen(&mut app, 60, 26));
}

#[test]
fn a_permission_prompt_shows_inline_with_its_keys() {
    let mut app = app(vec![user("msg_0001", "list files")]);
    let request: PermissionRequest = serde_json::from_value(json!({
        "id": "per_0001", "session_id": SESSION, "permission": "bash", "patterns": ["rm -rf build"],
        "always": ["rm *"], "metadata": {}
    }))
    .unwrap();
    app.event(EventPayload::SessionStatus { session_id: SESSION.into(), status: SessionStatus::Busy });
    app.event(EventPayload::PermissionAsked(request));
    insta::assert_snapshot!(screen(&mut app, 80, 12));
    // `y` answers it once and the prompt goes away.
    let actions = app.key(crossterm::event::KeyEvent::from(crossterm::event::KeyCode::Char('y')));
    assert_eq!(
        actions,
        vec![codeloop_tui::Action::ReplyPermission(
            "per_0001".into(),
            codeloop_tui::PermissionAnswer { reply: codeloop_types::PermissionReply::Once, message: None }
        )]
    );
    assert!(!screen(&mut app, 80, 12).contains("permission"));
}

#[test]
fn the_status_line_shows_model_agent_context_cost_session_and_state() {
    let mut history = vec![user("msg_0001", "hi")];
    history.push(MessageWithParts {
        info: assistant("msg_0002", 64_000),
        parts: vec![part("msg_0002", "prt_0001", json!({"type": "text", "text": "hello"}))],
    });
    let mut app = app(history);
    let idle = screen(&mut app, 100, 6);
    app.event(EventPayload::SessionStatus {
        session_id: SESSION.into(),
        status: SessionStatus::Retry {
            attempt: 2,
            max_attempts: 8,
            message: "overloaded".into(),
            next: codeloop_types::now_ms() + 60_400,
            delay_ms: 60_400,
        },
    });
    let retry = screen(&mut app, 100, 6);
    insta::assert_snapshot!(format!("{idle}---\n{retry}"));
}

#[test]
fn page_up_scrolls_back_and_page_down_returns_to_the_end() {
    let history: Vec<MessageWithParts> =
        (0..40).map(|n| user(&format!("msg_{n:04}"), &format!("message number {n}"))).collect();
    let mut app = app(history);
    let mut view = View::default();
    let bottom = screen_in(&mut app, &mut view, 40, 12);
    assert!(bottom.contains("message number 39"), "{bottom}");
    app.key(crossterm::event::KeyEvent::from(crossterm::event::KeyCode::PageUp));
    let back = screen_in(&mut app, &mut view, 40, 12);
    assert!(!back.contains("message number 39") && back.contains("more rows"), "{back}");
    // New output while scrolled back does not move the view.
    app.event(EventPayload::MessageUpdated { session_id: SESSION.into(), info: assistant("msg_9999", 10) });
    assert_eq!(screen_in(&mut app, &mut view, 40, 12), back);
    app.key(crossterm::event::KeyEvent::from(crossterm::event::KeyCode::PageDown));
    let again = screen_in(&mut app, &mut view, 40, 12);
    assert!(again.contains("message number 39") && !again.contains("more rows"), "{again}");
}

#[test]
fn a_ten_thousand_part_session_draws_only_what_is_visible() {
    let mut history = Vec::new();
    for n in 0..2_000 {
        history.push(user(&format!("msg_{n:05}a"), &format!("question {n}")));
        let id = format!("msg_{n:05}b");
        let parts = (0..4)
            .map(|k| {
                tool(
                    &id,
                    &format!("prt_{n:05}{k}"),
                    "bash",
                    json!({"status": "completed", "input": {"command": "ls"},
                    "output": "a\nb\nc", "title": "ls", "metadata": {}, "time": {"start": 0, "end": 1}}),
                )
            })
            .collect();
        history.push(MessageWithParts { info: assistant(&id, 10), parts });
    }
    let mut app = app(history);
    let mut terminal = Terminal::new(TestBackend::new(100, 40)).unwrap();
    let mut view = View::default();
    terminal.draw(|frame| draw(frame, &mut app, &mut view)).unwrap();
    let first = view.rendered();
    assert!(first > 0, "the first frame renders the session");
    for _ in 0..10 {
        app.event(EventPayload::SessionStatus { session_id: SESSION.into(), status: SessionStatus::Busy });
        terminal.draw(|frame| draw(frame, &mut app, &mut view)).unwrap();
    }
    // Unchanged items come from the cache: later frames render none of them again (what a frame costs
    // is measured in the render bench, not asserted here).
    assert_eq!(view.rendered(), first, "items rendered again by frames that changed none");
}

#[test]
fn a_reached_limit_is_a_line_naming_it() {
    let mut app = app(vec![user("msg_0001", "hi")]);
    app.event(EventPayload::SessionLimit {
        session_id: SESSION.into(),
        limit: codeloop_types::Limit::RunMaxCostUsd,
        value: 0.5,
        used: 0.625,
    });
    let screen = screen(&mut app, 120, 12);
    assert!(screen.contains("limit run_max_cost_usd reached"), "{screen}");
    assert!(screen.contains("0.6250 of 0.5000 USD"), "{screen}");
}

#[test]
fn the_status_line_shows_the_cache_hit_rate_and_keeps_every_field_at_120_columns() {
    let mut app = app(vec![user("msg_0001", "hi")]);
    let mut info = session();
    info.tokens.input = 200;
    info.tokens.cache.read = 600;
    info.tokens.cache.write = 200;
    app.event(EventPayload::SessionUpdated { session_id: SESSION.into(), info });
    app.event(EventPayload::SessionStatus { session_id: SESSION.into(), status: SessionStatus::Busy });
    let screen = screen(&mut app, 120, 6);
    let status = screen.lines().last().unwrap();
    for field in ["● busy", "fake/test", "build", "$0.0123", "cache hit 60%", SESSION] {
        assert!(status.contains(field), "{field} missing from: {status}");
    }
    assert!(status.contains("context") || status.contains("ctx"), "{status}");
}
