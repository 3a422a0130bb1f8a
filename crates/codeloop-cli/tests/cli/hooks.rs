//! Hooks through the real binary (DESIGN.md §5d): config files, trust, `run`'s exit codes and
//! warnings, `codeloop hooks list|test`.

use std::io::Write as _;
use std::process::Stdio;

use super::walls::codeloop_as;
use super::*;

/// An executable `sh` script under the env's home; returns its path.
fn script(env: &Env, name: &str, body: &str) -> String {
    let path = env.home.path().join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

fn hook(event: &str, matcher: &str, command: &str) -> String {
    format!(
        "[[hooks.{event}]]\nmatcher = \"{matcher}\"\n[[hooks.{event}.hooks]]\ntype = \"command\"\ncommand = '''{command}'''\n"
    )
}

fn bash_then_text(command: &str) -> Script {
    Script::new([
        Turn::from(Reply::tool_call("bash", json!({"command": command}))),
        Turn::from(Reply::text("done")),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exits_1_when_user_prompt_submit_refuses_and_says_why() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new([Turn::from(Reply::text("hi"))])).await.unwrap();
    let refuse = script(&env, "refuse.sh", "echo 'prompts about friday are refused' >&2\nexit 2");
    let config = env.config(&fake.base_url(), &hook("UserPromptSubmit", "", &refuse));
    let output = codeloop_as(&env, Some(&config), &["run", "hello"]).await;
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("prompts about friday are refused"), "{stderr}");
    assert_eq!(fake.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exits_0_after_continue_false_with_the_stop_reason_on_stderr() {
    let env = Env::new();
    let fake = FakeProvider::start(bash_then_text("echo one")).await.unwrap();
    let halt =
        script(&env, "halt.sh", r#"echo '{"continue": false, "stopReason": "the hook has seen enough"}'"#);
    let config = env.config(&fake.base_url(), &hook("PostToolUse", "Bash", &halt));
    let output = codeloop_as(&env, Some(&config), &["run", "--on-ask", "allow", "go"]).await;
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("the hook has seen enough"), "{stderr}");
    assert_eq!(fake.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_hook_is_one_warning_line_and_the_run_goes_on() {
    let env = Env::new();
    let fake = FakeProvider::start(bash_then_text("touch ran.txt")).await.unwrap();
    let broken = script(&env, "broken.sh", "echo 'it broke' >&2\nexit 7");
    let config = env.config(&fake.base_url(), &hook("PreToolUse", "Bash", &broken));
    let output = codeloop_as(&env, Some(&config), &["run", "--on-ask", "allow", "go"]).await;
    let (_, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(env.project.path().join("ran.txt").exists());
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("warning: hook")).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("exited with status 7") && lines[0].contains("it broke"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_projects_hooks_never_run_and_are_named_until_it_is_trusted() {
    let env = Env::new();
    let fake = FakeProvider::start(bash_then_text("true").repeating()).await.unwrap();
    let user = env.config(&fake.base_url(), "");
    let global = env.home.path().join(".config/codeloop/config.toml");
    std::fs::create_dir_all(global.parent().unwrap()).unwrap();
    std::fs::rename(&user, &global).unwrap();
    let mark = env.home.path().join("pwned");
    let repo = hook("PreToolUse", "", &format!("touch {}", mark.display()));
    std::fs::write(env.project.path().join("codeloop.toml"), &repo).unwrap();

    let output = codeloop_as(&env, None, &["run", "--on-ask", "allow", "go"]).await;
    let (_, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(!mark.exists(), "an untrusted project's hook never runs");
    assert!(stderr.contains("not trusted") && stderr.contains("run hook `touch"), "{stderr}");
    let listed = codeloop_as(&env, None, &["hooks", "list"]).await;
    assert!(text(&listed).0.contains("untrusted"), "{}", text(&listed).0);

    let output = codeloop_as(&env, None, &["trust"]).await;
    assert!(output.status.success(), "{}", text(&output).1);
    let output = codeloop_as(&env, None, &["run", "--on-ask", "allow", "go"]).await;
    assert!(output.status.success(), "{}", text(&output).1);
    assert!(mark.exists(), "a trusted project's hook runs");
    let listed = codeloop_as(&env, None, &["hooks", "list"]).await;
    let (stdout, _) = text(&listed);
    assert!(
        stdout.contains("PreToolUse") && stdout.contains("project") && stdout.contains("trusted"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_claude_loads_claudes_settings_and_a_trusted_projects() {
    let env = Env::new();
    let fake = FakeProvider::start(bash_then_text("true").repeating()).await.unwrap();
    let config = env.config(&fake.base_url(), "[hooks]\nimport_claude = true\n");
    let from_home = env.home.path().join("from-home");
    let from_project = env.home.path().join("from-project");
    std::fs::create_dir_all(env.home.path().join(".claude")).unwrap();
    let settings = |mark: &std::path::Path| {
        json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": format!("touch {}", mark.display())}]}]}})
            .to_string()
    };
    std::fs::write(env.home.path().join(".claude/settings.json"), settings(&from_home)).unwrap();
    std::fs::create_dir_all(env.project.path().join(".claude")).unwrap();
    std::fs::write(env.project.path().join(".claude/settings.json"), settings(&from_project)).unwrap();

    let output = codeloop_as(&env, Some(&config), &["run", "--on-ask", "allow", "go"]).await;
    let (_, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(from_home.exists(), "the user's Claude hooks run");
    assert!(!from_project.exists(), "an untrusted project's Claude hooks do not");
    assert!(stderr.contains(".claude/settings.json"), "{stderr}");

    let output = codeloop_as(&env, Some(&config), &["trust"]).await;
    assert!(output.status.success(), "{}", text(&output).1);
    let output = codeloop_as(&env, Some(&config), &["run", "--on-ask", "allow", "go"]).await;
    assert!(output.status.success(), "{}", text(&output).1);
    assert!(from_project.exists(), "a trusted project's Claude hooks run");
    let listed = codeloop_as(&env, Some(&config), &["hooks", "list"]).await;
    let (stdout, _) = text(&listed);
    assert!(stdout.contains("claude-user") && stdout.contains("claude-project"), "{stdout}");
}

/// `codeloop hooks test ARGS` with `input` on stdin.
fn hooks_test(env: &Env, config: &Path, args: &[&str], input: &str) -> Output {
    let mut all = vec!["hooks", "test"];
    all.extend_from_slice(args);
    let mut command = env.command(Some(config), &all);
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn hooks_test_prints_the_merged_decision_and_exits_2_when_it_blocks() {
    let env = Env::new();
    let guard = script(&env, "guard.sh", "grep -q 'rm -rf' && { echo 'no rm -rf' >&2; exit 2; }\nexit 0");
    let context =
        script(&env, "context.sh", r#"echo '{"hookSpecificOutput":{"additionalContext":"checked"}}'"#);
    let extra =
        format!("{}{}", hook("PreToolUse", "Bash", &guard), hook("PreToolUse", "Edit|Write", &context));
    let config = env.config("http://127.0.0.1:1/v1", &extra);

    let blocked = hooks_test(
        &env,
        &config,
        &["PreToolUse", "--tool", "Bash"],
        r#"{"tool_input": {"command": "rm -rf /"}}"#,
    );
    let (stdout, stderr) = text(&blocked);
    assert_eq!(blocked.status.code(), Some(2), "{stdout}{stderr}");
    let decision: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(decision["decision"], "block");
    assert_eq!(decision["reason"], "no rm -rf");

    let allowed =
        hooks_test(&env, &config, &["PreToolUse", "--tool", "bash"], r#"{"tool_input": {"command": "ls"}}"#);
    assert_eq!(allowed.status.code(), Some(0), "{}", text(&allowed).1);
    let decision: Value = serde_json::from_str(&text(&allowed).0).unwrap();
    assert_eq!(decision["decision"], "none");

    let patched = hooks_test(&env, &config, &["PreToolUse", "--tool", "apply_patch"], "{}");
    let decision: Value = serde_json::from_str(&text(&patched).0).unwrap();
    assert_eq!(decision["additionalContext"], "checked", "apply_patch matches Edit|Write");

    let unknown = hooks_test(&env, &config, &["BeforeTool"], "{}");
    assert_eq!(unknown.status.code(), Some(1));
    assert!(text(&unknown).1.contains("PreToolUse"));
}
