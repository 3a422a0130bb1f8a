//! Driving the real `codeloop` binary: an isolated environment (data dir, config, HOME) pointed at an
//! in-process fake provider, a running `codeloop run --format json` whose event lines are read with the
//! time each arrived, signals, and the checks made after a kill (integrity, recovery, durability of
//! streamed text, pairing of tool calls in the requests sent afterwards).

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use codeloop_testkit::{FakeProvider, Script};
use serde_json::Value;
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// The binary under test.
pub const CODELOOP: &str = env!("CARGO_BIN_EXE_codeloop");

/// Longest any single wait of the suite may take before the test fails instead of hanging.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Text flushes happen at most every 200 ms (DESIGN.md §4 "Store and recovery").
pub const FLUSH_WINDOW: Duration = Duration::from_millis(200);

/// Allowed on top of the flush window for the writer thread to commit the batch (the machine is shared
/// and busy): 100 ms, or `CODELOOP_CRASH_SLACK_MS`.
pub fn commit_slack() -> Duration {
    let ms = std::env::var("CODELOOP_CRASH_SLACK_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    Duration::from_millis(ms)
}

/// An isolated codeloop installation: its own data dir, config file and HOME, and a fake provider.
pub struct Env {
    pub data: TempDir,
    pub project: TempDir,
    home: TempDir,
    pub config: PathBuf,
    pub fake: FakeProvider,
}

impl Env {
    pub async fn new(script: Script) -> Env {
        Env::with(script, 128_000, "").await
    }

    /// `context` sets the fake model's window; `extra` is appended to the config file.
    pub async fn with(script: Script, context: u64, extra: &str) -> Env {
        let data = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let fake = FakeProvider::start(script).await.unwrap();
        let config = home.path().join("codeloop-test.toml");
        let text = format!(
            "model = \"fake/test\"\n\n[provider.fake]\napi = \"openai-chat\"\nbase_url = \"{}\"\n\n[provider.fake.models.test]\ncontext = {context}\noutput = 4000\n\n{extra}\n",
            fake.base_url()
        );
        std::fs::write(&config, text).unwrap();
        std::fs::write(project.path().join("a.txt"), "hello from a.txt\n").unwrap();
        Env { data, project, home, config, fake }
    }

    pub fn db_path(&self) -> PathBuf {
        self.data.path().join("codeloop.db")
    }

    /// `codeloop ARGS…` in the project directory with this environment, stdin closed, output piped.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(CODELOOP);
        command
            .args(args)
            .current_dir(self.project.path())
            .env("CODELOOP_DATA_DIR", self.data.path())
            .env("CODELOOP_CONFIG", &self.config)
            .env("HOME", self.home.path())
            .env("XDG_CONFIG_HOME", self.home.path().join("config"))
            .env("XDG_DATA_HOME", self.home.path().join("data"))
            .env_remove("CODELOOP_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }

    /// Runs `codeloop ARGS…` to completion.
    pub async fn output(&self, args: &[&str]) -> Output {
        let child = self.command(args).spawn().unwrap();
        let output = tokio::time::timeout(DEADLINE, child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("codeloop {args:?} did not finish within {DEADLINE:?}"))
            .unwrap();
        Output {
            status: output.status,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Starts `codeloop run --format json ARGS…` and returns it running.
    pub fn spawn_run(&self, args: &[&str]) -> Running {
        let mut all = vec!["run", "--format", "json"];
        all.extend_from_slice(args);
        let mut child = self.command(&all).spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let collected = Arc::new(Mutex::new(String::new()));
        let sink = collected.clone();
        tokio::spawn(async move {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text).await;
            sink.lock().unwrap().push_str(&text);
        });
        Running { child, lines: Some(BufReader::new(stdout).lines()), seen: Vec::new(), stderr: collected }
    }

    /// The stored session as `codeloop session export` prints it (this also runs recovery).
    pub async fn export(&self, session: &str) -> Value {
        let out = self.output(&["session", "export", session]).await;
        assert!(out.status.success(), "session export failed: {}", out.stderr);
        serde_json::from_str(&out.stdout).unwrap()
    }

    /// The JSON bodies of every request the fake provider received.
    pub fn bodies(&self) -> Vec<Value> {
        self.fake.requests().into_iter().map(|r| r.body).collect()
    }
}

pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// One event line and when the test read it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub event: Value,
}

/// A `codeloop run --format json` process.
pub struct Running {
    pub child: Child,
    lines: Option<Lines<BufReader<ChildStdout>>>,
    pub seen: Vec<Seen>,
    stderr: Arc<Mutex<String>>,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the process is running")
    }

    /// Reads event lines until one matches `pred`, and returns it. Fails after [`DEADLINE`] or at EOF.
    pub async fn until(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let started = Instant::now();
        loop {
            let left = DEADLINE.saturating_sub(started.elapsed());
            let lines = self.lines.as_mut().expect("stdout is still open");
            let line = match tokio::time::timeout(left, lines.next_line()).await {
                Ok(Ok(Some(line))) => line,
                Ok(Ok(None)) => panic!("codeloop exited before {what}; stderr: {}", self.stderr()),
                Ok(Err(e)) => panic!("reading codeloop's stdout: {e}"),
                Err(_) => panic!("no {what} within {DEADLINE:?}; stderr: {}", self.stderr()),
            };
            let Ok(event) = serde_json::from_str::<Value>(&line) else { continue };
            self.seen.push(Seen { at: Instant::now(), event: event.clone() });
            if pred(&event) {
                return event;
            }
        }
    }

    /// Reads until `n` text deltas have been seen in total; returns the last one.
    pub async fn until_deltas(&mut self, n: usize) -> Value {
        let already = self.deltas().len();
        let mut count = already;
        let mut last = Value::Null;
        while count < n {
            last = self.until("a text delta", is_delta).await;
            count += 1;
        }
        last
    }

    /// The session id, from the first event that names one.
    pub fn session(&self) -> String {
        self.seen
            .iter()
            .find_map(|s| s.event["properties"]["session_id"].as_str().map(str::to_owned))
            .expect("an event named the session")
    }

    /// Every text delta seen: `(when, part id, text)`.
    pub fn deltas(&self) -> Vec<(Instant, String, String)> {
        self.seen
            .iter()
            .filter(|s| is_delta(&s.event))
            .map(|s| {
                let p = &s.event["properties"];
                (s.at, p["part_id"].as_str().unwrap().to_owned(), p["delta"].as_str().unwrap().to_owned())
            })
            .collect()
    }

    /// SIGKILL now; returns the moment just before the signal was sent.
    pub fn kill9(&mut self) -> Instant {
        let at = Instant::now();
        self.child.start_kill().unwrap();
        at
    }

    /// Sends `signal` (`"INT"`, `"TERM"`) with kill(1).
    pub fn signal(&self, signal: &str) {
        let status =
            std::process::Command::new("kill").arg(format!("-{signal}")).arg(self.pid().to_string()).status();
        assert!(status.unwrap().success(), "kill -{signal} failed");
    }

    /// Reads what is left of stdout (recording it) and waits for the exit.
    pub async fn wait(&mut self) -> ExitStatus {
        if let Some(mut lines) = self.lines.take() {
            let drain = async {
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Ok(event) = serde_json::from_str::<Value>(&line) {
                        self.seen.push(Seen { at: Instant::now(), event });
                    }
                }
            };
            tokio::time::timeout(DEADLINE, drain).await.expect("stdout closes once codeloop exits");
        }
        tokio::time::timeout(DEADLINE, self.child.wait()).await.expect("codeloop exits").unwrap()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

pub fn is_delta(event: &Value) -> bool {
    event["type"] == "message.part.delta" && event["properties"]["field"] == "text"
}

/// A `message.part.updated` event for a tool part in `status`.
pub fn is_tool_in(event: &Value, status: &str) -> bool {
    event["type"] == "message.part.updated"
        && event["properties"]["part"]["type"] == "tool"
        && event["properties"]["part"]["state"]["status"] == status
}

// ----- the database as the kill left it -----

/// `PRAGMA integrity_check` of the file as it is (WAL included).
pub fn integrity(db: &Path) -> String {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.query_row("PRAGMA integrity_check", [], |row| row.get::<_, String>(0)).unwrap()
}

/// What a crash left open, read straight from the file before anything recovers it.
#[derive(Debug, Default)]
pub struct LeftOpen {
    pub tool_parts: Vec<String>,
    pub messages: Vec<String>,
}

pub fn left_open(db: &Path) -> LeftOpen {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    let ids = |sql: &str| -> Vec<String> {
        let mut stmt = conn.prepare(sql).unwrap();
        stmt.query_map([], |row| row.get::<_, String>(0)).unwrap().map(Result::unwrap).collect()
    };
    LeftOpen {
        tool_parts: ids("SELECT id FROM part WHERE tool_status IN ('pending', 'running')"),
        messages: ids("SELECT id FROM message WHERE unfinished = 1"),
    }
}

/// The stored text of a part, straight from the file.
pub fn stored_text(db: &Path, part: &str) -> Option<String> {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    let data: Option<String> =
        conn.query_row("SELECT data FROM part WHERE id = ?1", [part], |row| row.get(0)).ok();
    data.and_then(|d| serde_json::from_str::<Value>(&d).ok())
        .and_then(|v| v["text"].as_str().map(str::to_owned))
}

/// Checks that every delta seen more than the flush window before `killed_at` is on disk: for each
/// text part streamed, the stored text starts with those deltas and is itself a prefix of everything
/// streamed. Returns `(bytes that had to be durable, bytes stored)` summed over parts.
pub fn assert_streamed_text_durable(db: &Path, run: &Running, killed_at: Instant) -> (usize, usize) {
    let cutoff = killed_at.checked_sub(FLUSH_WINDOW + commit_slack()).unwrap();
    let mut parts: Vec<String> = Vec::new();
    for (_, part, _) in run.deltas() {
        if !parts.contains(&part) {
            parts.push(part);
        }
    }
    let (mut durable, mut stored_total) = (0, 0);
    for part in parts {
        let all: String = run.deltas().iter().filter(|d| d.1 == part).map(|d| d.2.as_str()).collect();
        let due: String =
            run.deltas().iter().filter(|d| d.1 == part && d.0 <= cutoff).map(|d| d.2.as_str()).collect();
        let stored = stored_text(db, &part).unwrap_or_default();
        assert!(
            stored.starts_with(&due),
            "part {part}: {} bytes streamed ≥ {:?} before the kill, only {} on disk",
            due.len(),
            FLUSH_WINDOW + commit_slack(),
            stored.len()
        );
        assert!(all.starts_with(&stored), "part {part}: the stored text is not what was streamed");
        durable += due.len();
        stored_total += stored.len();
    }
    (durable, stored_total)
}

// ----- after recovery -----

/// Every message and part of an export.
pub fn messages(export: &Value) -> Vec<Value> {
    export["messages"].as_array().cloned().unwrap_or_default()
}

/// After recovery: no tool part pending or running; the parts left open are interrupted errors; every
/// assistant message completed; the messages left open are `Aborted`.
pub fn assert_recovered(export: &Value, open: &LeftOpen) {
    for message in messages(export) {
        let info = &message["info"];
        if info["role"] == "assistant" {
            assert!(info["time"]["completed"].is_i64(), "assistant message left open: {info}");
            if open.messages.iter().any(|m| info["id"] == m.as_str()) {
                assert_eq!(info["error"]["name"], "Aborted", "{info}");
            }
        }
        for part in message["parts"].as_array().into_iter().flatten() {
            if part["type"] != "tool" {
                continue;
            }
            let state = &part["state"];
            assert!(state["status"] == "completed" || state["status"] == "error", "open tool part: {part}");
            if open.tool_parts.iter().any(|p| part["id"] == p.as_str()) {
                assert_eq!(state["status"], "error", "{part}");
                assert_eq!(state["metadata"]["interrupted"], true, "{part}");
            }
        }
    }
}

/// In every request body, each assistant tool call is answered by exactly one `role: tool` message
/// right after its assistant message, and every tool message answers a call.
pub fn assert_paired(bodies: &[Value]) {
    for (n, body) in bodies.iter().enumerate() {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let mut i = 0;
        while i < messages.len() {
            let message = &messages[i];
            i += 1;
            assert_ne!(message["role"], "tool", "request {n}: a tool result without its call: {message}");
            let Some(calls) = message["tool_calls"].as_array() else { continue };
            let ids: Vec<&str> = calls.iter().map(|c| c["id"].as_str().unwrap_or_default()).collect();
            let mut answered: Vec<&str> = Vec::new();
            while i < messages.len() && messages[i]["role"] == "tool" {
                answered.push(messages[i]["tool_call_id"].as_str().unwrap_or_default());
                i += 1;
            }
            let (mut want, mut got) = (ids.clone(), answered.clone());
            want.sort_unstable();
            got.sort_unstable();
            assert_eq!(got, want, "request {n}: every call needs exactly one result");
        }
    }
}

/// `codeloop run --continue MESSAGE` succeeds, and every request sent so far pairs its calls.
pub async fn assert_continue_works(env: &Env, message: &str) -> Output {
    let before = env.fake.request_count();
    let out = env.output(&["run", "--continue", message]).await;
    assert!(out.status.success(), "run --continue failed ({:?}): {}", out.status.code(), out.stderr);
    assert!(env.fake.request_count() > before, "--continue sent a request");
    assert_paired(&env.bodies());
    out
}

// ----- processes left behind -----

/// Pids of live processes whose command line contains `marker` (e.g. a `bash` grandchild).
pub fn processes_with(marker: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return pids };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let state = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = state.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'));
        if !zombie && String::from_utf8_lossy(&cmdline).contains(marker) {
            pids.push(pid);
        }
    }
    pids
}

/// Kills processes this test started (found by their unique marker), by pid.
pub fn kill_pids(pids: &[u32]) {
    for pid in pids {
        let _ = std::process::Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
    }
}

/// A marker unique to this test run, to find its processes.
pub fn marker(name: &str) -> String {
    format!("crashtest-{name}-{}-{}", std::process::id(), codeloop_types::now_ms())
}

/// The contents of the `role: tool` messages of a request.
pub fn tool_results(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

/// Polls `condition` every 10 ms until it holds or [`DEADLINE`] passes; returns whether it held.
pub async fn poll_until(mut condition: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < DEADLINE {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    condition()
}
