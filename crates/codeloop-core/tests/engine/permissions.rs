//! Permissions: denied, allowed, asked and answered, and saved approvals across processes.

use codeloop_core::config::PermissionConfig;
use codeloop_core::permission::{AskPolicy, Reply};
use codeloop_core::{Blocked, Delivery, PromptInput, StopReason};
use codeloop_testkit::{Reply as ScriptReply, Script, Turn};
use codeloop_types::{EventPayload, PermissionAction, PermissionReply, PermissionRule, ToolState};
use serde_json::json;

use crate::harness::{Harness, config_for, open_engine, state};

fn ask_for_bash(config: &mut codeloop_core::config::Config) {
    config.permission = PermissionConfig(vec![PermissionRule::new("bash", "*", PermissionAction::Ask)]);
}

fn bash_script() -> Script {
    Script::new([
        Turn::from(ScriptReply::tool_call("bash", json!({"command": "echo hi > out.txt"}))),
        Turn::from(ScriptReply::text("wrote out.txt")),
    ])
}

#[tokio::test]
async fn a_headless_ask_is_denied_and_stops_the_run_with_a_clear_message() {
    let h = Harness::with(bash_script(), AskPolicy::Deny, ask_for_bash).await;
    let outcome = h.prompt("write out.txt").await;
    let StopReason::Blocked(Blocked::Unanswerable { message }) = &outcome.stop else {
        panic!("{:?}", outcome.stop)
    };
    assert!(message.contains("bash") && message.contains("--on-ask allow"), "{message}");
    assert!(!h.project.path().join("out.txt").exists(), "the command must not run");
    assert!(matches!(state(&h.tool_parts()[0]), ToolState::Error(_)));
    assert_eq!(h.fake.request_count(), 1);
}

#[tokio::test]
async fn on_ask_allow_lets_the_call_through() {
    let h = Harness::with(bash_script(), AskPolicy::Allow, ask_for_bash).await;
    assert_eq!(h.prompt("write out.txt").await.stop, StopReason::Completed);
    assert_eq!(h.read("out.txt"), "hi\n");
}

#[tokio::test]
async fn a_deny_rule_is_fed_back_to_the_model_and_the_run_continues() {
    let h = Harness::with(bash_script(), AskPolicy::Allow, |config| {
        config.permission =
            PermissionConfig(vec![PermissionRule::new("bash", "echo *", PermissionAction::Deny)]);
    })
    .await;
    assert_eq!(h.prompt("write out.txt").await.stop, StopReason::Completed);
    let tools = h.tool_parts();
    let ToolState::Error(error) = state(&tools[0]) else { panic!() };
    assert!(error.error.contains("Permission denied"), "{}", error.error);
    assert_eq!(h.fake.request_count(), 2);
}

#[tokio::test]
async fn an_always_approval_is_saved_and_honoured_by_a_new_process() {
    let h = Harness::with(bash_script(), AskPolicy::Wait, ask_for_bash).await;
    let (run, request) = h.start_until_asked("write out.txt").await;
    assert_eq!(request.permission, "bash");
    assert_eq!(request.always, vec!["echo *".to_owned()]);
    h.engine.reply_permission(&request.id, Reply { reply: PermissionReply::Always, message: None }).unwrap();
    // The first reply wins.
    assert!(
        h.engine
            .reply_permission(&request.id, Reply { reply: PermissionReply::Reject, message: None })
            .is_err()
    );
    assert_eq!(run.await.unwrap().stop, StopReason::Completed);
    h.engine.flush().await.unwrap();

    // A new engine on the same data dir (a new process) with no one to ask: the saved approval allows it.
    let fake = codeloop_testkit::FakeProvider::start(bash_script()).await.unwrap();
    let mut config = config_for(&fake.base_url());
    ask_for_bash(&mut config);
    let Harness { data, project, engine: old, .. } = h;
    drop(old);
    let engine = open_engine(data.path(), config, AskPolicy::Deny);
    let session = engine.create_session(project.path(), None, None, None).await.unwrap();
    std::fs::remove_file(project.path().join("out.txt")).unwrap();
    let outcome = engine.prompt(&session.id, PromptInput::text("again"), Delivery::Queue).await.unwrap();
    assert_eq!(outcome.stop, StopReason::Completed);
    assert_eq!(std::fs::read_to_string(project.path().join("out.txt")).unwrap(), "hi\n");
}

#[tokio::test]
async fn a_rejection_with_a_message_is_fed_back_to_the_model() {
    let h = Harness::with(bash_script(), AskPolicy::Wait, ask_for_bash).await;
    let (run, request) = h.start_until_asked("write out.txt").await;
    let reply = Reply { reply: PermissionReply::Reject, message: Some("use printf instead".into()) };
    h.engine.reply_permission(&request.id, reply).unwrap();
    assert_eq!(run.await.unwrap().stop, StopReason::Completed);
    let tools = h.tool_parts();
    let ToolState::Error(error) = state(&tools[0]) else { panic!() };
    assert!(error.error.contains("use printf instead"), "{}", error.error);
}

#[tokio::test]
async fn a_rejection_stops_the_run_unless_configured_to_continue() {
    for continue_on_reject in [false, true] {
        let h = Harness::with(bash_script(), AskPolicy::Wait, |config| {
            ask_for_bash(config);
            config.continue_on_reject = continue_on_reject;
        })
        .await;
        let (run, request) = h.start_until_asked("write out.txt").await;
        h.engine
            .reply_permission(&request.id, Reply { reply: PermissionReply::Reject, message: None })
            .unwrap();
        let outcome = run.await.unwrap();
        if continue_on_reject {
            assert_eq!(outcome.stop, StopReason::Completed);
            assert_eq!(h.fake.request_count(), 2, "the model saw the rejection and answered");
        } else {
            assert!(matches!(outcome.stop, StopReason::Blocked(_)), "{:?}", outcome.stop);
            assert_eq!(h.fake.request_count(), 1);
        }
        assert!(!h.project.path().join("out.txt").exists());
    }
}

#[tokio::test]
async fn the_question_tool_waits_for_an_answer_from_a_client() {
    let script = || {
        Script::new([
            Turn::from(ScriptReply::tool_call(
                "question",
                json!({"questions": [{"question": "Which database?", "options": [{"label": "SQLite"}, {"label": "Postgres"}]}]}),
            )),
            Turn::from(ScriptReply::text("SQLite it is.")),
        ])
    };
    let h = Harness::with(script(), AskPolicy::Wait, |_| {}).await;
    let (run, asked) = h.start("set up storage", |p| matches!(p, EventPayload::QuestionAsked(_))).await;
    let EventPayload::QuestionAsked(request) = &asked.payload else { unreachable!() };
    assert_eq!(request.questions[0].options.len(), 2);
    assert_eq!(h.engine.pending_questions(Some(&h.session.id)).len(), 1);
    h.engine.reply_question(&request.id, vec![vec!["SQLite".into()]]).unwrap();
    assert!(h.engine.reply_question(&request.id, vec![]).is_err(), "the first answer wins");
    assert_eq!(run.await.unwrap().stop, StopReason::Completed);
    let ToolState::Completed(done) = state(&h.tool_parts()[0]).clone() else { panic!() };
    assert!(done.output.contains("\"Which database?\"=\"SQLite\""), "{}", done.output);

    // Headless, no one can answer: the tool is not offered at all.
    let headless = Harness::with(script(), AskPolicy::Deny, |_| {}).await;
    headless.prompt("set up storage").await;
    let offered = headless.fake.requests()[0].body["tools"].to_string();
    assert!(!offered.contains("\"question\""), "{offered}");
}
