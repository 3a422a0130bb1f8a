//! Context management: overflow, summary with an explicit tail, anchored updates, replay after a provider
//! overflow, prune, `auto = false`, and the circuit breaker. Request shapes are pinned with insta.

use codeloop_core::config::ModelSettings;
use codeloop_core::permission::AskPolicy;
use codeloop_core::{StopReason, projection};
use codeloop_testkit::{Fault, Reply, Script, ScriptToolCall, ScriptUsage, Turn};
use codeloop_types::{AssistantError, EventPayload, Message, ToolState};
use serde_json::{Value, json};

use crate::harness::Harness;

/// 50 000-token window, 4 000 output: usable = 46 000.
fn small_window(config: &mut codeloop_core::config::Config) {
    let model = config.provider.get_mut("fake").unwrap().models.get_mut("test").unwrap();
    *model = ModelSettings { context: Some(50_000), output: Some(4_000), ..model.clone() };
}

/// A small window, and everything before the compaction summarised (no tail kept).
fn small_window_no_tail(config: &mut codeloop_core::config::Config) {
    small_window(config);
    config.compaction.tail_turns = 0;
}

fn text(text: &str, input: u64) -> Turn {
    Turn::from(Reply::text(text).with_usage(ScriptUsage::new(input, 20)))
}

const SUMMARY: &str = "## Objective\nShip the feature.\n\n## Important details\n- none\n\n## Work state\n### Completed\n- turn one\n### Active\n- (none)\n### Blocked\n- (none)\n\n## Next move\n1. continue\n\n## Relevant files\n- a.txt: notes";

/// The request's messages with the temp project path and long contents made stable for snapshots.
fn shape(h: &Harness, n: usize) -> Value {
    let project = h.project.path().canonicalize().unwrap().display().to_string();
    let mut messages = Value::Array(h.request_messages(n));
    redact(&mut messages, &project);
    messages
}

fn redact(value: &mut Value, project: &str) {
    match value {
        Value::String(s) => {
            let mut replaced = s.replace(project, "[PROJECT]");
            // The carried user words' delimiters are made at random per compaction.
            let nonce = regex::Regex::new(r"user-words-[0-9A-Za-z]+").unwrap();
            replaced = nonce.replace_all(&replaced, "user-words-[NONCE]").into_owned();
            // The date of the session's first day.
            if let Some(at) = replaced.find("Today's date: ") {
                let start = at + "Today's date: ".len();
                replaced.replace_range(start..(start + 10).min(replaced.len()), "[DATE]");
            }
            // The session's temp dir holds the uid and session id.
            if let Some(at) = replaced.find("($TMPDIR): ") {
                let start = at + "($TMPDIR): ".len();
                let end = replaced[start..].find('\n').map_or(replaced.len(), |e| start + e);
                replaced.replace_range(start..end, "[TMPDIR]");
            }
            *s = if replaced.len() > 400 {
                format!(
                    "{}… [{} chars]",
                    &replaced[..replaced.char_indices().nth(120).map_or(replaced.len(), |(i, _)| i)],
                    replaced.len()
                )
            } else {
                replaced
            };
        }
        Value::Array(items) => items.iter_mut().for_each(|v| redact(v, project)),
        Value::Object(map) => map.values_mut().for_each(|v| redact(v, project)),
        _ => {}
    }
}

fn summaries(h: &Harness) -> usize {
    h.history().iter().filter(|m| m.info.as_assistant().is_some_and(|a| a.summary)).count()
}

#[tokio::test]
async fn overflow_at_a_step_compacts_with_an_explicit_tail_and_continues() {
    let h = Harness::with(
        Script::new([
            text("Noted: task one.", 1_000),
            text("Noted: task two.", 2_000),
            Turn::from(
                Reply::tool_call("read", json!({"filePath": "a.txt"}))
                    .with_usage(ScriptUsage::new(3_000, 20)),
            ),
            text("Read it; the notes are long.", 47_000),
            text(SUMMARY, 5_000),
            text("Continuing after the summary.", 6_000),
        ]),
        AskPolicy::Deny,
        small_window,
    )
    .await;
    h.write("a.txt", "notes\n");
    h.prompt("task one").await;
    h.prompt("task two").await;
    let outcome = h.prompt("task three: read a.txt").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    assert_eq!(h.fake.request_count(), 6);
    assert_eq!(summaries(&h), 1);

    // The summary request: head only, no tools, the template prompt last.
    let summary_request = &h.fake.requests()[4].body;
    assert!(summary_request.get("tools").is_none_or(|t| t.as_array().is_none_or(|t| t.is_empty())));
    insta::assert_json_snapshot!("summary_request_with_tail", shape(&h, 4));
    // After: [compaction question, summary, tail…, continue].
    insta::assert_json_snapshot!("request_after_summary_with_tail", shape(&h, 5));

    // The tail is stored as explicit ids and nothing was deleted.
    let history = h.history();
    let compaction = history.iter().flat_map(|m| &m.parts).find_map(|p| p.as_compaction()).unwrap();
    assert!(!compaction.tail.is_empty());
    assert_eq!(compaction.tail_start_id.as_ref(), compaction.tail.first());
    let hidden = projection::hidden_ids(&history);
    assert!(!hidden.is_empty(), "older messages are hidden from the model");
    assert_eq!(history.len(), 11, "every message is still stored");
}

#[tokio::test]
async fn a_second_compaction_updates_the_previous_summary() {
    let h = Harness::with(
        Script::new([
            text("one", 1_000),
            text("two", 1_000),
            text("three", 47_000),
            text(SUMMARY, 5_000),
            text("continuing", 6_000),
            text("four", 47_000),
            text(&SUMMARY.replace("turn one", "turns one to four"), 5_000),
            text("continuing again", 6_000),
        ]),
        AskPolicy::Deny,
        small_window,
    )
    .await;
    h.prompt("one").await;
    h.prompt("two").await;
    h.prompt("three").await;
    h.prompt("four").await;
    assert_eq!(summaries(&h), 2);
    let second_summary = h.request_messages(6);
    let prompt = second_summary.last().unwrap()["content"].to_string();
    assert!(prompt.contains("<previous-summary>") && prompt.contains("Ship the feature."), "{prompt}");
    insta::assert_json_snapshot!("anchored_second_summary_request", shape(&h, 6));
    insta::assert_json_snapshot!("request_after_second_summary", shape(&h, 7));
}

#[tokio::test]
async fn a_provider_overflow_error_compacts_and_replays_the_last_user_message() {
    let h = Harness::with(
        Script::new([
            text("one", 1_000),
            text("two", 1_000),
            Turn::from(Fault::context_overflow()),
            text(SUMMARY, 5_000),
            text("Answering the replayed request.", 6_000),
        ]),
        AskPolicy::Deny,
        small_window,
    )
    .await;
    h.prompt("one").await;
    h.prompt("two").await;
    let outcome = h.prompt("three, with a huge paste").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    assert_eq!(h.fake.request_count(), 5);
    let after = h.request_messages(4);
    let last = after.last().unwrap()["content"].to_string();
    assert!(last.contains("three, with a huge paste"), "the request is replayed: {last}");
    insta::assert_json_snapshot!("request_after_overflow_replay", shape(&h, 4));
}

#[tokio::test]
async fn auto_false_never_compacts_and_a_provider_overflow_stops_with_instructions() {
    let h = Harness::with(
        Script::new([text("huge but fine", 49_000), Turn::from(Fault::context_overflow())]),
        AskPolicy::Deny,
        |config| {
            small_window(config);
            config.compaction.auto = false;
        },
    )
    .await;
    assert_eq!(h.prompt("one").await.stop, StopReason::Completed);
    let outcome = h.prompt("two").await;
    let StopReason::Error(AssistantError::ContextOverflow { message, .. }) = &outcome.stop else {
        panic!("{:?}", outcome.stop)
    };
    assert!(message.contains("codeloop session compact"), "{message}");
    assert_eq!(h.fake.request_count(), 2, "no summary request on any path");
    assert_eq!(summaries(&h), 0);
}

#[tokio::test]
async fn the_circuit_breaker_stops_a_session_whose_every_request_overflows() {
    let h = Harness::with(
        Script::new([
            text("one", 1_000),
            Turn::from(Fault::context_overflow()),
            text(SUMMARY, 5_000),
            Turn::from(Fault::context_overflow()),
            Turn::from(Fault::context_overflow()),
            Turn::from(Fault::context_overflow()),
        ]),
        AskPolicy::Deny,
        small_window,
    )
    .await;
    h.prompt("one").await;
    let outcome = h.prompt("two").await;
    let StopReason::Error(AssistantError::ContextOverflow { message, .. }) = &outcome.stop else {
        panic!("{:?}", outcome.stop)
    };
    assert!(message.contains("after compacting"), "{message}");
    assert_eq!(h.fake.request_count(), 4, "1 + overflow + summary + overflow, then stop");
}

#[tokio::test]
async fn usage_over_the_window_right_after_a_compaction_trips_the_breaker() {
    let h = Harness::with(
        Script::new([
            text("one", 1_000),
            text("two", 47_000),
            text(SUMMARY, 5_000),
            text("still huge", 47_000),
        ]),
        AskPolicy::Deny,
        small_window,
    )
    .await;
    h.prompt("one").await;
    let outcome = h.prompt("two").await;
    assert!(
        matches!(outcome.stop, StopReason::Error(AssistantError::ContextOverflow { .. })),
        "{:?}",
        outcome.stop
    );
    assert_eq!(h.fake.request_count(), 4);
}

#[tokio::test]
async fn a_long_session_crosses_the_window_three_times_and_finishes() {
    let mut turns = vec![text("started", 10_000)];
    for round in 0..3 {
        turns.push(Turn::from(
            Reply::tool_call("bash", json!({"command": format!("echo round {round}")}))
                .with_usage(ScriptUsage::new(30_000, 50)),
        ));
        turns.push(Turn::from(
            Reply::tool_call("read", json!({"filePath": "a.txt"})).with_usage(ScriptUsage::new(47_000, 50)),
        ));
        turns.push(text(SUMMARY, 4_000));
    }
    turns.push(text("All done.", 12_000));
    let h = Harness::with(Script::new(turns), AskPolicy::Deny, small_window).await;
    h.write("a.txt", "notes\n");
    h.prompt("start").await;
    let outcome = h.prompt("do the three rounds").await;
    assert_eq!(outcome.stop, StopReason::Completed, "{:?}", outcome.stop);
    assert_eq!(summaries(&h), 3);
    let last = outcome.message.unwrap();
    assert!(last.tokens.count() < 46_000, "the final request fits: {:?}", last.tokens);
}

#[tokio::test]
async fn a_tool_call_during_a_summary_aborts_it_with_a_clear_error() {
    let h = Harness::with(
        Script::new([
            text("one", 1_000),
            text("two", 47_000),
            Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"}))),
        ]),
        AskPolicy::Deny,
        small_window,
    )
    .await;
    h.prompt("one").await;
    let outcome = h.prompt("two").await;
    let StopReason::Error(error) = &outcome.stop else { panic!("{:?}", outcome.stop) };
    assert!(error.message().contains("Tool call not allowed while generating summary: read"), "{error}");
}

#[tokio::test]
async fn manual_compaction_summarises_without_continuing() {
    let h = Harness::new(Script::new([
        text("one", 1_000),
        text("two", 1_000),
        text("three", 1_000),
        text(SUMMARY, 500),
    ]))
    .await;
    h.prompt("one").await;
    h.prompt("two").await;
    h.prompt("three").await;
    let outcome = h.engine.compact(&h.session.id).await.unwrap();
    assert_eq!(outcome.stop, StopReason::Completed);
    assert_eq!(h.fake.request_count(), 4);
    let history = h.history();
    let Message::Assistant(last) = &history.last().unwrap().info else { panic!("the summary is last") };
    assert!(last.summary);
}

#[tokio::test]
async fn a_compaction_request_left_by_a_failed_compact_does_not_swallow_the_next_message() {
    use codeloop_types::{CompactionPart, MessageId, MessageTime, Part, PartKind, UserMessage};
    let h =
        Harness::new(Script::new([text("one", 1_000), text(SUMMARY, 500), text("the answer to two", 1_000)]))
            .await;
    h.prompt("one").await;
    // What `session compact` left when it failed before summarising: a request nothing answered.
    let Message::User(last_user) = &h.history()[0].info else { panic!("the first message is the user's") };
    let time = MessageTime { created: codeloop_types::now_ms(), completed: None };
    let request = UserMessage { id: MessageId::new(), time, ..last_user.clone() };
    let part = Part::new(
        h.session.id.clone(),
        request.id.clone(),
        PartKind::Compaction(CompactionPart {
            auto: false,
            overflow: false,
            tail_start_id: None,
            tail: vec![],
            focus: None,
        }),
    );
    h.engine
        .store()
        .apply(&[codeloop_store::Write::Message(Message::User(request)), codeloop_store::Write::Part(part)])
        .unwrap();

    let outcome = h.prompt("two").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    assert_eq!(h.fake.request_count(), 3, "summary, then the answer to two");
    assert!(Value::Array(h.request_messages(2)).to_string().contains("two"));
    let history = h.history();
    let last = history.last().unwrap();
    assert!(!last.info.as_assistant().unwrap().summary);
    let answer: String = last.parts.iter().filter_map(|p| p.as_text()).map(|t| t.text.clone()).collect();
    assert_eq!(answer, "the answer to two");
}

#[tokio::test]
async fn prune_clears_old_outputs_but_keeps_recent_turns_skills_and_the_stored_text() {
    // Each turn reads two ~48 KB files (~12 000 tokens each; read cuts lines over 2 000 chars).
    let big = format!("{}\n", "x".repeat(79)).repeat(580);
    let mut turns = Vec::new();
    for turn in 0..5 {
        turns.push(Turn::from(
            Reply::text("reading")
                .with_call(ScriptToolCall::new("read", json!({"filePath": format!("f{turn}a.txt")})))
                .with_call(ScriptToolCall::new("read", json!({"filePath": format!("f{turn}b.txt")})))
                .with_usage(ScriptUsage::new(1_000, 10)),
        ));
        turns.push(text("read both", 1_000));
    }
    turns.push(text("final", 1_000));
    let h = Harness::new(Script::new(turns)).await;
    for turn in 0..5 {
        h.write(&format!("f{turn}a.txt"), &big);
        h.write(&format!("f{turn}b.txt"), &big);
    }
    for turn in 0..5 {
        h.prompt(&format!("read pair {turn}")).await;
    }
    let tools = h.tool_parts();
    let pruned: Vec<bool> = tools
        .iter()
        .map(|p| match &p.as_tool().unwrap().state {
            ToolState::Completed(c) => c.time.compacted.is_some(),
            _ => false,
        })
        .collect();
    // Newest first: turns 5 and 4 are protected; turn 3 and the later read of turn 2 fill the 40 000
    // protected tokens; the earlier read of turn 2 and both of turn 1 are cleared.
    assert_eq!(pruned, [true, true, true, false, false, false, false, false, false, false]);
    // Stored outputs are unchanged.
    let ToolState::Completed(first) = &tools[0].as_tool().unwrap().state else { panic!() };
    assert!(first.output.contains("xxxx"));

    h.prompt("and now?").await;
    let messages = h.request_messages(10);
    let results = crate::harness::tool_results(&messages);
    assert_eq!(results[0].1, projection::PRUNED_OUTPUT);
    assert_eq!(results[1].1, projection::PRUNED_OUTPUT);
    assert_eq!(results[2].1, projection::PRUNED_OUTPUT);
    assert!(results[3].1.contains("xxxx"));
    insta::assert_json_snapshot!("request_after_prune", shape(&h, 10));
}

#[tokio::test]
async fn prune_does_nothing_when_less_than_the_minimum_would_be_freed() {
    let mut turns = Vec::new();
    for turn in 0..3 {
        turns.push(Turn::from(Reply::tool_call("read", json!({"filePath": format!("f{turn}.txt")}))));
        turns.push(text("read it", 1_000));
    }
    let h = Harness::new(Script::new(turns)).await;
    for turn in 0..3 {
        h.write(&format!("f{turn}.txt"), &format!("{}\n", "y".repeat(79)).repeat(580));
    }
    for turn in 0..3 {
        h.prompt(&format!("read {turn}")).await;
    }
    let any_pruned = h.tool_parts().iter().any(
        |p| matches!(&p.as_tool().unwrap().state, ToolState::Completed(c) if c.time.compacted.is_some()),
    );
    assert!(!any_pruned, "three turns: only ~12 000 tokens beyond the protected turns");
}

/// The provider messages of `history` encoded from scratch (no memo), as the fake provider records them,
/// led by the run's `context` block.
fn encoded_from_scratch(history: &[codeloop_store::MessageWithParts], context: &str) -> Vec<Value> {
    let visible = projection::visible_history(history);
    let model = codeloop_types::ModelRef::new("fake", "test");
    let mut messages =
        projection::to_provider_messages(&visible, &model, projection::ProjectionOptions::default());
    projection::lead_with_context(&mut messages, context.to_owned());
    let request = codeloop_provider::ProviderRequest { messages, ..Default::default() };
    let body = codeloop_provider::openai_chat::build_body(&request, codeloop_provider::Endpoint::Compatible);
    body["messages"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn every_step_sends_what_encoding_its_history_from_scratch_would_after_prune() {
    // Runs of three steps (two reads, then an answer) on ~12 000-token files: prune clears old outputs
    // between runs, and each step's request reuses the encoding of the steps before it.
    let big = format!("{}\n", "x".repeat(79)).repeat(580);
    let mut turns = Vec::new();
    for run in 0..5 {
        for file in ["a", "b"] {
            turns.push(Turn::from(
                Reply::tool_call("read", json!({"filePath": format!("f{run}{file}.txt")}))
                    .with_usage(ScriptUsage::new(1_000, 10)),
            ));
        }
        turns.push(text("read both", 1_000));
    }
    let h = Harness::new(Script::new(turns)).await;
    for run in 0..5 {
        h.write(&format!("f{run}a.txt"), &big);
        h.write(&format!("f{run}b.txt"), &big);
    }
    let mut checked = 0;
    for run in 0..5 {
        let before = h.history();
        let first_request = h.fake.requests().len();
        h.prompt(&format!("read pair {run}")).await;
        let after = h.history();
        let new = &after[before.len()..];
        assert_eq!(new.len(), 4, "the prompt and three steps");
        for step in 0..3 {
            // What the step saw: the history before the run, the prompt and the steps before it.
            let seen: Vec<_> = before.iter().chain(&new[..1 + step]).cloned().collect();
            // The recorded messages start with the system message.
            let sent = h.request_messages(first_request + step)[1..].to_vec();
            let context = sent[0]["content"][0]["text"].as_str().unwrap();
            assert!(context.starts_with("<context>"), "{context}");
            pretty_assertions::assert_eq!(
                sent,
                encoded_from_scratch(&seen, context),
                "run {run} step {step}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 15);
    let pruned = h
        .tool_parts()
        .iter()
        .filter(
            |p| matches!(&p.as_tool().unwrap().state, ToolState::Completed(c) if c.time.compacted.is_some()),
        )
        .count();
    assert!(pruned > 0, "prune changed earlier outputs between runs");
}

#[tokio::test]
async fn a_summary_of_a_history_where_no_tool_ran_says_no_tool_ran() {
    // A small model summarising this invented progress from the template's placeholders.
    let h = Harness::with(
        Script::new([
            text("I will plan the feature first.", 47_000),
            text(
                "## Objective\nPlan the feature.\n\n## Work state\n### Completed\n- No tool ran yet.",
                5_000,
            ),
            text("Continuing with the plan.", 6_000),
        ]),
        AskPolicy::Deny,
        small_window,
    )
    .await;
    assert_eq!(h.prompt("plan the feature").await.stop, StopReason::Completed);
    assert_eq!(h.fake.request_count(), 3);
    let summary_request = h.request_messages(1);
    let prompt = summary_request.last().unwrap()["content"].as_str().unwrap();
    assert!(
        prompt.contains("Tool results in the conversation above: none. No tool ran"),
        "the summariser is told that nothing ran: {prompt}"
    );
    assert!(prompt.contains("do not write one"), "codeloop writes the work state: {prompt}");
    assert!(!prompt.contains('<'), "no <placeholder> to copy: {prompt}");
    // The model's own work state is dropped; codeloop's record takes its place, and the model sees it.
    let history = h.history();
    let summary = history.iter().find(|m| m.info.as_assistant().is_some_and(|a| a.summary)).unwrap();
    let own = summary.parts.iter().find_map(|p| p.as_text().filter(|t| !t.synthetic)).unwrap();
    assert_eq!(own.text, "## Objective\nPlan the feature.\n");
    let note = summary.parts.iter().find_map(|p| p.as_text().filter(|t| t.synthetic)).unwrap();
    assert!(note.text.contains("No tool has run yet"), "{}", note.text);
    let after = Value::Array(h.request_messages(2)).to_string();
    assert!(after.contains("No tool has run yet") && !after.contains("### Completed"), "{after}");
}

#[tokio::test]
async fn the_summariser_is_told_which_tools_ran_and_how_they_ended() {
    let h = Harness::with(
        Script::new([
            Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"}))),
            Turn::from(Reply::tool_call("read", json!({"filePath": "missing.txt"}))),
            text("Read one of them.", 47_000),
            text(SUMMARY, 5_000),
            text("Continuing.", 6_000),
        ]),
        AskPolicy::Deny,
        small_window_no_tail,
    )
    .await;
    h.write("a.txt", "notes\n");
    assert_eq!(h.prompt("read both files").await.stop, StopReason::Completed);
    let summary_request = h.request_messages(3);
    let prompt = summary_request.last().unwrap()["content"].as_str().unwrap();
    assert!(
        prompt.ends_with(
            "Tool results in the conversation above (codeloop's record, oldest first):\n- read a.txt: completed\n- read missing.txt: failed"
        ),
        "{prompt}"
    );
    let history = h.history();
    let summary = history.iter().find(|m| m.info.as_assistant().is_some_and(|a| a.summary)).unwrap();
    let note = summary.parts.iter().find_map(|p| p.as_text().filter(|t| t.synthetic)).unwrap();
    assert!(note.text.contains("- read missing.txt: failed — File not found"), "{}", note.text);
    assert!(note.text.contains("- read a.txt: completed"), "{}", note.text);
}

#[tokio::test]
async fn a_summary_request_that_fails_never_locks_the_session() {
    for (why, fault) in [("refused", Fault::unauthorized()), ("does not fit", Fault::context_overflow())] {
        let h = Harness::new(Script::new([
            text("one", 1_000),
            Turn::fault(fault),
            text("the answer to two", 1_000),
        ]))
        .await;
        h.prompt("one").await;
        // The summary fails: a clear error, not a session stuck compacting.
        match h.engine.compact(&h.session.id).await {
            Ok(outcome) => assert!(matches!(outcome.stop, StopReason::Error(_)), "{why}: {:?}", outcome.stop),
            Err(error) => assert!(!error.to_string().is_empty(), "{why}"),
        }
        assert!(!h.engine.is_busy(&h.session.id), "{why}: the session is free again");
        let outcome = h.prompt("two").await;
        assert_eq!(outcome.stop, StopReason::Completed, "{why}");
        let history = h.history();
        let last = history.last().unwrap();
        let answer: String = last.parts.iter().filter_map(|p| p.as_text()).map(|t| t.text.clone()).collect();
        assert_eq!(answer, "the answer to two", "{why}: the next prompt is answered");
        assert_eq!(h.fake.request_count(), 3, "{why}");
    }
}

#[tokio::test]
async fn a_summary_cut_off_or_looping_is_asked_again_then_replaced_by_codeloops_own() {
    let looping =
        format!("## Objective\nShip it\n{}", "- keep reading the background notes again\n".repeat(6));
    let cut_off = Turn::from(
        Reply::text("## Objective\nShip the feat")
            .with_finish("length")
            .with_usage(ScriptUsage::new(5_000, 20)),
    );
    let h = Harness::with(
        Script::new([
            text("I will plan the feature first.", 47_000),
            text(&looping, 5_000),
            cut_off,
            text("Continuing with the plan.", 6_000),
        ]),
        AskPolicy::Deny,
        small_window,
    )
    .await;
    let mut events = h.engine.bus().subscribe();
    assert_eq!(h.prompt("build the export feature, keep the old API").await.stop, StopReason::Completed);
    assert_eq!(h.fake.request_count(), 4, "the summary was asked for twice");
    let retry = Value::Array(h.request_messages(2)).to_string();
    assert!(retry.contains("Write it again, briefly"), "{retry}");
    // Neither failed summary is carried: codeloop's own is, with the first request as its objective.
    let after = Value::Array(h.request_messages(3)).to_string();
    assert!(
        !after.contains("keep reading the background notes") && !after.contains("Ship the feat"),
        "{after}"
    );
    assert!(after.contains("## Objective\\nbuild the export feature, keep the old API"), "{after}");
    let mut warned = false;
    while let Ok(event) = events.try_recv() {
        warned |= matches!(&event.payload, EventPayload::SessionWarning { message, .. } if message.contains("codeloop carries its own"));
    }
    assert!(warned, "a warning says so");
}

#[tokio::test]
async fn the_users_words_survive_verbatim_and_a_long_first_message_is_cut_in_the_middle() {
    let first = format!("OBJECTIVE-START {} OBJECTIVE-END", "context ".repeat(12_000));
    let h = Harness::with(
        Script::new([
            text("noted", 1_000),
            text("on it", 47_000),
            text(SUMMARY, 5_000),
            text("Continuing.", 6_000),
        ]),
        AskPolicy::Deny,
        small_window_no_tail,
    )
    .await;
    h.prompt(&first).await;
    h.prompt("also: never touch the v1 API").await;
    let after = Value::Array(h.request_messages(3)).to_string();
    assert!(after.contains("never touch the v1 API"), "a later correction survives: {after}");
    assert!(
        after.contains("OBJECTIVE-START") && after.contains("OBJECTIVE-END"),
        "head and tail of the first"
    );
    assert!(after.contains("bytes of this message left out"), "cut in the middle, said");
    assert!(after.contains("already answered"), "framed as earlier messages");
}

#[tokio::test]
async fn files_in_view_come_back_as_they_are_now_and_a_file_that_fails_a_check_is_only_named() {
    let read = |path: &str| Turn::from(Reply::tool_call("read", json!({"filePath": path})));
    let h = Harness::with(
        Script::new([
            read("a.txt"),
            read("b.txt"),
            read("c.txt"),
            read("d.txt"),
            text("read them all", 1_000),
            text("on it", 47_000),
            text(SUMMARY, 5_000),
            text("Continuing.", 6_000),
        ]),
        AskPolicy::Deny,
        small_window_no_tail,
    )
    .await;
    for name in ["a.txt", "b.txt", "c.txt", "d.txt"] {
        h.write(name, &format!("old {name}\n"));
    }
    h.prompt("read the four files").await;
    // Between the reads and the compaction: one edited, one swapped for a link out of the project, one
    // for a FIFO (the compaction must not hang on it), one deleted.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "OUTSIDE SECRET\n").unwrap();
    let root = h.project.path();
    h.write("a.txt", "new text of a\n");
    std::fs::remove_file(root.join("b.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.join("b.txt")).unwrap();
    std::fs::remove_file(root.join("c.txt")).unwrap();
    let status = std::process::Command::new("mkfifo").arg(root.join("c.txt")).status().unwrap();
    assert!(status.success());
    std::fs::remove_file(root.join("d.txt")).unwrap();
    assert_eq!(h.prompt("go on").await.stop, StopReason::Completed);
    let after = Value::Array(h.request_messages(7)).to_string();
    assert!(after.contains("path=\\\"a.txt\\\">\\nnew text of a"), "restored as it is now: {after}");
    assert!(!after.contains("OUTSIDE SECRET") && !after.contains("old "), "{after}");
    assert!(after.contains("b.txt (outside the project)"), "{after}");
    assert!(after.contains("c.txt (not a regular file)"), "{after}");
    assert!(after.contains("d.txt (deleted)"), "{after}");
    // What was carried is recorded with the summary for people to see (session show, TUI, web page).
    let labels: Vec<String> = h
        .history()
        .iter()
        .filter(|m| matches!(&m.info, codeloop_types::Message::Assistant(a) if a.summary))
        .flat_map(|m| m.parts.iter().filter_map(|p| p.as_text()).filter_map(|t| t.carried_label()))
        .collect();
    assert_eq!(
        labels,
        [
            "carried 2 earlier user messages verbatim".to_owned(),
            "restored 1 file: a.txt; named, not shown: d.txt (deleted); c.txt (not a regular file); b.txt \
             (outside the project)"
                .to_owned(),
        ]
    );
}

#[tokio::test]
async fn the_work_state_carries_a_failed_command_and_a_write_never_the_models_invented_claim() {
    let invented = "## Objective\nShip it.\n\n## Work state\n### Completed\n- Completed: all tests pass\n\n## Next move\n1. release";
    let h = Harness::with(
        Script::new([
            Turn::from(Reply::tool_call(
                "bash",
                json!({"command": "echo oops; exit 3", "description": "run the tests"}),
            )),
            Turn::from(Reply::tool_call("write", json!({"filePath": "out.txt", "content": "one\ntwo\n"}))),
            text("All tests pass, done.", 47_000),
            text(invented, 5_000),
            text("Continuing.", 6_000),
        ]),
        AskPolicy::Allow,
        small_window_no_tail,
    )
    .await;
    assert_eq!(h.prompt("make the tests pass").await.stop, StopReason::Completed);
    let after = Value::Array(h.request_messages(4)).to_string();
    assert!(after.contains("failed — Exit code 3"), "the command's real outcome: {after}");
    assert!(after.contains("- write out.txt: completed"), "{after}");
    assert!(after.contains("- out.txt +2 −0"), "the file written, counted: {after}");
    assert!(!after.contains("all tests pass"), "the invented claim is not carried: {after}");
}

#[tokio::test]
async fn a_long_output_reaches_the_summariser_whole_when_it_fits_and_head_and_tail_when_it_does_not() {
    // ~8 KB with one line in the middle that matters.
    let command = "for i in $(seq 1 80); do echo \"line $i of the build log, nothing to see here at all....\"; \
                   if [ $i = 40 ]; then echo MIDDLE-ERROR-$((i + 2)); fi; done; echo LAST-LINE-$((6 * 7))";
    // (The command itself is in the request too: what is looked for is only in its output.)
    let script = || {
        Script::new([
            Turn::from(Reply::tool_call("bash", json!({"command": command, "description": "build"}))),
            text("Built.", 47_000),
            text(SUMMARY, 1_000),
            text("Continuing.", 6_000),
        ])
    };
    let h = Harness::with(script(), AskPolicy::Allow, small_window_no_tail).await;
    h.prompt("build it").await;
    let to_summariser = Value::Array(h.request_messages(2)).to_string();
    assert!(
        to_summariser.contains("MIDDLE-ERROR-42") && to_summariser.contains("LAST-LINE-42"),
        "{to_summariser}"
    );
    // What was summarised (the 8 KB output) is larger than what is carried: the request after is smaller.
    let before = Value::Array(h.request_messages(1)).to_string().len();
    let after = Value::Array(h.request_messages(3)).to_string().len();
    assert!(after < before, "after the compaction {after} bytes, before {before}");

    // The summariser's own window (`[compaction] model`) is small: the output is cut, head and tail kept.
    let small_summariser = |config: &mut codeloop_core::config::Config| {
        small_window_no_tail(config);
        let models = &mut config.provider.get_mut("fake").unwrap().models;
        let small = ModelSettings { context: Some(2_000), output: Some(500), ..models["test"].clone() };
        models.insert("small".into(), small);
        config.compaction.model = Some("fake/small".into());
    };
    let h = Harness::with(script(), AskPolicy::Allow, small_summariser).await;
    h.prompt("build it").await;
    let to_summariser = Value::Array(h.request_messages(2)).to_string();
    assert_eq!(h.fake.requests()[2].body["model"], "small");
    assert!(to_summariser.contains("line 1 of the build log"), "the head: {to_summariser}");
    assert!(to_summariser.contains("LAST-LINE-42"), "the tail: {to_summariser}");
    assert!(!to_summariser.contains("MIDDLE-ERROR-42"), "the middle is cut: {to_summariser}");
    assert!(to_summariser.len() < 2_000 * 4, "{}", to_summariser.len());
}
