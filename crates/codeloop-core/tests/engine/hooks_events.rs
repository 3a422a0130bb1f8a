//! The hook events the conformance table in `hooks.rs` does not reach: SubagentStart/SubagentStop
//! around the task tool, StopFailure on a run that ends in error, Notification on an ask, SessionEnd.
//! Each hook writes its stdin to a file; the test reads what it was told.

use codeloop_core::StopReason;
use codeloop_core::permission::AskPolicy;
use codeloop_testkit::{Fault, Reply, Script, Turn};
use codeloop_types::{PermissionAction, PermissionRule};
use serde_json::{Value, json};

use codeloop_types::EventPayload;

use crate::harness::{Harness, wait_for_event};
use crate::hooks::{Scripts, hook, user_hooks};

/// A hook that saves its input as `NAME.json` beside itself.
fn recorder(s: &Scripts, name: &str) -> String {
    s.script(&format!("{name}.sh"), &format!("cat > \"$(dirname \"$0\")/{name}.json\""))
}

fn told(s: &Scripts, name: &str) -> Value {
    let text = std::fs::read_to_string(s.path(&format!("{name}.json")))
        .unwrap_or_else(|e| panic!("the {name} hook never ran: {e}"));
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn subagent_start_and_stop_fire_around_the_task_tool() {
    let s = Scripts::new();
    let toml = format!(
        "{}{}",
        hook("SubagentStart", "", &recorder(&s, "start")),
        hook("SubagentStop", "", &recorder(&s, "stop"))
    );
    let h = Harness::with(
        Script::new([
            Turn::from(Reply::tool_call(
                "task",
                json!({"description": "find it", "prompt": "Where is it?", "subagent_type": "explore"}),
            )),
            Turn::from(Reply::text("In src/lib.rs.")),
            Turn::from(Reply::text("It is in src/lib.rs.")),
        ]),
        AskPolicy::Allow,
        user_hooks(&toml),
    )
    .await;
    assert_eq!(h.prompt("where is it?").await.stop, StopReason::Completed);
    assert_eq!(told(&s, "start")["hook_event_name"], "SubagentStart");
    let stop = told(&s, "stop");
    assert_eq!(stop["hook_event_name"], "SubagentStop");
    assert_eq!(stop["stop_hook_active"], false, "{stop}");
}

#[tokio::test]
async fn stop_failure_fires_when_a_run_ends_in_error() {
    let s = Scripts::new();
    let h = Harness::with(
        Script::new([Turn::fault(Fault::unauthorized())]),
        AskPolicy::Allow,
        user_hooks(&hook("StopFailure", "", &recorder(&s, "failed"))),
    )
    .await;
    let outcome = h.prompt("hello").await;
    assert!(matches!(outcome.stop, StopReason::Error(_)), "{:?}", outcome.stop);
    let input = told(&s, "failed");
    assert_eq!(input["hook_event_name"], "StopFailure");
    assert_eq!(input["session_id"], h.session.id.as_str());
}

#[tokio::test]
async fn notification_fires_when_an_ask_waits_for_someone() {
    let s = Scripts::new();
    let h = Harness::with(
        Script::new([
            Turn::from(Reply::tool_call("bash", json!({"command": "true"}))),
            Turn::from(Reply::text("done")),
        ]),
        AskPolicy::Wait,
        |config: &mut codeloop_core::config::Config| {
            user_hooks(&hook("Notification", "", &recorder(&s, "told")))(config);
            config.permission = codeloop_core::config::PermissionConfig(vec![PermissionRule::new(
                "bash",
                "*",
                PermissionAction::Ask,
            )]);
        },
    )
    .await;
    let mut events = h.engine.bus().subscribe();
    let engine = h.engine.clone();
    let session = h.session.id.clone();
    let run = tokio::spawn(async move {
        engine
            .prompt(&session, codeloop_core::PromptInput::text("run it"), codeloop_core::Delivery::Queue)
            .await
    });
    let asked = wait_for_event(&mut events, |p| matches!(p, EventPayload::PermissionAsked(_))).await;
    let EventPayload::PermissionAsked(request) = &asked.payload else { unreachable!() };
    // The hook runs beside the waiting ask: wait until it has written what it was told.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !s.path("told.json").exists() || std::fs::metadata(s.path("told.json")).unwrap().len() == 0 {
        assert!(std::time::Instant::now() < deadline, "the Notification hook never ran");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let answer = codeloop_core::SessionCommand::AnswerPermission {
        request: request.id.clone(),
        answer: codeloop_core::PermissionAnswer::Once,
    };
    h.engine.submit(answer).await.unwrap();
    assert_eq!(run.await.unwrap().unwrap().stop, StopReason::Completed);
    let input = told(&s, "told");
    assert_eq!(input["hook_event_name"], "Notification");
    assert!(input["message"].as_str().is_some_and(|m| m.contains("permission")), "{input}");
}

#[tokio::test]
async fn session_end_fires_with_its_reason() {
    let s = Scripts::new();
    let h = Harness::with(
        Script::new([Turn::from(Reply::text("hi"))]),
        AskPolicy::Allow,
        user_hooks(&hook("SessionEnd", "", &recorder(&s, "ended"))),
    )
    .await;
    h.prompt("hello").await;
    h.engine.end_session(&h.session.id, "other").await;
    let input = told(&s, "ended");
    assert_eq!(
        (input["hook_event_name"].as_str(), input["reason"].as_str()),
        (Some("SessionEnd"), Some("other"))
    );
}

#[tokio::test]
async fn a_process_that_is_done_ends_each_session_it_prompted_once() {
    let s = Scripts::new();
    let h = Harness::with(
        Script::new([Turn::from(Reply::text("hi"))]),
        AskPolicy::Allow,
        user_hooks(&hook(
            "SessionEnd",
            "",
            &s.script(
                "count.sh",
                "cat >> \"$(dirname \"$0\")/ended.log\"; echo >> \"$(dirname \"$0\")/ended.log\"",
            ),
        )),
    )
    .await;
    h.prompt("hello").await;
    h.engine.end_started_sessions("prompt_input_exit").await;
    h.engine.end_started_sessions("prompt_input_exit").await;
    let log = std::fs::read_to_string(s.path("ended.log")).expect("the SessionEnd hook ran");
    let ended: Vec<Value> =
        log.lines().filter(|l| !l.is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(ended.len(), 1, "once: {log}");
    assert_eq!(ended[0]["reason"], "prompt_input_exit");
    assert_eq!(ended[0]["session_id"], h.session.id.as_str());
}
