//! The coordinator: one run per session, joins, coalesced wakes, queued turns.

use codeloop_core::{Delivery, PromptInput, StopReason};
use codeloop_testkit::{Reply, Script, Turn};
use codeloop_types::{EventPayload, Message, PartKind, SessionStatus, ToolState};
use serde_json::json;

use crate::harness::{Harness, wait_for_event};

fn slow_text(text: &str) -> Turn {
    Turn::from(Reply::text(text).with_text_chunks(10).with_chunk_delay_ms(20))
}

#[tokio::test]
async fn concurrent_runs_on_one_session_share_one_provider_run() {
    let h = Harness::new(Script::new([slow_text("one answer for everyone")])).await;
    let (prompt, _) = h.start("hi", |p| matches!(p, EventPayload::PartDelta { .. })).await;
    let (a, b) =
        tokio::join!(h.engine.coordinator().run(&h.session.id), h.engine.coordinator().run(&h.session.id));
    let first = prompt.await.unwrap();
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(h.fake.request_count(), 1);
    assert_eq!(a.message, first.message);
    assert_eq!(b.message, first.message);
    assert_eq!(first.stop, StopReason::Completed);
}

#[tokio::test]
async fn five_wakes_during_a_run_coalesce_into_one_follow_up() {
    let h = Harness::new(Script::new([slow_text("working on it")])).await;
    let mut events = h.engine.bus().subscribe();
    let mut watch = h.engine.bus().subscribe();
    let engine = h.engine.clone();
    let session = h.session.id.clone();
    let prompt = tokio::spawn(async move {
        engine.prompt(&session, PromptInput::text("hi"), Delivery::Queue).await.unwrap()
    });
    wait_for_event(&mut events, |p| matches!(p, EventPayload::PartDelta { .. })).await;
    for _ in 0..5 {
        h.engine.coordinator().wake(&h.session.id);
    }
    prompt.await.unwrap();
    // Every status event is published before the run goes away: wait for that, then count them all.
    tokio::time::timeout(std::time::Duration::from_secs(10), h.engine.coordinator().settled(&h.session.id))
        .await
        .expect("runs did not settle");
    let mut statuses = Vec::new();
    while let Ok(event) = watch.try_recv() {
        statuses.push(event);
    }
    let busy = statuses
        .iter()
        .filter(|e| matches!(&e.payload, EventPayload::SessionStatus { status: SessionStatus::Busy, .. }))
        .count();
    assert_eq!(busy, 2, "the run plus exactly one follow-up");
    assert_eq!(h.fake.request_count(), 1, "the follow-up finds nothing new to answer");
    assert!(!h.engine.coordinator().is_busy(&h.session.id));
}

#[tokio::test]
async fn queued_inputs_become_separate_turns_in_order() {
    let h = Harness::new(Script::new([
        slow_text("first answer"),
        slow_text("second answer"),
        slow_text("third answer"),
    ]))
    .await;
    let (first, _) = h.start("one", |p| matches!(p, EventPayload::PartDelta { .. })).await;
    // The coordinator itself, not the engine's validating facade: its queue lock is taken on the first
    // poll and is FIFO, so "two" is stored before "three" (the facade's validation reads may interleave).
    let coordinator = h.engine.coordinator();
    let (second, third) = tokio::join!(
        coordinator.prompt(&h.session.id, PromptInput::text("two"), Delivery::Queue),
        coordinator.prompt(&h.session.id, PromptInput::text("three"), Delivery::Queue)
    );
    let first = first.await.unwrap();
    let (second, third) = (second.unwrap(), third.unwrap());
    assert_eq!(h.fake.request_count(), 3);
    let texts: Vec<String> = h
        .history()
        .iter()
        .map(|m| {
            let role = if matches!(m.info, Message::User(_)) { "user" } else { "assistant" };
            let text: String = m.parts.iter().filter_map(|p| p.as_text().map(|t| t.text.clone())).collect();
            format!("{role}: {text}")
        })
        .collect();
    assert_eq!(
        texts,
        [
            "user: one",
            "assistant: first answer",
            "user: two",
            "assistant: second answer",
            "user: three",
            "assistant: third answer"
        ]
    );
    let ids = [first.message.unwrap().id, second.message.unwrap().id, third.message.unwrap().id];
    assert!(ids[0] < ids[1] && ids[1] < ids[2], "each queued caller gets its own turn's answer");
}

#[tokio::test]
async fn interrupt_returns_after_the_running_tool_is_marked_interrupted() {
    let h = Harness::new(Script::new([Turn::from(Reply::tool_call("bash", json!({"command": "sleep 30"})))]))
        .await;
    let (run, _) = h
        .start("go", |p| {
            matches!(p, EventPayload::PartUpdated { part, .. }
            if part.as_tool().is_some_and(|t| matches!(t.state, ToolState::Running(_))))
        })
        .await;
    h.engine.coordinator().interrupt(&h.session.id).await;
    // Nothing was queued behind it: the session is idle again when interrupt returns (a delete or a
    // revert right after it is not refused as busy).
    assert!(!h.engine.coordinator().is_busy(&h.session.id));
    // Cleanup is done by the time interrupt returns: the stored part is already settled.
    let parts: Vec<_> = h.history().into_iter().flat_map(|m| m.parts).collect();
    let tool = parts.iter().find_map(|p| match &p.kind {
        PartKind::Tool(t) => Some(t.state.clone()),
        _ => None,
    });
    assert!(tool.is_some_and(|s| s.is_interrupted()));
    assert_eq!(run.await.unwrap().stop, StopReason::Interrupted);
    // An idle interrupt is a no-op: nothing starts, nothing is sent.
    h.engine.coordinator().interrupt(&h.session.id).await;
    assert!(!h.engine.coordinator().is_busy(&h.session.id));
    assert_eq!(h.fake.request_count(), 1);
}

#[tokio::test]
async fn a_session_whose_directory_is_gone_is_refused_with_where_it_runs_and_nothing_is_sent() {
    let h = Harness::new(Script::new([Turn::from(Reply::text("never asked"))])).await;
    let directory = h.session.directory.clone();
    std::fs::remove_dir_all(h.project.path()).unwrap();
    let refused = h.engine.prompt(&h.session.id, PromptInput::text("hello"), Delivery::Steer).await;
    let message = refused.expect_err("refused").to_string();
    assert!(message.contains(&directory) && message.contains("cannot see"), "{message}");
    assert_eq!(h.fake.request_count(), 0);
    assert!(h.history().is_empty(), "nothing recorded");
}
