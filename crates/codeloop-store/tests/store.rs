//! Integration tests of the SQLite store on real files: round trips, in-place updates, paging, recovery
//! after a crash (including a real SIGKILL of a child process), the batched writer, concurrency across
//! connections and stores, run locks, approvals and todos; and the PostgreSQL store over TLS (`tls/`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
mod tls;

#[path = "store/concurrency.rs"]
mod concurrency;
#[path = "store/postgres.rs"]
mod postgres_only;
#[path = "store/recovery.rs"]
mod recovery;
#[path = "store/usage.rs"]
mod usage;

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
use concurrency::*;
use pretty_assertions::assert_eq;
use recovery::*;
use serde_json::json;
use support::*;
use tempfile::TempDir;
use usage::*;

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
        let page = store
            .list_messages(&session.id, &Page { before: before.clone(), limit: 4, max_parts: None })
            .unwrap();
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
    assert_eq!(
        store.list_messages(&"ses_none".into(), &Page { before: None, limit: 5, max_parts: None }).unwrap(),
        vec![]
    );
}

fn a_page_bounded_by_parts_ends_early_but_holds_at_least_one_message(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let session = session("/p");
    seed(&*store, &session, 5, 3); // newest first: an answer of 3 parts, its question of 1, …
    let history = store.load_history(&session.id).unwrap();
    let pages_of = |max_parts: usize| {
        let mut sizes = Vec::new();
        let mut paged: Vec<MessageWithParts> = Vec::new();
        loop {
            let before = paged.last().map(|m| m.info.id().clone());
            let page = store
                .list_messages(&session.id, &Page { before, limit: 10, max_parts: Some(max_parts) })
                .unwrap();
            if page.is_empty() {
                break;
            }
            sizes.push(page.len());
            paged.extend(page);
        }
        paged.reverse();
        assert_eq!(paged, history, "every message once, whole, whatever the bound");
        sizes
    };
    assert_eq!(pages_of(4), [2, 2, 2, 2, 2], "an answer and its question fill 4 parts");
    assert_eq!(pages_of(2), [1; 10], "an answer over the bound still comes, alone");
    assert_eq!(pages_of(100), [10], "the message limit still holds");
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
    // As a write in a batch (the engine's one writer sends them so), the same upsert.
    store.apply(&[Write::Job { job: exited.clone(), owner: "host:1:2".into() }]).unwrap();
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
    a_page_bounded_by_parts_ends_early_but_holds_at_least_one_message,
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
    step_usage_lists_every_step_with_its_model_directory_and_time,
);
