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
            // A made-up name (with a label-breaking quote) is no tool: it counts as `invalid`.
            Turn::from(
                Reply::tool_call("glob", json!({"pattern": "*"}))
                    .with_tool_call("made_up\"}_tool", json!({}))
                    .with_usage(usage),
            ),
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

#[tokio::test]
async fn metrics_count_tokens_cost_tool_calls_steps_and_latency_behind_the_token() {
    let usage = ScriptUsage { input: 1_000, cached: 400, output: 50, ..Default::default() };
    let h = Harness::start_with(
        Script::new([
            // A made-up name (with a label-breaking quote) is no tool: it counts as `invalid`.
            Turn::from(
                Reply::tool_call("glob", json!({"pattern": "*"}))
                    .with_tool_call("made_up\"}_tool", json!({}))
                    .with_usage(usage),
            ),
            Turn::from(Reply::text("done").with_usage(usage)),
        ]),
        |setup| setup.options = setup.options.clone().with_token("metrics-token"),
    )
    .await;
    let open = h.client.get(h.url("/metrics")).send().await.unwrap();
    assert_eq!(open.status(), 401, "behind the token like every other route");
    let authed = |path: &str| h.client.get(h.url(path)).bearer_auth("metrics-token");
    let session: serde_json::Value = h
        .client
        .post(h.url("/session"))
        .bearer_auth("metrics-token")
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = session["id"].as_str().unwrap();
    let result = h
        .client
        .post(h.url(&format!("/session/{id}/prompt")))
        .bearer_auth("metrics-token")
        .json(&json!({"parts": [{"type": "text", "text": "list"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(result.status(), 200);
    // The metrics watch the bus: wait (bounded) until the last step is counted.
    let deadline = std::time::Instant::now() + crate::support::PATIENCE;
    let text = loop {
        let response = authed("/metrics").send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
        let text = response.text().await.unwrap();
        if text.contains("codeloop_steps_total 2") && text.contains("codeloop_runs_active 0") {
            break text;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        tokio::task::yield_now().await;
    };
    for line in [
        "codeloop_tokens_total{type=\"input\",model=\"fake/test\"} 2000",
        "codeloop_tokens_total{type=\"cache_read\",model=\"fake/test\"} 800",
        "codeloop_tokens_total{type=\"output\",model=\"fake/test\"} 100",
        "codeloop_tool_calls_total{tool=\"glob\",status=\"completed\"} 1",
        "codeloop_tool_calls_total{tool=\"invalid\",status=\"error\"} 1",
        "codeloop_retries_total 0",
        "codeloop_provider_duration_seconds_count{model=\"fake/test\"} 2",
        "codeloop_provider_ttft_seconds_count{model=\"fake/test\"} 2",
        "# TYPE codeloop_cost_usd_total counter",
        "codeloop_queue_depth 0",
        "codeloop_lease_renewals_total 0",
        "codeloop_failovers_total 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing from:\n{text}");
    }
    assert!(!text.contains("made_up"), "{text}");
}
