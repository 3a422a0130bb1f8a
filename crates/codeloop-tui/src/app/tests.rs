//! The rules of keys and commands, without a terminal or an engine.

use codeloop_types::MessageWithParts;
use codeloop_types::{EventPayload, Message, Part, QuestionRequest, Session, SessionStatus};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;

const SESSION: &str = "ses_test";

fn app() -> App {
    let mut session = Session::new("/p", "build", Some("fake/test".parse().unwrap()));
    session.id = SESSION.into();
    let user: Message = serde_json::from_value(json!({
        "role": "user", "id": "msg_1", "session_id": SESSION, "time": {"created": 0},
        "agent": "build", "model": {"provider_id": "fake", "model_id": "test"}
    }))
    .unwrap();
    let text = Part::user_text(SESSION.into(), "msg_1".into(), "hello");
    let history = vec![MessageWithParts { info: user, parts: vec![text] }];
    let mut app = App::new("/p".into(), None, None);
    app.outcome(Outcome::Opened {
        session,
        history: history.into_iter().map(Kept::new).collect(),
        permissions: Vec::new(),
        questions: Vec::new(),
        elicitations: Vec::new(),
        status: SessionStatus::Idle,
        created: false,
    });
    app
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::from(code)
}

fn ctrl(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL)
}

fn type_text(app: &mut App, text: &str) {
    for c in text.chars() {
        app.key(key(KeyCode::Char(c)));
    }
}

#[test]
fn ctrl_c_clears_the_input_and_a_second_one_in_a_row_quits() {
    let mut app = app();
    type_text(&mut app, "draft");
    assert_eq!(app.key(ctrl('c')), vec![]);
    assert_eq!(app.editor.text(), "");
    assert_eq!(app.key(ctrl('c')), vec![Action::Quit]);

    let mut app = super::tests::app();
    app.key(ctrl('c'));
    type_text(&mut app, "x");
    assert_eq!(app.key(ctrl('c')), vec![], "another key in between disarms");
}

#[test]
fn enter_sends_alt_enter_adds_a_line_and_enter_while_busy_queues() {
    let mut app = app();
    type_text(&mut app, "one");
    app.key(KeyEvent::new(KeyCode::Enter, KeyModifiers::ALT));
    type_text(&mut app, "two");
    let prompt = Prompt { text: "one\ntwo".into(), model: None, agent: None, effort: None };
    assert_eq!(app.key(key(KeyCode::Enter)), vec![Action::Prompt(SESSION.into(), prompt)]);
    assert!(app.busy());
    type_text(&mut app, "next");
    assert!(matches!(app.key(key(KeyCode::Enter)).as_slice(), [Action::Prompt(_, p)] if p.text == "next"));
    assert_eq!(app.queued, 1);
    // Up brings back the last message when the input is empty.
    app.key(key(KeyCode::Up));
    assert_eq!(app.editor.text(), "next");
}

#[test]
fn esc_interrupts_only_a_busy_session() {
    let mut app = app();
    assert_eq!(app.key(key(KeyCode::Esc)), vec![]);
    app.event(EventPayload::SessionStatus { session_id: SESSION.into(), status: SessionStatus::Busy });
    assert_eq!(app.key(key(KeyCode::Esc)), vec![Action::Abort(SESSION.into())]);
    app.event(EventPayload::SessionIdle { session_id: SESSION.into() });
    assert!(!app.busy());
}

#[test]
fn a_question_is_answered_by_number_or_in_words() {
    let mut app = app();
    let request: QuestionRequest = serde_json::from_value(json!({
        "id": "que_1", "session_id": SESSION,
        "questions": [
            {"question": "Which?", "options": [{"label": "red"}, {"label": "blue"}]},
            {"question": "Why?", "options": []}
        ]
    }))
    .unwrap();
    app.event(EventPayload::QuestionAsked(request));
    type_text(&mut app, "2");
    assert_eq!(app.key(key(KeyCode::Enter)), vec![]);
    type_text(&mut app, "because");
    assert_eq!(
        app.key(key(KeyCode::Enter)),
        vec![Action::ReplyQuestion("que_1".into(), vec![vec!["blue".into()], vec!["because".into()]])]
    );
    assert!(app.questions.is_empty());
}

#[test]
fn an_mcp_form_is_filled_field_by_field_and_a_link_is_confirmed() {
    use codeloop_types::{ElicitationAction, ElicitationReply, ElicitationRequest};
    let mut app = app();
    let form: ElicitationRequest = serde_json::from_value(json!({
        "id": "eli_1", "session_id": SESSION, "server": "web", "message": "Which name, how many?", "mode": "form",
        "schema": {"type": "object", "properties": {"name": {"type": "string", "default": "Ada"}, "count": {"type": "integer"}}},
    }))
    .unwrap();
    app.event(EventPayload::ElicitationAsked(form));
    let shown = crate::view::tests_support::prompt_text(&app, 80);
    // Fields come in name order (the schema's own order is not kept by JSON objects here).
    assert!(shown.contains("MCP server web asks") && shown.contains("1/2: count (integer)"), "{shown}");
    type_text(&mut app, "3");
    assert_eq!(app.key(key(KeyCode::Enter)), vec![]);
    let shown = crate::view::tests_support::prompt_text(&app, 80);
    assert!(shown.contains("2/2: name (string) [default \"Ada\"]"), "{shown}");
    // Left empty: the default applies (the engine fills it in).
    let reply = ElicitationReply { action: ElicitationAction::Accept, content: Some(json!({"count": 3})) };
    assert_eq!(
        app.key(key(KeyCode::Enter)),
        vec![Action::AnswerElicitation(SESSION.into(), "eli_1".into(), reply)]
    );
    assert!(app.elicitations.is_empty());

    let link: ElicitationRequest = serde_json::from_value(json!({
        "id": "eli_2", "session_id": SESSION, "server": "web", "message": "Sign in", "mode": "url",
        "url": "https://example.com/sign-in",
    }))
    .unwrap();
    app.event(EventPayload::ElicitationAsked(link));
    assert!(crate::view::tests_support::prompt_text(&app, 80).contains("open: https://example.com/sign-in"));
    assert_eq!(
        app.key(key(KeyCode::Char('n'))),
        vec![Action::AnswerElicitation(SESSION.into(), "eli_2".into(), ElicitationReply::decline())]
    );
}

#[test]
fn a_session_opened_while_a_server_asks_shows_the_request() {
    let mut app = app();
    let session = app.convo.session.clone().unwrap();
    let waiting: codeloop_types::ElicitationRequest = serde_json::from_value(json!({
        "id": "eli_9", "session_id": SESSION, "server": "web", "message": "Sign in", "mode": "url",
        "url": "https://example.com/sign-in",
    }))
    .unwrap();
    app.outcome(Outcome::Opened {
        session,
        history: Vec::new(),
        permissions: Vec::new(),
        questions: Vec::new(),
        elicitations: vec![waiting],
        status: SessionStatus::Busy,
        created: false,
    });
    assert!(crate::view::tests_support::prompt_text(&app, 80).contains("MCP server web asks"));
}

#[test]
fn undo_reverts_the_newest_shown_turn_and_redo_needs_a_revert() {
    let mut app = app();
    assert_eq!(app.send_text("/undo"), vec![Action::Revert(SESSION.into(), "msg_1".into())]);
    assert_eq!(app.send_text("/redo"), vec![]);
    let mut session = app.convo.session.clone().unwrap();
    session.revert = Some(codeloop_types::Revert {
        message_id: "msg_1".into(),
        snapshot: String::new(),
        files: Vec::new(),
        not_undone: Vec::new(),
    });
    app.event(EventPayload::SessionUpdated { session_id: SESSION.into(), info: session });
    assert_eq!(app.send_text("/undo"), vec![], "nothing shown is left to undo");
    assert_eq!(app.send_text("/redo"), vec![Action::Unrevert(SESSION.into())]);
}

#[test]
fn commands_parse_their_arguments() {
    let mut app = app();
    assert_eq!(
        app.send_text("/model openai/gpt-4.1"),
        vec![Action::CheckModel("openai/gpt-4.1".parse().unwrap())]
    );
    assert_eq!(app.send_text("/agent plan"), vec![Action::CheckAgent("plan".into())]);
    assert_eq!(app.send_text("/sessions ses_other"), vec![Action::Open(Some("ses_other".into()))]);
    assert_eq!(app.send_text("/new"), vec![Action::Open(None)]);
    assert_eq!(app.send_text("/export"), vec![Action::Export(SESSION.into())]);
    assert_eq!(app.send_text("/quit"), vec![Action::Quit]);
    let before = app.convo.items.len();
    assert_eq!(app.send_text("/nope"), vec![]);
    assert_eq!(app.convo.items.len(), before + 1, "an unknown command says so");
}

#[test]
fn effort_is_chosen_with_slash_effort_and_sent_with_the_next_prompts() {
    let mut app = app();
    assert_eq!(app.send_text("/effort high"), vec![]);
    let sent = app.send_text("think hard");
    assert!(
        matches!(sent.as_slice(), [Action::Prompt(_, p)] if p.effort == Some(codeloop_types::Effort::High)),
        "{sent:?}"
    );
    app.state = RunState::Idle;
    assert_eq!(app.send_text("/effort xhigh"), vec![]);
    assert_eq!(app.effort, Some(codeloop_types::Effort::High), "an unknown level changes nothing");
    app.send_text("/effort default");
    let sent = app.send_text("again");
    assert!(matches!(sent.as_slice(), [Action::Prompt(_, p)] if p.effort.is_none()), "{sent:?}");
}

fn with_commands(app: &mut App) {
    let entry = |name: &str, description: &str| crate::client::CommandEntry {
        name: name.into(),
        description: Some(description.into()),
        hint: None,
    };
    app.outcome(Outcome::Commands(vec![
        entry("init", "Write AGENTS.md"),
        entry("review", "Review the diff"),
        entry("release", "Cut a release"),
    ]));
}

#[test]
fn a_command_file_runs_as_slash_name_and_help_lists_it() {
    let mut app = app();
    with_commands(&mut app);
    type_text(&mut app, "/review src/a.rs now");
    assert_eq!(
        app.key(key(KeyCode::Enter)),
        vec![Action::RunCommand(SESSION.into(), "review".into(), "src/a.rs now".into(), None)]
    );
    assert!(app.busy());
    let mut app = super::tests::app();
    with_commands(&mut app);
    type_text(&mut app, "/help");
    app.key(key(KeyCode::Enter));
    let shown: String = app
        .convo
        .items
        .iter()
        .filter_map(|item| match item {
            crate::convo::Item::Notice(_, notice) => Some(notice.text.clone()),
            _ => None,
        })
        .collect();
    assert!(shown.contains("/review") && shown.contains("Review the diff"), "{shown}");
    type_text(&mut app, "/nosuch");
    assert_eq!(app.key(key(KeyCode::Enter)), vec![]);
}

#[test]
fn tab_completes_a_command_name() {
    let mut app = app();
    with_commands(&mut app);
    type_text(&mut app, "/rev");
    app.key(key(KeyCode::Tab));
    assert_eq!(app.editor.text(), "/review ");
    app.editor.clear();
    type_text(&mut app, "/re");
    assert_eq!(app.matching_commands("re"), ["redo", "review", "release"]);
    app.key(key(KeyCode::Tab));
    assert_eq!(app.editor.text(), "/re", "several match: the common prefix stays, and they are listed");
    app.editor.clear();
    type_text(&mut app, "/in");
    app.key(key(KeyCode::Tab));
    assert_eq!(app.editor.text(), "/init ");
}
