//! What a failed attempt leaves in the message its retry continues: tool calls that were cut, ran, or
//! come back with the same id, and the text and reasoning the model must not see twice.

use codeloop_core::StopReason;
use codeloop_testkit::{Fault, Reply, Script, ScriptToolCall, Turn};
use codeloop_types::ToolState;
use serde_json::json;

use crate::checks::{assert_consistent, tool_call_ids, tool_results};
use crate::harness::Harness;

fn tool_states(h: &Harness) -> Vec<(String, ToolState)> {
    h.history()
        .into_iter()
        .flat_map(|m| m.parts)
        .filter_map(|p| p.as_tool().map(|t| (t.call_id.clone(), t.state.clone())))
        .collect()
}

#[tokio::test]
async fn a_reset_after_the_finish_chunk_keeps_the_finished_answer() {
    // Chat chunks: role, call head, 1 argument fragment, finish, usage, [DONE]. The first 5 arrive, so the
    // provider said it was done before the connection dropped.
    let call = ScriptToolCall::new("bash", json!({"command": "echo ran >> log.txt"})).with_fragments(1);
    let h = Harness::new(Script::new([
        Turn::from(Fault::reset(Reply::default().with_call(call), 5)),
        Turn::from(Reply::text("Logged.")),
    ]))
    .await;
    let run = h.prompt("log it").await;
    assert_eq!(run.outcome.stop, StopReason::Completed);
    assert_eq!(h.read("log.txt"), "ran\n");
    assert!(run.retries().is_empty(), "a finished answer is not retried: {:?}", run.retry_attempts());
    let states = tool_states(&h);
    assert!(matches!(states[0].1, ToolState::Completed(_)), "the call ran to the end: {:?}", states[0].1);
    let results = tool_results(&h.bodies()[1]);
    assert!(!results[0].1.contains("aborted"), "the model gets the real result: {results:?}");
}

#[tokio::test]
async fn a_retry_that_reuses_a_call_id_runs_the_call() {
    // Servers that send no call id get `call_0` from the decoder on every attempt; here the id is explicit.
    let call =
        || ScriptToolCall::new("read", json!({"filePath": "a.txt"})).with_id("call_same").with_fragments(3);
    let h = Harness::new(Script::new([
        Turn::from(Fault::reset(Reply::default().with_call(call()), 3)),
        Turn::from(Reply::default().with_call(call())),
        Turn::from(Reply::text("a.txt says hello.")),
    ]))
    .await;
    let run = h.prompt("read a.txt").await;
    assert_eq!(run.outcome.stop, StopReason::Completed);
    assert_eq!(h.fake.request_count(), 3);
    let results = tool_results(&h.bodies()[2]);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].1.contains("hello from a.txt"), "the retried call ran: {results:?}");
    assert_consistent(&h.history(), &h.bodies());
}

#[tokio::test]
async fn a_failed_attempt_leaves_nothing_for_the_model_to_see() {
    // Role, 2 reasoning chunks, 1 text chunk, the call head: then the connection drops.
    let partial = Reply::text("Let me read it.")
        .with_text_chunks(1)
        .with_reasoning("Thinking about a.txt")
        .with_reasoning_chunks(2)
        .with_call(ScriptToolCall::new("read", json!({"filePath": "a.txt"})).with_fragments(3));
    let h = Harness::new(Script::new([
        Turn::from(Fault::reset(partial, 5)),
        Turn::from(Reply::text("Nothing to do.")),
        Turn::from(Reply::text("Still nothing.")),
    ]))
    .await;
    assert_eq!(h.prompt("first").await.outcome.stop, StopReason::Completed);
    assert_eq!(h.prompt("second").await.outcome.stop, StopReason::Completed);
    let next = &h.bodies()[2];
    assert_consistent(&h.history(), &h.bodies());
    let messages = &next["messages"];
    assert_eq!(tool_call_ids(next), Vec::<String>::new(), "no call the model never finished: {messages}");
    assert!(
        !messages.to_string().contains("Thinking about"),
        "no reasoning of the failed attempt: {messages}"
    );
}

#[tokio::test]
async fn a_failed_attempt_leaves_its_parts_settled_and_paired() {
    // The same scenario as above, checking only what holds today: nothing is left open and every call the
    // requests carry is paired with one result.
    let partial = Reply::text("Let me read it.")
        .with_text_chunks(1)
        .with_reasoning("Thinking about a.txt")
        .with_reasoning_chunks(2)
        .with_call(ScriptToolCall::new("read", json!({"filePath": "a.txt"})).with_fragments(3));
    let h = Harness::new(Script::new([
        Turn::from(Fault::reset(partial, 5)),
        Turn::from(Reply::text("Nothing to do.")),
        Turn::from(Reply::text("Still nothing.")),
    ]))
    .await;
    assert_eq!(h.prompt("first").await.outcome.stop, StopReason::Completed);
    assert_eq!(h.prompt("second").await.outcome.stop, StopReason::Completed);
    assert_eq!(h.fake.request_count(), 3);
    let states = tool_states(&h);
    assert_eq!(states.len(), 1);
    assert!(states[0].1.is_interrupted(), "{:?}", states[0].1);
    assert_consistent(&h.history(), &h.bodies());
}
