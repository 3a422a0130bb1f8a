//! Integration tests of the SQLite store on real files: round trips, in-place updates, paging, recovery
//! after a crash (including a real SIGKILL of a child process), the batched writer, concurrency across
//! connections and stores, run locks, approvals and todos; and the PostgreSQL store over TLS (`tls/`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
mod tls;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use codeloop_store::{
    DiskUsage, MessageWithParts, Page, PgStore, RecoveryReport, SessionFilter, SqliteStore, Store,
    StoreError, StoreWriter, Write,
};
use codeloop_types::{
    AssistantError, INTERRUPTED_ERROR, Message, PermissionAction, PermissionRule, SessionId, Todo,
    TodoPriority, TodoStatus, ToolState,
};
use pretty_assertions::assert_eq;
use serde_json::json;
use support::*;
use tempfile::TempDir;

fn temp() -> TempDir {
    tempfile::tempdir().unwrap()
}

fn ids(history: &[MessageWithParts]) -> Vec<String> {
    history.iter().map(|m| m.info.id().to_string()).collect()
}

// ---------------------------------------------------------------------------------------------------------
// Round trips

fn every_part_kind_and_both_message_kinds_round_trip(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let session = session("/work/project");
    let question = user(&session.id);
    let answer = finished_assistant(&session.id, question.id());
    let question_parts = vec![part(&question, text_kind("hello"))];
    let answer_parts = every_part_kind(&answer);

    let mut batch = vec![Write::Session(session.clone()), Write::Message(question.clone())];
    batch.extend(question_parts.iter().cloned().map(Write::Part));
    batch.push(Write::Message(answer.clone()));
    batch.extend(answer_parts.iter().cloned().map(Write::Part));
    store.apply(&batch).unwrap();

    let expected = vec![
        MessageWithParts { info: question.clone(), parts: question_parts },
        MessageWithParts { info: answer.clone(), parts: answer_parts.clone() },
    ];
    assert_eq!(store.load_history(&session.id).unwrap(), expected);
    assert_eq!(store.get_session(&session.id).unwrap(), Some(session.clone()));
    assert_eq!(store.get_message(answer.id()).unwrap(), Some(expected[1].clone()));
    assert_eq!(store.get_message(&"msg_missing".into()).unwrap(), None);

    // And the same after reopening the file. The run lock keeps recovery from settling the open tool calls.
    let _run = store.lock_session(&session.id).unwrap();
    drop(store);
    let store = place.open();
    assert_eq!(store.last_recovery(), &RecoveryReport::default());
    assert_eq!(store.load_history(&session.id).unwrap(), expected);
}

fn tool_state_data_round_trips_unchanged_through_every_transition(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let session = session("/p");
    let question = user(&session.id);
    let answer = finished_assistant(&session.id, question.id());
    store
        .apply(&[Write::Session(session.clone()), Write::Message(question), Write::Message(answer.clone())])
        .unwrap();

    let mut tool = part(&answer, tool_kind("bash", pending()));
    let mut seen = Vec::new();
    let steps: [fn(&mut ToolState); 5] = [
        |s: &mut ToolState| s.append_raw("t\"}").unwrap(),
        |s: &mut ToolState| {
            s.start(json!({"command": "cat", "env": {"A": "1"}, "big": 1e300, "neg": -0.5}), 7).unwrap()
        },
        |s: &mut ToolState| {
            s.progress(None, Some(json!({"output": "line\n\u{0}\u{1f600}", "list": [true, null]}))).unwrap()
        },
        |s: &mut ToolState| {
            s.complete("out \"quoted\"\n".into(), "cat".into(), json!({"k": [1, {"x": "y"}]}), vec![], 9)
                .unwrap()
        },
        |s: &mut ToolState| s.mark_compacted(11).unwrap(),
    ];
    for step in steps {
        step(&mut tool.as_tool_mut().unwrap().state);
        store.apply(&[Write::Part(tool.clone())]).unwrap();
        let stored = store.get_message(answer.id()).unwrap().unwrap().parts;
        assert_eq!(stored, vec![tool.clone()]);
        seen.push(tool.as_tool().unwrap().state.status());
    }
    assert_eq!(seen, ["pending", "running", "running", "completed", "completed"]);
}

// ---------------------------------------------------------------------------------------------------------
// In-place updates and space

fn usage_after_checkpoint(store: &SqliteStore) -> DiskUsage {
    store.checkpoint().unwrap();
    store.disk_usage().unwrap()
}

#[test]
fn updating_one_part_ten_thousand_times_does_not_grow_the_database() {
    let dir = temp();
    let store = open(dir.path());
    let session = session("/p");
    let question = user(&session.id);
    let answer = finished_assistant(&session.id, question.id());
    store
        .apply(&[Write::Session(session.clone()), Write::Message(question), Write::Message(answer.clone())])
        .unwrap();
    let mut tool = part(&answer, tool_kind("bash", running(1)));
    let output = "x".repeat(1000);
    let mut update = |i: usize| {
        let metadata = json!({"output": format!("{output} {i}"), "tick": i});
        tool.as_tool_mut().unwrap().state.progress(None, Some(metadata)).unwrap();
        store.apply(&[Write::Part(tool.clone())]).unwrap();
    };
    for i in 0..10 {
        update(i);
    }
    let before = usage_after_checkpoint(&store);
    for i in 10..10_000 {
        update(i);
    }
    let after = usage_after_checkpoint(&store);
    assert!(
        after.page_count <= before.page_count + 2,
        "database grew from {before:?} to {after:?} after 10 000 updates of one part"
    );
    let file = std::fs::metadata(store.db_path()).unwrap().len();
    assert!(file <= (before.page_count + 2) * before.page_size, "file is {file} bytes");
    let stored = store.get_message(answer.id()).unwrap().unwrap().parts;
    assert_eq!(stored, vec![tool]);
}

#[test]
fn a_thousand_one_kilobyte_tool_parts_take_little_more_than_their_json() {
    let dir = temp();
    let store = open(dir.path());
    let session = session("/p");
    let question = user(&session.id);
    let answer = finished_assistant(&session.id, question.id());
    store
        .apply(&[Write::Session(session.clone()), Write::Message(question), Write::Message(answer.clone())])
        .unwrap();
    let before = usage_after_checkpoint(&store);
    let output: String = (0..1024).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    let parts: Vec<Write> =
        (0..1000).map(|_| Write::Part(part(&answer, tool_kind("bash", completed(&output))))).collect();
    store.apply(&parts).unwrap();
    let after = usage_after_checkpoint(&store);
    let bytes = after.used_bytes() - before.used_bytes();
    let json_bytes: usize = parts
        .iter()
        .map(|w| match w {
            Write::Part(p) => serde_json::to_string(&p.kind).unwrap().len(),
            _ => 0,
        })
        .sum();
    eprintln!("1000 tool parts: {bytes} bytes of database for {json_bytes} bytes of part JSON");
    assert!(bytes * 2 < json_bytes as u64 * 3, "{bytes} bytes for {json_bytes} bytes of JSON");
}

#[test]
fn deleting_a_session_removes_its_tree_and_gives_the_space_back() {
    let dir = temp();
    let store = open(dir.path());
    let keep = session("/p");
    seed(&*store, &keep, 2, 2);
    let root = session("/p");
    let child = child_session(&root);
    let grandchild = child_session(&child);
    let big = "y".repeat(4000);
    for s in [&root, &child, &grandchild] {
        let messages = seed(&*store, s, 50, 3);
        let bulky: Vec<Write> =
            messages.iter().map(|m| Write::Part(part(m, tool_kind("bash", completed(&big))))).collect();
        store.apply(&bulky).unwrap();
        store.set_todos(&s.id, &[todo("x", TodoStatus::Pending)]).unwrap();
    }
    let _ = store.lock_session(&child.id).unwrap();
    let full = usage_after_checkpoint(&store);

    assert!(store.delete_session(&root.id).unwrap());
    assert!(!store.delete_session(&root.id).unwrap());

    for s in [&root, &child, &grandchild] {
        assert_eq!(store.get_session(&s.id).unwrap(), None);
        assert_eq!(store.load_history(&s.id).unwrap(), vec![]);
        assert_eq!(store.get_todos(&s.id).unwrap(), vec![]);
        let lock_file = dir.path().join("locks").join(format!("{}.lock", s.id));
        assert!(!lock_file.exists(), "{}", lock_file.display());
    }
    assert_eq!(store.load_history(&keep.id).unwrap().len(), 4);
    let empty = usage_after_checkpoint(&store);
    assert_eq!(empty.freelist_count, 0);
    assert!(empty.page_count * 4 < full.page_count, "{full:?} -> {empty:?}");
    let file = std::fs::metadata(store.db_path()).unwrap().len();
    assert_eq!(file, empty.page_count * empty.page_size);
}

// ---------------------------------------------------------------------------------------------------------
// Reads

fn messages_page_newest_first_with_an_exclusive_cursor(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let other = session("/p");
    let session = session("/p");
    let messages = seed(&*store, &session, 5, 3); // 10 messages
    seed(&*store, &other, 5, 3); // interleaved ids from another session must not leak into pages
    let history = store.load_history(&session.id).unwrap();
    assert_eq!(ids(&history), messages.iter().map(|m| m.id().to_string()).collect::<Vec<_>>());

    let mut pages = Vec::new();
    let mut before = None;
    loop {
        let page = store.list_messages(&session.id, &Page { before: before.clone(), limit: 4 }).unwrap();
        let Some(last) = page.last() else { break };
        before = Some(last.info.id().clone());
        pages.push(page);
    }
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [4, 4, 2]);
    let mut paged: Vec<MessageWithParts> = pages.into_iter().flatten().collect();
    paged.reverse();
    assert_eq!(paged, history);
    for message in &paged {
        let part_ids: Vec<_> = message.parts.iter().map(|p| p.id.clone()).collect();
        let mut sorted = part_ids.clone();
        sorted.sort();
        assert_eq!(part_ids, sorted);
        assert!(message.parts.iter().all(|p| &p.message_id == message.info.id()));
    }
    assert_eq!(store.list_messages(&session.id, &Page::default()).unwrap().len(), 10);
    assert_eq!(store.list_messages(&"ses_none".into(), &Page { before: None, limit: 5 }).unwrap(), vec![]);
}

fn sessions_list_roots_children_and_directories_most_recently_updated_first(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let mut a = session("/one");
    let mut b = session("/two");
    let mut c = child_session(&a);
    a.time.updated = 100;
    b.time.updated = 300;
    c.time.updated = 200;
    store.apply(&[Write::Session(a.clone()), Write::Session(b.clone()), Write::Session(c.clone())]).unwrap();
    let list = |filter: SessionFilter| -> Vec<SessionId> {
        store.list_sessions(&filter).unwrap().into_iter().map(|s| s.id).collect()
    };
    assert_eq!(list(SessionFilter::default()), [b.id.clone(), a.id.clone()]);
    assert_eq!(
        list(SessionFilter { include_children: true, ..Default::default() }),
        [b.id.clone(), c.id.clone(), a.id.clone()]
    );
    assert_eq!(list(SessionFilter { parent: Some(a.id.clone()), ..Default::default() }), [c.id.clone()]);
    assert_eq!(
        list(SessionFilter { directory: Some("/one".into()), include_children: true, ..Default::default() }),
        [c.id.clone(), a.id.clone()]
    );
    assert_eq!(list(SessionFilter { limit: Some(1), ..Default::default() }), [b.id.clone()]);

    // Updating a session in place moves it in the order and keeps one row.
    a.time.updated = 400;
    a.title = "renamed".into();
    store.apply(&[Write::Session(a.clone())]).unwrap();
    assert_eq!(list(SessionFilter::default()), [a.id.clone(), b.id.clone()]);
    assert_eq!(store.get_session(&a.id).unwrap().unwrap().title, "renamed");
}

fn removing_parts_and_messages_takes_them_out_of_history(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let session = session("/p");
    let messages = seed(&*store, &session, 2, 2);
    let history = store.load_history(&session.id).unwrap();
    let dropped_part = history[1].parts[0].id.clone();
    store.apply(&[Write::RemovePart(dropped_part), Write::RemoveMessage(messages[2].id().clone())]).unwrap();
    let after = store.load_history(&session.id).unwrap();
    assert_eq!(ids(&after), [messages[0].id(), messages[1].id(), messages[3].id()].map(|id| id.to_string()));
    assert_eq!(after[1].parts, history[1].parts[1..].to_vec());
    assert_eq!(store.get_message(messages[2].id()).unwrap(), None);
}

fn a_failing_write_rolls_back_its_whole_batch(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let session = session("/p");
    let question = user(&session.id);
    let orphan = part(&user(&session.id), text_kind("no such message"));
    let result =
        store.apply(&[Write::Session(session.clone()), Write::Message(question), Write::Part(orphan)]);
    assert!(matches!(result, Err(StoreError::Sqlite(_) | StoreError::Postgres(_))), "{result:?}");
    assert_eq!(store.get_session(&session.id).unwrap(), None);
}

// ---------------------------------------------------------------------------------------------------------
// Recovery

/// A session as a crashed run leaves it: one unfinished answer with open and settled tool calls.
struct Crashed {
    session: codeloop_types::Session,
    answer: Message,
    parts: Vec<codeloop_types::Part>,
    errored: Message,
}

fn crashed_run(store: &dyn Store) -> Crashed {
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

fn assert_recovered(store: &dyn Store, crashed: &Crashed) {
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

fn recovery_interrupts_open_tool_calls_and_aborts_unfinished_answers(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let crashed = crashed_run(&*store);
    let report = store.recover(None).unwrap();
    assert_eq!(report, RecoveryReport { interrupted_parts: 2, aborted_messages: 2 });
    assert_recovered(&*store, &crashed);
    assert_eq!(store.recover(None).unwrap(), RecoveryReport::default());
}

fn recovery_runs_on_open_and_reports_what_it_changed(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let crashed = crashed_run(&*place.open());
    let store = place.open();
    assert_eq!(store.last_recovery(), &RecoveryReport { interrupted_parts: 2, aborted_messages: 2 });
    assert_recovered(&*store, &crashed);
    assert_eq!(place.open().last_recovery(), &RecoveryReport::default());
}

fn recovery_leaves_a_locked_session_alone_until_its_lock_is_released(kind: Kind) {
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

fn recover_one_session_settles_only_that_session(kind: Kind) {
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

fn text_flushed_through_the_writer_survives_a_crash(kind: Kind) {
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

fn dropping_the_writer_commits_everything_queued(kind: Kind) {
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

fn a_failed_write_is_reported_by_the_next_flush_and_spares_its_batch(kind: Kind) {
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

fn writer_coalesces_repeated_part_updates_into_the_last_version(kind: Kind) {
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

// ---------------------------------------------------------------------------------------------------------
// Concurrency

#[test]
fn readers_do_not_wait_for_an_open_write_transaction() {
    let dir = temp();
    let store = open(dir.path());
    let session = session("/p");
    seed(&*store, &session, 3, 2);
    let expected = store.load_history(&session.id).unwrap();

    // Another connection (as another process would) holds the write lock with uncommitted changes.
    let blocker = rusqlite::Connection::open(store.db_path()).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE; DELETE FROM part;").unwrap();
    let start = Instant::now();
    assert_eq!(store.load_history(&session.id).unwrap(), expected);
    assert_eq!(store.list_messages(&session.id, &Page { before: None, limit: 2 }).unwrap().len(), 2);
    // Far below the 5 s busy timeout a blocked read would wait for.
    assert!(start.elapsed() < Duration::from_secs(3), "reads waited {:?}", start.elapsed());
    blocker.execute_batch("ROLLBACK").unwrap();
}

fn a_reader_sees_whole_batches_while_a_writer_writes(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let session = session("/p");
    store.apply(&[Write::Session(session.clone())]).unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for _ in 0..200 {
                let question = user(&session.id);
                let mut batch = vec![Write::Message(question.clone())];
                batch.extend((0..3).map(|i| Write::Part(part(&question, text_kind(&i.to_string())))));
                store.apply(&batch).unwrap();
            }
            done.store(true, Ordering::Release);
        });
        let mut reads = 0;
        let mut last_len = 0;
        while !done.load(Ordering::Acquire) || reads == 0 {
            let history = store.load_history(&session.id).unwrap();
            assert!(history.iter().all(|m| m.parts.len() == 3), "a read saw half a batch");
            assert!(history.len() >= last_len);
            last_len = history.len();
            reads += 1;
        }
        assert!(reads > 0);
    });
    assert_eq!(store.load_history(&session.id).unwrap().len(), 200);
}

fn two_stores_on_one_data_dir_write_concurrently_without_lock_errors(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let stores = [place.open(), place.open()];
    let sessions: Vec<SessionId> = std::thread::scope(|scope| {
        let writers: Vec<_> =
            stores.iter().map(|store| scope.spawn(|| write_turns(&**store, TURNS_PER_PROCESS))).collect();
        writers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    for (store, session) in stores.iter().rev().zip(&sessions) {
        assert_eq!(store.load_history(session).unwrap().len(), TURNS_PER_PROCESS);
    }
}

/// Environment variable that turns `writer_helper_process` into the second process of the test below.
const WRITER_DIR_ENV: &str = "CODELOOP_STORE_WRITER_DIR";
const TURNS_PER_PROCESS: usize = 300;

/// Writes `turns` turns into a new session of `store`, one transaction each, plus a todo update per turn.
fn write_turns(store: &dyn Store, turns: usize) -> SessionId {
    let session = session("/p");
    store.apply(&[Write::Session(session.clone())]).unwrap();
    for turn in 0..turns {
        let question = user(&session.id);
        let batch = [Write::Message(question.clone()), Write::Part(part(&question, text_kind("q")))];
        store.apply(&batch).unwrap_or_else(|e| panic!("turn {turn}: {e}"));
        store.set_todos(&session.id, &[todo(&turn.to_string(), TodoStatus::InProgress)]).unwrap();
    }
    session.id
}

/// Not a test of its own: the other process of `two_processes_write_one_data_dir_without_lock_errors`.
#[test]
#[ignore = "helper process, started by two_processes_write_one_data_dir_without_lock_errors"]
fn writer_helper_process() {
    let Some(dir) = std::env::var_os(WRITER_DIR_ENV) else { return };
    let store = open(std::path::Path::new(&dir));
    println!("ready");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    let session = write_turns(&*store, TURNS_PER_PROCESS);
    println!("done {session}");
}

#[test]
fn two_processes_write_one_data_dir_without_lock_errors() {
    use std::io::Write as _;
    let dir = temp();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "writer_helper_process", "--ignored", "--nocapture", "--test-threads=1"])
        .env(WRITER_DIR_ENV, dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut wait_for = |word: &str| loop {
        let mut line = String::new();
        assert_ne!(stdout.read_line(&mut line).unwrap(), 0, "helper exited before `{word}`");
        if let Some((_, rest)) = line.trim().split_once(word) {
            break rest.trim().to_owned();
        }
    };
    wait_for("ready");
    let store = open(dir.path());
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mine = write_turns(&*store, TURNS_PER_PROCESS);
    let theirs = SessionId::from(wait_for("done"));
    assert!(child.wait().unwrap().success());
    for session in [mine, theirs] {
        assert_eq!(store.load_history(&session).unwrap().len(), TURNS_PER_PROCESS);
    }
}

// ---------------------------------------------------------------------------------------------------------
// Session locks

fn a_session_lock_refuses_a_second_holder_and_is_released_on_drop(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let other = place.open();
    let id = SessionId::new();
    let lock = store.lock_session(&id).unwrap();
    assert_eq!(lock.session_id(), &id);
    assert!(matches!(store.lock_session(&id), Err(StoreError::SessionBusy(busy)) if busy == id));
    assert!(matches!(other.lock_session(&id), Err(StoreError::SessionBusy(_))));
    // Other sessions are independent.
    let _unrelated = other.lock_session(&SessionId::new()).unwrap();
    drop(lock);
    let _again = other.lock_session(&id).unwrap();
}

/// Environment variable that turns `crash_helper_process` into the crashing run of the test below.
const CRASH_DIR_ENV: &str = "CODELOOP_STORE_CRASH_DIR";
/// The same, with the URL of a PostgreSQL database.
const CRASH_URL_ENV: &str = "CODELOOP_STORE_CRASH_URL";

/// Not a test of its own: the child process of `a_killed_run_releases_its_lock_and_is_recovered`. It
/// writes a run through the writer, flushes, holds the session lock, says `ready` and waits to be killed.
#[test]
#[ignore = "helper process, started by a_killed_run_releases_its_lock_and_is_recovered"]
fn crash_helper_process() {
    let store: Arc<dyn Store> = if let Some(url) = std::env::var_os(CRASH_URL_ENV) {
        Arc::new(PgStore::open(url.to_str().unwrap(), TEST_LEASE).unwrap())
    } else if let Some(dir) = std::env::var_os(CRASH_DIR_ENV) {
        open(std::path::Path::new(&dir))
    } else {
        return;
    };
    let writer = StoreWriter::new(store.clone()).unwrap();
    let session = session("/p");
    let question = user(&session.id);
    let answer = Message::Assistant(assistant(&session.id, question.id()));
    let lock = store.lock_session(&session.id).unwrap();
    writer.send(Write::Session(session.clone()));
    writer.send(Write::Message(question));
    writer.send(Write::Message(answer.clone()));
    writer.send(Write::Part(part(&answer, text_kind("streamed so far"))));
    writer.send(Write::Part(part(&answer, tool_kind("bash", running(5)))));
    writer.flush().wait().unwrap();
    println!("ready {}", session.id);
    let mut line = String::new();
    // Blocks until the parent kills this process; stdin is never written.
    let _ = std::io::stdin().read_line(&mut line);
    drop(lock);
}

fn a_killed_run_releases_its_lock_and_is_recovered(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let (env, value): (&str, std::ffi::OsString) = match &place {
        Place::Sqlite(dir) => (CRASH_DIR_ENV, dir.path().into()),
        Place::Postgres(url) => (CRASH_URL_ENV, url.into()),
    };
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_helper_process", "--ignored", "--nocapture", "--test-threads=1"])
        .env(env, value)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let session = loop {
        let mut line = String::new();
        assert_ne!(stdout.read_line(&mut line).unwrap(), 0, "helper exited before it was ready");
        // libtest may print `test crash_helper_process ... ` on the same line first.
        if let Some((_, id)) = line.trim().split_once("ready ") {
            break SessionId::from(id);
        }
    };

    // While the other process runs the session, it is busy and recovery leaves it alone.
    let store = place.open();
    assert_eq!(store.last_recovery(), &RecoveryReport::default());
    assert!(matches!(store.lock_session(&session), Err(StoreError::SessionBusy(_))));
    let live = store.load_history(&session).unwrap();
    assert_eq!(live[1].parts[1].as_tool().unwrap().state.status(), "running");

    child.kill().unwrap(); // SIGKILL: no destructor runs in the child
    child.wait().unwrap();
    let killed = Instant::now();

    let store = match kind {
        // The OS released the file lock with the process.
        Kind::Sqlite => {
            drop(store);
            place.open()
        }
        // The dead worker's lease still holds the session until it expires (it renewed it at most a third
        // of a lease ago); then another worker's open settles the run.
        Kind::Postgres => {
            assert!(matches!(store.lock_session(&session), Err(StoreError::SessionBusy(_))));
            loop {
                let reopened = place.open();
                if reopened.last_recovery() != &RecoveryReport::default() {
                    break reopened;
                }
                assert!(killed.elapsed() < TEST_LEASE * 5, "the dead worker's lease never expired");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    assert_eq!(store.last_recovery(), &RecoveryReport { interrupted_parts: 1, aborted_messages: 1 });
    let history = store.load_history(&session).unwrap();
    assert_eq!(history[1].parts[0].as_text().unwrap().text, "streamed so far");
    assert!(history[1].parts[1].as_tool().unwrap().state.is_interrupted());
    assert_eq!(history[1].info.as_assistant().unwrap().error, Some(AssistantError::aborted()));
    let _lock = store.lock_session(&session).unwrap();
}

// ---------------------------------------------------------------------------------------------------------
// Approvals and todos

fn approvals_are_saved_per_project_without_duplicates_and_can_be_revoked(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let bash = PermissionRule::new("bash", "git *", PermissionAction::Allow);
    let edit = PermissionRule::new("edit", "src/*", PermissionAction::Allow);
    let first = store.add_approval("/one", &bash).unwrap();
    let again = store.add_approval("/one", &bash).unwrap();
    assert_eq!(again.id, first.id);
    let denied = PermissionRule { action: PermissionAction::Deny, ..bash.clone() };
    assert_eq!(store.add_approval("/one", &denied).unwrap().rule, denied);
    let second = store.add_approval("/one", &edit).unwrap();
    let elsewhere = store.add_approval("/two", &bash).unwrap();

    let rules =
        |project| store.list_approvals(project).unwrap().into_iter().map(|a| (a.id, a.rule)).collect();
    let one: Vec<_> = rules(Some("/one"));
    assert_eq!(one, vec![(first.id, denied.clone()), (second.id, edit.clone())]);
    assert_eq!(rules(None).len(), 3);

    assert!(store.revoke_approval(second.id).unwrap());
    assert!(!store.revoke_approval(second.id).unwrap());
    assert_eq!(rules(Some("/one")), vec![(first.id, denied)]);
    assert_eq!(rules(Some("/two")), vec![(elsewhere.id, bash)]);
    drop(store);
    assert_eq!(place.open().list_approvals(None).unwrap().len(), 2);
}

fn todo(content: &str, status: TodoStatus) -> Todo {
    Todo { content: content.into(), status, priority: TodoPriority::High }
}

fn todos_are_replaced_as_a_whole_and_cleared(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let id = SessionId::new();
    assert_eq!(store.get_todos(&id).unwrap(), vec![]);
    let list = vec![todo("write tests", TodoStatus::Completed), todo("bench", TodoStatus::InProgress)];
    store.set_todos(&id, &list).unwrap();
    assert_eq!(store.get_todos(&id).unwrap(), list);
    let next = vec![todo("report", TodoStatus::Pending)];
    store.set_todos(&id, &next).unwrap();
    assert_eq!(store.get_todos(&id).unwrap(), next);
    store.set_todos(&id, &[]).unwrap();
    assert_eq!(store.get_todos(&id).unwrap(), vec![]);
}

fn jobs_are_saved_listed_and_go_with_their_session(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let s = session("/p");
    store.apply(&[Write::Session(s.clone())]).unwrap();
    let job = |command: &str| codeloop_types::Job {
        id: codeloop_types::JobId::new(),
        session_id: s.id.clone(),
        command: command.into(),
        state: codeloop_types::JobState::Running,
        exit_code: None,
        started: 1,
        ended: None,
    };
    let (server, build) = (job("npm run dev"), job("cargo build"));
    store.save_job(&server, "host:1:2").unwrap();
    store.save_job(&build, "host:1:2").unwrap();
    let exited = codeloop_types::Job {
        state: codeloop_types::JobState::Exited,
        exit_code: Some(0),
        ended: Some(5),
        ..build.clone()
    };
    store.save_job(&exited, "host:1:2").unwrap();
    let owned =
        |jobs: Vec<(codeloop_types::Job, String)>| jobs.into_iter().map(|(j, _)| j).collect::<Vec<_>>();
    assert_eq!(owned(store.list_jobs(Some(&s.id)).unwrap()), vec![server.clone(), exited]);
    assert_eq!(store.list_jobs(None).unwrap(), vec![(server, "host:1:2".to_owned())]);
    store.delete_session(&s.id).unwrap();
    assert_eq!(store.list_jobs(Some(&s.id)).unwrap(), vec![]);
}

// ---------------------------------------------------------------------------------------------------------
// Opening

#[test]
fn a_database_from_a_newer_codeloop_is_refused() {
    let dir = temp();
    drop(open(dir.path()));
    let conn = rusqlite::Connection::open(dir.path().join(codeloop_store::DB_FILE)).unwrap();
    conn.pragma_update(None, "user_version", codeloop_store::SCHEMA_VERSION + 1).unwrap();
    drop(conn);
    let error = SqliteStore::open(dir.path()).unwrap_err();
    assert!(matches!(error, StoreError::SchemaTooNew { .. }), "{error}");
}

#[test]
fn open_creates_the_data_dir() {
    let dir = temp();
    let nested = dir.path().join("a/b/c");
    let store = SqliteStore::open(&nested).unwrap();
    assert!(nested.join("codeloop.db").exists());
    assert_eq!(store.data_dir(), nested);
    let _ = Arc::new(store);
}

// ---------------------------------------------------------------------------------------------------------
// File modes

const PRIVATE_DIR_ENV: &str = "CODELOOP_STORE_TEST_PRIVATE_DIR";

#[cfg(unix)]
fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o777
}

/// `(path, mode)` of the data dir, the lock dir and every database file that exists.
#[cfg(unix)]
fn private_modes(data: &std::path::Path) -> Vec<(String, u32)> {
    let mut paths = vec![data.to_path_buf(), data.join("locks"), data.join("codeloop.db")];
    paths.extend(
        ["codeloop.db-wal", "codeloop.db-shm"].map(|f| data.join(f)).into_iter().filter(|p| p.exists()),
    );
    paths.iter().map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), mode(p))).collect()
}

#[cfg(unix)]
#[test]
fn the_data_dir_is_0700_and_the_database_0600_whatever_the_umask() {
    let dir = temp();
    let data = dir.path().join("new/data");
    // The umask belongs to the process: a child with the most permissive one opens the store.
    let status = Command::new("sh")
        .args(["-c", "umask 000 && exec \"$0\" \"$@\""])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "private_files_helper_process", "--ignored", "--nocapture", "--test-threads=1"])
        .env(PRIVATE_DIR_ENV, &data)
        .status()
        .unwrap();
    assert!(status.success(), "the helper process failed");
    let name = data.file_name().unwrap().to_string_lossy().into_owned();
    let modes = private_modes(&data);
    assert_eq!(modes[..3], [(name, 0o700), ("locks".into(), 0o700), ("codeloop.db".into(), 0o600)]);
    assert!(modes[3..].iter().all(|(_, m)| *m == 0o600), "{modes:?}");
}

/// Not a test of its own: the umask-000 process of `the_data_dir_is_0700_and_the_database_0600_…`.
#[cfg(unix)]
#[test]
#[ignore = "helper process, started by the_data_dir_is_0700_and_the_database_0600_whatever_the_umask"]
fn private_files_helper_process() {
    let Some(dir) = std::env::var_os(PRIVATE_DIR_ENV) else { return };
    let data = std::path::Path::new(&dir);
    let store = open(data);
    // A write while the store is open: the -wal and -shm files exist now (they go at close).
    store.apply(&[Write::Session(session("/project"))]).unwrap();
    let modes = private_modes(data);
    assert_eq!(modes.len(), 5, "the WAL files exist while the store is open: {modes:?}");
    for (file, mode) in modes {
        let want = if file.starts_with("codeloop.db") { 0o600 } else { 0o700 };
        assert_eq!(mode, want, "{file}: {mode:o}");
    }
}

// ---------------------------------------------------------------------------------------------------------
// Durable queued input

fn queued_input_stays_in_order_until_a_batch_records_it(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let s = session("/p");
    store.apply(&[Write::Session(s.clone())]).unwrap();
    let first = store.enqueue_input(&s.id, r#"{"parts":[{"type":"text","text":"one"}]}"#).unwrap();
    let second = store.enqueue_input(&s.id, r#"{"parts":[{"type":"text","text":"two"}]}"#).unwrap();
    assert!(first < second);
    let queued = store.queued_inputs(&s.id).unwrap();
    assert_eq!(queued.iter().map(|q| q.id).collect::<Vec<_>>(), [first, second]);
    let input: serde_json::Value = serde_json::from_str(&queued[0].input).unwrap();
    assert_eq!(input["parts"][0]["text"], "one");

    // Nobody runs the session, so it is an orphan for any worker to pick up, until someone owns it.
    assert_eq!(store.orphaned_sessions().unwrap(), vec![s.id.clone()]);
    let other = place.open();
    let lock = other.lock_session(&s.id).unwrap();
    assert_eq!(store.orphaned_sessions().unwrap(), vec![]);

    // Recording the first input takes it off the queue in the same batch; the rest survives a reopen.
    other.apply(&[Write::Message(user(&s.id)), Write::RemoveQueued(first)]).unwrap();
    drop(lock);
    let left: Vec<i64> = place.open().queued_inputs(&s.id).unwrap().iter().map(|q| q.id).collect();
    assert_eq!(left, [second]);

    // Deleting the session drops its queue.
    assert!(store.delete_session(&s.id).unwrap());
    assert_eq!(store.queued_inputs(&s.id).unwrap(), vec![]);
    assert_eq!(store.orphaned_sessions().unwrap(), vec![]);
}

// ---------------------------------------------------------------------------------------------------------
// Every test above that takes a `Kind` runs on both stores.

macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[test] fn $name() { super::$name(super::Kind::Sqlite) } )*
        }
        mod postgres {
            $( #[test] fn $name() { super::$name(super::Kind::Postgres) } )*
        }
    };
}

on_both_stores!(
    every_part_kind_and_both_message_kinds_round_trip,
    tool_state_data_round_trips_unchanged_through_every_transition,
    messages_page_newest_first_with_an_exclusive_cursor,
    sessions_list_roots_children_and_directories_most_recently_updated_first,
    removing_parts_and_messages_takes_them_out_of_history,
    a_failing_write_rolls_back_its_whole_batch,
    recovery_interrupts_open_tool_calls_and_aborts_unfinished_answers,
    recovery_runs_on_open_and_reports_what_it_changed,
    recovery_leaves_a_locked_session_alone_until_its_lock_is_released,
    recover_one_session_settles_only_that_session,
    text_flushed_through_the_writer_survives_a_crash,
    dropping_the_writer_commits_everything_queued,
    a_failed_write_is_reported_by_the_next_flush_and_spares_its_batch,
    writer_coalesces_repeated_part_updates_into_the_last_version,
    a_reader_sees_whole_batches_while_a_writer_writes,
    two_stores_on_one_data_dir_write_concurrently_without_lock_errors,
    a_session_lock_refuses_a_second_holder_and_is_released_on_drop,
    approvals_are_saved_per_project_without_duplicates_and_can_be_revoked,
    todos_are_replaced_as_a_whole_and_cleared,
    jobs_are_saved_listed_and_go_with_their_session,
    a_killed_run_releases_its_lock_and_is_recovered,
    queued_input_stays_in_order_until_a_batch_records_it,
);

// ---------------------------------------------------------------------------------------------------------
// PostgreSQL only: URLs, leases across workers, schema versions

/// Runs one statement on `url` outside any store, as an operator (or another program) would.
fn sql(url: &str, statement: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        client.batch_execute(statement).await.unwrap();
    });
}

fn postgres_url() -> Option<String> {
    match Place::new(Kind::Postgres)? {
        Place::Postgres(url) => Some(url),
        Place::Sqlite(_) => None,
    }
}

#[test]
fn postgres_a_bad_or_unreachable_url_is_a_clear_error_that_hides_the_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let error =
        PgStore::open(&format!("postgres://codeloop:hunter2@127.0.0.1:{port}/db"), TEST_LEASE).unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, StoreError::Unavailable { .. }), "{text}");
    assert!(text.contains(&format!("postgres://codeloop:***@127.0.0.1:{port}/db")), "{text}");
    assert!(text.contains("CODELOOP_DATABASE_URL"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");

    let error = PgStore::open("postgres://codeloop:hunter2@127.0.0.1:notaport/db", TEST_LEASE).unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, StoreError::InvalidUrl { .. }), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}

#[test]
fn postgres_an_expired_lease_is_taken_over_and_its_holder_learns_it_lost_it() {
    let Some(url) = postgres_url() else { return };
    let (a, b) = (PgStore::open(&url, TEST_LEASE).unwrap(), PgStore::open(&url, TEST_LEASE).unwrap());
    let id = SessionId::new();
    let lease = a.lock_session(&id).unwrap();
    assert!(lease.is_held());
    assert!(matches!(b.lock_session(&id), Err(StoreError::SessionBusy(busy)) if busy == id));

    // A worker that stopped renewing (paused, cut off) leaves an expired row: another worker takes it.
    sql(&url, "UPDATE run_lease SET expires_at = clock_timestamp() - interval '1 second'");
    let taken = b.lock_session(&id).unwrap();
    let started = Instant::now();
    while lease.is_held() {
        assert!(started.elapsed() < TEST_LEASE * 2, "the old holder never noticed it lost its lease");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Dropping the lost lease leaves the new holder's row alone.
    drop(lease);
    assert!(matches!(a.lock_session(&id), Err(StoreError::SessionBusy(_))));
    assert!(taken.is_held());
    drop(taken);
    let _again = a.lock_session(&id).unwrap();
}

#[test]
fn postgres_a_held_lease_is_renewed_past_its_length() {
    let Some(url) = postgres_url() else { return };
    let (a, b) = (PgStore::open(&url, TEST_LEASE).unwrap(), PgStore::open(&url, TEST_LEASE).unwrap());
    let id = SessionId::new();
    let lease = a.lock_session(&id).unwrap();
    std::thread::sleep(TEST_LEASE + TEST_LEASE / 2);
    assert!(lease.is_held());
    assert!(matches!(b.lock_session(&id), Err(StoreError::SessionBusy(_))));
}

#[test]
fn postgres_a_database_from_a_newer_codeloop_is_refused() {
    let Some(url) = postgres_url() else { return };
    drop(PgStore::open(&url, TEST_LEASE).unwrap());
    sql(&url, "UPDATE codeloop_schema SET version = version + 1");
    let error = PgStore::open(&url, TEST_LEASE).unwrap_err();
    assert!(matches!(error, StoreError::SchemaTooNew { .. }), "{error}");
}

#[test]
fn postgres_workers_see_every_workers_events_in_one_increasing_id_order() {
    let Some(url) = postgres_url() else { return };
    let workers: Vec<PgStore> = (0..2).map(|_| PgStore::open(&url, TEST_LEASE).unwrap()).collect();
    let mut outboxes = Vec::new();
    let mut inboxes = Vec::new();
    for worker in &workers {
        let (outbox, rx) = tokio::sync::mpsc::unbounded_channel();
        let (seen, inbox) = std::sync::mpsc::channel::<(u64, String)>();
        let seen = std::sync::Mutex::new(seen);
        let sink: codeloop_store::EventSink =
            Box::new(move |id, json| drop(seen.lock().unwrap().send((id, json))));
        worker.event_log().unwrap().relay(rx, sink).unwrap();
        outboxes.push(outbox);
        inboxes.push(inbox);
    }
    // Both workers publish at once.
    for n in 0..50 {
        for (w, outbox) in outboxes.iter().enumerate() {
            outbox.send(json!({"worker": w, "n": n}).to_string()).unwrap();
        }
    }
    let received: Vec<Vec<(u64, String)>> = inboxes
        .iter()
        .map(|inbox| (0..100).map(|_| inbox.recv_timeout(Duration::from_secs(10)).unwrap()).collect())
        .collect();
    assert_eq!(received[0], received[1], "every worker sees the same events with the same ids");
    let ids: Vec<u64> = received[0].iter().map(|(id, _)| *id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    // Each worker's own events keep their order.
    for w in 0..2 {
        let mine: Vec<u64> = received[0]
            .iter()
            .map(|(_, json)| serde_json::from_str::<serde_json::Value>(json).unwrap())
            .filter(|e| e["worker"] == w)
            .map(|e| e["n"].as_u64().unwrap())
            .collect();
        assert_eq!(mine, (0..50).collect::<Vec<_>>());
    }
}

#[test]
fn postgres_a_worker_that_lost_its_lease_can_no_longer_write_the_session() {
    let Some(url) = postgres_url() else { return };
    let (a, b) = (PgStore::open(&url, TEST_LEASE).unwrap(), PgStore::open(&url, TEST_LEASE).unwrap());
    let s = session("/p");
    a.apply(&[Write::Session(s.clone())]).unwrap();
    let lease = a.lock_session(&s.id).unwrap();
    let question = user(&s.id);
    a.apply(&[Write::Message(question.clone())]).unwrap();

    // Another worker takes the session over once the lease has expired (a paused or cut-off worker).
    sql(&url, "UPDATE run_lease SET expires_at = clock_timestamp() - interval '1 second'");
    let _taken = b.lock_session(&s.id).unwrap();
    let late = a.apply(&[Write::Part(part(&question, text_kind("written after losing the session")))]);
    assert!(matches!(&late, Err(StoreError::LeaseLost(id)) if id == &s.id), "{late:?}");
    assert_eq!(b.load_history(&s.id).unwrap()[0].parts, vec![]);
    // Its other sessions are not affected.
    a.apply(&[Write::Session(session("/q"))]).unwrap();
    drop(lease);
}

#[test]
fn postgres_the_store_keeps_working_after_its_connections_are_cut() {
    let Some(url) = postgres_url() else { return };
    let store = PgStore::open(&url, TEST_LEASE).unwrap();
    let session = codeloop_types::Session::new("/p", "build", None);
    store.apply(&[Write::Session(session.clone())]).unwrap();
    // What a database restart (or a failover of a managed database) does to every open connection.
    sql(
        &url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE application_name = 'codeloop' AND pid <> pg_backend_pid()",
    );
    // The next calls get fresh connections: nothing fails because the pool held dead ones.
    let mut renamed = session.clone();
    renamed.title = "after the cut".into();
    store.apply(&[Write::Session(renamed)]).unwrap();
    assert_eq!(store.get_session(&session.id).unwrap().unwrap().title, "after the cut");
}
