//! Many `codeloop serve` workers on one PostgreSQL store (DESIGN.md §5b), as real processes over HTTP:
//! sessions are shared, and when the worker running a session is killed, another one settles its run
//! and runs the prompt it had queued. Skipped, loudly, without PostgreSQL. Also one server serving
//! sessions of several projects (on SQLite).

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use codeloop_testkit::{FakeProvider, Reply, Script, Turn};
use serde_json::{Value, json};

use super::{Env, Killed};

/// Starts `codeloop serve --store URL` with its own data dir (another machine) and returns it with its
/// base URL.
fn worker(env: &Env, config: &std::path::Path, store: &str) -> (Killed, String, tempfile::TempDir) {
    serve(env, config, Some(store))
}

/// `codeloop serve` in the env's project, on `store` (else SQLite in its own data dir).
fn serve(env: &Env, config: &std::path::Path, store: Option<&str>) -> (Killed, String, tempfile::TempDir) {
    let data = tempfile::tempdir().unwrap();
    let (server, url) = serve_in(env, config, store, data.path());
    (server, url, data)
}

/// `codeloop serve` with `data` as its data dir.
pub(super) fn serve_in(
    env: &Env,
    config: &std::path::Path,
    store: Option<&str>,
    data: &std::path::Path,
) -> (Killed, String) {
    let mut serve = Command::new(env!("CARGO_BIN_EXE_codeloop"));
    serve.args(["serve", "--port", "0"]);
    if let Some(store) = store {
        serve.args(["--store", store]);
    }
    serve
        .current_dir(env.project.path())
        .env("CODELOOP_DATA_DIR", data)
        .env("HOME", env.home.path())
        .env("CODELOOP_CONFIG", config)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("CODELOOP_DATABASE_URL")
        .env("CODELOOP_SERVER_TOKEN", super::TEST_TOKEN)
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
    (server, url)
}

/// Polls `check` (what other processes did, seen over HTTP) until it gives a value; fails with `what`
/// after 20 s.
pub(super) async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut check: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(super) async fn messages(http: &reqwest::Client, base: &str, session: &str) -> Vec<Value> {
    let page: Vec<Value> =
        http.get(format!("{base}/session/{session}/message")).send().await.unwrap().json().await.unwrap();
    page.into_iter().rev().collect()
}

pub(super) fn text_of(message: &Value) -> String {
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
    let http = super::http_client();

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

/// A slow first answer, its continuation after a takeover, and the answer to the steered prompt.
fn takeover_script() -> Script {
    let slow =
        Turn::from(Reply::text("never finished ".repeat(40)).with_text_chunks(40).with_chunk_delay_ms(100));
    Script::new([
        slow,
        Turn::from(Reply::text("continued after the takeover")),
        Turn::from(Reply::text("steered prompt answered")),
    ])
}

/// Starts "one" on `base`, waits until its answer streams, steers "two" into it (default delivery) and
/// returns the session once that call answered 202: from then on the prompt must survive anything.
async fn steer_into_a_streaming_run(http: &reqwest::Client, base: &str) -> String {
    let session: Value =
        http.post(format!("{base}/session")).json(&json!({})).send().await.unwrap().json().await.unwrap();
    let id = session["id"].as_str().unwrap().to_owned();
    let prompt = |text: &str| json!({"parts": [{"type": "text", "text": text}]});
    let first =
        http.post(format!("{base}/session/{id}/prompt_async")).json(&prompt("one")).send().await.unwrap();
    assert_eq!(first.status(), 202);
    eventually("the first answer never started streaming", || async {
        messages(http, base, &id).await.get(1).filter(|m| !text_of(m).is_empty()).map(drop)
    })
    .await;
    let steered =
        http.post(format!("{base}/session/{id}/prompt_async")).json(&prompt("two")).send().await.unwrap();
    assert_eq!(steered.status(), 202);
    id
}

/// The history once the steered prompt is answered; checks it was recorded and answered exactly once.
async fn answered_once(http: &reqwest::Client, base: &str, id: &str) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let history = messages(http, base, id).await;
        let answered = history.last().is_some_and(|m| {
            text_of(m) == "steered prompt answered" && !m["info"]["time"]["completed"].is_null()
        });
        if answered {
            let twos = history.iter().filter(|m| m["info"]["role"] == "user" && text_of(m) == "two").count();
            assert_eq!(twos, 1, "the steered prompt is recorded once: {history:#?}");
            return history;
        }
        assert!(Instant::now() < deadline, "the accepted prompt was never answered: {history:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_steered_prompt_accepted_by_a_worker_killed_at_once_is_answered_by_another_and_its_status_clears() {
    let Some(store) = codeloop_testkit::postgres::database() else { return };
    let fake = FakeProvider::start(takeover_script()).await.unwrap();
    let env = Env::new();
    let config = env.config(&fake.base_url(), "[store]\nlease_secs = 2\n");
    let (mut a, a_url, _a_data) = worker(&env, &config, &store);
    let (_b, b_url, _b_data) = worker(&env, &config, &store);
    let http = super::http_client();
    let id = steer_into_a_streaming_run(&http, &a_url).await;
    a.0.kill().unwrap(); // SIGKILL right after the 202: no time to do anything more
    a.0.wait().unwrap();

    answered_once(&http, &b_url, &id).await;
    assert_eq!(fake.request_count(), 3, "no answer is asked for twice");
    // The dead worker's busy status is gone once the takeover is done.
    eventually("the session still shows busy on the other worker", || async {
        let statuses: Value =
            http.get(format!("{b_url}/session/status")).send().await.unwrap().json().await.unwrap();
        statuses.get(&id).is_none_or(|s| s["type"] == "idle").then_some(())
    })
    .await;
    // The survivor's metrics count the take-over and the queue it emptied; its own run only.
    let metrics = http.get(format!("{b_url}/metrics")).send().await.unwrap().text().await.unwrap();
    for line in ["codeloop_failovers_total 1", "codeloop_queue_depth 0", "codeloop_leases_lost_total 0"] {
        assert!(metrics.lines().any(|l| l == line), "{line} missing from:\n{metrics}");
    }
}

#[tokio::test]
async fn a_steered_prompt_accepted_by_a_server_killed_at_once_is_answered_after_the_restart() {
    let fake = FakeProvider::start(takeover_script()).await.unwrap();
    let env = Env::new();
    let config = env.config(&fake.base_url(), "");
    let data = tempfile::tempdir().unwrap();
    let (mut first, first_url) = serve_in(&env, &config, None, data.path());
    let http = super::http_client();
    let id = steer_into_a_streaming_run(&http, &first_url).await;
    first.0.kill().unwrap();
    first.0.wait().unwrap();

    let (_second, second_url) = serve_in(&env, &config, None, data.path());
    let history = answered_once(&http, &second_url, &id).await;
    assert_eq!(text_of(&history[0]), "one");
    assert_eq!(fake.request_count(), 3, "no answer is asked for twice");
}

/// Reads SSE frames from `response` until one satisfies `until`; returns every bus event (`data` JSON
/// with an `id`) read so far.
async fn read_events(response: &mut reqwest::Response, until: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut buffer = String::new();
    let mut events = Vec::new();
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            let Some(data) = frame.lines().find_map(|l| l.strip_prefix("data: ")) else { continue };
            let event: Value = serde_json::from_str(data).unwrap();
            if event["id"].is_u64() {
                let done = until(&event);
                events.push(event);
                if done {
                    return events;
                }
            }
        }
        let chunk = tokio::time::timeout(Duration::from_secs(20), response.chunk())
            .await
            .expect("no event within 20 s")
            .unwrap()
            .expect("the stream ended");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test]
async fn sse_on_one_worker_streams_another_workers_run_and_replays_it_by_store_id() {
    let Some(store) = codeloop_testkit::postgres::database() else { return };
    let fake = FakeProvider::start(Script::new([Turn::from(
        Reply::text("streamed across workers").with_text_chunks(5),
    )]))
    .await
    .unwrap();
    let env = Env::new();
    let config = env.config(&fake.base_url(), "");
    let (_a, a_url, _a_data) = worker(&env, &config, &store);
    let (_b, b_url, _b_data) = worker(&env, &config, &store);
    let http = super::http_client();
    let session: Value =
        http.post(format!("{a_url}/session")).json(&json!({})).send().await.unwrap().json().await.unwrap();
    let id = session["id"].as_str().unwrap().to_owned();

    let mut on_b = http.get(format!("{b_url}/event")).send().await.unwrap();
    let idle = |e: &Value| e["type"] == "session.idle" && e["properties"]["session_id"] == id.as_str();
    let run = http
        .post(format!("{a_url}/session/{id}/prompt"))
        .json(&json!({"parts": [{"type": "text", "text": "hi"}]}));
    let (answer, events) = tokio::join!(async { run.send().await.unwrap() }, read_events(&mut on_b, idle));
    assert_eq!(answer.status(), 200);
    let ids: Vec<u64> = events.iter().map(|e| e["id"].as_u64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    let streamed: String = events
        .iter()
        .filter(|e| e["type"] == "message.part.delta")
        .map(|e| e["properties"]["delta"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(streamed, "streamed across workers");

    // A client of worker A reconnects to worker B with the last id it saw: B replays what followed.
    let middle = ids[ids.len() / 2];
    let mut replay =
        http.get(format!("{b_url}/event")).header("Last-Event-ID", middle.to_string()).send().await.unwrap();
    let last = *ids.last().unwrap();
    let replayed = read_events(&mut replay, |e| e["id"].as_u64() == Some(last)).await;
    let replayed: Vec<u64> = replayed.iter().map(|e| e["id"].as_u64().unwrap()).collect();
    assert_eq!(replayed, ids.iter().copied().filter(|i| *i > middle).collect::<Vec<_>>());

    // A worker started after the run replays it too, from the store's event log (kept an hour), with no
    // `resync`.
    let (_c, c_url, _c_data) = worker(&env, &config, &store);
    let first = ids[0];
    let mut late =
        http.get(format!("{c_url}/event")).header("Last-Event-ID", first.to_string()).send().await.unwrap();
    let frames = read_frames(&mut late, |frame| frame.contains(&format!("id: {last}\n"))).await;
    assert!(!frames.contains(r#""type":"resync""#), "{frames}");
    let replayed: Vec<u64> = frames
        .lines()
        .filter_map(|line| line.strip_prefix("id: "))
        .map(|id| id.trim().parse().unwrap())
        .collect();
    assert_eq!(replayed, ids.iter().copied().filter(|i| *i > first).collect::<Vec<_>>());
}

/// Reads raw SSE text from `response` until `until` holds for what was read.
async fn read_frames(response: &mut reqwest::Response, until: impl Fn(&str) -> bool) -> String {
    let mut text = String::new();
    while !until(&text) {
        let chunk = tokio::time::timeout(Duration::from_secs(10), response.chunk())
            .await
            .expect("no event in 10 s")
            .unwrap()
            .expect("the stream ended");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    text
}

#[tokio::test]
async fn a_client_of_one_worker_sees_and_answers_and_aborts_another_workers_run() {
    let Some(store) = codeloop_testkit::postgres::database() else { return };
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call("bash", json!({"command": "echo approved > approved.txt"}))),
        Turn::from(Reply::text("done after the approval")),
        Turn::from(Reply::text("never finished ".repeat(100)).with_text_chunks(100).with_chunk_delay_ms(100)),
    ]))
    .await
    .unwrap();
    let env = Env::new();
    let config = env.config(&fake.base_url(), "[permission]\nbash = \"ask\"\n");
    let (_a, a_url, _a_data) = worker(&env, &config, &store);
    let (_b, b_url, _b_data) = worker(&env, &config, &store);
    let http = super::http_client();
    let session: Value =
        http.post(format!("{a_url}/session")).json(&json!({})).send().await.unwrap().json().await.unwrap();
    let id = session["id"].as_str().unwrap().to_owned();
    let prompt = |text: &str| json!({"parts": [{"type": "text", "text": text}]});

    // Worker A runs the session and waits on a permission request; worker B lists it and answers it.
    let accepted = http
        .post(format!("{a_url}/session/{id}/prompt_async"))
        .json(&prompt("make it"))
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 202);
    let request = eventually("worker B never saw worker A's permission request", || async {
        let pending: Vec<Value> =
            http.get(format!("{b_url}/permission")).send().await.unwrap().json().await.unwrap();
        pending.into_iter().find(|p| p["session_id"] == id.as_str())
    })
    .await;
    let statuses: Value =
        http.get(format!("{b_url}/session/status")).send().await.unwrap().json().await.unwrap();
    assert!(!statuses[id.as_str()].is_null(), "worker B shows A's run as busy: {statuses}");
    // A worker that starts now learns of it from the store's event log.
    let (_d, d_url, _d_data) = worker(&env, &config, &store);
    eventually("a worker started later never listed the pending request", || async {
        let pending: Vec<Value> =
            http.get(format!("{d_url}/permission")).send().await.unwrap().json().await.unwrap();
        pending.iter().any(|p| p["id"] == request["id"]).then_some(())
    })
    .await;
    let replied = http
        .post(format!("{b_url}/permission/{}/reply", request["id"].as_str().unwrap()))
        .json(&json!({"reply": "once"}))
        .send()
        .await
        .unwrap();
    assert_eq!(replied.status(), 200, "{}", replied.text().await.unwrap());
    eventually("the approved run never finished", || async {
        let history = messages(&http, &a_url, &id).await;
        history.last().is_some_and(|m| text_of(m) == "done after the approval").then_some(())
    })
    .await;
    assert!(env.project.path().join("approved.txt").exists());

    // A long answer streams on A; aborting it elsewhere stops it there, answered once it has stopped.
    let accepted =
        http.post(format!("{a_url}/session/{id}/prompt_async")).json(&prompt("talk")).send().await.unwrap();
    assert_eq!(accepted.status(), 202);
    eventually("worker B never saw the second run start", || async {
        let statuses: Value =
            http.get(format!("{b_url}/session/status")).send().await.unwrap().json().await.unwrap();
        (!statuses[id.as_str()].is_null()).then_some(())
    })
    .await;
    // Aborted through worker C, started after the run began (so it never saw it start: the lease tells).
    let (_c, c_url, _c_data) = worker(&env, &config, &store);
    let aborted: Value =
        http.post(format!("{c_url}/session/{id}/abort")).send().await.unwrap().json().await.unwrap();
    assert_eq!(aborted["aborted"], true);
    let history = messages(&http, &a_url, &id).await;
    let last = history.last().unwrap();
    assert!(!last["info"]["error"].is_null(), "the run on A was interrupted: {last:#}");
    let statuses: Value =
        http.get(format!("{a_url}/session/status")).send().await.unwrap().json().await.unwrap();
    assert!(statuses[id.as_str()].is_null(), "{statuses}");
    assert_eq!(fake.request_count(), 3);
}

#[tokio::test]
async fn doctor_logs_in_to_the_store_and_says_what_is_wrong() {
    let Some(store) = codeloop_testkit::postgres::database() else { return };
    let fake = FakeProvider::start(Script::new([Turn::from(Reply::text("x"))])).await.unwrap();
    let env = Env::new();
    let config = env.config(&fake.base_url(), "");
    let output = env.codeloop_with(Some(&config), &["doctor"], &[("CODELOOP_DATABASE_URL", store.as_str())]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("✓ store: PostgreSQL 1"), "{stdout}");
    // A server that answers but will not let us in: its reason, not "answers".
    let (base, _) = store.rsplit_once('/').unwrap();
    let missing = format!("{base}/no_such_database");
    let output =
        env.codeloop_with(Some(&config), &["doctor"], &[("CODELOOP_DATABASE_URL", missing.as_str())]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("✗ store: PostgreSQL at"), "{stdout}");
    assert!(stdout.contains("no_such_database\" does not exist"), "{stdout}");
    // Asking for TLS from a server without it is named as such.
    let tls = format!("{store}?sslmode=require");
    let output = env.codeloop_with(Some(&config), &["doctor"], &[("CODELOOP_DATABASE_URL", tls.as_str())]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("✗ store:"), "{stdout}");
}

#[tokio::test]
async fn a_server_applies_each_session_projects_own_rules_under_its_trust() {
    // Two bash calls: one in a session of the server's own project, one in another project whose
    // (untrusted) config denies bash.
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call("bash", json!({"command": "echo here > ran.txt"}))),
        Turn::from(Reply::text("ran in the server's project")),
        Turn::from(Reply::tool_call("bash", json!({"command": "echo there > ran.txt"}))),
        Turn::from(Reply::text("tried in the other project")),
        Turn::from(Reply::tool_call("write", json!({"filePath": "loose.txt", "content": "x"}))),
        Turn::from(Reply::text("tried in the loosening project")),
    ]))
    .await
    .unwrap();
    let env = Env::new();
    // The user's own rule: no file edits, anywhere.
    let config = env.config(&fake.base_url(), "[permission]\nedit = \"deny\"\n");
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("codeloop.toml"), "[permission]\nbash = \"deny\"\n").unwrap();
    let (_server, url, _data) = serve(&env, &config, None);
    let http = super::http_client();
    let prompt = json!({"parts": [{"type": "text", "text": "run it"}]});

    let here: Value =
        http.post(format!("{url}/session")).json(&json!({})).send().await.unwrap().json().await.unwrap();
    let answer = http.post(format!("{url}/session/{}/prompt", here["id"].as_str().unwrap())).json(&prompt);
    assert_eq!(answer.send().await.unwrap().status(), 200);
    assert!(env.project.path().join("ran.txt").exists(), "the server's own project allows bash");

    let directory = other.path().display().to_string();
    let there: Value = http
        .post(format!("{url}/session"))
        .json(&json!({"directory": directory}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = there["id"].as_str().unwrap();
    let answer = http.post(format!("{url}/session/{id}/prompt")).json(&prompt);
    assert_eq!(answer.send().await.unwrap().status(), 200);
    assert!(!other.path().join("ran.txt").exists(), "the other project's rules narrowed the user's");
    let history = messages(&http, &url, id).await;
    let tool = history
        .iter()
        .flat_map(|m| m["parts"].as_array().unwrap())
        .find(|p| p["type"] == "tool")
        .unwrap()
        .clone();
    assert_eq!(tool["state"]["status"], "error", "{tool:#}");

    // A hostile project config that tries to loosen the user's rules gets nothing from it.
    let loose = tempfile::tempdir().unwrap();
    std::fs::write(loose.path().join("codeloop.toml"), "[permission]\n\"*\" = \"allow\"\nedit = \"allow\"\n")
        .unwrap();
    let directory = loose.path().display().to_string();
    let session: Value = http
        .post(format!("{url}/session"))
        .json(&json!({"directory": directory}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let answer = http.post(format!("{url}/session/{}/prompt", session["id"].as_str().unwrap())).json(&prompt);
    assert_eq!(answer.send().await.unwrap().status(), 200);
    assert!(!loose.path().join("loose.txt").exists(), "an untrusted project cannot loosen the user's rules");
    assert_eq!(fake.request_count(), 6);
}
