//! Concurrency across connections, stores and processes, and session locks, on both stores.

use super::*;
use pretty_assertions::assert_eq;

// ---------------------------------------------------------------------------------------------------------
// Concurrency

#[test]
pub(super) fn readers_do_not_wait_for_an_open_write_transaction() {
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
    assert_eq!(
        store.list_messages(&session.id, &Page { before: None, limit: 2, max_parts: None }).unwrap().len(),
        2
    );
    // Far below the 5 s busy timeout a blocked read would wait for.
    assert!(start.elapsed() < Duration::from_secs(3), "reads waited {:?}", start.elapsed());
    blocker.execute_batch("ROLLBACK").unwrap();
}

pub(super) fn a_reader_sees_whole_batches_while_a_writer_writes(kind: Kind) {
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

pub(super) fn two_stores_on_one_data_dir_write_concurrently_without_lock_errors(kind: Kind) {
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
pub(super) const WRITER_DIR_ENV: &str = "CODELOOP_STORE_WRITER_DIR";
pub(super) const TURNS_PER_PROCESS: usize = 300;

/// Writes `turns` turns into a new session of `store`, one transaction each, plus a todo update per turn.
pub(super) fn write_turns(store: &dyn Store, turns: usize) -> SessionId {
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
pub(super) fn writer_helper_process() {
    let Some(dir) = std::env::var_os(WRITER_DIR_ENV) else { return };
    let store = open(std::path::Path::new(&dir));
    println!("ready");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    let session = write_turns(&*store, TURNS_PER_PROCESS);
    println!("done {session}");
}

#[test]
pub(super) fn two_processes_write_one_data_dir_without_lock_errors() {
    use std::io::Write as _;
    let dir = temp();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "concurrency::writer_helper_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
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

pub(super) fn a_session_lock_refuses_a_second_holder_and_is_released_on_drop(kind: Kind) {
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
pub(super) const CRASH_DIR_ENV: &str = "CODELOOP_STORE_CRASH_DIR";
/// The same, with the URL of a PostgreSQL database.
pub(super) const CRASH_URL_ENV: &str = "CODELOOP_STORE_CRASH_URL";

/// Not a test of its own: the child process of `a_killed_run_releases_its_lock_and_is_recovered`. It
/// writes a run through the writer, flushes, holds the session lock, says `ready` and waits to be killed.
#[test]
#[ignore = "helper process, started by a_killed_run_releases_its_lock_and_is_recovered"]
pub(super) fn crash_helper_process() {
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

pub(super) fn a_killed_run_releases_its_lock_and_is_recovered(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let (env, value): (&str, std::ffi::OsString) = match &place {
        Place::Sqlite(dir) => (CRASH_DIR_ENV, dir.path().into()),
        Place::Postgres(url) => (CRASH_URL_ENV, url.into()),
    };
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "concurrency::crash_helper_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
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
