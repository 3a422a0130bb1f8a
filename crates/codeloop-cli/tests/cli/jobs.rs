//! Background jobs and a call that owns its whole tree, through the real binary and the real kernel
//! (DESIGN.md §5f): a foreground call whose double fork, `setsid` and `nohup` children are ended and
//! counted, on each path (PID namespace, subreaper without user namespaces, mode off); jobs that end with
//! the `run` process, also when it is SIGKILLed (then recorded as lost); and a server job that answers a
//! later call, listed and killed through the HTTP API.

use std::io::BufRead;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use codeloop_testkit::{FakeProvider, Reply, Script, Turn};
use serde_json::{Value, json};

use super::walls::{landlock, tool_result};
use super::{Env, Killed, TEST_TOKEN, http_client, text};

/// Waits up to `limit` for `done`, looking again every 20 ms.
fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

/// A word for the command lines of one test's processes.
fn token(env: &Env) -> String {
    format!("codeloop-job-{}", env.data.path().file_name().unwrap().to_string_lossy())
}

/// Live processes (seen from here, whatever namespace they are in) whose command line holds `token`.
fn running(token: &str) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
        .filter(|e| {
            let zombie = std::fs::read_to_string(e.path().join("stat"))
                .ok()
                .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with(['Z', 'X'])))
                .unwrap_or(true);
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            !zombie && String::from_utf8_lossy(&cmdline).contains(token)
        })
        .count()
}

/// One way a tool call's tree is owned: its name, the config it needs and its environment.
type TreePath = (&'static str, &'static str, Vec<(&'static str, &'static str)>);

/// The three ways a tool call's tree is owned.
fn paths() -> Vec<TreePath> {
    let mut paths = vec![("mode off (subreaper)", "[sandbox]\nmode = \"off\"\n", vec![])];
    if landlock() {
        paths.push(("PID namespace", "", vec![]));
        paths.push((
            "no user namespaces (subreaper inside Landlock)",
            "",
            vec![(codeloop_sandbox::NO_USER_NAMESPACES_ENV, "1")],
        ));
    }
    paths
}

fn run_blocking(env: &Env, config: &Path, vars: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    let mut command = env.command(Some(config), args);
    command.envs(vars.iter().copied()).stdin(Stdio::null());
    command.output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreground_call_that_double_forks_setsids_or_nohups_comes_back_complete_on_every_path() {
    for (path, extra, vars) in paths() {
        let env = Env::new();
        let t = token(&env);
        let script = format!(
            "setsid sh -c 'sleep 40; :' {t} & nohup sh -c 'sleep 41; :' {t} >/dev/null 2>&1 & \
             (sh -c 'sleep 42; :' {t} &); echo main-done"
        );
        let fake = FakeProvider::start(Script::new([
            Turn::from(Reply::tool_call("bash", json!({"command": script}))),
            Turn::from(Reply::text("done")),
        ]))
        .await
        .unwrap();
        let config = env.config(&fake.base_url(), extra);
        let started = Instant::now();
        let output = tokio::task::block_in_place(|| run_blocking(&env, &config, &vars, &["run", "go"]));
        assert!(output.status.success(), "{path}: {}", text(&output).1);
        assert!(started.elapsed() < Duration::from_secs(20), "{path}: the call waited for its leftovers");
        let result = tool_result(&fake, 1);
        assert!(result.contains("main-done"), "{path}: {result}");
        let count: u32 = result
            .split(" leftover process")
            .next()
            .and_then(|head| head.rsplit(['\n', ' ']).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{path}: no leftover count in {result}"));
        assert!((3..=6).contains(&count), "{path}: three shells (and their sleeps) were ended: {result}");
        assert_eq!(running(&t), 0, "{path}: nothing of the tree outlived the call");
    }
}

/// The first job of the session `codeloop run` just used, from `codeloop session jobs`.
fn first_job(env: &Env, config: &Path) -> Value {
    let sessions = run_blocking(env, config, &[], &["session", "list", "--format", "json"]);
    let sessions: Value = serde_json::from_slice(&sessions.stdout).unwrap();
    let id = sessions[0]["id"].as_str().unwrap().to_owned();
    let jobs = run_blocking(env, config, &[], &["session", "jobs", &id, "--format", "json"]);
    assert!(jobs.status.success(), "{}", text(&jobs).1);
    let jobs: Value = serde_json::from_slice(&jobs.stdout).unwrap();
    let listed = run_blocking(env, config, &[], &["session", "jobs", &id]);
    let line = text(&listed).0;
    assert!(line.starts_with(jobs[0]["id"].as_str().unwrap()), "{line}");
    jobs[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_end_with_the_run_process_and_with_a_sigkilled_one_they_are_recorded_as_lost() {
    for (path, extra, vars) in paths() {
        // The run ends: its job ends with it, recorded as killed.
        let env = Env::new();
        let t = token(&env);
        let fake = FakeProvider::start(Script::new([
            Turn::from(Reply::tool_call(
                "bash",
                json!({"command": format!("sh -c 'sleep 50; :' {t}"), "run_in_background": true}),
            )),
            Turn::from(Reply::text("started")),
        ]))
        .await
        .unwrap();
        let config = env.config(&fake.base_url(), extra);
        let output = tokio::task::block_in_place(|| run_blocking(&env, &config, &vars, &["run", "go"]));
        assert!(output.status.success(), "{path}: {}", text(&output).1);
        assert!(tool_result(&fake, 1).contains("job_"), "{path}: {}", tool_result(&fake, 1));
        assert_eq!(running(&t), 0, "{path}: the job ended with the run");
        assert_eq!(first_job(&env, &config)["state"], "killed", "{path}");

        // The run is SIGKILLed while its job and a foreground call run: both trees end, the job is lost.
        let env = Env::new();
        let t = token(&env);
        let fake = FakeProvider::start(Script::new([
            Turn::from(Reply::tool_call(
                "bash",
                json!({"command": format!("sh -c 'sleep 51; :' {t}-job"), "run_in_background": true}),
            )),
            Turn::from(Reply::tool_call("bash", json!({"command": format!("sh -c 'sleep 52; :' {t}-call")}))),
            Turn::from(Reply::text("never")),
        ]))
        .await
        .unwrap();
        let config = env.config(&fake.base_url(), extra);
        let mut command = env.command(Some(&config), &["run", "go"]);
        command.envs(vars.iter().copied()).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        let mut run = Killed(command.spawn().unwrap());
        assert!(
            eventually(Duration::from_secs(20), || running(&format!("{t}-job")) >= 1
                && running(&format!("{t}-call")) >= 1),
            "{path}: the job and the call did not start"
        );
        run.0.kill().unwrap();
        run.0.wait().unwrap();
        assert!(eventually(Duration::from_secs(5), || running(&t) == 0), "{path}: a tree outlived its owner");
        let job = first_job(&env, &config);
        assert_eq!(job["state"], "lost", "{path}: {job}");
    }
}

/// `codeloop serve` on a free port with the test token; its URL.
fn serve(env: &Env, config: &Path) -> (Killed, String) {
    let mut serve = env.command(Some(config), &["serve", "--port", "0"]);
    serve.env("CODELOOP_SERVER_TOKEN", TEST_TOKEN).stdin(Stdio::null()).stderr(Stdio::piped());
    let mut server = Killed(serve.spawn().unwrap());
    let mut lines = std::io::BufReader::new(server.0.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().expect("the server exited before listening").unwrap();
        if let Some(at) = line.find("http://") {
            break line[at..].split_whitespace().next().unwrap().trim_end_matches('/').to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (server, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_job_answers_a_later_call_and_is_listed_and_killed_through_the_api() {
    let env = Env::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let fetch = format!(
        "python3 -c \"import time, urllib.request as u\nfor _ in range(200):\n  try:\n    print('status', u.urlopen('http://127.0.0.1:{port}/').status); break\n  except OSError: time.sleep(0.05)\""
    );
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call(
            "bash",
            json!({"command": format!("exec python3 -m http.server {port} --bind 127.0.0.1"), "run_in_background": true}),
        )),
        Turn::from(Reply::text("serving")),
        Turn::from(Reply::tool_call("bash", json!({"command": fetch}))),
        Turn::from(Reply::text("it answers")),
    ]))
    .await
    .unwrap();
    let config = env.config(&fake.base_url(), "");
    let (_server, url) = serve(&env, &config);
    let client = http_client();
    let session: Value =
        client.post(format!("{url}/session")).json(&json!({})).send().await.unwrap().json().await.unwrap();
    let id = session["id"].as_str().unwrap().to_owned();
    let prompt = |text: &str| {
        let body = json!({"parts": [{"type": "text", "text": text}]});
        client.post(format!("{url}/session/{id}/prompt")).json(&body).send()
    };
    assert!(prompt("serve").await.unwrap().status().is_success());
    let jobs: Value =
        client.get(format!("{url}/session/{id}/job")).send().await.unwrap().json().await.unwrap();
    let job = jobs[0].clone();
    assert_eq!(job["state"], "running", "{jobs}");
    assert!(job["id"].as_str().unwrap().starts_with("job_"));
    assert!(job["command"].as_str().unwrap().contains("http.server"));
    assert!(job["started"].as_i64().is_some() && job.get("ended").is_none(), "{job}");

    // The next prompt's call reaches the job's server.
    assert!(prompt("fetch").await.unwrap().status().is_success());
    assert!(tool_result(&fake, 3).contains("status 200"), "{}", tool_result(&fake, 3));

    let job_id = job["id"].as_str().unwrap();
    let killed = client.post(format!("{url}/session/{id}/job/{job_id}/kill")).send().await.unwrap();
    assert!(killed.status().is_success());
    let killed: Value = killed.json().await.unwrap();
    assert_eq!(killed["state"], "killed", "{killed}");
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "the server is gone");
    let jobs: Value =
        client.get(format!("{url}/session/{id}/job")).send().await.unwrap().json().await.unwrap();
    assert_eq!(jobs[0]["state"], "killed");
    assert!(jobs[0]["ended"].as_i64().is_some());
    let missing = client.post(format!("{url}/session/{id}/job/job_nope/kill")).send().await.unwrap();
    assert_eq!(missing.status(), 404);
}
