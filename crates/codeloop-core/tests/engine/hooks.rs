//! Hooks through the real pipeline (DESIGN.md §5d): real `sh` hook scripts written into a temp dir, the
//! fake provider over HTTP, a real SQLite store. One test per row of the conformance table: each exit
//! code and JSON decision field where it bites.

use std::path::PathBuf;

use codeloop_core::config::{Config, PermissionConfig};
use codeloop_core::hooks::{HookLayer, HookSource, HooksSettings};
use codeloop_core::permission::AskPolicy;
use codeloop_core::{Blocked, Delivery, PromptInput, StopReason};
use codeloop_testkit::{Reply, Script, Turn};
use codeloop_types::{EventPayload, PermissionAction, PermissionRule, ToolState};
use serde_json::{Value, json};

use crate::harness::{Harness, state, tool_results};

/// Hook scripts and what they leave behind.
pub struct Scripts {
    pub dir: tempfile::TempDir,
}

impl Scripts {
    pub fn new() -> Scripts {
        Scripts { dir: tempfile::tempdir().unwrap() }
    }

    /// Writes an executable `sh` script and returns the command that runs it.
    pub fn script(&self, name: &str, body: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// `[hooks]` TOML (`[[PreToolUse]]` …, without the `hooks.` prefix) as the user's layer.
pub fn user_hooks(toml: &str) -> impl FnOnce(&mut Config) {
    let settings: HooksSettings = toml::from_str(toml).unwrap();
    move |config: &mut Config| {
        config.hook_layers = vec![HookLayer { source: HookSource::User, path: "user.toml".into(), settings }];
    }
}

pub fn hook(event: &str, matcher: &str, command: &str) -> String {
    format!(
        "[[{event}]]\nmatcher = \"{matcher}\"\n[[{event}.hooks]]\ntype = \"command\"\ncommand = '''{command}'''\n"
    )
}

fn bash(command: &str) -> Script {
    Script::new([
        Turn::from(Reply::tool_call("bash", json!({"command": command}))),
        Turn::from(Reply::text("done")),
    ])
}

fn last_tool_error(h: &Harness) -> String {
    match state(h.tool_parts().last().unwrap()) {
        ToolState::Error(error) => error.error.clone(),
        other => panic!("expected an error, got {other:?}"),
    }
}

fn with(a: impl FnOnce(&mut Config), b: impl FnOnce(&mut Config)) -> impl FnOnce(&mut Config) {
    move |config: &mut Config| {
        a(config);
        b(config);
    }
}

fn rule(permission: &str, pattern: &str, action: PermissionAction) -> impl FnOnce(&mut Config) {
    let rule = PermissionRule::new(permission, pattern, action);
    move |config: &mut Config| config.permission = PermissionConfig(vec![rule])
}

#[tokio::test]
async fn pre_tool_use_exit_2_never_runs_the_tool_and_the_model_gets_the_reason() {
    let s = Scripts::new();
    let guard = s.script("guard.sh", "cat > \"$(dirname \"$0\")/input.json\"\necho 'no rm here' >&2\nexit 2");
    let h = Harness::with(
        bash("touch ran.txt"),
        AskPolicy::Allow,
        user_hooks(&hook("PreToolUse", "Bash", &guard)),
    )
    .await;
    assert_eq!(h.prompt("go").await.stop, StopReason::Completed, "the run goes on");
    assert!(!h.project.path().join("ran.txt").exists(), "a blocked call never runs");
    let error = last_tool_error(&h);
    assert!(error.contains("no rm here"), "{error}");
    let results = tool_results(&h.request_messages(1));
    assert!(results[0].1.contains("no rm here"), "{results:?}");
    let input: Value = serde_json::from_str(&std::fs::read_to_string(s.path("input.json")).unwrap()).unwrap();
    assert_eq!(input["hook_event_name"], "PreToolUse");
    assert_eq!(input["tool_name"], "Bash");
    assert_eq!(input["tool_input"]["command"], "touch ran.txt");
    assert_eq!(input["session_id"], h.session.id.as_str());
    assert_eq!(input["cwd"], h.project.path().display().to_string());
    assert!(input["tool_use_id"].is_string() && input["permission_mode"].is_string());
}

#[tokio::test]
async fn a_json_deny_acts_as_exit_2() {
    let s = Scripts::new();
    let guard = s.script(
        "guard.sh",
        r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"policy says no"}}'"#,
    );
    let h =
        Harness::with(bash("touch ran.txt"), AskPolicy::Allow, user_hooks(&hook("PreToolUse", "", &guard)))
            .await;
    assert_eq!(h.prompt("go").await.stop, StopReason::Completed);
    assert!(!h.project.path().join("ran.txt").exists());
    assert!(last_tool_error(&h).contains("policy says no"));
}

#[tokio::test]
async fn a_hook_allow_answers_an_ask_but_never_a_deny_rule() {
    let s = Scripts::new();
    let allow = s.script(
        "allow.sh",
        r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"}}'"#,
    );
    // Asked, headless with no one to answer: the hook's allow answers it.
    let h = Harness::with(
        bash("touch ran.txt"),
        AskPolicy::Deny,
        with(rule("bash", "*", PermissionAction::Ask), user_hooks(&hook("PreToolUse", "Bash", &allow))),
    )
    .await;
    assert_eq!(h.prompt("go").await.stop, StopReason::Completed);
    assert!(h.project.path().join("ran.txt").exists(), "the hook's allow answered the ask");

    // A deny rule holds whatever the hook says.
    let h = Harness::with(
        bash("touch ran.txt"),
        AskPolicy::Allow,
        with(
            rule("bash", "touch *", PermissionAction::Deny),
            user_hooks(&hook("PreToolUse", "Bash", &allow)),
        ),
    )
    .await;
    assert_eq!(h.prompt("go").await.stop, StopReason::Completed);
    assert!(!h.project.path().join("ran.txt").exists(), "a deny rule beats a hook's allow");
    assert!(last_tool_error(&h).contains("Permission denied"));
}

#[tokio::test]
async fn a_hook_ask_turns_an_allowed_call_into_an_ask() {
    let s = Scripts::new();
    let ask = s.script(
        "ask.sh",
        r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask"}}'"#,
    );
    let h =
        Harness::with(bash("touch ran.txt"), AskPolicy::Deny, user_hooks(&hook("PreToolUse", "Bash", &ask)))
            .await;
    let outcome = h.prompt("go").await;
    assert!(matches!(outcome.stop, StopReason::Blocked(Blocked::Unanswerable { .. })), "{:?}", outcome.stop);
    assert!(!h.project.path().join("ran.txt").exists());
}

#[tokio::test]
async fn updated_input_replaces_the_arguments_and_is_checked_against_the_rules_again() {
    let s = Scripts::new();
    let rewrite = s.script(
        "rewrite.sh",
        r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","updatedInput":{"command":"touch rewritten.txt"}}}'"#,
    );
    let h = Harness::with(
        bash("touch original.txt"),
        AskPolicy::Allow,
        user_hooks(&hook("PreToolUse", "Bash", &rewrite)),
    )
    .await;
    assert_eq!(h.prompt("go").await.stop, StopReason::Completed);
    assert!(h.project.path().join("rewritten.txt").exists());
    assert!(!h.project.path().join("original.txt").exists());

    // The rewritten command meets a deny rule: denied, although the hook said allow.
    let h = Harness::with(
        bash("touch original.txt"),
        AskPolicy::Allow,
        with(
            rule("bash", "touch rewritten*", PermissionAction::Deny),
            user_hooks(&hook("PreToolUse", "Bash", &rewrite)),
        ),
    )
    .await;
    assert_eq!(h.prompt("go").await.stop, StopReason::Completed);
    assert!(!h.project.path().join("rewritten.txt").exists());
    assert!(last_tool_error(&h).contains("Permission denied"));
}

#[tokio::test]
async fn post_tool_use_failure_fires_on_a_non_zero_bash_exit_and_its_stderr_reaches_the_model() {
    let s = Scripts::new();
    let ok = s.script("ok.sh", "cat > \"$(dirname \"$0\")/ok.json\"");
    let failure =
        s.script("failure.sh", "cat > \"$(dirname \"$0\")/failure.json\"\necho 'tests are red' >&2\nexit 2");
    let config =
        format!("{}{}", hook("PostToolUse", "Bash", &ok), hook("PostToolUseFailure", "Bash", &failure));
    let h = Harness::with(bash("exit 3"), AskPolicy::Allow, user_hooks(&config)).await;
    assert_eq!(h.prompt("go").await.stop, StopReason::Completed);
    assert!(!s.path("ok.json").exists(), "exactly one of the two fires");
    let input: Value =
        serde_json::from_str(&std::fs::read_to_string(s.path("failure.json")).unwrap()).unwrap();
    assert_eq!(input["hook_event_name"], "PostToolUseFailure");
    // As Claude Code writes it: the exit code, then the output.
    assert_eq!(input["error"], "Exit code 3", "{input}");
    assert_eq!(input["is_interrupt"], false, "{input}");
    let results = tool_results(&h.request_messages(1));
    assert!(results[0].1.contains("tests are red"), "{results:?}");

    let s2 = Scripts::new();
    let ok = s2.script("ok.sh", "cat > \"$(dirname \"$0\")/ok.json\"\necho '{\"hookSpecificOutput\":{\"additionalContext\":\"formatted\"}}'");
    let failure = s2.script("failure.sh", "touch \"$(dirname \"$0\")/failure.json\"");
    let config =
        format!("{}{}", hook("PostToolUse", "Bash", &ok), hook("PostToolUseFailure", "Bash", &failure));
    let h = Harness::with(bash("echo fine"), AskPolicy::Allow, user_hooks(&config)).await;
    assert_eq!(h.prompt("go").await.stop, StopReason::Completed);
    assert!(!s2.path("failure.json").exists());
    let input: Value = serde_json::from_str(&std::fs::read_to_string(s2.path("ok.json")).unwrap()).unwrap();
    // Claude Code's Bash response.
    assert_eq!(input["tool_response"]["stdout"], "fine", "{input}");
    assert_eq!(input["tool_response"]["interrupted"], false, "{input}");
    let results = tool_results(&h.request_messages(1));
    assert!(results[0].1.contains("formatted"), "{results:?}");
}

#[tokio::test]
async fn a_stop_block_continues_with_the_reason_and_stops_after_eight() {
    let s = Scripts::new();
    let stop = s.script(
        "stop.sh",
        "cat >> \"$(dirname \"$0\")/inputs.jsonl\"\necho >> \"$(dirname \"$0\")/inputs.jsonl\"\necho 'run cargo test again' >&2\nexit 2",
    );
    let turns: Vec<Turn> = (0..10).map(|i| Turn::from(Reply::text(format!("answer {i}")))).collect();
    let h = Harness::with(Script::new(turns), AskPolicy::Allow, user_hooks(&hook("Stop", "", &stop))).await;
    assert_eq!(h.prompt("go").await.stop, StopReason::Completed);
    assert_eq!(h.fake.request_count(), 9, "the first answer and eight continuations");
    let inputs: Vec<Value> = std::fs::read_to_string(s.path("inputs.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Claude Code's cap: the hook is asked a ninth time and its block overridden.
    assert_eq!(inputs.len(), 9);
    assert_eq!(inputs[8]["last_assistant_message"], "answer 8");
    assert_eq!(inputs[0]["stop_hook_active"], false);
    assert_eq!(inputs[1]["stop_hook_active"], true);
    assert_eq!(inputs[0]["last_assistant_message"], "answer 0");
    let second = h.request_messages(1);
    let last_user = second.iter().rev().find(|m| m["role"] == "user").unwrap();
    assert!(last_user.to_string().contains("run cargo test again"), "{last_user}");
}

#[tokio::test]
async fn continue_false_ends_the_run_with_the_stop_reason() {
    let s = Scripts::new();
    let halt = s.script("halt.sh", r#"echo '{"continue": false, "stopReason": "enough for today"}'"#);
    let script = Script::new([
        Turn::from(Reply::tool_call("bash", json!({"command": "echo one"}))),
        Turn::from(Reply::tool_call("bash", json!({"command": "echo two"}))),
        Turn::from(Reply::text("done")),
    ]);
    let h = Harness::with(script, AskPolicy::Allow, user_hooks(&hook("PostToolUse", "", &halt))).await;
    let outcome = h.prompt("go").await;
    assert_eq!(outcome.stop, StopReason::HookStopped("enough for today".into()));
    assert_eq!(h.fake.request_count(), 1, "no step after the hook said stop");
}

#[tokio::test]
async fn user_prompt_submit_refuses_a_prompt_before_it_is_stored_or_adds_context() {
    let s = Scripts::new();
    let refuse = s.script(
        "refuse.sh",
        "grep -q secret && { echo 'no secrets in prompts' >&2; exit 2; }\necho 'the build is green'",
    );
    let h = Harness::with(
        Script::new([Turn::from(Reply::text("ok"))]),
        AskPolicy::Allow,
        user_hooks(&hook("UserPromptSubmit", "", &refuse)),
    )
    .await;
    let refused = h.engine.prompt(&h.session.id, PromptInput::text("my secret"), Delivery::Queue).await;
    let error = refused.unwrap_err().to_string();
    assert!(error.contains("no secrets in prompts"), "{error}");
    assert!(h.history().is_empty(), "a refused prompt is never stored");
    assert_eq!(h.fake.request_count(), 0);

    assert_eq!(h.prompt("hello").await.stop, StopReason::Completed);
    let body = h.fake.requests()[0].body.to_string();
    assert!(body.contains("the build is green"), "plain stdout is context for the model: {body}");
}

#[tokio::test]
async fn session_start_context_reaches_the_model_once() {
    let s = Scripts::new();
    let start = s.script("start.sh", "cat > \"$(dirname \"$0\")/start.json\"\necho 'project uses tabs'");
    let h = Harness::with(
        Script::new([Turn::from(Reply::text("a")), Turn::from(Reply::text("b"))]),
        AskPolicy::Allow,
        user_hooks(&hook("SessionStart", "startup", &start)),
    )
    .await;
    h.prompt("one").await;
    let input: Value = serde_json::from_str(&std::fs::read_to_string(s.path("start.json")).unwrap()).unwrap();
    assert_eq!(input["source"], "startup");
    std::fs::remove_file(s.path("start.json")).unwrap();
    h.prompt("two").await;
    assert!(!s.path("start.json").exists(), "once per session");
    assert!(h.fake.requests()[0].body.to_string().contains("project uses tabs"));
}

#[tokio::test]
async fn permission_request_answers_a_headless_ask_but_never_an_explicit_only_one() {
    let s = Scripts::new();
    let allow = s.script(
        "allow.sh",
        r#"echo '{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}'"#,
    );
    let h = Harness::with(
        bash("touch ran.txt"),
        AskPolicy::Deny,
        with(rule("bash", "*", PermissionAction::Ask), user_hooks(&hook("PermissionRequest", "", &allow))),
    )
    .await;
    assert_eq!(h.prompt("go").await.stop, StopReason::Completed);
    assert!(h.project.path().join("ran.txt").exists());

    let deny = s.script(
        "deny.sh",
        r#"echo '{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"deny","message":"not on fridays"}}}'"#,
    );
    let h = Harness::with(
        bash("touch ran.txt"),
        AskPolicy::Allow,
        with(rule("bash", "*", PermissionAction::Ask), user_hooks(&hook("PermissionRequest", "", &deny))),
    )
    .await;
    assert_eq!(h.prompt("go").await.stop, StopReason::Completed);
    assert!(!h.project.path().join("ran.txt").exists());
    assert!(last_tool_error(&h).contains("not on fridays"));

    // A write to a protected path is only granted by a named rule or a person.
    let script = Script::new([
        Turn::from(Reply::tool_call("write", json!({"filePath": "codeloop.toml", "content": "x = 1\n"}))),
        Turn::from(Reply::text("done")),
    ]);
    let h = Harness::with(script, AskPolicy::Deny, user_hooks(&hook("PermissionRequest", "", &allow))).await;
    let outcome = h.prompt("go").await;
    assert!(!h.project.path().join("codeloop.toml").exists(), "{:?}", outcome.stop);
    let error = last_tool_error(&h);
    assert!(error.contains("codeloop.toml"), "{error}");
}

#[tokio::test]
async fn other_exit_codes_and_time_outs_warn_and_proceed_unless_on_error_blocks() {
    let s = Scripts::new();
    let broken = s.script("broken.sh", "echo 'oops' >&2\nexit 1");
    let slow = s.script("slow.sh", "sleep 30");
    let config = format!(
        "{}{}[[PreToolUse.hooks]]\ncommand = '''{slow}'''\ntimeout = 0.3\n",
        hook("PreToolUse", "Bash", &broken),
        "[[PreToolUse]]\nmatcher = \"Bash\"\n"
    );
    let h = Harness::with(bash("touch ran.txt"), AskPolicy::Allow, user_hooks(&config)).await;
    let mut events = h.engine.bus().subscribe();
    assert_eq!(h.prompt("go").await.stop, StopReason::Completed);
    assert!(h.project.path().join("ran.txt").exists(), "the action proceeds");
    let mut warnings = Vec::new();
    let mut ran = Vec::new();
    while let Ok(event) = events.try_recv() {
        match &event.payload {
            EventPayload::SessionWarning { message, .. } => warnings.push(message.clone()),
            EventPayload::HookRan { exit_code, decision, command, .. } => {
                ran.push((command.clone(), *exit_code, decision.clone()))
            }
            _ => {}
        }
    }
    assert!(
        warnings.iter().any(|w| w.starts_with("hook") && w.contains("exited with status 1")),
        "{warnings:?}"
    );
    assert!(warnings.iter().any(|w| w.starts_with("hook") && w.contains("timed out")), "{warnings:?}");
    assert!(ran.contains(&(broken.clone(), Some(1), "none".into())), "{ran:?}");
    assert!(ran.contains(&(slow.clone(), None, "none".into())), "{ran:?}");

    let config = format!(
        "[[PreToolUse]]\n[[PreToolUse.hooks]]\ncommand = '''{slow}'''\ntimeout = 0.3\non_error = \"block\"\n"
    );
    let h = Harness::with(bash("touch ran.txt"), AskPolicy::Allow, user_hooks(&config)).await;
    assert_eq!(h.prompt("go").await.stop, StopReason::Completed);
    assert!(!h.project.path().join("ran.txt").exists(), "on_error = block blocks on a time-out");
    assert!(last_tool_error(&h).contains("timed out"));
}

#[tokio::test]
async fn a_crashing_hook_warns_and_the_call_proceeds() {
    let s = Scripts::new();
    let crash = s.script("crash.sh", "kill -9 $$");
    let h = Harness::with(
        bash("touch ran.txt"),
        AskPolicy::Allow,
        user_hooks(&hook("PreToolUse", "Bash", &crash)),
    )
    .await;
    assert_eq!(h.prompt("go").await.stop, StopReason::Completed);
    assert!(h.project.path().join("ran.txt").exists());
}

#[tokio::test]
async fn identical_handlers_run_once_and_matchers_match_codeloops_own_name() {
    let s = Scripts::new();
    let count = s.script("count.sh", "echo x >> \"$(dirname \"$0\")/count\"");
    let config = format!(
        "{}{}{}",
        hook("PreToolUse", "bash", &count),
        hook("PreToolUse", "Bash", &count),
        hook("PreToolUse", "Read", &count)
    );
    let h = Harness::with(bash("true"), AskPolicy::Allow, user_hooks(&config)).await;
    h.prompt("go").await;
    assert_eq!(std::fs::read_to_string(s.path("count")).unwrap(), "x\n");
}

#[tokio::test]
async fn the_hook_runs_in_the_project_with_its_environment_and_a_transcript() {
    let s = Scripts::new();
    let env = s.script(
        "env.sh",
        "out=\"$(dirname \"$0\")/env.txt\"\npwd > \"$out\"\necho \"$CODELOOP_PROJECT_DIR\" >> \"$out\"\necho \"$CLAUDE_PROJECT_DIR\" >> \"$out\"\n\
         echo \"$CODELOOP_SESSION_ID\" >> \"$out\"\npath=$(sed -n 's/.*\"transcript_path\":\"\\([^\"]*\\)\".*/\\1/p')\ncp \"$path\" \"$(dirname \"$0\")/transcript.json\"",
    );
    let h = Harness::with(bash("true"), AskPolicy::Allow, user_hooks(&hook("PreToolUse", "", &env))).await;
    h.prompt("go").await;
    let lines: Vec<String> =
        std::fs::read_to_string(s.path("env.txt")).unwrap().lines().map(str::to_owned).collect();
    let project = std::fs::canonicalize(h.project.path()).unwrap().display().to_string();
    assert_eq!(std::fs::canonicalize(&lines[0]).unwrap().display().to_string(), project);
    assert_eq!(lines[1], h.project.path().display().to_string());
    assert_eq!(lines[2], lines[1]);
    assert_eq!(lines[3], h.session.id.as_str());
    // Claude Code's transcript: JSON Lines, one message a line, that outlives the hook.
    let lines: Vec<Value> = std::fs::read_to_string(s.path("transcript.json"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "user", "{lines:?}");
    assert_eq!(lines[0]["message"], json!({"role": "user", "content": "go"}));
    assert_eq!(lines[0]["sessionId"], h.session.id.as_str());
    assert_eq!(lines[0]["parentUuid"], Value::Null);
    let call = lines.iter().find(|l| l["type"] == "assistant").unwrap();
    assert_eq!(call["message"]["content"][0]["type"], "tool_use", "{call}");
    assert_eq!(call["message"]["content"][0]["name"], "Bash", "{call}");
    assert_eq!(call["parentUuid"], lines[0]["uuid"]);
    let kept = h.engine.data_dir().join("transcripts").join(format!("{}.jsonl", h.session.id));
    assert!(kept.exists(), "the transcript stays for the session's life");
}

#[tokio::test]
async fn an_http_handler_gets_the_input_and_its_answer_decides() {
    use axum::{Json, Router, routing::post};
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let recorder = seen.clone();
    let app = Router::new().route(
        "/hook",
        post(move |headers: axum::http::HeaderMap, Json(body): Json<Value>| {
            let recorder = recorder.clone();
            async move {
                let mut body = body;
                body["auth"] = json!(headers.get("x-token").and_then(|v| v.to_str().ok()));
                recorder.lock().unwrap().push(body);
                Json(json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "the server says no"}}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let config = format!(
        "[[PreToolUse]]\nmatcher = \"Bash\"\n[[PreToolUse.hooks]]\ntype = \"http\"\nurl = \"{url}\"\nheaders = {{ x-token = \"t1\" }}\n"
    );
    let h = Harness::with(bash("touch ran.txt"), AskPolicy::Allow, user_hooks(&config)).await;
    assert_eq!(h.prompt("go").await.stop, StopReason::Completed);
    assert!(!h.project.path().join("ran.txt").exists());
    assert!(last_tool_error(&h).contains("the server says no"));
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0]["tool_name"], "Bash");
    assert_eq!(seen[0]["auth"], "t1");
}

#[tokio::test]
async fn hook_ran_says_what_each_hook_decided() {
    let s = Scripts::new();
    let deny = s.script("deny.sh", "exit 2");
    let h =
        Harness::with(bash("true"), AskPolicy::Allow, user_hooks(&hook("PreToolUse", "Bash", &deny))).await;
    let mut events = h.engine.bus().subscribe();
    h.prompt("go").await;
    let ran = std::iter::from_fn(|| events.try_recv().ok())
        .find_map(|e| match &e.payload {
            EventPayload::HookRan { .. } => Some(serde_json::to_value(e.as_ref()).unwrap()),
            _ => None,
        })
        .unwrap();
    assert_eq!(ran["type"], "hook.ran");
    let p = &ran["properties"];
    assert_eq!(
        (p["event"].as_str(), p["source"].as_str(), p["command"].as_str()),
        (Some("PreToolUse"), Some("user"), Some(deny.as_str()))
    );
    assert_eq!((p["exit_code"].as_i64(), p["decision"].as_str()), (Some(2), Some("block")));
    assert!(p["duration_ms"].is_u64());
}

#[tokio::test]
async fn pre_compact_exit_2_skips_the_compaction_and_post_compact_fires_after_one() {
    let s = Scripts::new();
    let skip = s.script("skip.sh", "echo 'not now' >&2\nexit 2");
    let h = Harness::with(
        Script::new([Turn::from(Reply::text("a"))]),
        AskPolicy::Allow,
        user_hooks(&hook("PreCompact", "manual", &skip)),
    )
    .await;
    h.prompt("one").await;
    let outcome = h.engine.compact(&h.session.id).await.unwrap();
    assert_eq!(outcome.stop, StopReason::Completed);
    assert_eq!(h.fake.request_count(), 1, "no summary was asked for");
    assert!(!h.history().iter().any(|m| m.info.as_assistant().is_some_and(|a| a.summary)));

    let post = s.script("post.sh", "cat > \"$(dirname \"$0\")/post.json\"");
    let h = Harness::with(
        Script::new([Turn::from(Reply::text("a")), Turn::from(Reply::text("the summary"))]),
        AskPolicy::Allow,
        user_hooks(&hook("PostCompact", "manual", &post)),
    )
    .await;
    h.prompt("one").await;
    h.engine.compact(&h.session.id).await.unwrap();
    let input: Value = serde_json::from_str(&std::fs::read_to_string(s.path("post.json")).unwrap()).unwrap();
    assert_eq!(input["trigger"], "manual");
    let summary = input["compact_summary"].as_str().unwrap();
    assert!(summary.contains("the summary"), "{summary}");
    // What is carried beside the summary is named there too: codeloop's work state and the user's words.
    assert!(summary.contains("carried 1 earlier user message verbatim"), "{summary}");
}
