//! `GET /event`: whole part sequences, resume with Last-Event-ID, resync, many clients and many prompts.

use std::collections::HashMap;

use codeloop_core::Replay;
use codeloop_testkit::{Reply, Script, Turn};
use codeloop_types::EventPayload;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::support::{Harness, Received, ids};

fn part_type(event: &Received) -> &str {
    event.properties()["part"]["type"].as_str().unwrap_or("")
}

/// A compact description of each event: what a client would act on.
fn describe(event: &Received) -> String {
    let p = event.properties();
    match event.kind() {
        "message.updated" => format!("message.updated {}", p["info"]["role"].as_str().unwrap_or("?")),
        "message.part.updated" if part_type(event) == "tool" => {
            format!("tool {}", p["part"]["state"]["status"].as_str().unwrap_or("?"))
        }
        "message.part.updated" => format!("part {}", part_type(event)),
        "session.status" => format!("status {}", p["status"]["type"].as_str().unwrap_or("?")),
        other => other.to_owned(),
    }
}

#[tokio::test]
async fn prompt_async_watched_through_events_yields_the_whole_part_sequence() {
    let h = Harness::start(Script::new([
        Turn::from(Reply::tool_call("bash", json!({"command": "echo hello"})).with_text("Running it.")),
        Turn::from(Reply::text("All done here.").with_text_chunks(3)),
    ]))
    .await;
    let session = h.create_session().await;
    let mut sse = h.events(&format!("?session={session}")).await;
    let (status, body) = h
        .post(
            &format!("/session/{session}/prompt_async"),
            json!({"parts": [{"type": "text", "text": "run it"}]}),
        )
        .await;
    assert_eq!((status, body), (202, serde_json::Value::Null));
    let events = sse.until(|e| e.kind() == "session.idle").await;

    let ids = ids(&events);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids strictly increase: {ids:?}");
    assert!(events.iter().all(|e| e.properties()["session_id"] == json!(session)));

    // Collapse consecutive deltas and repeated text updates: the sequence a client renders.
    let mut sequence: Vec<String> = Vec::new();
    for event in &events {
        let line = describe(event);
        if sequence.last() != Some(&line) || !matches!(line.as_str(), "message.part.delta" | "part text") {
            sequence.push(line);
        }
    }
    let position = |what: &str, from: usize| {
        sequence[from..]
            .iter()
            .position(|s| s == what)
            .map(|i| i + from)
            .unwrap_or_else(|| panic!("`{what}` missing after position {from} in {sequence:#?}"))
    };
    let user = position("message.updated user", 0);
    let user_part = position("part text", user);
    let busy = position("status busy", 0);
    let assistant = position("message.updated assistant", busy.max(user_part));
    let step_start = position("part step-start", assistant);
    let delta = position("message.part.delta", step_start);
    let pending = position("tool pending", step_start);
    let running = position("tool running", pending);
    let completed = position("tool completed", running);
    // The step finishes when the model's stream ends; the tool may still be running then.
    let step_finish = position("part step-finish", pending);
    let second_step = position("part step-start", completed.max(step_finish));
    let second_delta = position("message.part.delta", second_step);
    let last_finish = position("part step-finish", second_delta);
    let idle = position("status idle", last_finish);
    assert!(delta < pending, "{sequence:#?}");
    assert_eq!(&sequence[idle..], ["status idle", "session.idle"], "{sequence:#?}");

    let output = events
        .iter()
        .filter(|e| part_type(e) == "tool")
        .find_map(|e| e.properties()["part"]["state"]["output"].as_str())
        .unwrap();
    assert!(output.contains("hello"), "{output}");
    let text: String = events
        .iter()
        .filter(|e| e.kind() == "message.part.delta")
        .map(|e| e.properties()["delta"].as_str().unwrap().to_owned())
        .collect();
    assert!(text.starts_with("Running it."), "{text}");
    assert!(text.ends_with("All done here."), "{text}");
}

#[tokio::test]
async fn reconnecting_with_last_event_id_receives_exactly_the_missed_events() {
    let h = Harness::start(Script::new([Turn::from(
        Reply::text("one two three four five six seven eight nine ten")
            .with_text_chunks(10)
            .with_chunk_delay_ms(2),
    )]))
    .await;
    let session = h.create_session().await;
    let query = format!("?session={session}");
    let mut reference = h.events(&query).await;
    let mut early = h.events(&query).await;
    h.post(
        &format!("/session/{session}/prompt_async"),
        json!({"parts": [{"type": "text", "text": "count"}]}),
    )
    .await;

    // The early client reads a few events and goes away mid-run.
    let mut first = Vec::new();
    while ids(&first).len() < 4 {
        first.push(early.next().await);
    }
    drop(early);
    let last_seen = *ids(&first).last().unwrap();

    let all = reference.until(|e| e.kind() == "session.idle").await;
    let mut resumed = h.events_with(&query, Some(last_seen)).await;
    let rest = resumed.until(|e| e.kind() == "session.idle").await;
    let mut joined = ids(&first);
    joined.extend(ids(&rest));
    assert_eq!(joined, ids(&all), "no gap, no duplicate");

    // `?since=` does the same for clients that cannot set headers.
    let mut since = h.events(&format!("{query}&since={last_seen}")).await;
    let again = since.until(|e| e.kind() == "session.idle").await;
    assert_eq!(ids(&again), ids(&rest));
}

/// The first SSE frame of `GET /event`, as raw text.
async fn greeting(h: &Harness, last_event_id: Option<u64>) -> String {
    use futures::StreamExt;
    let mut request = h.client.get(h.url("/event"));
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id.to_string());
    }
    let mut body = request.send().await.unwrap().bytes_stream();
    let mut seen = String::new();
    while !seen.contains("\n\n") {
        let chunk = body.next().await.expect("the stream ended before its greeting").unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    seen.split("\n\n").next().unwrap().to_owned()
}

#[tokio::test]
async fn the_greeting_of_a_reconnect_carries_no_event_id() {
    let h = Harness::start(Script::new([Turn::from(Reply::text("hi"))])).await;
    h.create_session().await;
    let first = greeting(&h, None).await;
    assert!(first.contains("server.connected"), "{first}");
    let position: u64 = first
        .lines()
        .find_map(|l| l.strip_prefix("id:"))
        .expect("a first connection's greeting says where the stream starts")
        .trim()
        .parse()
        .unwrap();
    assert!(position > 0, "creating the session published events");
    let again = greeting(&h, Some(position)).await;
    assert!(again.contains("server.connected"), "{again}");
    assert!(!again.lines().any(|l| l.starts_with("id:")), "the greeting is not event {position}: {again}");
}

#[tokio::test]
async fn a_client_beyond_the_replay_buffer_gets_one_resync_then_live_events() {
    let h = Harness::start(Script::new(Vec::<Turn>::new())).await;
    let bus = h.engine.bus().clone();
    let filler = || EventPayload::SessionCompacted { session_id: "ses_filler".into() };
    let first = bus.publish(filler());
    while !matches!(bus.subscribe_after(first).0, Replay::TooFarBehind { .. }) {
        for _ in 0..1000 {
            bus.publish(filler());
        }
    }
    let mut sse = h.events_with("", Some(first)).await;
    let resync = sse.next().await;
    assert_eq!(resync.kind(), "resync");
    assert_eq!(resync.properties()["reason"], "too_far_behind");
    assert_eq!((resync.id, resync.data.get("id")), (None, None), "a resync does not set Last-Event-ID");
    let live = bus.publish(filler());
    let next = sse.next().await;
    assert_eq!((next.id, next.kind()), (Some(live), "session.compacted"));

    // An id this server never published (it restarted) also asks for a resync.
    let mut sse = h.events_with("", Some(live + 1_000)).await;
    let resync = sse.next().await;
    assert_eq!((resync.kind(), resync.properties()["reason"].as_str()), ("resync", Some("unknown_id")));
}

#[tokio::test]
async fn ten_clients_and_ten_prompts_run_one_at_a_time_and_lose_nothing() {
    const N: usize = 10;
    let turns: Vec<Turn> = (0..N)
        .map(|i| Turn::from(Reply::text(format!("answer {i}")).with_text_chunks(3).with_chunk_delay_ms(3)))
        .collect();
    let h = Harness::start(Script::new(turns)).await;
    let session = h.create_session().await;
    let mut clients = Vec::new();
    for _ in 0..N {
        clients.push(h.events(&format!("?session={session}")).await);
    }
    let path = format!("/session/{session}/prompt");
    let prompts = (0..N).map(|i| {
        let body = json!({"parts": [{"type": "text", "text": format!("question {i}")}], "delivery": "queue"});
        h.post(&path, body)
    });
    let results = futures::future::join_all(prompts).await;
    let mut answers: Vec<String> = results
        .iter()
        .map(|(status, result)| {
            assert_eq!(*status, 200, "{result}");
            assert_eq!(result["stop"], json!({"type": "completed"}));
            result["parts"].as_array().unwrap().iter().find(|p| p["type"] == "text").unwrap()["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    answers.sort();
    assert_eq!(answers, (0..N).map(|i| format!("answer {i}")).collect::<Vec<_>>());

    // One run at a time: each request already contains the previous answer.
    let requests = h.fake.requests();
    assert_eq!(requests.len(), N);
    for (i, request) in requests.iter().enumerate().skip(1) {
        assert!(request.body.to_string().contains(&format!("answer {}", i - 1)), "request {i} overlapped");
    }

    let (_, history) = h.get(&format!("/session/{session}/message?limit=100")).await;
    let roles: HashMap<&str, usize> =
        history.as_array().unwrap().iter().fold(HashMap::new(), |mut acc, m| {
            *acc.entry(m["info"]["role"].as_str().unwrap()).or_default() += 1;
            acc
        });
    assert_eq!(roles, HashMap::from([("user", N), ("assistant", N)]));

    let mut reference: Option<Vec<u64>> = None;
    for mut client in clients {
        let events = client.until_idle(N).await;
        let statuses: Vec<&str> = events
            .iter()
            .filter(|e| e.kind() == "session.status")
            .map(|e| e.properties()["status"]["type"].as_str().unwrap())
            .collect();
        assert_eq!(statuses, ["busy", "idle"].repeat(N), "runs never overlap");
        let seen = ids(&events);
        match &reference {
            Some(reference) => assert_eq!(&seen, reference, "every client sees the same events"),
            None => reference = Some(seen),
        }
    }
}

#[tokio::test]
async fn prompt_async_refuses_what_the_engine_refuses_before_the_202() {
    let h = Harness::start(Script::new(Vec::<Turn>::new())).await;
    let session = h.create_session().await;
    let body = json!({"parts": [{"type": "text", "text": "hi"}], "model": "nowhere/none"});
    let (status, error) = h.post(&format!("/session/{session}/prompt_async"), body).await;
    assert_eq!(status, 400);
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("nowhere"), "{message}");
    // The one agent rule: a subagent is not a session's own agent, asynchronously either.
    let body = json!({"parts": [{"type": "text", "text": "hi"}], "agent": "explore"});
    let (status, error) = h.post(&format!("/session/{session}/prompt_async"), body).await;
    assert_eq!(status, 400);
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("agent \"explore\" runs only as a subagent"), "{message}");
}

#[tokio::test]
async fn prompt_async_failures_at_run_time_arrive_as_session_error() {
    let h = Harness::start(Script::new(Vec::<Turn>::new())).await;
    let session = h.create_session().await;
    let mut sse = h.events(&format!("?session={session}")).await;
    let (status, _) = h
        .post(&format!("/session/{session}/prompt_async"), json!({"parts": [{"type": "text", "text": "hi"}]}))
        .await;
    assert_eq!(status, 202);
    // The scripted provider has no turn for it: the run fails and says so on the stream.
    let error = sse.until(|e| e.kind() == "session.error").await.pop().unwrap();
    assert!(error.properties()["error"]["message"].as_str().is_some(), "{:?}", error.data);
}
