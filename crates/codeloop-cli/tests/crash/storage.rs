//! Bounded storage through the binary: `codeloop session delete` gives the space of a session back.

use codeloop_testkit::{Reply, Script, ScriptToolCall, Turn};
use serde_json::json;

use crate::support::Env;

/// `(page_count, freelist_count, page_size)` of the database, after the last process closed it.
fn pages(db: &std::path::Path) -> (i64, i64, i64) {
    let conn = rusqlite::Connection::open(db).unwrap();
    let get = |name: &str| conn.pragma_query_value(None, name, |row| row.get::<_, i64>(0)).unwrap();
    (get("page_count"), get("freelist_count"), get("page_size"))
}

fn file_size(db: &std::path::Path) -> u64 {
    let wal = db.with_extension("db-wal");
    std::fs::metadata(db).map(|m| m.len()).unwrap_or(0) + std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_session_gives_its_space_back() {
    // Ten reads of 40 KB files: about 400 KB of tool output in one session.
    let mut reply = Reply::text("Reading them all.");
    for i in 0..10 {
        reply = reply.with_call(ScriptToolCall::new("read", json!({ "filePath": format!("big{i}.txt") })));
    }
    let env = Env::new(Script::new([
        Turn::from(Reply::text("A small session.")),
        Turn::from(reply),
        Turn::from(Reply::text("Read.")),
    ]))
    .await;
    for i in 0..10 {
        let line = format!("{i} {}\n", "x".repeat(78));
        std::fs::write(env.project.path().join(format!("big{i}.txt")), line.repeat(500)).unwrap();
    }
    let small = env.output(&["run", "hello"]).await;
    assert!(small.status.success(), "{}", small.stderr);
    let big = env.output(&["run", "--format", "json", "read the big files"]).await;
    assert!(big.status.success(), "{}", big.stderr);
    let session = big
        .stdout
        .lines()
        .find_map(|l| {
            serde_json::from_str::<serde_json::Value>(l).ok()?["properties"]["session_id"]
                .as_str()
                .map(str::to_owned)
        })
        .unwrap();

    let db = env.db_path();
    let (before_pages, _, page_size) = pages(&db);
    let before_size = file_size(&db);
    let deleted = env.output(&["session", "delete", &session]).await;
    assert!(deleted.status.success(), "{}", deleted.stderr);
    let (after_pages, after_free, _) = pages(&db);
    let after_size = file_size(&db);
    eprintln!(
        "session delete: {before_pages} → {after_pages} pages of {page_size} B, {after_free} free; file {before_size} → {after_size} B"
    );
    assert!(
        (before_pages - after_pages) * page_size > 300_000,
        "about 400 KB of tool output is given back: {before_pages} → {after_pages} pages"
    );
    assert_eq!(after_free, 0, "freed pages are returned to the file system (incremental vacuum)");
    assert!(after_size + 300_000 < before_size, "the file shrinks: {before_size} → {after_size}");
    let list = env.output(&["session", "list", "--format", "json"]).await;
    assert!(!list.stdout.contains(&session));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_store_write_fails_the_run_and_names_the_data_dir() {
    let env = Env::new(Script::new([
        Turn::from(Reply::text("Stored.")),
        Turn::from(Reply::text("This answer cannot be stored.")),
    ]))
    .await;
    let first = env.output(&["run", "hello"]).await;
    assert!(first.status.success(), "{}", first.stderr);
    // From now on the database refuses every new assistant message, the way a full disk refuses a
    // write: a real SQLite error on the writer's own transactions, in the middle of the next run.
    let conn = rusqlite::Connection::open(env.db_path()).unwrap();
    conn.execute_batch(
        "CREATE TRIGGER disk_full BEFORE INSERT ON message WHEN json_extract(NEW.data, '$.role') = 'assistant'
         BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;",
    )
    .unwrap();
    drop(conn);

    let second = env.output(&["run", "--continue", "again"]).await;
    assert_eq!(second.status.code(), Some(1), "stdout: {}\nstderr: {}", second.stdout, second.stderr);
    let data_dir = env.data.path().display().to_string();
    assert!(
        second
            .stderr
            .contains(&format!("error: could not save this session in the data directory {data_dir}")),
        "{}",
        second.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_refuses_the_prompt_fails_the_run_and_names_the_data_dir() {
    let env = Env::new(Script::new([Turn::from(Reply::text("Stored."))])).await;
    let first = env.output(&["run", "hello"]).await;
    assert!(first.status.success(), "{}", first.stderr);
    // Now even the user's message cannot be written: the run fails before the model is called.
    let conn = rusqlite::Connection::open(env.db_path()).unwrap();
    conn.execute_batch(
        "CREATE TRIGGER disk_full BEFORE INSERT ON message
         BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;",
    )
    .unwrap();
    drop(conn);

    let second = env.output(&["run", "--continue", "again"]).await;
    assert_eq!(second.status.code(), Some(1), "stderr: {}", second.stderr);
    let data_dir = env.data.path().display().to_string();
    assert!(
        second
            .stderr
            .contains(&format!("error: could not save this session in the data directory {data_dir}")),
        "{}",
        second.stderr
    );
    assert_eq!(env.fake.request_count(), 1, "the model is not called for a prompt that was not stored");
}
