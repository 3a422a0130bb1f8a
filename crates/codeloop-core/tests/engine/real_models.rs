//! What a real model on the other end needs (issue 23): the tools offered per model (edit profile,
//! nothing without something behind it), sampling defaults per family, tool calls written as text,
//! and a patch marker with a remark after it.

use std::sync::Arc;

use codeloop_core::config::{AgentSettings, Config, ModelSettings, PermissionConfig};
use codeloop_core::permission::AskPolicy;
use codeloop_core::{Delivery, Engine, EngineOptions, PromptInput, StopReason};
use codeloop_provider::{ToolCallText, WireApi};
use codeloop_testkit::{Reply, Script, Turn};
use codeloop_types::{EventPayload, ModelRef, PermissionAction, PermissionRule, ToolProfile, ToolState};
use serde_json::{Value, json};

use crate::harness::{Harness, state, tool_results};

/// The tool names a request body offered (any wire format).
fn offered(body: &Value) -> Vec<String> {
    let tools = body["tools"].as_array().cloned().unwrap_or_default();
    let mut names: Vec<String> = tools
        .iter()
        .flat_map(|t| match t["functionDeclarations"].as_array() {
            Some(declarations) => declarations.clone(),
            None => vec![t.clone()],
        })
        .filter_map(|t| t["function"]["name"].as_str().or(t["name"].as_str()).map(str::to_owned))
        .collect();
    names.sort();
    names
}

fn add_model(config: &mut Config, id: &str, settings: ModelSettings) {
    config.provider.get_mut("fake").unwrap().models.insert(id.into(), settings);
}

/// A prompt in a new session of `h`'s project on `model`; returns the session's first request body.
async fn first_request_on(h: &Harness, model: &str) -> Value {
    let model = ModelRef::new("fake", model);
    let session = h.engine.create_session(h.project.path(), None, Some(model), None).await.unwrap();
    let before = h.fake.request_count();
    let outcome = h.engine.prompt(&session.id, PromptInput::text("hi"), Delivery::Queue).await.unwrap();
    assert_eq!(outcome.stop, StopReason::Completed);
    h.fake.requests()[before].body.clone()
}

#[tokio::test]
async fn gpt5_is_offered_apply_patch_and_other_models_edit_and_write() {
    let h = Harness::with(
        Script::new([Turn::from(Reply::text("ok")), Turn::from(Reply::text("ok"))]),
        AskPolicy::Deny,
        |config| {
            add_model(config, "gpt-5", ModelSettings::default());
            add_model(config, "qwen2.5-coder-1.5b-instruct", ModelSettings::default());
        },
    )
    .await;
    let gpt5 = offered(&first_request_on(&h, "gpt-5").await);
    assert!(gpt5.contains(&"apply_patch".into()), "{gpt5:?}");
    assert!(!gpt5.contains(&"edit".into()) && !gpt5.contains(&"write".into()), "{gpt5:?}");
    let qwen = offered(&first_request_on(&h, "qwen2.5-coder-1.5b-instruct").await);
    assert!(qwen.contains(&"edit".into()) && qwen.contains(&"write".into()), "{qwen:?}");
    assert!(!qwen.contains(&"apply_patch".into()), "{qwen:?}");
}

#[tokio::test]
async fn sampling_comes_from_the_family_unless_config_sets_it() {
    let h = Harness::with(
        Script::new([
            Turn::from(Reply::text("ok")),
            Turn::from(Reply::text("ok")),
            Turn::from(Reply::text("ok")),
        ]),
        AskPolicy::Deny,
        |config| {
            add_model(config, "qwen2.5-coder-1.5b-instruct", ModelSettings::default());
            add_model(config, "gpt-5", ModelSettings { temperature: Some(0.3), ..Default::default() });
            let tuned =
                ModelSettings { id: Some("qwen2.5-coder".into()), top_p: Some(0.8), ..Default::default() };
            add_model(config, "tuned", tuned);
        },
    )
    .await;
    let qwen = first_request_on(&h, "qwen2.5-coder-1.5b-instruct").await;
    assert_eq!((qwen["temperature"].as_f64(), qwen["top_p"].as_f64()), (Some(0.55), Some(1.0)), "{qwen}");
    let gpt5 = first_request_on(&h, "gpt-5").await;
    assert!(gpt5.get("temperature").is_none() && gpt5.get("top_p").is_none(), "gpt-5 takes none: {gpt5}");
    let tuned = first_request_on(&h, "tuned").await;
    assert_eq!((tuned["temperature"].as_f64(), tuned["top_p"].as_f64()), (Some(0.55), Some(0.8)), "{tuned}");
}

#[tokio::test]
async fn a_model_set_to_the_patch_profile_gets_apply_patch_and_a_remark_after_a_marker_line_is_forgiven() {
    // What Qwen2.5-Coder wrote after reading a format with inline "(optional)" remarks.
    let patch = "*** Begin Patch\n*** Update File: greet.sh\n@@\n-echo \"Helo\"\n+echo \"Hello\"\n*** End of File (optional)\n*** End Patch (end)";
    let h = Harness::with(
        Script::new([
            Turn::from(Reply::tool_call("apply_patch", json!({"patchText": patch}))),
            Turn::from(Reply::text("Fixed the greeting.")),
        ]),
        AskPolicy::Deny,
        |config| {
            let model = config.provider.get_mut("fake").unwrap().models.get_mut("test").unwrap();
            model.tools = Some(ToolProfile::Patch);
        },
    )
    .await;
    h.write("greet.sh", "echo \"Helo\"\n");
    assert_eq!(h.prompt("fix the greeting").await.stop, StopReason::Completed);
    let tools = offered(&h.fake.requests()[0].body);
    assert!(tools.contains(&"apply_patch".into()) && !tools.contains(&"edit".into()), "{tools:?}");
    assert!(matches!(state(&h.tool_parts()[0]), ToolState::Completed(_)), "{:?}", state(&h.tool_parts()[0]));
    assert_eq!(h.read("greet.sh"), "echo \"Hello\"\n");
}

/// An engine whose skills live in the project's `.codeloop/skills`.
fn engine_with_project_skills(h: &Harness) -> Engine {
    let mut options = EngineOptions::new(
        h.data.path().join("skills-engine"),
        crate::common::config_for(&h.fake.base_url()),
    );
    options.ask_policy = AskPolicy::Deny;
    options.env = Arc::new(|_| None);
    options.skill_dirs = Some(vec![".codeloop/skills".into()]);
    Engine::open(options).unwrap()
}

#[tokio::test]
async fn skill_is_offered_only_when_a_skill_is_installed() {
    let h = Harness::new(Script::new([Turn::from(Reply::text("ok")), Turn::from(Reply::text("ok"))])).await;
    let engine = engine_with_project_skills(&h);
    let session = engine.create_session(h.project.path(), None, None, None).await.unwrap();
    engine.prompt(&session.id, PromptInput::text("hi"), Delivery::Queue).await.unwrap();
    let without = offered(&h.fake.requests()[0].body);
    assert!(!without.contains(&"skill".into()), "no skills, no skill tool: {without:?}");
    assert!(without.contains(&"read".into()));

    let dir = h.project.path().join(".codeloop/skills/deploy");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), "---\ndescription: Ship it.\n---\nRun the release script.\n")
        .unwrap();
    engine.prompt(&session.id, PromptInput::text("again"), Delivery::Queue).await.unwrap();
    let with = offered(&h.fake.requests()[1].body);
    assert!(with.contains(&"skill".into()), "{with:?}");
}

#[tokio::test]
async fn task_is_offered_only_when_the_agent_can_start_a_subagent() {
    let script = || Script::new([Turn::from(Reply::text("ok"))]);
    let default = Harness::new(script()).await;
    default.prompt("hi").await;
    assert!(offered(&default.fake.requests()[0].body).contains(&"task".into()));

    let no_subagents = Harness::with(script(), AskPolicy::Deny, |config| {
        for name in ["general", "explore"] {
            config.agent.insert(name.into(), AgentSettings { disable: true, ..Default::default() });
        }
    })
    .await;
    no_subagents.prompt("hi").await;
    let tools = offered(&no_subagents.fake.requests()[0].body);
    assert!(!tools.contains(&"task".into()), "no subagents, no task tool: {tools:?}");

    let all_denied = Harness::with(script(), AskPolicy::Deny, |config| {
        config.permission = PermissionConfig(vec![
            PermissionRule::new("task", "general", PermissionAction::Deny),
            PermissionRule::new("task", "explore", PermissionAction::Deny),
        ]);
    })
    .await;
    all_denied.prompt("hi").await;
    let tools = offered(&all_denied.fake.requests()[0].body);
    assert!(!tools.contains(&"task".into()), "every subagent denied by name: {tools:?}");
}

/// What Qwen2.5-Coder answers on a server started without a tool-call parser, in 3 chunks.
fn call_as_text() -> Turn {
    let text = "<tool_call>\n{\"name\": \"read\", \"arguments\": {\"filePath\": \"a.txt\"}}\n</tool_call>";
    Turn::from(Reply::text(text).with_text_chunks(3))
}

fn set_tool_call_text(config: &mut Config, mode: ToolCallText) {
    config.provider.get_mut("fake").unwrap().tool_call_text = Some(mode);
}

/// Runs one prompt and returns its outcome with the warnings published meanwhile.
async fn prompt_with_warnings(h: &Harness, text: &str) -> (StopReason, Vec<String>) {
    let mut events = h.engine.bus().subscribe();
    let outcome = h.prompt(text).await;
    let mut warnings = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let EventPayload::SessionWarning { message, .. } = &event.payload {
            warnings.push(message.clone());
        }
    }
    (outcome.stop, warnings)
}

#[tokio::test]
async fn a_tool_call_written_as_text_is_named_in_a_warning_by_default() {
    let h = Harness::new(Script::new([call_as_text()])).await;
    h.write("a.txt", "hi\n");
    let (stop, warnings) = prompt_with_warnings(&h, "what is in a.txt?").await;
    assert_eq!(stop, StopReason::Completed, "warn leaves the answer as it is");
    let [warning] = warnings.as_slice() else { panic!("one warning: {warnings:?}") };
    assert!(warning.contains("call to `read` written as text"), "{warning}");
    assert!(warning.contains("tool_call_text = \"parse\" in [provider.fake.models.\"test\"]"), "{warning}");
    assert!(h.tool_parts().is_empty());
}

#[tokio::test]
async fn with_tool_call_text_off_nothing_is_said() {
    let h = Harness::with(Script::new([call_as_text()]), AskPolicy::Deny, |c| {
        set_tool_call_text(c, ToolCallText::Off)
    })
    .await;
    let (stop, warnings) = prompt_with_warnings(&h, "what is in a.txt?").await;
    assert_eq!(stop, StopReason::Completed);
    assert!(warnings.is_empty(), "{warnings:?}");
}

async fn parsed_call_runs_and_is_recorded(api: WireApi, answer: Turn) {
    let h =
        Harness::with(Script::new([answer, Turn::from(Reply::text("It says hi."))]), AskPolicy::Deny, |c| {
            set_tool_call_text(c, ToolCallText::Parse);
            c.provider.get_mut("fake").unwrap().api = api;
        })
        .await;
    h.write("a.txt", "hi\n");
    let (stop, warnings) = prompt_with_warnings(&h, "what is in a.txt?").await;
    assert_eq!(stop, StopReason::Completed);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(h.fake.request_count(), 2, "the call ran and the model was asked again");
    let tools = h.tool_parts();
    let tool = tools[0].as_tool().unwrap();
    assert_eq!(tool.tool, "read");
    assert_eq!(tool.metadata, Some(json!({"written_as_text": true})), "recorded as a call made from text");
    let ToolState::Completed(done) = &tool.state else { panic!("{:?}", tool.state) };
    assert!(done.output.contains("1: hi"), "{}", done.output);
    // The assistant message holds the call and no text: the next request sends it as a real call.
    let history = h.history();
    assert!(history[1].parts.iter().all(|p| p.as_text().is_none()), "{:?}", history[1].parts);
    if api == WireApi::OpenAiChat {
        let results = tool_results(&h.request_messages(1));
        assert_eq!(results[0].0, tool.call_id);
    }
}

#[tokio::test]
async fn with_tool_call_text_parse_a_call_written_as_text_runs_and_is_recorded_as_a_call() {
    parsed_call_runs_and_is_recorded(WireApi::OpenAiChat, call_as_text()).await;
}

#[tokio::test]
async fn with_tool_call_text_parse_a_fenced_json_call_runs_over_anthropic_too() {
    let fenced = "```json\n{\"name\": \"read\", \"parameters\": {\"filePath\": \"a.txt\"}}\n```";
    parsed_call_runs_and_is_recorded(WireApi::Anthropic, Turn::from(Reply::text(fenced))).await;
}

#[tokio::test]
async fn with_tool_call_text_parse_prose_stays_prose() {
    let h = Harness::with(
        Script::new([Turn::from(Reply::text("{Braces} in prose are not a call.").with_text_chunks(4))]),
        AskPolicy::Deny,
        |c| set_tool_call_text(c, ToolCallText::Parse),
    )
    .await;
    assert_eq!(h.prompt("hi").await.stop, StopReason::Completed);
    assert!(h.tool_parts().is_empty());
    let text = h.history()[1].parts.iter().find_map(|p| p.as_text().map(|t| t.text.clone())).unwrap();
    assert_eq!(text, "{Braces} in prose are not a call.");
}

#[tokio::test]
async fn a_task_call_with_an_invented_id_is_told_to_leave_it_out() {
    let h = Harness::new(Script::new([
        Turn::from(Reply::tool_call(
            "task",
            json!({"description": "look", "prompt": "look", "subagent_type": "explore", "task_id": "ses_invented"}),
        )),
        Turn::from(Reply::text("ok")),
    ]))
    .await;
    assert_eq!(h.prompt("look around").await.stop, StopReason::Completed);
    let tools = h.tool_parts();
    let ToolState::Error(error) = state(&tools[0]) else { panic!("{:?}", state(&tools[0])) };
    assert!(error.error.contains("leave task_id out to start a new task"), "{}", error.error);
}

#[tokio::test]
async fn a_call_written_among_other_text_is_warned_about_but_never_run() {
    // How Qwen2.5-Coder 1.5B often answers: a sentence, then the call as a fenced JSON block.
    let mixed = || {
        let text = "I will read the file first.\n```json\n{\"name\": \"read\", \"arguments\": {\"filePath\": \"a.txt\"}}\n```";
        Script::new([Turn::from(Reply::text(text))])
    };
    for (mode, expected) in [
        (ToolCallText::Warn, "looks like a call to `read` written as text"),
        (ToolCallText::Parse, "takes only an answer that is nothing but calls"),
    ] {
        let h = Harness::with(mixed(), AskPolicy::Deny, |c| set_tool_call_text(c, mode)).await;
        let (stop, warnings) = prompt_with_warnings(&h, "what is in a.txt?").await;
        assert_eq!(stop, StopReason::Completed);
        assert!(h.tool_parts().is_empty(), "{mode:?}: prose around it, so no call is made");
        assert!(matches!(warnings.as_slice(), [w] if w.contains(expected)), "{mode:?}: {warnings:?}");
    }
}
