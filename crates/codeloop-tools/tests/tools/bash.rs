//! bash: working directory, merged output, exit codes, timeouts and cancellation killing the whole
//! process group, output spill, and permission patterns.

use std::path::Path;
use std::time::{Duration, Instant};

use codeloop_tools::{PermissionError, ToolFailure};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common::Env;

/// Whether a process is gone: no /proc entry, or a zombie nobody reaped (the container's init may not).
fn is_dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Polls /proc until every pid is dead or the deadline passes.
fn wait_dead(pids: &[i32], within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if pids.iter().all(|&pid| is_dead(pid)) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read_pids(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| l.trim().parse().unwrap()).collect()
}

#[tokio::test]
async fn bash_runs_in_the_project_dir_merges_streams_and_reports_the_exit_code() {
    let env = Env::new();
    let out = env.ok("bash", json!({"command": "pwd; echo to-stdout; echo to-stderr >&2; exit 3"})).await;
    let root = env.root().display().to_string();
    // The failure first (DESIGN.md §5l), then the output.
    assert_eq!(out.output, format!("Exit code 3\n{root}\nto-stdout\nto-stderr\n"));
    assert_eq!(out.metadata["exit"], json!(3));
    assert_eq!(out.metadata["truncated"], json!(false));
    assert_eq!(out.title, "pwd; echo to-stdout; echo to-stderr >&2; exit 3");
}

#[tokio::test]
async fn bash_uses_workdir_and_description() {
    let env = Env::new();
    std::fs::create_dir(env.path("sub")).unwrap();
    let out = env.ok("bash", json!({"command": "pwd", "workdir": "sub", "description": "Print dir"})).await;
    assert_eq!(out.output.trim(), env.path("sub").display().to_string());
    assert_eq!(out.title, "Print dir");
    assert_eq!(out.metadata["exit"], json!(0));
}

#[tokio::test]
async fn bash_reports_no_output() {
    let env = Env::new();
    let out = env.ok("bash", json!({"command": "true"})).await;
    assert_eq!(out.output, "(no output)");
}

#[tokio::test]
async fn bash_timeout_kills_the_whole_process_group() {
    let env = Env::new();
    // A background grandchild, a nested subshell's grandchild, and the foreground sleep.
    let script =
        "sleep 30 & echo $! > pids; (sleep 30 & echo $! >> pids; wait) & sleep 30 & echo $! >> pids; wait";
    let started = Instant::now();
    let out = env.ok("bash", json!({"command": script, "timeout": 500})).await;
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    assert!(
        out.output.contains("bash tool terminated command after exceeding timeout 500 ms"),
        "{}",
        out.output
    );
    assert!(out.output.contains("<shell_metadata>"));
    assert_eq!(out.metadata["exit"], json!(null));
    let pids = read_pids(&env.path("pids"));
    assert_eq!(pids.len(), 3);
    assert!(wait_dead(&pids, Duration::from_secs(5)), "still alive: {pids:?}");
}

#[tokio::test]
async fn bash_cancellation_kills_within_the_grace_period() {
    let env = Env::new();
    let ctx = env.ctx();
    let registry = env.registry.clone();
    let pid_file = env.path("pid");
    let waiting = env.host.progressed.notified();
    tokio::pin!(waiting);
    waiting.as_mut().enable();
    let call = tokio::spawn(async move {
        registry
            .execute("bash", json!({"command": "sleep 30 & echo $! > pid; echo started; wait"}), &ctx)
            .await
    });
    // Wait (on progress events, not time) until the command has printed "started".
    loop {
        waiting.as_mut().await;
        waiting.set(env.host.progressed.notified());
        waiting.as_mut().enable();
        let seen = env
            .host
            .progress
            .lock()
            .unwrap()
            .iter()
            .any(|m| m["output"].as_str().is_some_and(|o| o.contains("started")));
        if seen {
            break;
        }
    }
    let cancelled_at = Instant::now();
    env.cancel.cancel();
    let out = call.await.unwrap().unwrap();
    assert!(cancelled_at.elapsed() < Duration::from_secs(3), "took {:?}", cancelled_at.elapsed());
    assert!(out.output.contains("User aborted the command"), "{}", out.output);
    assert!(wait_dead(&read_pids(&pid_file), Duration::from_secs(5)));
}

#[tokio::test]
async fn bash_spills_long_output_and_keeps_the_tail() {
    let env = Env::new();
    let out = env.ok("bash", json!({"command": "seq 1 30000"})).await;
    assert!(
        out.output.starts_with("...output truncated...\n\nFull output saved to: "),
        "{}",
        &out.output[..200]
    );
    assert!(out.output.ends_with("30000\n"), "{}", &out.output[out.output.len() - 300..]);
    assert_eq!(out.metadata["truncated"], json!(true));
    let path = out.metadata["outputPath"].as_str().unwrap();
    assert!(out.output.contains(path));
    let full = std::fs::read_to_string(path).unwrap();
    assert_eq!(full.lines().count(), 30000);
    assert!(out.output.len() <= 51_200 + 300);
}

#[tokio::test]
async fn bash_progress_is_throttled() {
    let env = Env::new();
    let started = Instant::now();
    env.ok("bash", json!({"command": "for i in $(seq 1 20000); do echo line $i; done"})).await;
    let ticks = started.elapsed().as_millis() / 100;
    let updates = env.host.progress.lock().unwrap().len() as u128;
    assert!(updates <= ticks + 3, "{updates} updates in {ticks} ticks");
    let last = env.host.progress.lock().unwrap().last().cloned().unwrap();
    assert!(last["output"].as_str().unwrap().ends_with("line 20000\n"));
}

#[tokio::test]
async fn bash_asks_per_command_with_arity_prefixes() {
    let env = Env::new();
    env.deny("bash");
    let err = env
        .run(
            "bash",
            json!({"command": "git status --short && npm run dev -- --port 3 | grep x; cd sub; ls -la"}),
        )
        .await;
    assert!(matches!(err, Err(ToolFailure::Permission(PermissionError::Denied { .. }))));
    let asks = env.asks_for("bash");
    assert_eq!(asks.len(), 1);
    assert_eq!(asks[0].patterns, vec!["git status --short", "npm run dev -- --port 3", "grep x", "ls -la"]);
    assert_eq!(asks[0].always, vec!["git status *", "npm run dev *", "grep *", "ls *"]);
}

#[tokio::test]
async fn denied_bash_runs_nothing() {
    let env = Env::new();
    env.deny("bash");
    assert!(env.run("bash", json!({"command": "touch created.txt"})).await.is_err());
    assert!(!env.path("created.txt").exists());
}

#[tokio::test]
async fn bash_asks_external_directory_for_paths_and_workdirs_outside_the_project() {
    let env = Env::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("x.txt"), "x").unwrap();
    let other = outside.path().display().to_string();
    env.ok("bash", json!({"command": format!("cat {other}/x.txt && rm -f inside.txt")})).await;
    let external = env.asks_for("external_directory");
    assert_eq!(external.len(), 1);
    assert_eq!(external[0].patterns, vec![format!("{other}/*")]);

    env.deny("external_directory");
    let denied = env.run("bash", json!({"command": "ls", "workdir": other})).await;
    assert!(matches!(denied, Err(ToolFailure::Permission(_))));
    assert_eq!(env.asks_for("external_directory")[1].patterns, vec![format!("{other}/*")]);
}

#[tokio::test]
async fn bash_rejects_a_zero_timeout() {
    let env = Env::new();
    let message = env.fail("bash", json!({"command": "true", "timeout": 0})).await;
    assert!(message.contains("Timeout must be a positive number"));
}

#[tokio::test]
async fn bash_does_not_wait_for_detached_processes_holding_the_pipe() {
    let env = Env::new();
    let started = Instant::now();
    let out = env.ok("bash", json!({"command": "(sleep 30 & echo $! > bg); echo done"})).await;
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert_eq!(out.output, "done\n");
    assert_eq!(out.metadata["exit"], json!(0));
    for pid in read_pids(&env.path("bg")) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
}

#[tokio::test]
async fn bash_timeout_escalates_to_sigkill_when_term_is_ignored() {
    let env = Env::new();
    let started = Instant::now();
    let out = env
        .ok("bash", json!({"command": "trap '' TERM; sleep 30 & echo $! > pid; wait", "timeout": 200}))
        .await;
    assert!(started.elapsed() < Duration::from_secs(6), "took {:?}", started.elapsed());
    assert!(out.output.contains("exceeding timeout 200 ms"));
    assert!(wait_dead(&read_pids(&env.path("pid")), Duration::from_secs(5)));
}

#[tokio::test]
async fn bash_asks_external_directory_for_redirections_outside_the_project() {
    let env = Env::new();
    let outside = tempfile::tempdir().unwrap();
    env.deny("external_directory");
    let target = outside.path().join("out.txt");
    let result =
        env.run("bash", json!({"command": format!("echo hi > {} 2>/dev/null", target.display())})).await;
    assert!(result.is_err());
    assert!(!target.exists());
    assert_eq!(
        env.asks_for("external_directory")[0].patterns,
        vec![format!("{}/*", outside.path().display())]
    );
}
