//! Many `codeloop serve` workers on one PostgreSQL store (DESIGN.md §5b), as real processes over HTTP:
//! sessions are shared, and when the worker running a session is killed, another one settles its run
//! and runs the prompt it had queued. Skipped, loudly, without PostgreSQL.

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use codeloop_testkit::{FakeProvider, Reply, Script, Turn};
use serde_json::{Value, json};

use super::{Env, Killed};

/// Starts `codeloop serve --store URL` with its own data dir (another machine) and returns it with its
/// base URL.
fn worker(env: &Env, config: &std::path::Path, store: &str) -> (Killed, String, tempfile::TempDir) {
    let data = tempfile::tempdir().unwrap();
    let mut serve = Command::new(env!("CARGO_BIN_EXE_codeloop"));
    serve
        .args(["serve", "--port", "0", "--store", store])
        .current_dir(env.project.path())
        .env("CODELOOP_DATA_DIR", data.path())
        .env("HOME", env.home.path())
        .env("CODELOOP_CONFIG", config)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("CODELOOP_DATABASE_URL")
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    let mut server = Killed(serve.spawn().unwrap());
    let stderr = server.0.stderr.take().unwrap();
    let mut lines = std::io::BufReader::new(stderr).lines();
    let url = loop {
        let line = lines.next().expect("the worker exited before listening").unwrap();
        if let Some(at) = line.find("http://") {
            break line[at..].split_whitespace().next().unwrap().to_owned();
        }
    };
    // Keep reading, so the worker never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (server, url, data)
}

async fn messages(http: &reqwest::Client, base: &str, session: &str) -> Vec<Value> {
    let page: Vec<Value> =
        http.get(format!("{base}/session/{session}/message")).send().await.unwrap().json().await.unwrap();
    page.into_iter().rev().collect()
}

fn text_of(message: &Value) -> String {
    message["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "text")
        .map(|p| p["text"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_killed_workers_run_is_settled_and_its_queued_prompt_run_by_another_worker() {
    let Some(store) = codeloop_testkit::postgres::database() else { return };
    // The first answer streams slowly enough to kill its worker in the middle of it.
    let slow =
        Turn::from(Reply::text("never finished ".repeat(40)).with_text_chunks(40).with_chunk_delay_ms(100));
    let fake = FakeProvider::start(Script::new([
        slow,
        Turn::from(Reply::text("continued by the other worker")),
        Turn::from(Reply::text("queued prompt answered")),
    ]))
    .await
    .unwrap();
    let env = Env::new();
    let config = env.config(&fake.base_url(), "[store]\nlease_secs = 2\n");
    let (mut a, a_url, _a_data) = worker(&env, &config, &store);
    let (_b, b_url, _b_data) = worker(&env, &config, &store);
    let http = reqwest::Client::new();

    // A session created on one worker is served by the other.
    let session: Value =
        http.post(format!("{a_url}/session")).json(&json!({})).send().await.unwrap().json().await.unwrap();
    let id = session["id"].as_str().unwrap().to_owned();
    let listed: Vec<Value> = http.get(format!("{b_url}/session")).send().await.unwrap().json().await.unwrap();
    assert!(listed.iter().any(|s| s["id"] == id.as_str()), "{listed:?}");

    let prompt = |text: &str| json!({"parts": [{"type": "text", "text": text}], "delivery": "queue"});
    let accepted =
        http.post(format!("{a_url}/session/{id}/prompt_async")).json(&prompt("one")).send().await.unwrap();
    assert_eq!(accepted.status(), 202);
    // Worker A is streaming the answer once its first text reaches the store (seen through worker B).
    let deadline = Instant::now() + Duration::from_secs(20);
    while messages(&http, &b_url, &id).await.get(1).is_none_or(|m| text_of(m).is_empty()) {
        assert!(Instant::now() < deadline, "worker A never started answering");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let queued =
        http.post(format!("{a_url}/session/{id}/prompt_async")).json(&prompt("two")).send().await.unwrap();
    assert_eq!(queued.status(), 202);
    // prompt_async answers before the prompt is handled: wait until worker A has stored it.
    let (db, connection) = tokio_postgres::connect(&store, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let row = db.query_one("SELECT count(*) FROM queued_input", &[]).await.unwrap();
        if row.get::<_, i64>(0) == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "worker A never stored the queued prompt");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    a.0.kill().unwrap(); // SIGKILL: no cleanup, the lease stays until it expires
    a.0.wait().unwrap();

    // Worker B takes over within a lease or two: the dead run is settled and continued, then the queued
    // prompt runs.
    let deadline = Instant::now() + Duration::from_secs(30);
    let history = loop {
        let history = messages(&http, &b_url, &id).await;
        if history.len() == 5 && !history[4]["info"]["time"]["completed"].is_null() {
            break history;
        }
        assert!(Instant::now() < deadline, "worker B never took over: {history:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(text_of(&history[0]), "one");
    // The dead worker's answer was settled like crash recovery (aborted, completed), then continued.
    assert!(!history[1]["info"]["error"].is_null(), "{:#?}", history[1]);
    assert!(!history[1]["info"]["time"]["completed"].is_null(), "{:#?}", history[1]);
    assert_eq!(text_of(&history[2]), "continued by the other worker");
    assert_eq!(text_of(&history[3]), "two");
    assert_eq!(text_of(&history[4]), "queued prompt answered");
    assert_eq!(fake.request_count(), 3);
}
