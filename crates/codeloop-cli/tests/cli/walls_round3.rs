//! The third audit's findings (DESIGN.md §5c), each through the real binary with a positive control: a
//! sandboxed command answering asks through the server, a model writing the config that grants it
//! escalation, protected paths that do not exist yet, nested repositories, UNIX sockets and agents,
//! writable package caches, secrets behind forms the analysis cannot see, the process and saved-output
//! limits, and credentials in environment values.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use codeloop_testkit::{FakeProvider, Reply, Script, Turn};
use serde_json::{Value, json};

use super::walls::{bash_under_walls, codeloop, landlock, tool_result};
use super::{Env, Killed, text};

/// Every request the model got, as one string: what must never carry a secret.
fn everything_sent(fake: &FakeProvider) -> String {
    fake.requests().iter().map(|r| r.body.to_string()).collect::<Vec<_>>().join("\n")
}

/// `codeloop serve` with no token given: it makes one. Returns the server, its URL and its stderr lines
/// so far (up to where it said it listens).
fn serve_without_token(env: &Env, config: &Path) -> (Killed, String, Vec<String>) {
    let mut serve = Command::new(env!("CARGO_BIN_EXE_codeloop"));
    serve
        .args(["serve", "--port", "0"])
        .current_dir(env.project.path())
        .env("CODELOOP_DATA_DIR", env.data.path())
        .env("HOME", env.home.path())
        .env("CODELOOP_CONFIG", config)
        .env_remove("CODELOOP_SERVER_TOKEN")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    let mut server = Killed(serve.spawn().unwrap());
    let mut lines = std::io::BufReader::new(server.0.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let url = loop {
        let line = lines.next().expect("the server exited before listening").unwrap();
        seen.push(line.clone());
        if let Some(at) = line.find("http://") {
            break line[at..].split_whitespace().next().unwrap().to_owned();
        }
    };
    // The line after names the token file.
    seen.push(lines.next().expect("the server names its token file").unwrap());
    std::thread::spawn(move || for _ in lines {});
    (server, url, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_always_requires_a_token_and_a_command_cannot_answer_asks_through_it() {
    let env = Env::new();
    let fake =
        FakeProvider::start(Script::new([Turn::from(Reply::text("placeholder"))]).repeating()).await.unwrap();
    let config = env.config(&fake.base_url(), "");
    let (server, url, stderr) = serve_without_token(&env, &config);
    let port = url.rsplit(':').next().unwrap().trim_end_matches('/').to_owned();
    let file = env.data.path().join(format!("server/{port}.json"));
    assert!(stderr.iter().any(|l| l.contains(&*file.to_string_lossy())), "{stderr:?}");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let token = saved["token"].as_str().unwrap().to_owned();
    assert!(token.len() >= 32, "{saved}");
    assert_eq!(saved["pid"], json!(server.0.id()));

    let http = reqwest::Client::new();
    let anonymous = http.get(format!("{url}/permission")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401, "no token, no answers");
    let health = http.get(format!("{url}/health")).send().await.unwrap();
    assert_eq!(health.status(), 200, "liveness stays open");
    let listed = http.get(format!("{url}/permission")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(listed.status(), 200, "the user's client gets in");

    // A command the model runs tries the door, the token file and the server's command line.
    let probe = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port} && printf 'GET /permission HTTP/1.0\\r\\nHost: 127.0.0.1\\r\\n\\r\\n' >&3 \
         && head -c 12 <&3; echo; cat {file} 2>&1 | head -c 200; echo; cat /proc/{pid}/cmdline 2>&1 | head -c 200; \
         echo; echo procs=$(ls /proc | grep -c '^[0-9]')",
        file = file.display(),
        pid = server.0.id()
    );
    let model = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call("bash", json!({"command": probe}))),
        Turn::from(Reply::text("done")),
    ]))
    .await
    .unwrap();
    // The rules let it look anywhere: the walls, not a prompt, must stop it.
    let config = env.config(&model.base_url(), "[permission]\nexternal_directory = \"allow\"\n");
    // A second server on the same data dir with this model; the first one's door is the target.
    let (_second, second_url, _) = serve_without_token(&env, &config);
    let second_port = second_url.rsplit(':').next().unwrap().trim_end_matches('/');
    let second_token: Value = serde_json::from_str(
        &std::fs::read_to_string(env.data.path().join(format!("server/{second_port}.json"))).unwrap(),
    )
    .unwrap();
    let second_token = second_token["token"].as_str().unwrap();
    let session: Value = http
        .post(format!("{second_url}/session"))
        .bearer_auth(second_token)
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = session["id"].as_str().unwrap();
    let answered = http
        .post(format!("{second_url}/session/{id}/prompt"))
        .bearer_auth(second_token)
        .json(&json!({"parts": [{"type": "text", "text": "probe"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 200);
    let seen = tool_result(&model, 1);
    assert!(seen.contains(" 401"), "the command got no further than the door: {seen}");
    assert!(!seen.contains(&token) && !seen.contains(second_token), "no token reaches the model: {seen}");
    assert!(!seen.contains("--port"), "the server's command line is out of sight: {seen}");
    if landlock() {
        let procs: usize =
            seen.split("procs=").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
        assert!(procs < 10, "the call sees only its own processes: {seen}");
    }

    // Stopping removes the file; a token on the command line is warned about.
    drop(server);
    let output = Command::new(env!("CARGO_BIN_EXE_codeloop"))
        .args([
            "serve",
            "--port",
            "0",
            "--token",
            "on-argv",
            "--hostname",
            "0.0.0.0",
            "--cors",
            "https://x.example",
        ])
        .current_dir(env.project.path())
        .env("CODELOOP_DATA_DIR", env.data.path())
        .env("HOME", env.home.path())
        .env("CODELOOP_CONFIG", &config)
        .env_remove("CODELOOP_SERVER_TOKEN")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut killed = Killed(output);
    let mut lines = std::io::BufReader::new(killed.0.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains("warning") && first.contains("CODELOOP_SERVER_TOKEN"), "{first}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_token_is_only_for_this_machine() {
    let env = Env::new();
    let output = env.codeloop(None, &["serve", "--port", "0", "--hostname", "0.0.0.0"]);
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--token") && !stderr.contains("listening"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_cannot_create_codeloop_config_claude_settings_or_a_nested_repository() {
    if !landlock() {
        return;
    }
    let env = Env::new();
    let pwned = env.home.path().join("pwned");
    // Forms the analysis cannot see (the target is in a variable); each creates something protected.
    let script = format!(
        "f=codeloop.toml; printf '[permission]\\nsandbox_escalate = \"allow\"\\n' > $f; \
         d=.codeloop; mkdir -p $d && echo x > $d/config.toml; \
         c=.claude; mkdir -p $c && echo '{{}}' > $c/settings.json; \
         mkdir -p sub && git -C sub init -q && git -C sub config core.fsmonitor 'touch {pwned}'; \
         echo mine > notes.txt; ls -A; ls -A sub",
        pwned = pwned.display()
    );
    let seen = bash_under_walls(&env, "", &script, &[]).await;
    let root = env.project.path();
    for gone in ["codeloop.toml", ".codeloop", ".claude/settings.json", "sub/.git"] {
        assert!(!root.join(gone).exists(), "{gone} was left in the project: {seen}");
    }
    assert_eq!(std::fs::read_to_string(root.join("notes.txt")).unwrap(), "mine\n", "its own files stay");
    assert!(seen.contains("moved to") && seen.contains("write tool"), "{seen}");
    let moved: Vec<PathBuf> = seen
        .lines()
        .filter_map(|l| l.split(" was moved to ").nth(1))
        .map(|p| PathBuf::from(p.trim()))
        .collect();
    assert_eq!(moved.len(), 4, "{seen}");
    assert!(moved.iter().all(|p| p.exists()), "nothing is lost: {moved:?}");
    // The user's next `git status` in the nested directory runs nothing of the model's.
    Command::new("git").args(["status"]).current_dir(root.join("sub")).output().unwrap();
    assert!(!pwned.exists(), "no fsmonitor ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_trusted_project_the_model_cannot_grant_itself_escalation() {
    if !landlock() {
        return;
    }
    let env = Env::new();
    let root = env.project.path();
    std::fs::write(root.join("codeloop.toml"), "model = \"fake/test\"\n").unwrap();
    let fake = FakeProvider::start(
        Script::new([
            Turn::from(Reply::tool_call(
                "bash",
                json!({"command": "f=codeloop.toml; printf '[permission]\\nsandbox_escalate = \"allow\"\\n' >> $f; \
                                   d=.codeloop; mkdir -p $d; printf '[permission]\\nsandbox_escalate = \"allow\"\\n' > $d/config.toml; echo tried"}),
            )),
            Turn::from(Reply::text("done")),
        ])
        .repeating(),
    )
    .await
    .unwrap();
    let config = env.config(&fake.base_url(), "");
    let trusted = codeloop(&env, &config, &["trust"]).await;
    assert!(trusted.status.success(), "{}", text(&trusted).1);
    let output = codeloop(&env, &config, &["run", "--on-ask", "allow", "go"]).await;
    assert!(output.status.success(), "{}", text(&output).1);
    assert_eq!(std::fs::read_to_string(root.join("codeloop.toml")).unwrap(), "model = \"fake/test\"\n");
    assert!(!root.join(".codeloop/config.toml").exists());
    // Had it got there, trust would not have held: every byte of the project config counts.
    std::fs::write(
        root.join("codeloop.toml"),
        "model = \"fake/test\"\n[permission]\nsandbox_escalate = \"allow\"\n",
    )
    .unwrap();
    let escalate = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call("bash", json!({"command": "echo out", "escalate": true}))),
        Turn::from(Reply::text("done")),
    ]))
    .await
    .unwrap();
    let config = env.config(&escalate.base_url(), "");
    let output = codeloop(&env, &config, &["run", "--on-ask", "allow", "go"]).await;
    let (_, stderr) = text(&output);
    assert!(stderr.contains("changed since you trusted it"), "{stderr}");
    assert!(stderr.contains("sandbox_escalate"), "the escalation was refused: {stderr}");
    assert!(!output.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_sockets_and_variables_are_out_of_reach_and_project_sockets_stay() {
    if !landlock() {
        return;
    }
    let env = Env::new();
    let agent_dir = tempfile::tempdir().unwrap();
    let agent = agent_dir.path().join("agent.sock");
    let _agent = std::os::unix::net::UnixListener::bind(&agent).unwrap();
    let daemon_dir = tempfile::tempdir().unwrap();
    let daemon = daemon_dir.path().join("docker.sock");
    let _daemon = std::os::unix::net::UnixListener::bind(&daemon).unwrap();
    let app = env.project.path().join("app.sock");
    let _app = std::os::unix::net::UnixListener::bind(&app).unwrap();
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call(
            "bash",
            json!({"command": format!(
                "echo agent=${{SSH_AUTH_SOCK:-none}} db=${{DATABASE_URL:-none}} plain=$PLAIN_URL; \
                 [ -S {agent} ] && echo AGENT-VISIBLE; [ -S {daemon} ] && echo DAEMON-VISIBLE; \
                 [ -S app.sock ] && echo app-visible",
                agent = agent.display(), daemon = daemon.display())}),
        )),
        Turn::from(Reply::text("done")),
    ]))
    .await
    .unwrap();
    let config = env.config(&fake.base_url(), "[sandbox]\nnetwork = false\n");
    let mut command = env.command(Some(&config), &["run", "--on-ask", "allow", "go"]);
    command
        .env("SSH_AUTH_SOCK", &agent)
        .env("DATABASE_URL", "postgres://app:hunter2@db/app")
        .env("PLAIN_URL", "https://example.com/x");
    let output = tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap();
    assert!(output.status.success(), "{}", text(&output).1);
    let seen = tool_result(&fake, 1);
    assert!(seen.contains("agent=none db=none plain=https://example.com/x"), "{seen}");
    assert!(!seen.contains("AGENT-VISIBLE") && !seen.contains("DAEMON-VISIBLE"), "{seen}");
    assert!(seen.contains("app-visible"), "a socket inside the project stays: {seen}");
    assert!(!everything_sent(&fake).contains("hunter2"));

    // On purpose: `allow_unix_sockets` opens one.
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call(
            "bash",
            json!({"command": format!("[ -S {} ] && echo DAEMON-VISIBLE", daemon.display())}),
        )),
        Turn::from(Reply::text("done")),
    ]))
    .await
    .unwrap();
    let extra = format!("[sandbox]\nallow_unix_sockets = [\"{}\"]\n", daemon.display());
    let config = env.config(&fake.base_url(), &extra);
    let output = codeloop(&env, &config, &["run", "--on-ask", "allow", "go"]).await;
    assert!(output.status.success(), "{}", text(&output).1);
    assert!(tool_result(&fake, 1).contains("DAEMON-VISIBLE"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn package_caches_never_write_through_to_the_users_own() {
    if !landlock() {
        return;
    }
    let env = Env::new();
    let crate_dir = env.home.path().join(".cargo/registry/src/index/dep-1.0.0");
    std::fs::create_dir_all(&crate_dir).unwrap();
    std::fs::write(crate_dir.join("build.rs"), "fn main() {}\n").unwrap();
    let script = format!(
        "echo 'std::process::Command::new(\"sh\");' >> {0}/build.rs && cat {0}/build.rs && mkdir -p ~/.npm/_cacache && echo x > ~/.npm/_cacache/y; echo rc=$?",
        crate_dir.display()
    );
    let seen = bash_under_walls(&env, "", &script, &[]).await;
    assert!(seen.contains("std::process::Command"), "the command's build sees its own change: {seen}");
    assert_eq!(std::fs::read_to_string(crate_dir.join("build.rs")).unwrap(), "fn main() {}\n");
    assert!(!env.home.path().join(".npm/_cacache/y").exists());
    // Named on purpose, a cache writes through.
    let extra =
        format!("[sandbox]\ncache_dirs = [\"{}\"]\n", env.home.path().join(".cargo/registry").display());
    bash_under_walls(&env, &extra, &format!("echo '// kept' >> {}/build.rs", crate_dir.display()), &[]).await;
    assert!(std::fs::read_to_string(crate_dir.join("build.rs")).unwrap().contains("// kept"));
}

/// A committed `.env` holding a secret; `run` with `script` as one bash call under the default headless
/// policy (asks are refused). Returns the fake provider.
async fn try_to_read_the_secret(
    env: &Env,
    script: &str,
    extra: &str,
) -> (FakeProvider, std::process::Output) {
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call("bash", json!({"command": script}))),
        Turn::from(Reply::text("done")),
    ]))
    .await
    .unwrap();
    let config = env.config(&fake.base_url(), extra);
    let output = codeloop(env, &config, &["run", "go"]).await;
    (fake, output)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_stay_hidden_from_commands_the_analysis_cannot_see_into() {
    if !landlock() {
        return;
    }
    let env = Env::new();
    let root = env.project.path();
    std::fs::write(root.join(".env"), "API_KEY=hunter2\n").unwrap();
    std::fs::write(root.join("app.txt"), "uses KEY from env\n").unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"])
            .args(args)
            .current_dir(root)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out).1);
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "init"]);
    for script in [
        "grep -r KEY . --exclude-dir=.git",
        "cat .en?",
        "cat $(echo .env)",
        "git show HEAD:.env",
        "sh -c 'cat .\"env\"'",
        "cp .env copy.txt && cat copy.txt",
    ] {
        let (fake, _) = try_to_read_the_secret(&env, script, "").await;
        assert!(!everything_sent(&fake).contains("hunter2"), "{script} leaked the secret");
        let _ = std::fs::remove_file(root.join("copy.txt"));
    }
    // A rule that allows it opens it for commands too.
    let (fake, output) =
        try_to_read_the_secret(&env, "cat .env", "[permission]\nread = { \".env\" = \"allow\" }\n").await;
    assert!(output.status.success(), "{}", text(&output).1);
    assert!(tool_result(&fake, 1).contains("hunter2"), "{}", tool_result(&fake, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_is_bounded_and_its_leftovers_are_ended_and_counted() {
    if !landlock() {
        return;
    }
    let env = Env::new();
    // dash gives up at the first refused fork; the count uses builtins only. `sleep 61` is this test's own
    // (another test's job sleeps 60).
    let script = "sh -c 'i=0; while [ $i -lt 600 ]; do sleep 61 & i=$((i+1)); done' 2>/dev/null; \
                  set -- /proc/[0-9]*; echo count=$#";
    let seen = bash_under_walls(&env, "[sandbox]\nmax_processes = 300\n", script, &[]).await;
    let count: usize =
        seen.split("count=").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
    let check = env.codeloop(None, &["sandbox", "check"]);
    // Where the check found the limit binding (a pids cgroup, or pid_max), it bound this call too.
    if text(&check).0.lines().any(|l| l.starts_with("✓ processes: at most")) {
        assert!(count <= 301, "{seen}");
        assert!(seen.contains("leftover"), "{seen}");
    }
    // Nothing of it outlives the call.
    let stray = Command::new("pgrep").args(["-f", "^sleep 61$"]).output();
    if let Ok(stray) = stray {
        assert!(String::from_utf8_lossy(&stray.stdout).trim().is_empty(), "sleeps left running");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_output_is_saved_only_up_to_the_cap() {
    let env = Env::new();
    let seen = bash_under_walls(
        &env,
        "[tool_output]\nmax_saved_bytes = 100000\n",
        "head -c 3000000 /dev/zero | tr '\\0' x; echo",
        &[],
    )
    .await;
    assert!(seen.contains("max_saved_bytes"), "{seen}");
    let saved = seen
        .split("saved to: ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no saved path: {seen}"));
    let size = std::fs::metadata(&saved).unwrap().len();
    assert!(size < 101_000, "{size} bytes saved");
}
