//! The `codeloop` binary end to end: the offline demo, `run` with both output formats, `--continue`,
//! `session` commands, config errors and exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use codeloop_testkit::{FakeProvider, Reply, Script, Turn};
use serde_json::{Value, json};

#[path = "cli/acp.rs"]
mod acp;
#[path = "cli/cloud.rs"]
mod cloud;
#[path = "cli/first_run.rs"]
mod first_run;
#[path = "cli/gc.rs"]
mod gc;
#[path = "cli/hooks.rs"]
mod hooks;
#[path = "cli/jobs.rs"]
mod jobs;
#[path = "cli/lsp.rs"]
mod lsp;
#[path = "cli/mcp.rs"]
mod mcp;
#[path = "cli/project_context.rs"]
mod project_context;
#[path = "cli/queue_kills.rs"]
mod queue_kills;
#[path = "cli/telemetry.rs"]
mod telemetry;
#[path = "cli/tui.rs"]
mod tui;
#[path = "cli/walls.rs"]
mod walls;
#[path = "cli/walls_round3.rs"]
mod walls_round3;
#[path = "cli/walls_round4.rs"]
mod walls_round4;
#[path = "cli/web.rs"]
mod web;
#[path = "cli/workers.rs"]
mod workers;

#[path = "cli/commands.rs"]
mod commands;
#[path = "cli/defects.rs"]
mod defects;
#[path = "cli/real_models.rs"]
mod real_models;

struct Env {
    data: tempfile::TempDir,
    home: tempfile::TempDir,
    project: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env {
            data: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
            project: tempfile::tempdir().unwrap(),
        }
    }

    fn config(&self, base_url: &str, extra: &str) -> std::path::PathBuf {
        let path = self.home.path().join("config.toml");
        std::fs::write(
            &path,
            format!(
                "model = \"fake/test\"\n[provider.fake]\nbase_url = \"{base_url}\"\n[provider.fake.models.test]\ncontext = 128000\noutput = 8000\ncost = {{ input = 1.0, output = 2.0 }}\n{extra}"
            ),
        )
        .unwrap();
        path
    }

    fn codeloop(&self, config: Option<&Path>, args: &[&str]) -> Output {
        self.codeloop_with(config, args, &[])
    }

    fn codeloop_with(&self, config: Option<&Path>, args: &[&str], vars: &[(&str, &str)]) -> Output {
        let mut cmd = self.command(config, args);
        cmd.envs(vars.iter().copied());
        cmd.output().unwrap()
    }

    /// The binary in the project dir with this env's data dir and home, and `config` as
    /// `$CODELOOP_CONFIG` (`None`: only the files under the home count).
    fn command(&self, config: Option<&Path>, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_codeloop"));
        cmd.args(args)
            .current_dir(self.project.path())
            .env("CODELOOP_DATA_DIR", self.data.path())
            .env("HOME", self.home.path())
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_DATA_HOME")
            .env_remove("CODELOOP_CONFIG");
        // Telemetry goes only where a test says.
        for variable in
            ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"]
        {
            cmd.env_remove(variable);
        }
        // A key in the developer's environment would choose a model by itself.
        for (_, variables, _) in codeloop_core::models::providers_by_key() {
            for variable in *variables {
                cmd.env_remove(variable);
            }
        }
        if let Some(config) = config {
            cmd.env("CODELOOP_CONFIG", config);
        }
        cmd
    }
}

/// The token the tests give `codeloop serve` (in `CODELOOP_SERVER_TOKEN`, as a user would).
const TEST_TOKEN: &str = "test-token";

/// An HTTP client that sends [`TEST_TOKEN`] on every request.
fn http_client() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    let value = reqwest::header::HeaderValue::from_str(&format!("Bearer {TEST_TOKEN}")).unwrap();
    headers.insert(reqwest::header::AUTHORIZATION, value);
    reqwest::Client::builder().default_headers(headers).build().unwrap()
}

/// What the model was told the last tool call returned, in request `n` (OpenAI chat's tool message).
fn last_tool_output(fake: &FakeProvider, n: usize) -> String {
    let messages = fake.requests()[n].body["messages"].as_array().cloned().unwrap_or_default();
    messages.iter().rev().find(|m| m["role"] == "tool").map(|m| m["content"].to_string()).unwrap_or_default()
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn demo_exits_zero_and_really_changes_the_file() {
    let env = Env::new();
    let dir = env.project.path().join("demo");
    let output = env.codeloop(None, &["demo", "--dir", dir.to_str().unwrap()]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert_eq!(
        std::fs::read_to_string(dir.join("greet.sh")).unwrap(),
        "#!/usr/bin/env bash\necho \"Hello, world\"\n"
    );
    assert!(stdout.contains("now prints PASS"), "{stdout}");
    assert!(stderr.contains("→ edit greet.sh"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_streams_text_to_stdout_and_activity_to_stderr_then_continue_resumes() {
    let env = Env::new();
    std::fs::write(env.project.path().join("a.txt"), "hello\n").unwrap();
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"})).with_text("Reading.")),
        Turn::from(Reply::text("It says hello.")),
        Turn::from(Reply::text("Still hello.")),
    ]))
    .await
    .unwrap();
    let config = env.config(&fake.base_url(), "");
    let run = |args: Vec<&str>| {
        let env = &env;
        let config = config.clone();
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        async move {
            tokio::task::spawn_blocking({
                let data = env.data.path().to_owned();
                let home = env.home.path().to_owned();
                let project = env.project.path().to_owned();
                move || {
                    Command::new(env!("CARGO_BIN_EXE_codeloop"))
                        .args(&args)
                        .current_dir(&project)
                        .env("CODELOOP_DATA_DIR", data)
                        .env("HOME", home)
                        .env("CODELOOP_CONFIG", config)
                        .env_remove("XDG_CONFIG_HOME")
                        .env_remove("XDG_DATA_HOME")
                        .output()
                        .unwrap()
                }
            })
            .await
            .unwrap()
        }
    };
    let output = run(vec!["run", "what does a.txt say?"]).await;
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stdout, "Reading.\nIt says hello.\n");
    assert!(stderr.contains("→ read a.txt"), "{stderr}");
    assert!(stderr.contains("fake/test") && stderr.contains("ses_"), "final summary line: {stderr}");

    let output = run(vec!["run", "--continue", "--format", "json", "and now?"]).await;
    assert!(output.status.success());
    let events: Vec<Value> =
        String::from_utf8_lossy(&output.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert!(types.contains(&"message.part.delta") && types.contains(&"session.idle"), "{types:?}");
    let ids: Vec<u64> = events.iter().map(|e| e["id"].as_u64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "event ids increase");
    // --continue sent the whole conversation.
    let third = &fake.requests()[2].body["messages"];
    assert!(third.to_string().contains("what does a.txt say?"), "{third}");

    let output = run(vec!["session", "list", "--format", "json"]).await;
    let sessions: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(sessions.as_array().unwrap().len(), 1);
    let id = sessions[0]["id"].as_str().unwrap().to_owned();
    let output = run(vec!["session", "export", &id]).await;
    let export: Value = serde_json::from_slice(&output.stdout).unwrap();
    let messages = export["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 5);
    let parts: Vec<&str> =
        messages[1]["parts"].as_array().unwrap().iter().map(|p| p["type"].as_str().unwrap()).collect();
    assert_eq!(parts, ["step-start", "text", "tool", "step-finish"]);
    assert_eq!(messages[1]["parts"][2]["state"]["status"], "completed");
    assert!(messages[1]["parts"][3]["tokens"]["input"].as_u64().is_some());
    let output = run(vec!["session", "show", &id]).await;
    assert!(String::from_utf8_lossy(&output.stdout).contains("It says hello."));
    let output = run(vec!["session", "delete", &id]).await;
    assert!(output.status.success());
    let output = run(vec!["session", "show", &id]).await;
    assert!(!output.status.success());
}

#[test]
fn an_invalid_config_is_a_clear_error_with_the_file_and_key() {
    let env = Env::new();
    let config = env.home.path().join("bad.toml");
    std::fs::write(&config, "[compaction]\nauto = \"sometimes\"\n").unwrap();
    let output = env.codeloop(Some(&config), &["run", "hi"]);
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr.contains("bad.toml") && stderr.contains("auto"), "{stderr}");
}

#[test]
fn no_model_configured_says_how_to_configure_one() {
    let env = Env::new();
    let output = env.codeloop(None, &["run", "hi"]);
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr.contains("--model"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_auth_error_exits_one_and_names_the_key_variable() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new([Turn::from(codeloop_testkit::Fault::unauthorized())]))
        .await
        .unwrap();
    let config = env.config(&fake.base_url(), "");
    let text_config = std::fs::read_to_string(&config)
        .unwrap()
        .replace("[provider.fake]\n", "[provider.fake]\napi_key_env = \"FAKE_API_KEY\"\n");
    std::fs::write(&config, text_config).unwrap();
    let missing = env.codeloop(Some(&config), &["run", "hi"]);
    let (_, stderr) = text(&missing);
    assert_eq!(missing.status.code(), Some(1));
    assert!(stderr.contains("API key missing") && stderr.contains("$FAKE_API_KEY"), "{stderr}");
    assert_eq!(fake.request_count(), 0, "nothing is sent without a key");
    let output = tokio::task::spawn_blocking(move || {
        env.codeloop_with(Some(&config), &["run", "hi"], &[("FAKE_API_KEY", "sk-wrong")])
    })
    .await
    .unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr.contains("check your API key in $FAKE_API_KEY"), "{stderr}");
    assert!(!stderr.contains("sk-wrong"), "the key is never printed");
    assert_eq!(fake.request_count(), 1, "no retry on 401: {stderr}");
}

/// Kills the child when the test ends, even on a failed assertion.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `codeloop serve` on `port` (0: any) in the project with `config`, its token given in the environment
/// (`None`: it makes one); the server and its URL once it listens.
fn start_serve(env: &Env, config: &Path, port: u16, token: Option<&str>) -> (Killed, String) {
    use std::io::BufRead;
    let mut serve = Command::new(env!("CARGO_BIN_EXE_codeloop"));
    serve
        .args(["serve", "--port", &port.to_string()])
        .current_dir(env.project.path())
        .env("CODELOOP_DATA_DIR", env.data.path())
        .env("HOME", env.home.path())
        .env("CODELOOP_CONFIG", config)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("CODELOOP_SERVER_TOKEN")
        .stderr(std::process::Stdio::piped());
    if let Some(token) = token {
        serve.env("CODELOOP_SERVER_TOKEN", token);
    }
    let mut server = Killed(serve.spawn().unwrap());
    // The server says where it listens once it does.
    let mut lines = std::io::BufReader::new(server.0.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().expect("the server exited before listening").unwrap();
        if let Some(at) = line.find("http://") {
            break line[at..].split_whitespace().next().unwrap().to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (server, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_attach_drives_a_running_server_with_the_same_output() {
    let env = Env::new();
    std::fs::write(env.project.path().join("a.txt"), "hello\n").unwrap();
    let fake = FakeProvider::start(
        Script::new([
            Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"})).with_text("Reading.")),
            Turn::from(Reply::text("It says hello.")),
        ])
        .repeating(),
    )
    .await
    .unwrap();
    let config = env.config(&fake.base_url(), "");
    // The token made by the server, and one given to it in its environment: either way a client on this
    // machine finds it through the server file (DESIGN.md §5b), without the variable.
    for given in [None, Some("given-in-the-environment")] {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let (server, url) = start_serve(&env, &config, port, given);
        let project = env.project.path().to_owned();
        let home = env.home.path().to_owned();
        let data = env.data.path().to_owned();
        let output = tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_codeloop"))
                .args(["run", "--attach", &url, "what does a.txt say?"])
                .current_dir(project)
                .env("HOME", home)
                .env("CODELOOP_DATA_DIR", data)
                .env_remove("CODELOOP_SERVER_TOKEN")
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let (stdout, stderr) = text(&output);
        assert!(output.status.success(), "token {given:?}: stdout: {stdout}\nstderr: {stderr}");
        assert_eq!(stdout, "Reading.\nIt says hello.\n");
        assert!(stderr.contains("→ read a.txt"), "{stderr}");
        drop(server);
    }
    assert_eq!(fake.request_count(), 4);
}

#[tokio::test]
async fn serve_refuses_cors_without_a_token() {
    let env = Env::new();
    for origin in ["*", "https://app.example"] {
        let mut serve = tokio::process::Command::new(env!("CARGO_BIN_EXE_codeloop"));
        serve
            .args(["serve", "--port", "0", "--cors", origin])
            .current_dir(env.project.path())
            .env("CODELOOP_DATA_DIR", env.data.path())
            .env("HOME", env.home.path())
            .env_remove("CODELOOP_SERVER_TOKEN")
            .env_remove("CODELOOP_CONFIG")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        // A server that starts never exits by itself: the timeout turns that into a failure.
        let output = tokio::time::timeout(std::time::Duration::from_secs(30), serve.output())
            .await
            .expect("`serve --cors` without a token must refuse to start, not serve")
            .unwrap();
        let (_, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("--cors") && stderr.contains("--token"), "{stderr}");
        assert!(!stderr.contains("listening"), "{stderr}");
    }
}

impl Env {
    /// `program args…` in the project with this environment, as an async command with output piped.
    fn program_command(&self, config: &Path, program: &str, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .current_dir(self.project.path())
            .env("CODELOOP_DATA_DIR", self.data.path())
            .env("HOME", self.home.path())
            .env("CODELOOP_CONFIG", config)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_DATA_HOME")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        cmd
    }
}

/// A clipboard write (OSC 52), a screen clear and cursor home, a colour through the one-character C1
/// CSI, a bell and backspaces: what a hostile answer would send a terminal.
const HOSTILE: &str = "Hi \u{1b}]52;c;ZXZpbA==\u{7} there\u{1b}[2J\u{1b}[H \u{9b}31mred\u{8}\u{8}!";
/// A tool call whose path (shown in the activity line) carries a screen clear.
const HOSTILE_PATH: &str = "x\u{1b}[2J.txt";

fn hostile_turns() -> [Turn; 2] {
    [
        Turn::from(Reply::tool_call("read", json!({"filePath": HOSTILE_PATH})).with_text("Looking.")),
        Turn::from(Reply::text(HOSTILE)),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_sequences_are_kept_exactly_for_pipes() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new(hostile_turns())).await.unwrap();
    let config = env.config(&fake.base_url(), "");
    let output =
        env.program_command(&config, env!("CARGO_BIN_EXE_codeloop"), &["run", "go"]).output().await.unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stdout, format!("Looking.\n{HOSTILE}\n"));
    assert!(stderr.contains(&format!("→ read {HOSTILE_PATH}")), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_sequences_are_neutralised_on_a_terminal() {
    if std::process::Command::new("script").arg("--version").output().is_err() {
        eprintln!(
            "SKIPPED: `script` (util-linux) is needed to give codeloop a terminal; it is not installed"
        );
        return;
    }
    let env = Env::new();
    let fake = FakeProvider::start(Script::new(hostile_turns())).await.unwrap();
    let config = env.config(&fake.base_url(), "");
    // `script` runs codeloop with a pseudo-terminal as stdin, stdout and stderr, and copies what
    // codeloop wrote to it (both streams) to its own stdout.
    let inner = format!("'{}' run --on-ask deny go", env!("CARGO_BIN_EXE_codeloop"));
    let output =
        env.program_command(&config, "script", &["-qec", &inner, "/dev/null"]).output().await.unwrap();
    let (screen, stderr) = text(&output);
    assert!(output.status.success(), "{screen}\n{stderr}");
    assert!(screen.contains("Looking."), "codeloop ran: {screen:?}");
    for control in ['\u{1b}', '\u{9b}', '\u{7}', '\u{8}'] {
        assert!(!screen.contains(control), "{control:?} reached the terminal: {screen:?}");
    }
    assert!(screen.contains("Hi ␛]52;c;ZXZpbA==␇ there␛[2J␛[H \u{fffd}31mred␈␈!"), "{screen:?}");
    assert!(screen.contains("→ read x␛[2J.txt"), "{screen:?}");

    // The stored session shown on a terminal: the same text, neutralised the same way.
    let session = screen.split_whitespace().find(|w| w.starts_with("ses_")).unwrap().to_owned();
    let inner = format!("'{}' session show {session}", env!("CARGO_BIN_EXE_codeloop"));
    let output =
        env.program_command(&config, "script", &["-qec", &inner, "/dev/null"]).output().await.unwrap();
    let (shown, _) = text(&output);
    assert!(output.status.success(), "{shown}");
    assert!(!shown.contains('\u{1b}'), "{shown:?}");
    assert!(shown.contains("Hi ␛]52;c;ZXZpbA==␇ there"), "{shown:?}");
}

/// Idle sockets opened against `codeloop serve`: more than its open-file limit in the test below.
const IDLE_SOCKETS: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_a_real_client_while_idle_connections_pile_up() {
    use tokio::io::AsyncBufReadExt;

    let env = Env::new();
    let config = env.config("http://127.0.0.1:9", "");
    // A soft limit of 64 open files: the idle sockets below would exhaust it.
    let inner =
        format!("ulimit -Sn 64 && exec '{}' serve --port 0 --token s3cret", env!("CARGO_BIN_EXE_codeloop"));
    let mut server = env.program_command(&config, "sh", &["-c", &inner]).spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(server.stderr.take().unwrap()).lines();
    let url = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            let line = lines.next_line().await.unwrap().expect("the server exited before listening");
            if let Some(at) = line.find("http://") {
                break line[at..].split_whitespace().next().unwrap().to_owned();
            }
        }
    })
    .await
    .expect("the server starts");
    let addr = url.trim_start_matches("http://").to_owned();
    // Connecting can itself stall once the server stops accepting (its queue fills): bounded too.
    let idle = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        let mut idle = Vec::with_capacity(IDLE_SOCKETS);
        for _ in 0..IDLE_SOCKETS {
            idle.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
        }
        idle
    })
    .await
    .expect("the server keeps accepting connections");
    let client = reqwest::Client::new();
    let response = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        client.get(format!("{url}/session")).bearer_auth("s3cret").send(),
    )
    .await
    .expect("an authorised request is answered while idle connections are open")
    .unwrap();
    assert_eq!(response.status(), 200);
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_a_subagent_as_the_sessions_agent_with_the_engines_one_rule() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new([Turn::from(Reply::text("never"))])).await.unwrap();
    let config = env.config(&fake.base_url(), "");
    let output = env.codeloop(Some(&config), &["run", "--agent", "explore", "hello"]);
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("agent \"explore\" runs only as a subagent, through the task tool"), "{stderr}");
    assert!(stderr.contains("choose one of") && stderr.contains("build"), "{stderr}");
    assert_eq!(fake.request_count(), 0);
}

/// A fault of the configuration is answered as one (422 `config`), not as the caller's 400: a session
/// whose project's `codeloop.toml` does not parse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_project_config_is_a_config_fault_over_http() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new([Turn::from(Reply::text("ok"))]).repeating()).await.unwrap();
    let config = env.config(&fake.base_url(), "");
    let broken = tempfile::tempdir().unwrap();
    std::fs::write(broken.path().join("codeloop.toml"), "model = [unclosed\n").unwrap();
    let (_server, url) = start_serve(&env, &config, 0, Some(TEST_TOKEN));
    let http = http_client();
    let session: Value = http
        .post(format!("{url}/session"))
        .json(&json!({"directory": broken.path()}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = session["id"].as_str().unwrap_or_else(|| panic!("{session}"));
    let answer = http
        .post(format!("{url}/session/{id}/prompt"))
        .json(&json!({"parts": [{"type": "text", "text": "hi"}]}))
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    let body: Value = answer.json().await.unwrap();
    assert_eq!((status, body["error"]["code"].as_str()), (422, Some("config")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("codeloop.toml"), "{body}");
    assert_eq!(fake.request_count(), 0, "nothing was sent");
}
