//! Loop rules: doom-loop guard and step limits.

use codeloop_core::StopReason;
use codeloop_core::config::AgentSettings;
use codeloop_core::permission::AskPolicy;
use codeloop_testkit::{Reply, Script, Turn};
use codeloop_types::ToolState;
use serde_json::json;

use crate::harness::{Harness, state};

#[tokio::test]
async fn doom_loop_fires_on_three_identical_calls_spread_over_three_steps() {
    let read = || Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"})));
    let h = Harness::new(Script::new([read(), read(), read(), Turn::from(Reply::text("never sent"))])).await;
    h.write("a.txt", "hi\n");
    let outcome = h.prompt("read a.txt").await;
    let StopReason::Blocked(message) = &outcome.stop else { panic!("expected a block: {:?}", outcome.stop) };
    assert!(
        message.contains("doom loop") && message.contains("read") && message.contains("a.txt"),
        "{message}"
    );
    assert_eq!(h.fake.request_count(), 3, "the run stops instead of asking the model again");
    let tools = h.tool_parts();
    assert!(matches!(state(&tools[0]), ToolState::Completed(_)));
    assert!(matches!(state(&tools[1]), ToolState::Completed(_)));
    assert!(matches!(state(&tools[2]), ToolState::Error(_)), "the third call is not run");
}

#[tokio::test]
async fn doom_loop_fires_on_an_abababab_cycle() {
    let a = || Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"})));
    let b = || Turn::from(Reply::tool_call("grep", json!({"pattern": "hi"})));
    let h = Harness::new(Script::new([a(), b(), a(), b(), a(), b(), Turn::from(Reply::text("never sent"))]))
        .await;
    h.write("a.txt", "hi\n");
    let outcome = h.prompt("look around").await;
    let StopReason::Blocked(message) = &outcome.stop else { panic!("expected a block: {:?}", outcome.stop) };
    assert!(message.contains("repeated"), "{message}");
    assert_eq!(h.fake.request_count(), 6);
}

#[tokio::test]
async fn an_allowed_doom_loop_keeps_going() {
    let read = || Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"})));
    let h = Harness::with(
        Script::new([read(), read(), read(), Turn::from(Reply::text("done"))]),
        AskPolicy::Allow,
        |_| {},
    )
    .await;
    h.write("a.txt", "hi\n");
    assert_eq!(h.prompt("read a.txt").await.stop, StopReason::Completed);
    assert_eq!(h.fake.request_count(), 4);
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
