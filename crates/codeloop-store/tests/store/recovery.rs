//! Recovery after a crash and the batched writer, on both stores.

use super::*;
use pretty_assertions::assert_eq;

// ---------------------------------------------------------------------------------------------------------
// Recovery

/// A session as a crashed run leaves it: one unfinished answer with open and settled tool calls.
pub(super) struct Crashed {
    session: codeloop_types::Session,
    answer: Message,
    parts: Vec<codeloop_types::Part>,
    errored: Message,
}

pub(super) fn crashed_run(store: &dyn Store) -> Crashed {
    let session = session("/p");
    let question = user(&session.id);
    let answer = Message::Assistant(assistant(&session.id, question.id()));
    let mut errored = assistant(&session.id, question.id());
    errored.error = Some(AssistantError::ContextOverflow { message: "too long".into(), body: None });
    let errored = Message::Assistant(errored);
    let parts = vec![
        part(&answer, text_kind("partial answer, flushed before the crash")),
        part(&answer, tool_kind("bash", pending())),
        part(&answer, tool_kind("bash", running(50))),
        part(&answer, tool_kind("read", completed("done"))),
        part(&answer, tool_kind("edit", failed())),
    ];
    let mut batch = vec![
        Write::Session(session.clone()),
        Write::Message(question),
        Write::Message(answer.clone()),
        Write::Message(errored.clone()),
    ];
    batch.extend(parts.iter().cloned().map(Write::Part));
    store.apply(&batch).unwrap();
    Crashed { session, answer, parts, errored }
}

pub(super) fn assert_recovered(store: &dyn Store, crashed: &Crashed) {
    let history = store.load_history(&crashed.session.id).unwrap();
    let answer = &history[1];
    let info = answer.info.as_assistant().unwrap();
    assert_eq!(info.error, Some(AssistantError::aborted()));
    assert!(info.time.completed.unwrap() >= info.time.created);
    // The message kept everything else.
    let mut expected_info = crashed.answer.as_assistant().unwrap().clone();
    expected_info.error = info.error.clone();
    expected_info.time.completed = info.time.completed;
    assert_eq!(info, &expected_info);

    // An unfinished message that already had an error keeps it.
    let errored = history[2].info.as_assistant().unwrap();
    assert_eq!(errored.error, crashed.errored.as_assistant().unwrap().error);
    assert!(errored.time.completed.is_some());

    let states: Vec<&ToolState> = answer.parts.iter().filter_map(|p| p.as_tool()).map(|t| &t.state).collect();
    for state in &states[..2] {
        let ToolState::Error(e) = state else { panic!("not interrupted: {state:?}") };
        assert_eq!(e.error, INTERRUPTED_ERROR);
        assert!(state.is_interrupted());
    }
    let ToolState::Error(was_running) = states[1] else { unreachable!() };
    assert_eq!(was_running.time.start, 50);
    assert_eq!(was_running.metadata.as_ref().unwrap()["output"], "running 3 tests\n");
    // Settled parts and text are untouched.
    assert_eq!(answer.parts[0], crashed.parts[0]);
    assert_eq!(answer.parts[3..], crashed.parts[3..]);
}

pub(super) fn recovery_interrupts_open_tool_calls_and_aborts_unfinished_answers(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let crashed = crashed_run(&*store);
    let report = store.recover(None).unwrap();
    assert_eq!(report, RecoveryReport { interrupted_parts: 2, aborted_messages: 2 });
    assert_recovered(&*store, &crashed);
    assert_eq!(store.recover(None).unwrap(), RecoveryReport::default());
}

pub(super) fn recovery_runs_on_open_and_reports_what_it_changed(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let crashed = crashed_run(&*place.open());
    let store = place.open();
    assert_eq!(store.last_recovery(), &RecoveryReport { interrupted_parts: 2, aborted_messages: 2 });
    assert_recovered(&*store, &crashed);
    assert_eq!(place.open().last_recovery(), &RecoveryReport::default());
}

pub(super) fn recovery_leaves_a_locked_session_alone_until_its_lock_is_released(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let running = crashed_run(&*store);
    let dead = crashed_run(&*store);
    let lock = store.lock_session(&running.session.id).unwrap();
    let before = store.load_history(&running.session.id).unwrap();

    // Another store (as another process would) on the same dir, opened while the run is live.
    let other = place.open();
    assert_eq!(other.last_recovery(), &RecoveryReport { interrupted_parts: 2, aborted_messages: 2 });
    assert_recovered(&*other, &dead);
    assert_eq!(store.load_history(&running.session.id).unwrap(), before);

    // The run's owner may settle its own session while holding the lock.
    drop(lock);
    assert_eq!(store.recover(None).unwrap(), RecoveryReport { interrupted_parts: 2, aborted_messages: 2 });
    assert_recovered(&*store, &running);
}

pub(super) fn recover_one_session_settles_only_that_session(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let a = crashed_run(&*store);
    let b = crashed_run(&*store);
    let _lock = store.lock_session(&a.session.id).unwrap();
    let report = store.recover(Some(&a.session.id)).unwrap();
    assert_eq!(report, RecoveryReport { interrupted_parts: 2, aborted_messages: 2 });
    assert_recovered(&*store, &a);
    let b_history = store.load_history(&b.session.id).unwrap();
    assert_eq!(b_history[1].parts, b.parts);
}

// ---------------------------------------------------------------------------------------------------------
// The batched writer

pub(super) fn text_flushed_through_the_writer_survives_a_crash(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let writer = StoreWriter::new(store.arc()).unwrap();
    let session = session("/p");
    let question = user(&session.id);
    let answer = Message::Assistant(assistant(&session.id, question.id()));
    writer.send(Write::Session(session.clone()));
    writer.send(Write::Message(question.clone()));
    writer.send(Write::Message(answer.clone()));
    let mut text = part(&answer, text_kind(""));
    let mut streamed = String::new();
    for delta in 0..2000 {
        streamed.push_str(&format!("tok{delta} "));
        if delta % 50 == 49 {
            let codeloop_types::PartKind::Text(t) = &mut text.kind else { unreachable!() };
            t.text = streamed.clone();
            writer.send(Write::Part(text.clone()));
        }
    }
    writer.flush().wait().unwrap();
    // A crash: no graceful shutdown of the writer or the store.
    std::mem::forget(writer);
    std::mem::forget(store);

    let reopened = place.open();
    let history = reopened.load_history(&session.id).unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[0].info, question);
    assert_eq!(history[1].parts, vec![text]);
    assert_eq!(history[1].parts[0].as_text().unwrap().text, streamed);
    // The unfinished answer was settled by recovery on open.
    assert_eq!(reopened.last_recovery().aborted_messages, 1);
}

pub(super) fn dropping_the_writer_commits_everything_queued(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let session = session("/p");
    {
        let writer = StoreWriter::new(store.arc()).unwrap();
        writer.send(Write::Session(session.clone()));
    }
    assert_eq!(store.get_session(&session.id).unwrap(), Some(session));
}

#[tokio::test(flavor = "current_thread")]
async fn flush_is_awaitable_from_async_code() {
    let dir = temp();
    let store = open(dir.path());
    let writer = StoreWriter::new(store.clone()).unwrap();
    let session = session("/p");
    writer.send(Write::Session(session.clone()));
    writer.flush().await.unwrap();
    assert_eq!(store.get_session(&session.id).unwrap(), Some(session));
    writer.flush().await.unwrap();
}

pub(super) fn a_failed_write_is_reported_by_the_next_flush_and_spares_its_batch(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let writer = StoreWriter::new(store.arc()).unwrap();
    let session = session("/p");
    let question = user(&session.id);
    let orphan = part(&user(&session.id), text_kind("its message was never written"));
    let good = part(&question, text_kind("fine"));
    writer.send(Write::Session(session.clone()));
    writer.send(Write::Message(question.clone()));
    writer.send(Write::Part(orphan));
    writer.send(Write::Part(good.clone()));
    let error = writer.flush().wait().unwrap_err();
    assert!(
        matches!(&error, StoreError::WriteFailed { count: 1, first } if first.to_lowercase().contains("foreign key")),
        "{error}"
    );
    // The other writes of the batch are committed, and the error is reported once.
    assert_eq!(store.get_message(question.id()).unwrap().unwrap().parts, vec![good]);
    writer.flush().wait().unwrap();
    // The count of lost writes stays, for whoever did not take the error.
    assert_eq!(writer.failed_writes(), 1);
    writer.close().unwrap();
}

pub(super) fn writer_coalesces_repeated_part_updates_into_the_last_version(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let writer = StoreWriter::new(store.arc()).unwrap();
    let session = session("/p");
    let question = user(&session.id);
    writer.send(Write::Session(session.clone()));
    writer.send(Write::Message(question.clone()));
    let mut text = part(&question, text_kind(""));
    for i in 0..500 {
        let codeloop_types::PartKind::Text(t) = &mut text.kind else { unreachable!() };
        t.text.push_str(&i.to_string());
        writer.send(Write::Part(text.clone()));
    }
    writer.close().unwrap();
    assert_eq!(store.get_message(question.id()).unwrap().unwrap().parts, vec![text]);
}
