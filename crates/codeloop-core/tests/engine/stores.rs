//! The engine on PostgreSQL (DESIGN.md §5b): the same pipeline through `StoreChoice::Url`, and two engines
//! (two workers) sharing one database. Skipped, loudly, where PostgreSQL is not installed.

use std::path::Path;
use std::sync::Arc;

use codeloop_core::{Delivery, Engine, EngineOptions, PromptInput, RunError, StopReason, StoreChoice};
use codeloop_store::SessionFilter;
use codeloop_testkit::postgres::database;
use codeloop_testkit::{FakeProvider, Reply, Script, Turn};
use codeloop_types::{EventPayload, PartKind};

use crate::common::config_for;
use crate::harness::wait_for_event;

fn worker(url: &str, fake: &FakeProvider, data: &Path) -> Engine {
    let mut options = EngineOptions::new(data, config_for(&fake.base_url()));
    options.store = StoreChoice::Url(url.to_owned());
    options.env = Arc::new(|_| None);
    options.skill_dirs = Some(Vec::new());
    Engine::open(options).unwrap()
}

fn answer_text(engine: &Engine, session: &codeloop_types::SessionId) -> String {
    let history = engine.history(session).unwrap();
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
    let session = a.create_session(project.path(), None, None, None).unwrap();
    let outcome = a.prompt(&session.id, PromptInput::text("hi"), Delivery::Queue).await.unwrap();
    assert_eq!(outcome.stop, StopReason::Completed);

    let b = worker(&url, &fake, data_b.path());
    let listed: Vec<_> = b.sessions(&SessionFilter::default()).unwrap().into_iter().map(|s| s.id).collect();
    assert_eq!(listed, vec![session.id.clone()]);
    assert_eq!(b.history(&session.id).unwrap().len(), 2);
    assert_eq!(answer_text(&b, &session.id), "hello from postgres");
}

#[tokio::test]
async fn a_second_worker_asked_to_run_a_running_session_is_refused_until_it_ends() {
    let Some(url) = database() else { return };
    let slow = Turn::from(Reply::text("first worker's answer").with_text_chunks(10).with_chunk_delay_ms(30));
    let fake = FakeProvider::start(Script::new([slow, Turn::from(Reply::text("second worker's answer"))]))
        .await
        .unwrap();
    let (data_a, data_b, project) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = worker(&url, &fake, data_a.path());
    let b = worker(&url, &fake, data_b.path());
    let session = a.create_session(project.path(), None, None, None).unwrap();

    let mut events = a.bus().subscribe();
    let running = {
        let (a, id) = (a.clone(), session.id.clone());
        tokio::spawn(async move { a.prompt(&id, PromptInput::text("one"), Delivery::Queue).await })
    };
    wait_for_event(&mut events, |p| matches!(p, EventPayload::PartDelta { .. })).await;
    let refused = b.prompt(&session.id, PromptInput::text("two"), Delivery::Queue).await;
    assert!(matches!(refused, Err(RunError::Busy(_))), "{refused:?}");

    assert_eq!(running.await.unwrap().unwrap().stop, StopReason::Completed);
    // The lease went with the run: now the other worker runs the session.
    let second = b.prompt(&session.id, PromptInput::text("two"), Delivery::Queue).await.unwrap();
    assert_eq!(second.stop, StopReason::Completed);
    assert_eq!(answer_text(&a, &session.id), "second worker's answer");
    assert_eq!(fake.request_count(), 2);
}
