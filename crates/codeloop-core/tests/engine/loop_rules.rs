//! Loop rules: doom-loop guard and step limits.

use codeloop_core::config::{AgentSettings, PermissionConfig};
use codeloop_core::permission::{AskPolicy, Reply as Answer};
use codeloop_core::{Blocked, StopReason};
use codeloop_testkit::{Reply, Script, Turn};
use codeloop_types::{PermissionAction, PermissionReply, PermissionRule, ToolState};
use serde_json::json;

use crate::harness::{Harness, state};

#[tokio::test]
async fn doom_loop_fires_on_three_identical_failing_calls_spread_over_three_steps() {
    let h = Harness::new(Script::new([
        failing_edit(),
        failing_edit(),
        failing_edit(),
        Turn::from(Reply::text("never sent")),
    ]))
    .await;
    h.write("a.txt", "hi\n");
    let outcome = h.prompt("edit a.txt").await;
    let StopReason::Blocked(Blocked::DoomLoop { message }) = &outcome.stop else {
        panic!("expected the doom-loop brake: {:?}", outcome.stop)
    };
    assert!(
        message.contains("doom loop") && message.contains("edit") && message.contains("a.txt"),
        "{message}"
    );
    assert_eq!(h.fake.request_count(), 3, "the run stops instead of asking the model again");
    let tools = h.tool_parts();
    assert!(matches!(state(&tools[2]), ToolState::Error(_)), "the third call is not run");
}

#[tokio::test]
async fn a_repeat_of_work_that_succeeded_is_called_done_and_the_run_goes_on_once() {
    let read = || Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"})));
    let h = Harness::new(Script::new([read(), read(), read(), Turn::from(Reply::text("It says hi."))])).await;
    h.write("a.txt", "hi\n");
    let outcome = h.prompt("read a.txt").await;
    assert_eq!(outcome.stop, StopReason::Completed, "a finished task does not end as a failure");
    let tools = h.tool_parts();
    let ToolState::Completed(third) = state(&tools[2]) else { panic!("{:?}", state(&tools[2])) };
    assert!(third.output.contains("already done") && third.output.contains("Do not repeat it"), "{third:?}");
    // Told once: the next identical call is a loop.
    let read = || Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"})));
    let h =
        Harness::new(Script::new([read(), read(), read(), read(), Turn::from(Reply::text("never sent"))]))
            .await;
    h.write("a.txt", "hi\n");
    let outcome = h.prompt("read a.txt").await;
    assert!(matches!(outcome.stop, StopReason::Blocked(Blocked::DoomLoop { .. })), "{:?}", outcome.stop);
    assert_eq!(h.fake.request_count(), 4);
}

#[tokio::test]
async fn doom_loop_fires_on_an_abababab_cycle() {
    let a = || Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"})));
    let b = || Turn::from(Reply::tool_call("grep", json!({"pattern": "hi"})));
    let h = Harness::new(Script::new([a(), b(), a(), b(), a(), b(), Turn::from(Reply::text("never sent"))]))
        .await;
    h.write("a.txt", "hi\n");
    let outcome = h.prompt("look around").await;
    let StopReason::Blocked(Blocked::DoomLoop { message }) = &outcome.stop else {
        panic!("expected the doom-loop brake: {:?}", outcome.stop)
    };
    assert!(message.contains("repeated"), "{message}");
    assert_eq!(h.fake.request_count(), 6);
}

#[tokio::test]
async fn a_doom_loop_a_rule_allows_keeps_going() {
    let read = || Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"})));
    let h = Harness::with(
        Script::new([read(), read(), read(), Turn::from(Reply::text("done"))]),
        AskPolicy::Deny,
        |config| {
            config.permission =
                PermissionConfig(vec![PermissionRule::new("doom_loop", "*", PermissionAction::Allow)]);
        },
    )
    .await;
    h.write("a.txt", "hi\n");
    assert_eq!(h.prompt("read a.txt").await.stop, StopReason::Completed);
    assert_eq!(h.fake.request_count(), 4);
}

/// The same failing edit, again and again: what a small model does with a format it cannot write.
fn failing_edit() -> Turn {
    Turn::from(Reply::tool_call(
        "edit",
        json!({"filePath": "a.txt", "oldString": "not in the file", "newString": "x"}),
    ))
}

#[tokio::test]
async fn on_ask_allow_does_not_answer_the_doom_loop_brake() {
    let h = Harness::with(
        Script::new([failing_edit(), failing_edit(), failing_edit(), Turn::from(Reply::text("never sent"))]),
        AskPolicy::Allow,
        |_| {},
    )
    .await;
    h.write("a.txt", "hi\n");
    let outcome = h.prompt("fix a.txt").await;
    let StopReason::Blocked(Blocked::DoomLoop { message }) = &outcome.stop else {
        panic!("expected the doom-loop brake: {:?}", outcome.stop)
    };
    assert!(message.contains("doom loop") && message.contains("`edit` was called 3 times"), "{message}");
    assert!(message.contains("doom_loop = \"allow\""), "says how to allow it: {message}");
    assert_eq!(h.fake.request_count(), 3, "the third identical call stops the run");
    let tools = h.tool_parts();
    let ToolState::Error(third) = state(&tools[2]) else { panic!("{:?}", state(&tools[2])) };
    assert!(third.error.contains("--on-ask allow does not answer it"), "{}", third.error);
    assert!(h.engine.pending_permissions(Some(&h.session.id)).is_empty());
}

#[tokio::test]
async fn an_interactive_run_is_asked_about_a_doom_loop_and_a_rejection_stops_it() {
    let h = Harness::with(
        Script::new([failing_edit(), failing_edit(), failing_edit(), Turn::from(Reply::text("never sent"))]),
        AskPolicy::Wait,
        |_| {},
    )
    .await;
    h.write("a.txt", "hi\n");
    let (run, request) = h.start_until_asked("fix a.txt").await;
    assert_eq!(request.permission, "doom_loop");
    assert_eq!(request.patterns, vec!["edit".to_owned()]);
    let description = request.metadata["description"].as_str().unwrap();
    assert!(description.contains("3 times in a row"), "{description}");
    h.engine.reply_permission(&request.id, Answer { reply: PermissionReply::Reject, message: None }).unwrap();
    let outcome = run.await.unwrap();
    assert!(matches!(&outcome.stop, StopReason::Blocked(Blocked::DoomLoop { .. })), "{:?}", outcome.stop);
    assert_eq!(h.fake.request_count(), 3);
}

#[tokio::test]
async fn the_last_step_sends_no_tools_and_asks_for_text() {
    let h = Harness::with(
        Script::new([
            Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"}))),
            Turn::from(Reply::text("Step limit reached; I read a.txt.")),
        ]),
        AskPolicy::Deny,
        |config| {
            config.agent.insert("build".into(), AgentSettings { steps: Some(2), ..Default::default() });
        },
    )
    .await;
    h.write("a.txt", "hi\n");
    let outcome = h.prompt("read a.txt").await;
    assert_eq!(outcome.stop, StopReason::StepLimit(2));
    let requests = h.fake.requests();
    assert!(!requests[0].body["tools"].as_array().unwrap().is_empty());
    assert!(requests[1].body.get("tools").is_none_or(|t| t.as_array().is_none_or(|t| t.is_empty())));
    let last = requests[1].body["messages"].as_array().unwrap().last().unwrap().to_string();
    assert!(last.contains("maximum number of steps"), "{last}");
}
