//! Hooks against the real Claude Code (DESIGN.md §5d): the scenarios recorded from Claude Code 2.1.332
//! (`fixtures/claude-code-2.1.332`, see its README) replayed through codeloop with the same hooks, and what
//! each hook read compared field by field — `tool_name`, `tool_input`, `tool_response`, a failure's
//! `error` — and the fields every payload carries.

use std::collections::BTreeSet;
use std::path::Path;

use codeloop_core::StopReason;
use codeloop_core::permission::AskPolicy;
use codeloop_testkit::{Reply, Script, Turn};
use serde_json::{Value, json};

use crate::harness::Harness;
use crate::hooks::{Scripts, hook};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/engine/fixtures/claude-code-2.1.332");

/// One recorded hook call: the event and what the hook read on stdin.
fn recorded(name: &str) -> Vec<(String, Value)> {
    let text = std::fs::read_to_string(Path::new(FIXTURES).join(name)).unwrap();
    text.lines()
        .map(|line| {
            let line: Value = serde_json::from_str(line).unwrap();
            (line["event"].as_str().unwrap().to_owned(), line["input"].clone())
        })
        .collect()
}

/// A hook for every tool event that keeps what it read, in order.
fn dumping_hooks(scripts: &Scripts) -> String {
    let dump = scripts.script("dump.sh", "cat > \"$(dirname \"$0\")/$(date +%s%N)-$1.json\"");
    ["PreToolUse", "PostToolUse", "PostToolUseFailure"]
        .iter()
        .map(|e| hook(e, "*", &format!("{dump} {e}")))
        .collect()
}

/// What the dumping hooks read, in order, with the project's path written as Claude Code's recording has
/// it.
fn dumped(scripts: &Scripts, project: &Path) -> Vec<(String, Value)> {
    let mut files: Vec<_> = std::fs::read_dir(scripts.dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    files.sort();
    let project = project.display().to_string();
    files
        .iter()
        .map(|name| {
            let event = name.split_once('-').unwrap().1.trim_end_matches(".json").to_owned();
            let text = std::fs::read_to_string(scripts.dir.path().join(name)).unwrap();
            (event, serde_json::from_str(&text.replace(&project, "$PROJECT")).unwrap())
        })
        .collect()
}

/// The user's hooks, in a setup like the recorded Claude Code's: its sessions ran at effort `medium`.
fn user_hooks(toml: &str) -> impl FnOnce(&mut codeloop_core::config::Config) {
    let hooks = crate::hooks::user_hooks(toml);
    move |config| {
        hooks(config);
        for agent in ["build", "general"] {
            config.agent.entry(agent.into()).or_default().effort = Some(codeloop_types::Effort::Medium);
        }
    }
}

/// The payloads without `tool_use_id`: Claude's ids are its model's; the rest must match.
fn without_call_ids(all: Vec<(String, Value)>) -> Vec<(String, Value)> {
    all.into_iter()
        .map(|(event, mut input)| {
            input["tool_use_id"] = Value::Null;
            (event, input)
        })
        .collect()
}

fn compare(claude: &[(String, Value)], ours: &[(String, Value)]) {
    assert_eq!(
        claude.iter().map(|(e, _)| e.as_str()).collect::<Vec<_>>(),
        ours.iter().map(|(e, _)| e.as_str()).collect::<Vec<_>>(),
        "the events, in order"
    );
    for ((event, theirs), (_, mine)) in claude.iter().zip(ours) {
        for field in ["tool_name", "tool_input", "tool_response", "error", "is_interrupt"] {
            assert_eq!(
                mine.get(field),
                theirs.get(field),
                "{event} `{field}`:\nclaude:   {theirs}\ncodeloop: {mine}"
            );
        }
        let missing = missing_fields(theirs, mine);
        assert!(missing.is_empty(), "{event}: codeloop does not send {missing:?}:\n{mine}");
    }
}

/// The fields Claude Code sent that codeloop's payload lacks.
fn missing_fields<'a>(theirs: &'a Value, mine: &Value) -> BTreeSet<&'a str> {
    theirs.as_object().unwrap().keys().map(String::as_str).filter(|k| mine.get(*k).is_none()).collect()
}

#[tokio::test]
async fn bash_read_write_and_edit_hooks_read_what_claude_codes_read() {
    let claude: Vec<(String, Value)> =
        recorded("hooks-tools.jsonl").into_iter().filter(|(event, _)| event.contains("ToolUse")).collect();
    let scripts = Scripts::new();
    // The recorded scenario, in codeloop's tools (Claude Code 2.1.332 has no Grep or Glob tool).
    let script = Script::new([
        Turn::from(Reply::tool_call(
            "bash",
            json!({"command": "echo hello; echo err >&2", "description": "Say hello"}),
        )),
        Turn::from(Reply::tool_call("write", json!({"filePath": "new.txt", "content": "one\ntwo\n"}))),
        Turn::from(Reply::tool_call("read", json!({"filePath": "new.txt"}))),
        Turn::from(Reply::tool_call(
            "edit",
            json!({"filePath": "new.txt", "oldString": "two", "newString": "three"}),
        )),
        Turn::from(Reply::tool_call("write", json!({"filePath": "new.txt", "content": "replaced\n"}))),
        Turn::from(Reply::tool_call("bash", json!({"command": "echo oops; exit 3", "description": "Fail"}))),
        Turn::from(Reply::text("All done.")),
    ]);
    let h = Harness::with(script, AskPolicy::Allow, user_hooks(&dumping_hooks(&scripts))).await;
    assert_eq!(h.prompt("do the steps").await.stop, StopReason::Completed);
    let ours = dumped(&scripts, &h.project.path().canonicalize().unwrap());
    compare(&without_call_ids(claude), &without_call_ids(ours));
}

#[tokio::test]
async fn a_claude_style_guard_blocks_edits_writes_and_commands_by_their_claude_fields() {
    let scripts = Scripts::new();
    // The guard a Claude Code user has: jq-free, it greps the fields Claude Code names.
    let guard = scripts.script(
        "guard.sh",
        "input=$(cat); for field in '\"new_string\":\"[^\"]*SECRET' '\"content\":\"[^\"]*SECRET' '\"command\":\"[^\"]*SECRET'; do \
         printf '%s' \"$input\" | grep -q \"$field\" && { echo \"no secrets in $field\" >&2; exit 2; }; done; exit 0",
    );
    let script = Script::new([
        Turn::from(
            Reply::text("trying")
                .with_tool_call("write", json!({"filePath": "a.txt", "content": "SECRET=1\n"}))
                .with_tool_call("bash", json!({"command": "echo SECRET > b.txt"})),
        ),
        Turn::from(Reply::tool_call("write", json!({"filePath": "c.txt", "content": "fine\n"}))),
        Turn::from(Reply::tool_call(
            "edit",
            json!({"filePath": "c.txt", "oldString": "fine", "newString": "SECRET"}),
        )),
        Turn::from(Reply::text("done")),
    ]);
    let h =
        Harness::with(script, AskPolicy::Allow, user_hooks(&hook("PreToolUse", "Edit|Write|Bash", &guard)))
            .await;
    assert_eq!(h.prompt("go").await.stop, StopReason::Completed);
    let root = h.project.path();
    assert!(!root.join("a.txt").exists() && !root.join("b.txt").exists());
    assert_eq!(std::fs::read_to_string(root.join("c.txt")).unwrap(), "fine\n", "the edit was blocked");
}

#[tokio::test]
async fn a_permission_request_hook_matched_on_bash_sees_the_call_and_answers_it() {
    let claude = recorded("hooks-permission.jsonl");
    let scripts = Scripts::new();
    let dump = scripts.script("dump.sh", "cat > \"$(dirname \"$0\")/$(date +%s%N)-$1.json\"");
    let allow = scripts.script(
        "allow.sh",
        "cat > \"$(dirname \"$0\")/$(date +%s%N)-PermissionRequest.json\"; \
         echo '{\"hookSpecificOutput\": {\"hookEventName\": \"PermissionRequest\", \"decision\": {\"behavior\": \"allow\"}}}'",
    );
    // The recorded settings: PermissionRequest and PreToolUse matched on "Bash", PostToolUse on "*".
    let hooks = format!(
        "{}{}{}",
        hook("PermissionRequest", "Bash", &allow),
        hook("PreToolUse", "Bash", &format!("{dump} PreToolUse")),
        hook("PostToolUse", "*", &format!("{dump} PostToolUse"))
    );
    let script = Script::new([
        Turn::from(Reply::tool_call(
            "bash",
            json!({"command": "touch made-by-bash.txt && echo made", "description": "Make a file"}),
        )),
        Turn::from(Reply::text("Made it.")),
    ]);
    // A rule that asks, and no one to answer but the hook.
    let tweak = |config: &mut codeloop_core::config::Config| {
        user_hooks(&hooks)(config);
        config.permission =
            codeloop_core::config::PermissionConfig(vec![codeloop_types::PermissionRule::new(
                "bash",
                "*",
                codeloop_types::PermissionAction::Ask,
            )]);
    };
    let h = Harness::with(script, AskPolicy::Deny, tweak).await;
    assert_eq!(h.prompt("make the file").await.stop, StopReason::Completed);
    assert!(h.project.path().join("made-by-bash.txt").exists(), "the hook's allow answered the ask");
    let ours = dumped(&scripts, &h.project.path().canonicalize().unwrap());
    compare(&without_call_ids(claude), &without_call_ids(ours.clone()));
    // What "always" would add: Claude Code suggests directories and a mode, codeloop its rule (the
    // README's hooks section says so).
    let suggested = &ours[1].1["permission_suggestions"];
    assert_eq!(suggested[0]["type"], "addRules", "{suggested}");
}

#[tokio::test]
async fn the_sessions_own_events_carry_claude_codes_fields() {
    let claude: Vec<(String, Value)> =
        recorded("hooks-tools.jsonl").into_iter().filter(|(event, _)| !event.contains("ToolUse")).collect();
    let scripts = Scripts::new();
    let dump = scripts.script("dump.sh", "cat > \"$(dirname \"$0\")/$(date +%s%N)-$1.json\"");
    let hooks: String = ["SessionStart", "UserPromptSubmit", "Stop", "SessionEnd"]
        .iter()
        .map(|e| format!("[[{e}]]\n[[{e}.hooks]]\ntype = \"command\"\ncommand = '''{dump} {e}'''\n"))
        .collect();
    let script = Script::new([Turn::from(Reply::text("All done."))]);
    let h = Harness::with(script, AskPolicy::Allow, user_hooks(&hooks)).await;
    assert_eq!(h.prompt("do the steps").await.stop, StopReason::Completed);
    h.engine.end_started_sessions("other").await;
    let ours = dumped(&scripts, &h.project.path().canonicalize().unwrap());
    for (event, theirs) in &claude {
        let mine = &ours.iter().find(|(e, _)| e == event).unwrap_or_else(|| panic!("no {event}: {ours:?}")).1;
        let missing = missing_fields(theirs, mine);
        assert!(
            missing.is_empty(),
            "{event}: codeloop does not send {missing:?}:\nclaude:   {theirs}\ncodeloop: {mine}"
        );
    }
    // One prompt, one id on each of its events: its user message's. Effort only on the turn's events.
    let prompt = h.history().iter().find_map(|m| m.info.as_user().map(|u| u.id.to_string())).unwrap();
    for (event, mine) in ours.iter().filter(|(e, _)| e != "SessionStart") {
        assert_eq!(mine["prompt_id"].as_str(), Some(prompt.as_str()), "{event}: {mine}");
    }
    let effort = |event: &str| ours.iter().find(|(e, _)| e == event).map(|(_, m)| m["effort"].clone());
    assert_eq!(effort("Stop"), Some(json!({"level": "medium"})));
    assert_eq!(effort("UserPromptSubmit"), Some(Value::Null));
}

#[tokio::test]
async fn the_subagent_tool_is_agent_and_its_hooks_carry_the_agents_id() {
    let claude = recorded("hooks-subagent.jsonl");
    let scripts = Scripts::new();
    let dump = scripts.script("dump.sh", "cat > \"$(dirname \"$0\")/$(date +%s%N)-$1.json\"");
    // The recorded settings: the tool hooks matched on "Task", which matches Claude Code's `Agent`.
    let hooks = format!(
        "{}{}{}{}",
        hook("PreToolUse", "Task", &format!("{dump} PreToolUse")),
        hook("PostToolUse", "Task", &format!("{dump} PostToolUse")),
        hook("SubagentStart", "", &format!("{dump} SubagentStart")),
        hook("SubagentStop", "", &format!("{dump} SubagentStop")),
    );
    let script = Script::new([
        Turn::from(Reply::tool_call(
            "task",
            json!({"description": "Look around", "prompt": "Say what is here.", "subagent_type": "general"}),
        )),
        Turn::from(Reply::text("Nothing much here.")),
        Turn::from(Reply::text("All done.")),
    ]);
    let h = Harness::with(script, AskPolicy::Allow, user_hooks(&hooks)).await;
    assert_eq!(h.prompt("look").await.stop, StopReason::Completed);
    let ours = dumped(&scripts, &h.project.path().canonicalize().unwrap());
    let find = |all: &[(String, Value)], event: &str| -> Value {
        all.iter().find(|(e, _)| e == event).unwrap_or_else(|| panic!("no {event} in {all:?}")).1.clone()
    };
    for event in ["PreToolUse", "SubagentStart", "SubagentStop"] {
        let (theirs, mine) = (find(&claude, event), find(&ours, event));
        let missing = missing_fields(&theirs, &mine);
        assert!(missing.is_empty(), "{event}: codeloop does not send {missing:?}:\n{mine}");
    }
    let pre = find(&ours, "PreToolUse");
    assert_eq!(pre["tool_name"], "Agent");
    assert_eq!(pre["tool_input"]["subagent_type"], "general");
    let (start, stop) = (find(&ours, "SubagentStart"), find(&ours, "SubagentStop"));
    assert_eq!(start["agent_id"], stop["agent_id"], "one subagent, one id");
    assert_eq!(stop["agent_type"], "general");
    assert_eq!(stop["last_assistant_message"], "Nothing much here.");
    assert!(Path::new(stop["agent_transcript_path"].as_str().unwrap()).exists(), "{stop}");
}

#[tokio::test]
async fn no_subagent_start_fires_for_a_subagent_that_does_not_exist() {
    let scripts = Scripts::new();
    let dump = scripts.script("dump.sh", "cat > \"$(dirname \"$0\")/$(date +%s%N)-$1.json\"");
    let script = Script::new([
        Turn::from(Reply::tool_call(
            "task",
            json!({"description": "x", "prompt": "y", "subagent_type": "no-such-agent"}),
        )),
        Turn::from(Reply::text("oh well")),
    ]);
    let h = Harness::with(
        script,
        AskPolicy::Allow,
        user_hooks(&hook("SubagentStart", "", &format!("{dump} SubagentStart"))),
    )
    .await;
    assert_eq!(h.prompt("go").await.stop, StopReason::Completed);
    assert!(dumped(&scripts, h.project.path()).is_empty(), "nothing started");
}

/// Claude Code's order after a compaction: SessionStart (`compact`), then PostCompact; a `/compact` on its
/// own fires no Stop.
#[tokio::test]
async fn a_manual_compaction_starts_the_session_again_then_post_compact_and_no_stop() {
    let scripts = Scripts::new();
    let dump = scripts.script("dump.sh", "cat > \"$(dirname \"$0\")/$(date +%s%N)-$1.json\"");
    let hooks: String = ["SessionStart", "PostCompact", "Stop"]
        .iter()
        .map(|e| format!("[[{e}]]\n[[{e}.hooks]]\ntype = \"command\"\ncommand = '''{dump} {e}'''\n"))
        .collect();
    let script = Script::new([Turn::from(Reply::text("a")), Turn::from(Reply::text("the summary"))]);
    let h = Harness::with(script, AskPolicy::Allow, user_hooks(&hooks)).await;
    h.prompt("one").await;
    let before = dumped(&scripts, h.project.path()).len();
    h.engine.compact(&h.session.id).await.unwrap();
    let after: Vec<(String, Value)> = dumped(&scripts, h.project.path()).into_iter().skip(before).collect();
    let events: Vec<&str> = after.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(events, ["SessionStart", "PostCompact"], "{after:?}");
    assert_eq!(after[0].1["source"], "compact");
}

/// `CLAUDE_ENV_FILE`: what a SessionStart hook exports there is set for the session's later Bash calls.
#[tokio::test]
async fn a_session_start_hooks_env_file_reaches_later_bash_calls() {
    let scripts = Scripts::new();
    let export = scripts.script("export.sh", "echo 'export GREETING=from-the-hook' >> \"$CLAUDE_ENV_FILE\"");
    let hooks =
        format!("[[SessionStart]]\n[[SessionStart.hooks]]\ntype = \"command\"\ncommand = '''{export}'''\n");
    let script = Script::new([
        Turn::from(Reply::tool_call("bash", json!({"command": "echo \"greeting=$GREETING\""}))),
        Turn::from(Reply::text("done")),
    ]);
    let h = Harness::with(script, AskPolicy::Allow, user_hooks(&hooks)).await;
    assert_eq!(h.prompt("go").await.stop, StopReason::Completed);
    let results = crate::harness::tool_results(&h.request_messages(1));
    assert!(results[0].1.contains("greeting=from-the-hook"), "{results:?}");
}

/// What the model is told of a failed command, as Claude Code tells its model (recorded:
/// `model-tool-results.json`): `Exit code N` and the output, flagged as an error.
#[tokio::test]
async fn the_model_is_told_a_command_failed_as_claude_codes_model_is() {
    let recorded: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(Path::new(FIXTURES).join("model-tool-results.json")).unwrap(),
    )
    .unwrap();
    let theirs = recorded.iter().find(|r| r["tool_use_id"] == "toolu_08_0").unwrap();
    let script = Script::new([
        Turn::from(Reply::tool_call("bash", json!({"command": "echo oops; exit 3", "description": "Fail"}))),
        Turn::from(Reply::text("noted")),
    ]);
    let anthropic = |config: &mut codeloop_core::config::Config| {
        if let Some(fake) = config.provider.get_mut("fake") {
            fake.api = codeloop_provider::WireApi::Anthropic;
        }
    };
    let h = Harness::with(script, AskPolicy::Allow, anthropic).await;
    assert_eq!(h.prompt("go").await.stop, StopReason::Completed);
    let sent = &h.fake.requests()[1].body["messages"];
    let result = sent
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|block| block["type"] == "tool_result")
        .unwrap_or_else(|| panic!("no tool_result in {sent}"));
    assert_eq!(result["is_error"], theirs["is_error"], "{result}");
    let content = match &result["content"] {
        Value::String(text) => text.clone(),
        blocks => blocks[0]["text"].as_str().unwrap_or_default().to_owned(),
    };
    assert_eq!(content.trim_end(), theirs["content"].as_str().unwrap(), "{result}");
}
