//! Commands (DESIGN.md §5g) through the real binary: `run --command NAME ARGS…` with the user's and the
//! project's command files, trust for their shell parts, and the unknown-command error.

use std::path::Path;

use codeloop_testkit::{FakeProvider, Reply, Script, Turn};

use super::defects::codeloop;
use super::{Env, text};

fn write(dir: &Path, name: &str, body: &str) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, body).unwrap();
}

async fn fake() -> FakeProvider {
    FakeProvider::start(Script::new([Turn::from(Reply::text("done"))]).repeating()).await.unwrap()
}

/// The text of the last request's messages, as the model saw it.
fn last_request(fake: &FakeProvider) -> String {
    fake.requests().last().unwrap().body["messages"].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_command_expands_a_user_command_and_sends_it_as_the_message() {
    let env = Env::new();
    let fake = fake().await;
    let config = env.config(&fake.base_url(), "");
    write(
        env.home.path(),
        ".config/codeloop/commands/fix.md",
        "---\ndescription: Fix\n---\nFix issue $1 in $2, all: $ARGUMENTS",
    );
    write(env.project.path(), ".claude/commands/git/summary.md", "Summarise the branch.");
    let output = codeloop(&env, Some(&config), &["run", "--command", "fix", "42", "src main"]).await;
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("done"), "{stdout}");
    assert!(last_request(&fake).contains("Fix issue 42 in src, all: 42 src main"), "{}", last_request(&fake));
    let output =
        codeloop(&env, Some(&config), &["run", "--command", "git:summary", "--", "only", "this"]).await;
    assert!(output.status.success(), "{:?}", text(&output));
    assert!(last_request(&fake).contains("Summarise the branch.\\n\\nonly this"), "{}", last_request(&fake));
    let exported = codeloop(&env, None, &["session", "list", "--format", "json"]).await;
    let sessions: serde_json::Value = serde_json::from_slice(&exported.stdout).unwrap();
    let mut stored = String::new();
    for session in sessions.as_array().unwrap() {
        let exported = codeloop(&env, None, &["session", "export", session["id"].as_str().unwrap()]).await;
        stored.push_str(&String::from_utf8_lossy(&exported.stdout));
    }
    assert!(stored.contains("git:summary"), "the command's name is on the stored message: {stored}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_projects_shell_parts_are_not_run_until_it_is_trusted() {
    let env = Env::new();
    let fake = fake().await;
    let config = env.config(&fake.base_url(), "");
    write(env.project.path(), ".codeloop/commands/st.md", "Status: !`echo ran-$((40+2)) | tee ran.txt`");
    let output = codeloop(&env, Some(&config), &["run", "--command", "st"]).await;
    assert!(output.status.success(), "{:?}", text(&output));
    assert!(
        last_request(&fake).contains("Status: [not run: the project is not trusted]"),
        "{}",
        last_request(&fake)
    );
    assert!(!env.project.path().join("ran.txt").exists());
    let trusted = codeloop(&env, Some(&config), &["trust"]).await;
    assert!(trusted.status.success(), "{:?}", text(&trusted));
    let output = codeloop(&env, Some(&config), &["run", "--command", "st"]).await;
    assert!(output.status.success(), "{:?}", text(&output));
    assert!(last_request(&fake).contains("Status: ran-42"), "{}", last_request(&fake));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_command_is_an_error_naming_the_available_ones_and_nothing_is_sent() {
    let env = Env::new();
    let fake = fake().await;
    let config = env.config(&fake.base_url(), "");
    write(env.home.path(), ".claude/commands/review.md", "Review.");
    let output = codeloop(&env, Some(&config), &["run", "--command", "nosuch", "x"]).await;
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("nosuch") && stderr.contains("review") && stderr.contains("init"), "{stderr}");
    assert_eq!(fake.request_count(), 0);
    let listed = codeloop(&env, None, &["session", "list", "--format", "json"]).await;
    let sessions: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(sessions, serde_json::json!([]), "no empty session is left behind");
}

/// A bare model id in front matter, as many published command files write it: a provider that can serve it
/// is found; when none can, the session's model runs the command and a warning says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_model_in_front_matter_is_resolved_or_the_sessions_model_runs_it() {
    let env = Env::new();
    let fake = fake().await;
    let config = env.config(&fake.base_url(), "");
    let commands = env.home.path().join(".config/codeloop/commands");
    write(&commands, "known.md", "---\nmodel: test\n---\nKnown model.");
    write(&commands, "elsewhere.md", "---\nmodel: claude-sonnet-4-0\n---\nA model no provider here serves.");
    let output = codeloop(&env, Some(&config), &["run", "--command", "known"]).await;
    assert!(output.status.success(), "{:?}", text(&output));
    assert!(!text(&output).1.contains("warning"), "{:?}", text(&output));
    let output = codeloop(&env, Some(&config), &["run", "--command", "elsewhere"]).await;
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("claude-sonnet-4-0") && stderr.contains("session's model is used"), "{stderr}");
    assert!(last_request(&fake).contains("A model no provider here serves."), "{}", last_request(&fake));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_tools_pre_approve_a_commands_calls_within_deny_rules_and_only_if_trusted() {
    let env = Env::new();
    let call = |command: &str| Turn::from(Reply::tool_call("bash", serde_json::json!({"command": command})));
    let fake = FakeProvider::start(Script::new([
        call("echo ran-it"),
        Turn::from(Reply::text("done")),
        call("echo secret-thing"),
        Turn::from(Reply::text("done")),
        call("echo ran-it"),
    ]))
    .await
    .unwrap();
    let config = env
        .config(&fake.base_url(), "[permission]\nbash = { \"*\" = \"ask\", \"echo secret*\" = \"deny\" }\n");
    let front = "---\ndescription: Say things\nallowed-tools: Bash(echo:*), Read\n---\nSay $ARGUMENTS";
    write(env.home.path(), ".claude/commands/say.md", front);
    // The user's command: its echo runs unasked, even though bash asks and no one can answer here.
    let output = codeloop(&env, Some(&config), &["run", "--command", "say", "hi"]).await;
    assert!(output.status.success(), "{}", text(&output).1);
    assert!(super::last_tool_output(&fake, 1).contains("ran-it"), "{}", super::last_tool_output(&fake, 1));
    // A deny rule still holds.
    let output = codeloop(&env, Some(&config), &["run", "--command", "say", "it"]).await;
    assert!(output.status.success(), "{}", text(&output).1);
    let denied = super::last_tool_output(&fake, 3);
    assert!(denied.contains("Permission denied") && denied.contains("echo secret*"), "{denied}");
    // An untrusted project's command: its allowed-tools are ignored, and said.
    write(env.project.path(), ".claude/commands/psay.md", &front.replace("Say", "Project say"));
    let output = codeloop(&env, Some(&config), &["run", "--command", "psay", "x"]).await;
    let (_, stderr) = text(&output);
    assert!(
        stderr.contains("allowed-tools: Bash(echo:*), Read") && stderr.contains("not trusted"),
        "{stderr}"
    );
    assert!(stderr.contains("needs approval"), "the echo was not pre-approved: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_runs_with_the_effort_asked_for_it() {
    let env = Env::new();
    let fake = fake().await;
    let config = env.config(&fake.base_url(), "reasoning = true\n");
    write(env.home.path(), ".claude/commands/think.md", "Think about $ARGUMENTS");
    let output =
        codeloop(&env, Some(&config), &["run", "--command", "think", "--effort", "high", "it"]).await;
    assert!(output.status.success(), "{}", text(&output).1);
    let body = &fake.requests()[0].body;
    assert_eq!(body["reasoning_effort"], serde_json::json!("high"), "{body}");
    assert!(body["messages"].to_string().contains("Think about it"), "{body}");
}
