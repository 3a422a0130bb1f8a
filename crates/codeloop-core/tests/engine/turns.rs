//! Turns, tools and interruption.

use std::time::{Duration, Instant};

use codeloop_core::permission::AskPolicy;
use codeloop_core::{Delivery, PromptInput, StopReason};
use codeloop_testkit::{Reply, Script, ScriptToolCall, ScriptUsage, Turn};
use codeloop_types::{EventPayload, Finish, Message, PartKind, ToolState};
use serde_json::json;

use crate::harness::{Harness, state, tool_results};

#[tokio::test]
async fn two_turn_tool_round_trip_edits_a_file_and_sends_the_result_back() {
    let h = Harness::new(Script::new([
        Turn::from(
            Reply::tool_call(
                "edit",
                json!({"filePath": "hello.txt", "oldString": "wrold", "newString": "world"}),
            )
            .with_text("Fixing the typo.")
            .with_usage(ScriptUsage::new(1_000, 20).with_cached(400)),
        ),
        Turn::from(
            Reply::text("Done: fixed the typo.").with_usage(ScriptUsage::new(1_100, 10).with_cached(1_000)),
        ),
    ]))
    .await;
    h.write("hello.txt", "hello wrold\n");
    let outcome = h.prompt("fix the typo in hello.txt").await;

    assert_eq!(outcome.stop, StopReason::Completed);
    assert_eq!(h.read("hello.txt"), "hello world\n");
    assert_eq!(h.fake.request_count(), 2);

    let history = h.history();
    assert_eq!(history.len(), 3, "user, assistant(tool), assistant(text)");
    let first = &history[1];
    let kinds: Vec<&str> = first.parts.iter().map(|p| p.kind_name()).collect();
    assert_eq!(kinds, ["step-start", "text", "tool", "step-finish"]);
    let ToolState::Completed(done) = state(&first.parts[2]) else { panic!("tool not completed") };
    assert_eq!(done.output, "Edit applied successfully.");
    let PartKind::StepFinish(step) = &first.parts[3].kind else { panic!() };
    assert_eq!(step.reason, Finish::ToolCalls);
    assert_eq!((step.tokens.input, step.tokens.cache.read, step.tokens.output), (600, 400, 20));
    assert!(step.cost > 0.0);
    let Message::Assistant(last) = &history[2].info else { panic!() };
    assert_eq!(last.finish, Some(Finish::Stop));
    assert!(last.time.completed.is_some());

    // The second request carries the tool call and its result.
    let messages = h.request_messages(1);
    let results = tool_results(&messages);
    assert_eq!(results.len(), 1);
    assert!(results[0].1.contains("Edit applied successfully."), "{results:?}");
    let session = h.engine.session(&h.session.id).await.unwrap();
    assert_eq!(session.tokens.cache.read, 1_400);
}

#[tokio::test]
async fn stop_finish_with_tool_calls_continues_the_loop() {
    let h = Harness::new(Script::new([
        Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"})).with_finish("stop")),
        Turn::from(Reply::text("a.txt says hi")),
    ]))
    .await;
    h.write("a.txt", "hi\n");
    let outcome = h.prompt("what does a.txt say?").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    assert_eq!(h.fake.request_count(), 2, "the quirk must not end the run after the tool call");
    assert!(matches!(state(&h.tool_parts()[0]), ToolState::Completed(_)));
}

#[tokio::test]
async fn parallel_tool_calls_run_concurrently_and_each_gets_its_result() {
    // Each command waits until the other has started: run one after the other, both would time out.
    let wait_for = |mine: &str, other: &str| {
        format!(
            "touch {mine}.started; for i in $(seq 1 200); do [ -f {other}.started ] && break; sleep 0.02; done; \
             [ -f {other}.started ] && echo {mine}-saw-{other}"
        )
    };
    let h = Harness::new(Script::new([
        Turn::from(
            Reply::text("Running both.")
                .with_call(
                    ScriptToolCall::new("bash", json!({"command": wait_for("a", "b")})).with_fragments(3),
                )
                .with_call(
                    ScriptToolCall::new("bash", json!({"command": wait_for("b", "a")})).with_fragments(3),
                ),
        ),
        Turn::from(Reply::text("both ran")),
    ]))
    .await;
    let outcome = h.prompt("run both").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    let outputs: Vec<String> = h
        .tool_parts()
        .iter()
        .map(|p| match state(p) {
            ToolState::Completed(c) => c.output.clone(),
            other => panic!("not completed: {other:?}"),
        })
        .collect();
    assert!(outputs[0].contains("a-saw-b"), "{outputs:?}");
    assert!(outputs[1].contains("b-saw-a"), "{outputs:?}");
    let results = tool_results(&h.request_messages(1));
    assert_eq!(results.len(), 2);
    assert_ne!(results[0].0, results[1].0, "each call has its own result");
}

#[tokio::test]
async fn a_running_tool_is_marked_interrupted_when_the_run_is_aborted() {
    let h = Harness::new(Script::new([
        Turn::from(Reply::tool_call("bash", json!({"command": "sleep 30"}))),
        Turn::from(Reply::text("ok, stopped")),
    ]))
    .await;
    let (run, _) = h
        .start("sleep", |p| {
            matches!(p, EventPayload::PartUpdated { part, .. }
            if part.as_tool().is_some_and(|t| matches!(t.state, ToolState::Running(_))))
        })
        .await;
    let started = Instant::now();
    h.engine.abort(&h.session.id).await;
    let elapsed = started.elapsed();
    let outcome = run.await.unwrap();
    assert_eq!(outcome.stop, StopReason::Interrupted);
    // 250 ms cleanup wait plus the process-group kill; far below the 30 s the command wanted.
    assert!(elapsed < Duration::from_secs(5), "abort took {elapsed:?}");

    let tool = &h.tool_parts()[0];
    assert!(state(tool).is_interrupted(), "{:?}", state(tool));
    let history = h.history();
    let Message::Assistant(aborted) = &history[1].info else { panic!() };
    assert!(aborted.error.as_ref().is_some_and(|e| e.is_aborted()));
    assert!(aborted.time.completed.is_some());

    // The next request pairs the interrupted call with an error result.
    let outcome = h.prompt("never mind").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    let results = tool_results(&h.request_messages(1));
    assert_eq!(results.len(), 1);
    assert!(results[0].1.contains("aborted"), "{results:?}");
    // Not a failure: an unknown outcome, said so (DESIGN.md §5m).
    assert!(results[0].1.contains("interrupted after it started and may have acted"), "{results:?}");
    assert_eq!(state(tool).metadata().and_then(|m| m.get("outcome")), Some(&json!("unknown")));
}

#[tokio::test]
async fn unknown_tools_and_invalid_arguments_reach_the_model_as_errors() {
    let h = Harness::new(Script::new([
        Turn::from(
            Reply::text("Trying things.")
                .with_call(ScriptToolCall::new("teleport", json!({"to": "mars"})))
                .with_call(ScriptToolCall::new(
                    "read",
                    codeloop_testkit::Arguments::raw("{\"filePath\": \"a.t"),
                ))
                .with_call(ScriptToolCall::new("read", json!({"path": "wrong-field"}))),
        ),
        Turn::from(Reply::text("I will fix my calls.")),
    ]))
    .await;
    let outcome = h.prompt("go").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    let errors: Vec<String> = h
        .tool_parts()
        .iter()
        .map(|p| match state(p) {
            ToolState::Error(e) => e.error.clone(),
            other => panic!("expected an error: {other:?}"),
        })
        .collect();
    assert!(errors[0].contains("teleport"), "{errors:?}");
    assert!(errors[1].contains("arguments provided to the tool are invalid"), "{errors:?}");
    assert!(errors[2].contains("invalid arguments"), "{errors:?}");
    let results = tool_results(&h.request_messages(1));
    assert_eq!(results.len(), 3);
}

#[tokio::test]
async fn steered_input_joins_the_next_step_of_the_active_run() {
    let h = Harness::with(
        Script::new([
            Turn::from(Reply::tool_call("bash", json!({"command": "sleep 0.3; echo done"}))),
            Turn::from(Reply::text("saw both")),
        ]),
        AskPolicy::Deny,
        |_| {},
    )
    .await;
    let (first, _) = h
        .start("first", |p| {
            matches!(p, EventPayload::PartUpdated { part, .. }
            if part.as_tool().is_some_and(|t| matches!(t.state, ToolState::Running(_))))
        })
        .await;
    let steered = h
        .engine
        .prompt(&h.session.id, PromptInput::text("also check the logs"), Delivery::Steer)
        .await
        .unwrap();
    let first = first.await.unwrap();
    assert_eq!(first.message, steered.message, "a steering caller joins the same run");
    assert_eq!(h.fake.request_count(), 2);
    let second = h.request_messages(1);
    let texts: Vec<String> =
        second.iter().filter(|m| m["role"] == "user").map(|m| m["content"].to_string()).collect();
    assert!(texts.last().unwrap().contains("also check the logs"), "{texts:?}");
}

#[tokio::test]
async fn the_task_tool_runs_a_subagent_in_a_child_session_and_returns_its_answer() {
    let h = Harness::new(Script::new([
        Turn::from(Reply::tool_call(
            "task",
            json!({"description": "find the config", "prompt": "Where is the config loaded?", "subagent_type": "explore"}),
        )),
        Turn::from(Reply::text("It is loaded in src/config.rs.")),
        Turn::from(Reply::text("The config is loaded in src/config.rs.")),
    ]))
    .await;
    let outcome = h.prompt("where is the config loaded?").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    let children = h
        .engine
        .sessions(codeloop_store::SessionFilter { parent: Some(h.session.id.clone()), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(children.len(), 1);
    assert_eq!(children[0].agent, "explore");
    assert!(children[0].title.contains("find the config"));
    // The child's request offered only the explore agent's tools.
    let child_tools: Vec<String> = h.fake.requests()[1].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        child_tools.contains(&"read".to_owned()) && !child_tools.contains(&"edit".to_owned()),
        "{child_tools:?}"
    );
    assert!(!child_tools.contains(&"task".to_owned()), "subagents cannot start subagents");
    let results = tool_results(&h.request_messages(2));
    assert!(
        results[0].1.contains("<task id=\"ses_") && results[0].1.contains("src/config.rs"),
        "{results:?}"
    );
}

#[tokio::test]
async fn tools_of_a_configured_mcp_server_are_offered_and_called() {
    let server = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/engine/fixtures/fake-mcp.sh");
    let h = Harness::with(
        Script::new([
            Turn::from(Reply::tool_call("fake_echo", json!({"text": "hello mcp"}))),
            Turn::from(Reply::text("The server said hello.")),
        ]),
        AskPolicy::Deny,
        |config| {
            config.mcp.insert(
                "fake".into(),
                codeloop_core::mcp::McpSettings {
                    command: vec!["bash".into(), server.display().to_string()],
                    ..Default::default()
                },
            );
            config.mcp.insert(
                "broken".into(),
                codeloop_core::mcp::McpSettings {
                    command: vec!["/nonexistent/mcp".into()],
                    ..Default::default()
                },
            );
        },
    )
    .await;
    let outcome = h.prompt("say hello through mcp").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    let offered: Vec<String> = h.fake.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(offered.contains(&"fake_echo".to_owned()), "{offered:?}");
    let results = tool_results(&h.request_messages(1));
    assert_eq!(results[0].1, "echo: hello mcp", "a server that fails to start is skipped: {results:?}");
}

#[tokio::test]
async fn a_command_knows_its_call_and_session_as_its_operation_id() {
    let h = Harness::with(
        Script::new([
            Turn::from(Reply::tool_call(
                "bash",
                json!({"command": "echo \"op=$CODELOOP_CALL_ID ses=$CODELOOP_SESSION_ID\""}),
            )),
            Turn::from(Reply::text("done")),
        ]),
        AskPolicy::Allow,
        |_| {},
    )
    .await;
    assert_eq!(h.prompt("say who you are").await.stop, StopReason::Completed);
    let (call_id, output) = tool_results(&h.request_messages(1)).remove(0);
    assert!(!call_id.is_empty());
    assert!(output.contains(&format!("op={call_id} ses={}", h.session.id)), "{output}");
}

#[tokio::test]
async fn tool_texts_never_lead_a_model_to_create_or_overwrite_what_it_has_not_read() {
    let edit = |path: &str, old: &str| {
        Turn::from(Reply::tool_call("edit", json!({"filePath": path, "oldString": old, "newString": "x"})))
    };
    let h = Harness::with(
        Script::new([
            // A missing file: nothing changed, the nearest paths, no "create it".
            edit("src/mian.rs", "fn main"),
            // A file never read whose text the model guessed: read it first.
            edit("config.json", "\"debug\": true"),
            // A write over a file never read: said, with how many lines it replaced.
            Turn::from(Reply::tool_call("write", json!({"filePath": "notes.txt", "content": "new\n"}))),
            // Read, then a write over it: a plain success.
            Turn::from(Reply::tool_call("read", json!({"filePath": "config.json"}))),
            Turn::from(Reply::tool_call("write", json!({"filePath": "config.json", "content": "{}\n"}))),
            Turn::from(Reply::text("done")),
        ]),
        AskPolicy::Allow,
        |_| {},
    )
    .await;
    std::fs::create_dir_all(h.project.path().join("src")).unwrap();
    h.write("src/main.rs", "fn main() {}\n");
    h.write("config.json", "{\n  \"debug\": false\n}\n");
    h.write("notes.txt", "one\ntwo\nthree\n");
    assert_eq!(h.prompt("fix things").await.stop, StopReason::Completed);
    let result = |n: usize| tool_results(&h.request_messages(n)).last().unwrap().1.clone();
    let missing = result(1);
    assert!(missing.contains("Nothing was changed") && missing.contains("src/main.rs"), "{missing}");
    assert!(!missing.contains("create") && !h.project.path().join("src/mian.rs").exists(), "{missing}");
    let guessed = result(2);
    assert!(guessed.contains("You have not read config.json in this session: read it first"), "{guessed}");
    let replaced = result(3);
    assert!(replaced.contains("replaced an existing file of 3 lines that was not read first"), "{replaced}");
    assert_eq!(result(5), "Wrote file successfully.");
}
