//! `[limits]` (DESIGN.md §5h): checked before each model request, normal turns and summaries alike; a
//! reached limit sends nothing more, lets started tools finish, stops the run and says which limit.

use codeloop_core::StopReason;
use codeloop_core::config::LimitsConfig;
use codeloop_core::permission::AskPolicy;
use codeloop_testkit::{Reply, Script, ScriptUsage, Turn};
use codeloop_types::{EventPayload, Limit, LimitReached, ToolState};
use serde_json::json;

use crate::harness::{Harness, wait_for_event};

/// `input` prompt tokens; at [`PRICE`] they cost input / 1 000 USD.
fn usage(input: u64) -> ScriptUsage {
    ScriptUsage { input, ..Default::default() }
}

/// USD per million input tokens: a few hundred tokens cost a visible fraction of a dollar.
const PRICE: f64 = 1_000.0;

async fn harness(script: Script, limits: LimitsConfig) -> Harness {
    Harness::with(script, AskPolicy::Deny, |config| {
        config.limits = limits;
        let model = config.provider.get_mut("fake").unwrap().models.get_mut("test").unwrap();
        model.cost.as_mut().unwrap().input = PRICE;
    })
    .await
}

#[tokio::test]
async fn a_run_over_its_cost_limit_finishes_its_tool_and_sends_nothing_more() {
    let h = harness(
        Script::new([
            Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"})).with_usage(usage(600))),
            Turn::from(Reply::text("never sent")),
        ]),
        LimitsConfig { run_max_cost_usd: Some(0.5), ..Default::default() },
    )
    .await;
    h.write("a.txt", "hello\n");
    let mut events = h.engine.bus().subscribe();
    let outcome = h.prompt("read a.txt").await;
    let StopReason::Limit(reached) = outcome.stop else { panic!("{:?}", outcome.stop) };
    assert_eq!(reached.limit, Limit::RunMaxCostUsd);
    assert_eq!(reached.value, 0.5);
    assert!((reached.used - 0.6).abs() < 1e-9, "{reached:?}");
    assert_eq!(h.fake.requests().len(), 1, "nothing is sent once the limit is reached");
    let tools = h.tool_parts();
    assert!(matches!(tools[0].as_tool().unwrap().state, ToolState::Completed(_)), "{tools:?}");
    let event = wait_for_event(&mut events, |p| matches!(p, EventPayload::SessionLimit { .. })).await;
    let json = serde_json::to_value(&event.payload).unwrap();
    assert_eq!(json["type"], "session.limit");
    assert_eq!(json["properties"]["limit"], "run_max_cost_usd");
    assert_eq!(json["properties"]["value"], 0.5);
    assert!(reached.to_string().contains("run_max_cost_usd"), "{reached}");
}

#[tokio::test]
async fn the_session_limit_counts_earlier_runs_and_stops_before_the_first_request() {
    let h = harness(
        Script::new([
            Turn::from(Reply::text("first").with_usage(usage(300))),
            Turn::from(Reply::text("second").with_usage(usage(300))),
            Turn::from(Reply::text("never sent")),
        ]),
        LimitsConfig { session_max_cost_usd: Some(0.6), run_max_cost_usd: Some(10.0), ..Default::default() },
    )
    .await;
    assert_eq!(h.prompt("one").await.stop, StopReason::Completed);
    assert_eq!(h.prompt("two").await.stop, StopReason::Completed);
    let outcome = h.prompt("three").await;
    let StopReason::Limit(LimitReached { limit, value, used }) = outcome.stop else {
        panic!("{:?}", outcome.stop)
    };
    assert_eq!((limit, value), (Limit::SessionMaxCostUsd, 0.6));
    assert!((used - 0.6).abs() < 1e-9);
    assert_eq!(h.fake.requests().len(), 2);
}

#[tokio::test]
async fn a_summary_request_counts_and_is_not_sent_past_the_token_limit() {
    // The first step fills the context (128 000 - 8 000 usable): the loop wants a summary next, and the
    // token limit the step passed stops it before the summary request.
    let h = harness(
        Script::new([
            Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"})).with_usage(usage(125_000))),
            Turn::from(Reply::text("a summary that is never asked for")),
        ]),
        LimitsConfig { run_max_tokens: Some(100_000), ..Default::default() },
    )
    .await;
    h.write("a.txt", "hello\n");
    let outcome = h.prompt("read a.txt").await;
    let StopReason::Limit(reached) = outcome.stop else { panic!("{:?}", outcome.stop) };
    assert_eq!(reached.limit, Limit::RunMaxTokens);
    assert!(reached.used >= 125_000.0, "{reached:?}");
    assert_eq!(h.fake.requests().len(), 1);
    let pending_summary = h.history().iter().any(|m| m.parts.iter().any(|p| p.as_compaction().is_some()));
    assert!(pending_summary, "the compaction was requested, only the summary request was held back");
}

#[tokio::test]
async fn a_run_past_its_minutes_stops_at_the_next_step() {
    // 0.002 minutes = 120 ms; the first reply streams for at least 3 × 100 ms.
    let slow =
        Reply::tool_call("read", json!({"filePath": "a.txt"})).with_text("a b c d").with_chunk_delay_ms(100);
    let h = harness(
        Script::new([Turn::from(slow), Turn::from(Reply::text("never sent"))]),
        LimitsConfig { run_max_minutes: Some(0.002), ..Default::default() },
    )
    .await;
    h.write("a.txt", "hello\n");
    let outcome = h.prompt("read a.txt").await;
    let StopReason::Limit(reached) = outcome.stop else { panic!("{:?}", outcome.stop) };
    assert_eq!(reached.limit, Limit::RunMaxMinutes);
    assert_eq!(h.fake.requests().len(), 1);
}

#[tokio::test]
async fn no_limit_is_set_by_default() {
    let big = || Turn::from(Reply::text("fine").with_usage(usage(50_000)));
    let h = Harness::new(Script::new([big(), big()])).await;
    assert_eq!(h.prompt("hi").await.stop, StopReason::Completed);
    assert_eq!(h.prompt("again").await.stop, StopReason::Completed);
}
