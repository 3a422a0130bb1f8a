//! Round trips in each wire format: a tool-call turn with reasoning, then the follow-up request, pinned
//! exactly (tool result shape, reasoning echoed back with its signature or encrypted content).

use codeloop_core::StopReason;
use codeloop_core::permission::AskPolicy;
use codeloop_provider::WireApi;
use codeloop_testkit::{Reply, Script, ScriptUsage, Turn};
use serde_json::{Value, json};

use crate::harness::Harness;

async fn round_trip(api: WireApi) -> Value {
    let h = Harness::with(
        Script::new([
            Turn::from(
                Reply::tool_call("read", json!({"filePath": "a.txt"}))
                    .with_reasoning("The user wants the file; read it.")
                    .with_text("Reading a.txt.")
                    .with_usage(ScriptUsage::new(1_200, 30).with_reasoning(8).with_cached(1_000)),
            ),
            Turn::from(Reply::text("It says hi.").with_usage(ScriptUsage::new(1_300, 5).with_cached(1_200))),
        ]),
        AskPolicy::Deny,
        |config| config.provider.get_mut("fake").unwrap().api = api,
    )
    .await;
    h.write("a.txt", "hi\n");
    let outcome = h.prompt("what is in a.txt?").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    let session = h.engine.session(&h.session.id).await.unwrap();
    assert!(session.cost > 0.0, "cost comes from the configured prices");
    let mut body = h.fake.requests()[1].body.clone();
    let project = h.project.path().canonicalize().unwrap().display().to_string();
    // The system prompt holds the date and paths; tools are pinned by the tool tests.
    for key in ["system", "instructions", "tools", "prompt_cache_key"] {
        if body.get(key).is_some() {
            body[key] = json!("[redacted]");
        }
    }
    if let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) {
        messages.retain(|m| m["role"] != "system");
    }
    // The context block leading the conversation holds the session's scratch dir and date.
    let scratch = codeloop_tools::session_temp_dir(h.session.id.as_str()).unwrap().display().to_string();
    let date = codeloop_types::date_of(session.time.created);
    let text = body
        .to_string()
        .replace(&project, "[PROJECT]")
        .replace(&scratch, "[TMPDIR]")
        .replace(&format!("Today's date: {date}"), "Today's date: [DATE]");
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn openai_chat_round_trip() {
    insta::assert_json_snapshot!("round_trip_openai_chat", round_trip(WireApi::OpenAiChat).await);
}

#[tokio::test]
async fn openai_responses_round_trip_echoes_reasoning_items() {
    let body = round_trip(WireApi::OpenAiResponses).await;
    let input = body["input"].as_array().unwrap();
    assert!(input.iter().any(|i| i["type"] == "function_call_output"), "{body}");
    insta::assert_json_snapshot!("round_trip_openai_responses", body);
}

#[tokio::test]
async fn anthropic_round_trip_echoes_signed_thinking() {
    let body = round_trip(WireApi::Anthropic).await;
    let text = body.to_string();
    assert!(text.contains("\"signature\""), "thinking goes back with its signature: {text}");
    assert!(text.contains("tool_result"), "{text}");
    insta::assert_json_snapshot!("round_trip_anthropic", body);
}
