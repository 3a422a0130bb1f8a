//! One test per provider fault (issue 6 §5): the outcome (retried then succeeded, or a clear error), the
//! exact number of provider calls, the `session.status` retry events, and the two invariants (every
//! stored tool call settled once, every request pairing each call with one result).
//!
//! Every scenario starts with a turn that calls `read`, so the request hit by the fault, and the ones
//! after it, carry a tool call and its result.

use codeloop_core::StopReason;
use codeloop_core::config::Config;
use codeloop_testkit::{Fault, Reply, Script, Turn};
use codeloop_types::{AssistantError, Message, ToolState};
use serde_json::json;

use crate::checks::{assert_consistent, tool_results};
use crate::harness::{Harness, KEY_ENV, Observed, fake_provider, ignored_text, visible_text};

const QUESTION: &str = "what does a.txt say?";
const FINAL: &str = "a.txt says hello.";
/// The answer a stream fault cuts short: 48 characters in 6 deltas of 8, after a role chunk.
const CUT: &str = "This answer is cut off by a fault, then retried.";

fn read_call() -> Turn {
    Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"})).with_text("Reading a.txt."))
}

fn done() -> Turn {
    Turn::from(Reply::text(FINAL))
}

fn cut_reply() -> Reply {
    Reply::text(CUT).with_text_chunks(6)
}

/// Runs `[read call, fault, final answer]` and checks what every retried fault must show: the run
/// completes after exactly three calls, one retry event for attempt 2 with `reason`, the retried request
/// is the same request again, and the invariants hold.
async fn retried_once(fault: Fault, reason: &str, tweak: impl FnOnce(&mut Config)) -> (Harness, Observed) {
    let h = Harness::with(Script::new([read_call(), Turn::from(fault), done()]), tweak).await;
    let run = h.prompt(QUESTION).await;
    assert_eq!(run.outcome.stop, StopReason::Completed, "{:?}", run.outcome.message);
    assert_eq!(h.fake.request_count(), 3, "tool turn, faulty attempt, retried attempt");
    assert_eq!(run.retry_attempts(), vec![(2, reason.to_owned())]);
    assert!(run.retries().iter().all(|r| r.max_attempts == 8));

    let bodies = h.bodies();
    assert_eq!(bodies[1]["messages"], bodies[2]["messages"], "a retry resends the same request");
    let results = tool_results(&bodies[2]);
    assert_eq!(results.len(), 1);
    assert!(results[0].1.contains("hello from a.txt"), "{results:?}");

    let history = h.history();
    assert_consistent(&history, &bodies);
    let last = history.last().unwrap();
    assert_eq!(visible_text(&last.parts), FINAL, "only the successful attempt's text is kept for the model");
    let Message::Assistant(info) = &last.info else { panic!("the last message is the answer") };
    assert_eq!(info.error, None);
    (h, run)
}

/// A stream fault after `after_chunks` chunks of [`cut_reply`] leaves the text it delivered as an
/// `ignored` part of the answer (kept for the record, never sent to the model).
fn assert_cut_text_ignored(h: &Harness, delivered_chars: usize) {
    let history = h.history();
    let ignored = ignored_text(&history.last().unwrap().parts);
    assert_eq!(ignored, vec![CUT[..delivered_chars].to_owned()]);
}

#[tokio::test]
async fn rate_limit_with_retry_after_zero_is_retried_at_once() {
    let (_, run) = retried_once(Fault::rate_limited(0), "rate limited", |_| {}).await;
    assert_eq!(run.only_delay_ms(), 0, "no backoff on retry-after: 0");
}

#[tokio::test]
async fn rate_limit_waits_as_long_as_retry_after_ms_asks() {
    let fault = Fault::status(429).header("retry-after-ms", "400");
    let (_, run) = retried_once(fault, "rate limited", |_| {}).await;
    assert_eq!(run.only_delay_ms(), 400, "not the default backoff");
    assert!(run.elapsed >= std::time::Duration::from_millis(400), "and it did wait: {:?}", run.elapsed);
}

#[tokio::test]
async fn rate_limit_waits_as_long_as_retry_after_seconds_asks() {
    let (_, run) = retried_once(Fault::rate_limited(1), "rate limited", |_| {}).await;
    assert_eq!(run.only_delay_ms(), 1_000);
}

#[tokio::test]
async fn server_error_is_retried_after_the_configured_backoff() {
    let (_, run) =
        retried_once(Fault::status(500), "HTTP 500", |config| config.retry.base_delay_ms = 40).await;
    // The first backoff plus up to 10 % jitter.
    let delay = run.only_delay_ms();
    assert!((40..=44).contains(&delay), "{delay}");
    // The status says when the next attempt starts, that long after it was announced.
    let retry = &run.retries()[0];
    assert!(retry.next >= codeloop_types::now_ms() - run.elapsed.as_millis() as i64 + 40);
    assert!(run.elapsed >= std::time::Duration::from_millis(40), "and it did wait: {:?}", run.elapsed);
}

#[tokio::test]
async fn overloaded_529_is_retried() {
    retried_once(Fault::overloaded(), "provider overloaded", |_| {}).await;
}

#[tokio::test]
async fn connection_reset_mid_stream_is_retried_and_the_cut_text_is_ignored() {
    // Role chunk + 2 text chunks (16 characters) arrive, then the connection drops.
    let (h, _) = retried_once(Fault::reset(cut_reply(), 3), "connection reset", |_| {}).await;
    assert_cut_text_ignored(&h, 16);
}

#[tokio::test]
async fn truncated_stream_is_retried_and_the_cut_text_is_ignored() {
    let (h, _) = retried_once(Fault::truncated(cut_reply(), 4), "bad stream", |_| {}).await;
    assert_cut_text_ignored(&h, 24);
}

#[tokio::test]
async fn malformed_json_chunk_is_retried_and_the_text_before_it_is_ignored() {
    let (h, _) = retried_once(Fault::malformed(cut_reply(), 2), "bad stream", |_| {}).await;
    assert_cut_text_ignored(&h, 8);
}

#[tokio::test]
async fn stalled_stream_hits_the_idle_timeout_and_is_retried() {
    let (h, run) = retried_once(Fault::stall(cut_reply(), 3), "stream stalled", |config| {
        fake_provider(config).idle_timeout_ms = Some(300);
        config.retry.base_delay_ms = 40;
    })
    .await;
    assert_cut_text_ignored(&h, 16);
    // 300 ms of silence, then the backoff.
    assert!((40..=44).contains(&run.only_delay_ms()));
    assert!(run.elapsed >= std::time::Duration::from_millis(340), "{:?}", run.elapsed);
}

#[tokio::test]
async fn error_event_mid_stream_is_retried() {
    let error = json!({"type": "overloaded_error", "message": "Overloaded"});
    let (h, _) = retried_once(Fault::error_event(cut_reply(), 3, error), "provider overloaded", |_| {}).await;
    assert_cut_text_ignored(&h, 16);
}

#[tokio::test]
async fn unauthorized_names_the_key_variable_and_is_not_retried() {
    let h = Harness::with(Script::new([read_call(), Turn::from(Fault::unauthorized()), done()]), |config| {
        fake_provider(config).api_key_env = Some(KEY_ENV.into());
    })
    .await;
    let run = h.prompt(QUESTION).await;
    let StopReason::Error(AssistantError::ProviderAuth { message, provider_id }) = &run.outcome.stop else {
        panic!("expected an auth error: {:?}", run.outcome.stop)
    };
    assert_eq!(provider_id, "fake");
    assert!(message.contains(&format!("check your API key in ${KEY_ENV}")), "{message}");
    assert_eq!(h.fake.request_count(), 2, "the 401 is not retried");
    assert!(run.retries().is_empty());
    assert_eq!(h.fake.requests()[1].header("authorization"), Some("Bearer sk-test"));
    let history = h.history();
    let Message::Assistant(last) = &history.last().unwrap().info else { panic!() };
    assert!(matches!(last.error, Some(AssistantError::ProviderAuth { .. })), "{:?}", last.error);
    assert_consistent(&history, &h.bodies());
}

#[tokio::test]
async fn a_missing_key_fails_before_any_request_with_the_variable_named() {
    let h = Harness::with(Script::new([done()]), |config| {
        fake_provider(config).api_key_env = Some("CODELOOP_FAULTS_UNSET_KEY".into());
    })
    .await;
    // The model is checked before any call: the run fails at once, nothing is sent, nothing is retried.
    let error = h
        .engine
        .prompt(&h.session.id, codeloop_core::PromptInput::text(QUESTION), codeloop_core::Delivery::Queue)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("$CODELOOP_FAULTS_UNSET_KEY"), "{error}");
    assert_eq!(h.fake.request_count(), 0);
    assert_consistent(&h.history(), &h.bodies());
}

#[tokio::test]
async fn context_overflow_without_auto_compaction_says_how_to_compact_by_hand() {
    let h = Harness::with(Script::new([read_call(), Turn::from(Fault::context_overflow()), done()]), |c| {
        c.compaction.auto = false;
    })
    .await;
    let run = h.prompt(QUESTION).await;
    let StopReason::Error(AssistantError::ContextOverflow { message, .. }) = &run.outcome.stop else {
        panic!("expected a context overflow: {:?}", run.outcome.stop)
    };
    assert!(message.contains(&format!("codeloop session compact {}", h.session.id)), "{message}");
    assert!(message.contains("auto = false"), "{message}");
    assert_eq!(h.fake.request_count(), 2, "an overflow is never retried");
    assert!(run.retries().is_empty());
    assert!(!run.compacted());
    assert_consistent(&h.history(), &h.bodies());
}

#[tokio::test]
async fn context_overflow_with_auto_compaction_summarises_and_goes_on() {
    let summary = "## Objective\nAnswer what a.txt says.\n## Work state\nRead a.txt.";
    let h = Harness::new(Script::new([
        read_call(),
        Turn::from(Fault::context_overflow()),
        Turn::from(Reply::text(summary)),
        done(),
    ]))
    .await;
    let run = h.prompt(QUESTION).await;
    assert_eq!(run.outcome.stop, StopReason::Completed, "{:?}", run.outcome.message);
    assert_eq!(h.fake.request_count(), 4, "tool turn, overflow, summary, answer");
    assert!(run.retries().is_empty(), "an overflow is compacted, not retried");
    assert!(run.compacted());

    let bodies = h.bodies();
    assert!(bodies[2].get("tools").is_none_or(|t| t.as_array().is_none_or(|t| t.is_empty())));
    assert!(bodies[3].to_string().contains("Answer what a.txt says."), "the summary reaches the model");
    let history = h.history();
    let summaries: Vec<_> =
        history.iter().filter_map(|m| m.info.as_assistant()).filter(|a| a.summary).collect();
    assert_eq!(summaries.len(), 1);
    assert_eq!(summaries[0].error, None);
    assert_eq!(visible_text(&history.last().unwrap().parts), FINAL);
    assert_consistent(&history, &bodies);
}

#[tokio::test]
async fn a_reset_while_a_tool_call_streams_settles_the_partial_call_and_the_retry_runs_it() {
    // Role, one text chunk, the call's head and one argument fragment; then the connection drops.
    let partial = Reply::text("Reading.").with_text_chunks(1).with_call(
        codeloop_testkit::ScriptToolCall::new("read", json!({"filePath": "a.txt"})).with_fragments(3),
    );
    let h = Harness::new(Script::new([
        Turn::from(Fault::reset(partial, 4)),
        Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"}))),
        done(),
    ]))
    .await;
    let run = h.prompt(QUESTION).await;
    assert_eq!(run.outcome.stop, StopReason::Completed);
    assert_eq!(h.fake.request_count(), 3);
    assert_eq!(run.retry_attempts(), vec![(2, "connection reset".to_owned())]);
    let history = h.history();
    let states: Vec<&ToolState> =
        history[1].parts.iter().filter_map(|p| p.as_tool()).map(|t| &t.state).collect();
    assert_eq!(states.len(), 2, "the cut call and the retried one: {states:?}");
    assert!(states[0].is_interrupted(), "{:?}", states[0]);
    assert!(matches!(states[1], ToolState::Completed(_)), "{:?}", states[1]);
    assert_consistent(&history, &h.bodies());
}
