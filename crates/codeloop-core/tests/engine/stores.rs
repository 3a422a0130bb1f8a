//! The engine on PostgreSQL (DESIGN.md §5b): the same pipeline through `StoreChoice::Url`, and two engines
//! (two workers) sharing one database. Skipped, loudly, where PostgreSQL is not installed.

use std::path::Path;
use std::sync::Arc;

use codeloop_core::{Delivery, Engine, EngineOptions, EventIds, PromptInput, StopReason, StoreChoice};
use codeloop_store::SessionFilter;
use codeloop_testkit::postgres::database;
use codeloop_testkit::{FakeProvider, Reply, Script, Turn};
use codeloop_types::{EventPayload, PartKind};

use crate::common::config_for;
use crate::harness::{Harness, wait_for_event};

fn worker(url: &str, fake: &FakeProvider, data: &Path) -> Engine {
    worker_with(url, fake, data, EventIds::Local)
}

fn worker_with(url: &str, fake: &FakeProvider, data: &Path, events: EventIds) -> Engine {
    let mut options = EngineOptions::new(data, config_for(&fake.base_url()));
    options.store = StoreChoice::Url(url.to_owned());
    options.events = events;
    options.env = Arc::new(|_| None);
    options.skill_dirs = Some(Vec::new());
    Engine::open(options).unwrap()
}

fn answer_text(engine: &Engine, session: &codeloop_types::SessionId) -> String {
    let history = engine.store().load_history(session).unwrap();
    history
        .last()
        .unwrap()
        .parts
        .iter()
        .filter_map(|p| match &p.kind {
            PartKind::Text(t) => Some(t.text.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_turn_runs_on_postgres_and_another_worker_reads_it() {
    let Some(url) = database() else { return };
    let fake = FakeProvider::start(Script::new([Reply::text("hello from postgres")])).await.unwrap();
    let (data_a, data_b, project) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = worker(&url, &fake, data_a.path());
    let session = a.create_session(project.path(), None, None, None).await.unwrap();
    let outcome = a.prompt(&session.id, PromptInput::text("hi"), Delivery::Queue).await.unwrap();
    assert_eq!(outcome.stop, StopReason::Completed);

    let b = worker(&url, &fake, data_b.path());
    let listed: Vec<_> =
        b.sessions(SessionFilter::default()).await.unwrap().into_iter().map(|s| s.id).collect();
    assert_eq!(listed, vec![session.id.clone()]);
    assert_eq!(b.history(&session.id).await.unwrap().len(), 2);
    assert_eq!(answer_text(&b, &session.id), "hello from postgres");
}

#[tokio::test]
async fn a_second_workers_prompt_queues_behind_the_running_one_and_never_overlaps() {
    let Some(url) = database() else { return };
    let slow = Turn::from(Reply::text("first answer").with_text_chunks(10).with_chunk_delay_ms(30));
    let fake =
        FakeProvider::start(Script::new([slow, Turn::from(Reply::text("second answer"))])).await.unwrap();
    let (data_a, data_b, project) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = worker(&url, &fake, data_a.path());
    let b = worker(&url, &fake, data_b.path());
    let session = a.create_session(project.path(), None, None, None).await.unwrap();

    let mut events = a.bus().subscribe();
    let running = {
        let (a, id) = (a.clone(), session.id.clone());
        tokio::spawn(async move { a.prompt(&id, PromptInput::text("one"), Delivery::Queue).await })
    };
    wait_for_event(&mut events, |p| matches!(p, EventPayload::PartDelta { .. })).await;
    // Another worker's run cannot take input at its next step (it is not in this process): even a
    // steered prompt is queued through the store, as its own turn after that run.
    let second = b.prompt(&session.id, PromptInput::text("two"), Delivery::Steer).await.unwrap();

    assert_eq!(running.await.unwrap().unwrap().stop, StopReason::Completed);
    assert_eq!(second.stop, StopReason::Completed);
    assert_eq!(texts_of(&b, &session.id), ["one", "first answer", "two", "second answer"]);
    let answer = b.history(&session.id).await.unwrap().pop().unwrap();
    assert_eq!(second.message.as_ref().map(|m| &m.id), Some(answer.info.id()));
    assert_eq!(fake.request_count(), 2);
}

fn texts_of(engine: &Engine, session: &codeloop_types::SessionId) -> Vec<String> {
    engine
        .store()
        .load_history(session)
        .unwrap()
        .iter()
        .map(|m| {
            m.parts
                .iter()
                .filter_map(|p| match &p.kind {
                    PartKind::Text(t) => Some(t.text.clone()),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

fn queued_texts(engine: &Engine, session: &codeloop_types::SessionId) -> Vec<String> {
    engine
        .store()
        .queued_inputs(session)
        .unwrap()
        .iter()
        .map(|q| {
            let input: PromptInput = serde_json::from_str(&q.input).unwrap();
            match &input.parts[0] {
                codeloop_core::input::InputPart::Text { text, .. } => text.clone(),
                other => panic!("{other:?}"),
            }
        })
        .collect()
}

/// Waits (yielding to the runtime, no sleeping) until the store holds `n` queued inputs of the session.
async fn until_queued(engine: &Engine, session: &codeloop_types::SessionId, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while queued_texts(engine, session).len() < n {
        assert!(std::time::Instant::now() < deadline, "input was never queued");
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn prompts_queued_while_a_session_runs_are_stored_and_run_in_order() {
    let slow = Turn::from(Reply::text("one").with_text_chunks(10).with_chunk_delay_ms(30));
    let h =
        Harness::new(Script::new([slow, Turn::from(Reply::text("two")), Turn::from(Reply::text("three"))]))
            .await;
    let (first, _) = h.start("1", |p| matches!(p, EventPayload::PartDelta { .. })).await;
    let queue = |text: &'static str| {
        let (engine, id) = (h.engine.clone(), h.session.id.clone());
        tokio::spawn(
            async move { engine.prompt(&id, PromptInput::text(text), Delivery::Queue).await.unwrap() },
        )
    };
    let second = queue("2");
    until_queued(&h.engine, &h.session.id, 1).await;
    let third = queue("3");
    until_queued(&h.engine, &h.session.id, 2).await;
    assert_eq!(queued_texts(&h.engine, &h.session.id), ["2", "3"]);

    assert_eq!(first.await.unwrap().stop, StopReason::Completed);
    assert_eq!(second.await.unwrap().stop, StopReason::Completed);
    assert_eq!(third.await.unwrap().stop, StopReason::Completed);
    assert_eq!(texts_of(&h.engine, &h.session.id), ["1", "one", "2", "two", "3", "three"]);
    assert_eq!(queued_texts(&h.engine, &h.session.id), Vec::<String>::new());
}

#[tokio::test]
async fn input_queued_by_a_dead_worker_is_run_by_another_once_its_lease_expires() {
    let Some(url) = database() else { return };
    let fake = FakeProvider::start(Script::new([Reply::text("first answer"), Reply::text("taken over")]))
        .await
        .unwrap();
    let (data_a, data_b, project) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = worker(&url, &fake, data_a.path());
    let session = a.create_session(project.path(), None, None, None).await.unwrap();
    a.prompt(&session.id, PromptInput::text("first"), Delivery::Queue).await.unwrap();

    // A worker that accepted a prompt while running the session, then died: its input is stored and
    // its lease row stays until it expires.
    let input = serde_json::to_string(&PromptInput::text("second")).unwrap();
    a.store().enqueue_input(&session.id, &input).unwrap();
    let runtime = tokio::runtime::Handle::current();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    runtime.spawn(connection);
    client
        .execute(
            "INSERT INTO run_lease (session_id, owner, expires_at)
             VALUES ($1, 'dead-worker', clock_timestamp() + interval '1 second')",
            &[&session.id.as_str()],
        )
        .await
        .unwrap();

    let b = worker(&url, &fake, data_b.path());
    assert_eq!(b.resume_orphans().await.unwrap(), 0, "the lease is still live");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if b.resume_orphans().await.unwrap() == 1 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the dead worker's lease never expired");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // The taken-over run settles what was left, then runs the queue; the entry goes when all is done.
    tokio::time::timeout(std::time::Duration::from_secs(10), b.coordinator().settled(&session.id))
        .await
        .expect("the run never ended");
    b.flush().await.unwrap();
    assert_eq!(texts_of(&b, &session.id), ["first", "first answer", "second", "taken over"]);
    assert_eq!(queued_texts(&b, &session.id), Vec::<String>::new());
}

#[tokio::test]
async fn every_worker_sees_every_workers_events_with_the_same_store_ids() {
    let Some(url) = database() else { return };
    let fake =
        FakeProvider::start(Script::new([Reply::text("seen everywhere").with_text_chunks(5)])).await.unwrap();
    let (data_a, data_b, project) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = worker_with(&url, &fake, data_a.path(), EventIds::Store);
    let b = worker_with(&url, &fake, data_b.path(), EventIds::Store);
    let (mut on_a, mut on_b) = (a.bus().subscribe(), b.bus().subscribe());
    let session = a.create_session(project.path(), None, None, None).await.unwrap();
    a.prompt(&session.id, PromptInput::text("hi"), Delivery::Queue).await.unwrap();

    // Worker B, which did not run anything, sees worker A's run: every event, same ids, same order.
    let idle = |p: &EventPayload| {
        matches!(p, EventPayload::SessionStatus { status: codeloop_types::SessionStatus::Idle, .. })
    };
    let mut seen = [Vec::new(), Vec::new()];
    for (rx, seen) in [&mut on_a, &mut on_b].into_iter().zip(seen.iter_mut()) {
        loop {
            let event =
                tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv()).await.unwrap().unwrap();
            let done = idle(&event.payload);
            seen.push(event);
            if done {
                break;
            }
        }
    }
    let ids = |events: &[Arc<codeloop_types::Event>]| events.iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(ids(&seen[0]), ids(&seen[1]));
    assert!(ids(&seen[1]).windows(2).all(|w| w[0] < w[1]));
    assert!(seen[1].iter().any(|e| matches!(&e.payload, EventPayload::PartDelta { .. })));
    assert_eq!(
        seen[0].iter().map(|e| &e.payload).collect::<Vec<_>>(),
        seen[1].iter().map(|e| &e.payload).collect::<Vec<_>>()
    );

    // Last-Event-ID on the other worker: replay from any id A's client saw.
    let middle = seen[0][seen[0].len() / 2].id;
    let (replay, _rx) = b.bus().subscribe_after(middle);
    let codeloop_core::Replay::Events(replayed) = replay else { panic!("B should replay") };
    // Exactly what followed that id (and possibly events published since), in order.
    let expected: Vec<u64> = ids(&seen[0]).into_iter().filter(|id| *id > middle).collect();
    assert!(ids(&replayed).starts_with(&expected), "{:?} vs {expected:?}", ids(&replayed));
}

#[tokio::test]
async fn a_worker_started_later_replays_earlier_events_from_the_stores_log() {
    let Some(url) = database() else { return };
    let fake = FakeProvider::start(Script::new([Reply::text("before C existed").with_text_chunks(4)]))
        .await
        .unwrap();
    let (data_a, data_c, project) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = worker_with(&url, &fake, data_a.path(), EventIds::Store);
    let mut on_a = a.bus().subscribe();
    let session = a.create_session(project.path(), None, None, None).await.unwrap();
    a.prompt(&session.id, PromptInput::text("hi"), Delivery::Queue).await.unwrap();
    let mut seen = Vec::new();
    loop {
        let event =
            tokio::time::timeout(std::time::Duration::from_secs(10), on_a.recv()).await.unwrap().unwrap();
        let idle = matches!(
            &event.payload,
            EventPayload::SessionStatus { status: codeloop_types::SessionStatus::Idle, .. }
        );
        seen.push(event);
        if idle {
            break;
        }
    }

    // Worker C starts after all of that: its bus holds none of it, the store's log does.
    let c = worker_with(&url, &fake, data_c.path(), EventIds::Store);
    let first = seen[0].id;
    assert!(matches!(c.bus().subscribe_after(first).0, codeloop_core::Replay::TooFarBehind { .. }));
    let (replay, _rx) = c.subscribe_after(first).await;
    let codeloop_core::Replay::Events(replayed) = replay else { panic!("C should replay from the store") };
    let after_first: Vec<_> = seen.iter().filter(|e| e.id > first).collect();
    // Everything A's subscriber saw after `first`, in order (events published after that may follow).
    assert!(replayed.len() >= after_first.len(), "{} < {}", replayed.len(), after_first.len());
    for (got, want) in replayed.iter().zip(&after_first) {
        assert_eq!((got.id, &got.payload), (want.id, &want.payload));
    }
    // An id A handed out is known to C even before C delivers anything newer; a made-up one is not.
    assert!(c.is_logged_event(seen.last().unwrap().id).await);
    assert!(!c.is_logged_event(seen.last().unwrap().id + 1_000_000).await);
}

#[tokio::test]
async fn a_new_prompt_waits_behind_input_a_dead_process_left_queued() {
    let h = Harness::new(Script::new([
        Turn::from(Reply::text("old answer")),
        Turn::from(Reply::text("new answer")),
    ]))
    .await;
    // A process queued this, then died before running it.
    let input = serde_json::to_string(&PromptInput::text("old")).unwrap();
    h.engine.store().enqueue_input(&h.session.id, &input).unwrap();

    let outcome = h.prompt("new").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    assert_eq!(texts_of(&h.engine, &h.session.id), ["old", "old answer", "new", "new answer"]);
    let last = h.engine.history(&h.session.id).await.unwrap().pop().unwrap();
    assert_eq!(outcome.message.as_ref().map(|m| &m.id), Some(last.info.id()), "the caller gets its own turn");
    assert_eq!(queued_texts(&h.engine, &h.session.id), Vec::<String>::new());
}
