//! What runs spend, seen over HTTP (DESIGN.md §5h): a reached limit in a prompt's result and on the
//! event stream, and `GET /metrics`.

use codeloop_core::config::LimitsConfig;
use codeloop_testkit::{Reply, Script, ScriptUsage, Turn};
use serde_json::json;

use crate::support::Harness;

#[tokio::test]
async fn a_reached_limit_is_the_prompts_stop_and_a_session_limit_event() {
    let usage = ScriptUsage { input: 900, output: 200, ..Default::default() };
    let h = Harness::start_with(
        Script::new([
            Turn::from(Reply::tool_call("glob", json!({"pattern": "*"})).with_usage(usage)),
            Turn::from(Reply::text("never sent")),
        ]),
        |setup| setup.config.limits = LimitsConfig { run_max_tokens: Some(1_000), ..Default::default() },
    )
    .await;
    let session = h.create_session().await;
    let mut events = h.events("").await;
    let (status, result) = h
        .post(&format!("/session/{session}/prompt"), json!({"parts": [{"type": "text", "text": "list"}]}))
        .await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["stop"]["type"], "limit", "{result}");
    assert_eq!(result["stop"]["limit"], "run_max_tokens");
    assert_eq!(result["stop"]["value"], 1000.0);
    assert_eq!(result["stop"]["used"], 1100.0);
    assert!(result["stop"]["message"].as_str().unwrap().contains("run_max_tokens"), "{result}");
    let seen = events.until(|e| e.kind() == "session.limit").await;
    let limit = seen.last().unwrap().properties().clone();
    assert_eq!(
        limit,
        json!({"session_id": session, "limit": "run_max_tokens", "value": 1000.0, "used": 1100.0})
    );
    assert_eq!(h.fake.requests().len(), 1);
}
