//! The interactive UI end to end: the real binary in a pseudo-terminal, its screen read back with a
//! terminal emulator (vt100), against the test kit's scripted provider. Every wait polls the screen
//! for expected text with a deadline; nothing sleeps to synchronise.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use codeloop_testkit::{FakeProvider, Reply, Script, Turn};
use portable_pty::{CommandBuilder, PtySize, native_pty_system};
use serde_json::json;

use super::Env;

const DEADLINE: Duration = Duration::from_secs(30);
const ROWS: u16 = 30;
const COLS: u16 = 100;

/// What the terminal has shown so far: the emulated screen and every raw byte.
#[derive(Default)]
struct Output {
    parser: Option<vt100::Parser>,
    raw: Vec<u8>,
    closed: bool,
}

/// `codeloop` running in a pseudo-terminal.
struct Tui {
    output: Arc<(Mutex<Output>, Condvar)>,
    writer: Box<dyn Write + Send>,
    child: Box<dyn portable_pty::Child + Send + Sync>,
    _master: Box<dyn portable_pty::MasterPty + Send>,
}

impl Tui {
    fn start(env: &Env, config: &Path, args: &[&str]) -> Tui {
        Self::start_sized(env, config, args, COLS)
    }

    /// Like [`Tui::start`] in a terminal `cols` wide.
    fn start_sized(env: &Env, config: &Path, args: &[&str], cols: u16) -> Tui {
        let pair = native_pty_system()
            .openpty(PtySize { rows: ROWS, cols, pixel_width: 0, pixel_height: 0 })
            .unwrap();
        let mut cmd = CommandBuilder::new(env!("CARGO_BIN_EXE_codeloop"));
        cmd.args(args);
        cmd.cwd(env.project.path());
        cmd.env("CODELOOP_DATA_DIR", env.data.path());
        cmd.env("HOME", env.home.path());
        cmd.env("CODELOOP_CONFIG", config);
        cmd.env("TERM", "xterm-256color");
        for name in ["XDG_CONFIG_HOME", "XDG_DATA_HOME", "CODELOOP_LOG"] {
            cmd.env_remove(name);
        }
        for (_, variables, _) in codeloop_core::models::providers_by_key() {
            for variable in *variables {
                cmd.env_remove(variable);
            }
        }
        let child = pair.slave.spawn_command(cmd).unwrap();
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().unwrap();
        let writer = pair.master.take_writer().unwrap();
        let output = Arc::new((
            Mutex::new(Output {
                parser: Some(vt100::Parser::new(ROWS.try_into().unwrap(), cols.try_into().unwrap(), 0)),
                ..Default::default()
            }),
            Condvar::new(),
        ));
        let shared = output.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                let n = reader.read(&mut buf).unwrap_or(0);
                let (lock, changed) = &*shared;
                let mut out = lock.lock().unwrap();
                if n == 0 {
                    out.closed = true;
                    changed.notify_all();
                    return;
                }
                out.raw.extend_from_slice(&buf[..n]);
                if let Some(parser) = out.parser.as_mut() {
                    parser.process(&buf[..n]);
                }
                changed.notify_all();
            }
        });
        Tui { output, writer, child, _master: pair.master }
    }

    fn screen(&self) -> String {
        let out = self.output.0.lock().unwrap();
        out.parser.as_ref().map(|p| p.screen().contents()).unwrap_or_default()
    }

    /// Waits until the screen shows `text` (or fails with what it shows).
    fn wait_for(&self, text: &str) -> String {
        self.wait_until(&format!("the screen to show {text:?}"), |screen| screen.contains(text))
    }

    fn wait_until(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + DEADLINE;
        let (lock, changed) = &*self.output;
        let mut out = lock.lock().unwrap();
        loop {
            let screen = out.parser.as_ref().map(|p| p.screen().contents()).unwrap_or_default();
            if done(&screen) {
                return screen;
            }
            let now = Instant::now();
            if now >= deadline || out.closed {
                panic!("timed out waiting for {what}; the screen:\n{screen}");
            }
            out = changed.wait_timeout(out, deadline - now).unwrap().0;
        }
    }

    fn send(&mut self, bytes: &str) {
        self.writer.write_all(bytes.as_bytes()).unwrap();
        self.writer.flush().unwrap();
    }

    /// Types a line and presses Enter.
    fn type_line(&mut self, text: &str) {
        self.send(text);
        self.wait_for(text);
        self.send("\r");
    }

    /// Waits for the process to exit; returns its success and everything it wrote.
    fn wait_exit(mut self) -> (bool, Vec<u8>) {
        let deadline = Instant::now() + DEADLINE;
        let (lock, changed) = &*self.output;
        let mut out = lock.lock().unwrap();
        while !out.closed {
            let now = Instant::now();
            assert!(now < deadline, "the UI did not exit");
            out = changed.wait_timeout(out, deadline - now).unwrap().0;
        }
        let raw = std::mem::take(&mut out.raw);
        drop(out);
        let status = self.child.wait().unwrap();
        (status.success(), raw)
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

fn fake(script: Script) -> (tokio::runtime::Runtime, FakeProvider) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let fake = runtime.block_on(FakeProvider::start(script)).unwrap();
    (runtime, fake)
}

#[test]
fn a_prompt_shows_the_answer_and_ctrl_c_twice_quits_restoring_the_terminal() {
    let env = Env::new();
    let (_runtime, fake) = fake(Script::new([Turn::from(
        Reply::text("The answer is **42**.\n\n- first point\n- second point").with_text_chunks(6),
    )]));
    let config = env.config(&fake.base_url(), "");
    let mut tui = Tui::start(&env, &config, &[]);
    let screen = tui.wait_for("Type a message");
    assert!(screen.contains("fake/test") && screen.contains("ses_"), "status line: {screen}");
    tui.type_line("what is the answer?");
    let screen = tui.wait_for("• second point");
    assert!(screen.contains("The answer is 42."), "{screen}");
    tui.wait_for("idle");
    // Ctrl+C clears the input first…
    tui.send("draft text");
    tui.wait_for("draft text");
    tui.send("\x03");
    tui.wait_until("the input to be cleared", |s| !s.contains("draft text"));
    // …and a second one in a row quits.
    tui.send("\x03");
    let (success, raw) = tui.wait_exit();
    assert!(success);
    let raw = String::from_utf8_lossy(&raw);
    let entered = raw.find("\x1b[?1049h").expect("the alternate screen was entered");
    let left = raw.rfind("\x1b[?1049l").expect("the alternate screen was left");
    assert!(left > entered);
    assert!(raw[left..].contains("codeloop --session ses_"), "{:?}", &raw[left..]);
}

#[test]
fn jobs_are_counted_in_the_status_line_and_listed_read_and_killed_with_slash_jobs() {
    let env = Env::new();
    let (_runtime, fake) = fake(Script::new([
        Turn::from(Reply::tool_call(
            "bash",
            json!({"command": "echo server-ready; exec sleep 60", "run_in_background": true, "description": "server"}),
        )),
        Turn::from(Reply::text("It runs.")),
    ]));
    let config = env.config(&fake.base_url(), "");
    let mut tui = Tui::start_sized(&env, &config, &[], 120);
    tui.wait_for("Type a message");
    tui.type_line("start a server");
    tui.wait_for("It runs.");
    // The answer shows a moment before the run is over: wait for the idle status line.
    let screen = tui.wait_until("an idle status line with one job", |s| {
        s.lines().any(|l| l.contains("⚙ 1 job ") && l.contains("idle"))
    });
    // At 120 columns the status line keeps every field and the whole session id besides the count.
    let status = screen.lines().find(|l| l.contains("⚙ 1 job ")).unwrap();
    for field in ["fake/test", "agent build", "% context", "$0.", "idle"] {
        assert!(status.contains(field), "{field} in {status:?}");
    }
    let id = &status[status.find("ses_").expect("the session id")..];
    assert_eq!(id.trim_end().len(), 30, "the whole session id: {status:?}");

    tui.type_line("/jobs");
    let screen = tui.wait_for("background jobs:");
    let listed = screen.lines().skip_while(|l| !l.contains("background jobs:")).nth(1).unwrap();
    let job = listed[listed.find("job_").unwrap()..].split_whitespace().next().unwrap().to_owned();
    assert!(listed.contains("running") && listed.contains("exec sleep 60"), "{listed}");
    tui.type_line(&format!("/jobs read {job}"));
    let screen = tui.wait_for("(newest output)");
    assert!(screen.contains("server-ready"), "{screen}");
    tui.type_line(&format!("/jobs kill {job}"));
    tui.wait_for(&format!("{job} killed"));
    tui.wait_until("the count to go", |s| !s.contains("⚙ 1 job "));
    tui.send("\x03");
    tui.send("\x03");
    assert!(tui.wait_exit().0);
}

#[test]
fn a_command_is_approved_with_y_and_esc_interrupts_a_running_sleep() {
    let env = Env::new();
    let (_runtime, fake) = fake(Script::new([
        Turn::from(Reply::tool_call(
            "bash",
            json!({"command": "echo approved-output", "description": "echo"}),
        )),
        Turn::from(Reply::text("It ran.")),
        Turn::from(Reply::tool_call("bash", json!({"command": "sleep 30", "description": "wait"}))),
        Turn::from(Reply::text("never sent")),
    ]));
    let config = env.config(&fake.base_url(), "[permission]\nbash = \"ask\"\n");
    let mut tui = Tui::start(&env, &config, &[]);
    tui.wait_for("Type a message");
    tui.type_line("run echo");
    tui.wait_for("reject with a message");
    tui.send("y");
    let screen = tui.wait_for("It ran.");
    assert!(
        screen.contains("✓ bash echo approved-output") && screen.contains("│ approved-output"),
        "{screen}"
    );
    tui.type_line("now wait");
    tui.wait_for("reject with a message");
    tui.send("y");
    tui.wait_for("sleep 30  running");
    tui.send("\x1b");
    let screen = tui.wait_for("sleep 30  interrupted");
    assert!(screen.contains("■ interrupted"), "{screen}");
    tui.wait_for("idle");
    assert_eq!(fake.requests().len(), 3, "the interrupted run made no further request");
}

#[test]
fn a_rejected_command_with_a_message_reaches_the_model_and_a_queued_message_runs_after() {
    let env = Env::new();
    let (_runtime, fake) = fake(Script::new([
        Turn::from(Reply::tool_call("bash", json!({"command": "rm -rf build", "description": "clean"}))),
        Turn::from(
            Reply::text("Understood, I will not delete it. ".repeat(8))
                .with_text_chunks(30)
                .with_chunk_delay_ms(60),
        ),
        Turn::from(Reply::text("Queued one answered.")),
    ]));
    let config = env.config(&fake.base_url(), "[permission]\nbash = \"ask\"\n");
    let mut tui = Tui::start(&env, &config, &[]);
    tui.wait_for("Type a message");
    tui.type_line("clean up");
    tui.wait_for("reject with a message");
    tui.send("m");
    tui.wait_for("message for the model");
    tui.type_line("keep the build dir");
    tui.wait_for("Understood");
    // Busy: Enter queues the next message.
    tui.type_line("and then this");
    tui.wait_for("1 queued");
    tui.wait_for("Queued one answered.");
    let requests = fake.requests();
    let second = requests[1].body.to_string();
    assert!(second.contains("keep the build dir"), "the rejection message reached the model: {second}");
    let third = requests[2].body.to_string();
    assert!(third.contains("and then this"), "{third}");
}

#[test]
fn undo_removes_a_file_the_turn_wrote_and_redo_brings_it_back() {
    let env = Env::new();
    let project = env.project.path();
    let git = |args: &[&str]| {
        let status = std::process::Command::new("git")
            .args(args)
            .current_dir(project)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .status()
            .unwrap();
        assert!(status.success());
    };
    std::fs::write(project.join("README"), "hi\n").unwrap();
    git(&["init", "-q"]);
    git(&["-c", "user.email=t@t", "-c", "user.name=t", "add", "."]);
    git(&["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init"]);
    let (_runtime, fake) = fake(Script::new([
        Turn::from(Reply::tool_call(
            "write",
            json!({"filePath": "notes.txt", "content": "written by the model\n"}),
        )),
        Turn::from(Reply::text("Wrote notes.txt.")),
    ]));
    let config = env.config(&fake.base_url(), "");
    let mut tui = Tui::start(&env, &config, &[]);
    tui.wait_for("Type a message");
    tui.type_line("write notes");
    tui.wait_for("Wrote notes.txt.");
    tui.wait_for("idle");
    assert!(project.join("notes.txt").exists());
    tui.type_line("/undo");
    tui.wait_for("undid the last turn");
    assert!(!project.join("notes.txt").exists(), "the file the turn wrote is gone");
    assert!(!tui.screen().contains("Wrote notes.txt."), "the turn's messages are hidden");
    tui.type_line("/redo");
    tui.wait_for("Wrote notes.txt.");
    assert!(project.join("notes.txt").exists());
}

/// `codeloop serve` on a free port, killed when dropped.
struct Server {
    child: std::process::Child,
    url: String,
}

impl Server {
    fn start(env: &Env, config: &Path) -> Server {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_codeloop"))
            .args(["serve", "--port", "0"])
            .current_dir(env.project.path())
            .env("CODELOOP_DATA_DIR", env.data.path())
            .env("HOME", env.home.path())
            .env("CODELOOP_CONFIG", config)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_DATA_HOME")
            // No token given: the server makes one and the UIs find it in the shared data dir.
            .env_remove("CODELOOP_SERVER_TOKEN")
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        while !line.contains("listening on ") {
            line.clear();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "the server did not start");
        }
        let url = line.split("listening on ").nth(1).unwrap().split_whitespace().next().unwrap().to_owned();
        // Keep draining stderr so the server never blocks on it.
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        Server { child, url }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn attached_to_a_server_two_uis_share_one_session_live() {
    let env = Env::new();
    let (_runtime, fake) = fake(Script::new([
        Turn::from(Reply::tool_call(
            "bash",
            json!({"command": "echo from-the-server", "description": "echo"}),
        )),
        Turn::from(Reply::text("Served answer.")),
    ]));
    let config = env.config(&fake.base_url(), "[permission]\nbash = \"ask\"\n");
    let server = Server::start(&env, &config);
    let mut first = Tui::start(&env, &config, &["--attach", &server.url]);
    let screen = first.wait_for("Type a message");
    let id = screen.split_whitespace().find(|w| w.starts_with("ses_")).unwrap().to_owned();
    let second = Tui::start(&env, &config, &["--attach", &server.url, "--session", &id]);
    second.wait_for(&id);
    first.type_line("over http");
    // The prompt shows in both; either may answer it.
    first.wait_for("reject with a message");
    second.wait_for("reject with a message");
    first.send("y");
    first.wait_for("Served answer.");
    let screen = second.wait_for("Served answer.");
    assert!(screen.contains("│ from-the-server") && screen.contains("▌ over http"), "{screen}");
    second.wait_until("the prompt to be gone in the other UI", |s| !s.contains("reject with a message"));
}

#[test]
fn without_a_terminal_codeloop_alone_prints_help() {
    let env = Env::new();
    let output = env.codeloop(None, &[]);
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("Usage: codeloop") && stdout.contains("tui"), "{stdout}");
    let output = env.codeloop(None, &["tui"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("needs a terminal"));
}

#[test]
fn agent_picks_follow_the_engines_one_rule_in_the_ui() {
    let env = Env::new();
    let (_runtime, fake) = fake(Script::new([Turn::from(Reply::text("Planned."))]));
    let config = env.config(&fake.base_url(), "");
    let mut tui = Tui::start(&env, &config, &[]);
    tui.wait_for("Type a message");
    // A subagent runs only through the task tool: the same refusal as `run --agent`, ACP and the API.
    tui.type_line("/agent explore");
    tui.wait_for("runs only as a subagent");
    tui.type_line("/agent plan");
    tui.wait_for("plan");
}

#[test]
fn a_command_file_is_completed_as_typed_and_runs_as_slash_name() {
    let env = Env::new();
    let (_runtime, fake) = fake(Script::new([Turn::from(Reply::text("Reviewed it."))]));
    let config = env.config(&fake.base_url(), "");
    let commands = env.home.path().join(".config/codeloop/commands");
    std::fs::create_dir_all(&commands).unwrap();
    std::fs::write(commands.join("review.md"), "---\ndescription: Review a file\n---\nPlease review $1")
        .unwrap();
    let mut tui = Tui::start(&env, &config, &[]);
    tui.wait_for("Type a message");
    tui.send("/rev");
    tui.wait_for("/review · Tab completes");
    tui.send("\t");
    tui.send("src/a.rs\r");
    let screen = tui.wait_for("Reviewed it.");
    assert!(screen.contains("Please review src/a.rs"), "the expanded text is the user's message: {screen}");
    let sent = fake.requests()[0].body["messages"].to_string();
    assert!(sent.contains("Please review src/a.rs"), "{sent}");
}
