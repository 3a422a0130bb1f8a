//! The prompt prefix caches across sessions: two sessions' first requests are byte-identical through
//! the system prompt and the tool list, in the order each wire format's server lays the prompt out, so a
//! prefix cache (llama.cpp's slots, OpenAI's and Gemini's implicit caches, Anthropic's cache markers)
//! reuses it. What varies per session or per day (date, scratch dir) comes after, in the conversation.

use codeloop_core::permission::AskPolicy;
use codeloop_core::{Delivery, PromptInput};
use codeloop_provider::WireApi;
use codeloop_testkit::{Reply, Script, Turn};
use serde_json::Value;

use crate::harness::Harness;

/// The parts of a request body in the order the server renders the prompt, first to last. Chat
/// templates (llama.cpp, vLLM) and OpenAI's own rendering put the tool list inside the system turn,
/// after the system text; the Responses API does the same with `instructions`; Anthropic renders tools,
/// then system, then messages; Gemini system instruction, tools, then contents.
fn rendered(api: WireApi, body: &Value) -> Vec<(&'static str, String)> {
    let json = |value: &Value| value.to_string();
    match api {
        WireApi::OpenAiChat | WireApi::Azure => {
            let messages = body["messages"].as_array().cloned().unwrap_or_default();
            let system = messages.iter().take_while(|m| m["role"] == "system").count();
            vec![
                ("system", json(&Value::Array(messages[..system].to_vec()))),
                ("tools", json(&body["tools"])),
                ("conversation", json(&Value::Array(messages[system..].to_vec()))),
            ]
        }
        WireApi::OpenAiResponses => vec![
            ("system", json(&body["instructions"])),
            ("tools", json(&body["tools"])),
            ("conversation", json(&body["input"])),
        ],
        WireApi::Anthropic => vec![
            ("tools", json(&body["tools"])),
            ("system", json(&body["system"])),
            ("conversation", json(&body["messages"])),
        ],
        WireApi::Gemini => vec![
            ("system", json(&body["systemInstruction"])),
            ("tools", json(&body["tools"])),
            ("conversation", json(&body["contents"])),
        ],
    }
}

/// The first request of two sessions of one project, each answering the same prompt.
async fn first_requests(api: WireApi) -> (Value, Value, [String; 2]) {
    let h = Harness::with(
        Script::new([Turn::from(Reply::text("Hello.")), Turn::from(Reply::text("Hello again."))]),
        AskPolicy::Deny,
        |config| config.provider.get_mut("fake").unwrap().api = api,
    )
    .await;
    let second = h.engine.create_session(h.project.path(), None, None, None).await.unwrap();
    // Gemini is not served by the test kit: its requests are recorded and answered 404.
    let _ = h.prompt("say hello").await;
    let _ = h.engine.prompt(&second.id, PromptInput::text("say hello"), Delivery::Queue).await;
    let requests = h.fake.requests();
    assert_eq!(requests.len(), 2, "one request per session");
    let scratch = |id: &str| codeloop_tools::session_temp_dir(id).unwrap().display().to_string();
    let dirs = [scratch(h.session.id.as_str()), scratch(second.id.as_str())];
    (requests[0].body.clone(), requests[1].body.clone(), dirs)
}

async fn prefix_covers_system_and_tools(api: WireApi) {
    let (first, second, scratch) = first_requests(api).await;
    let (a, b) = (rendered(api, &first), rendered(api, &second));
    let stable: usize = a.iter().take_while(|(part, _)| *part != "conversation").map(|(_, t)| t.len()).sum();
    let tools = &a.iter().find(|(part, _)| *part == "tools").unwrap().1;
    assert!(tools.len() > 1_000, "{}: the tools are in the request: {tools}", api.as_str());
    let (a, b): (String, String) =
        (a.into_iter().map(|(_, t)| t).collect(), b.into_iter().map(|(_, t)| t).collect());
    let common = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    eprintln!(
        "{}: first request {} bytes as rendered; identical prefix {common} bytes; system + tools {stable} bytes",
        api.as_str(),
        a.len()
    );
    assert!(
        common >= stable,
        "{}: the sessions' first requests differ at byte {common}, inside the system prompt or tools ({stable} bytes): …{}…",
        api.as_str(),
        &a[common.saturating_sub(80)..(common + 80).min(a.len())]
    );
    // What differs per session still reaches the model, after the stable part.
    assert!(a[stable..].contains(&scratch[0]) && b[stable..].contains(&scratch[1]), "{a}");
    assert!(a[stable..].contains("Today's date: "), "{a}");
}

#[tokio::test]
async fn openai_chat_first_requests_of_two_sessions_share_system_and_tools() {
    prefix_covers_system_and_tools(WireApi::OpenAiChat).await;
}

#[tokio::test]
async fn openai_responses_first_requests_of_two_sessions_share_instructions_and_tools() {
    prefix_covers_system_and_tools(WireApi::OpenAiResponses).await;
}

#[tokio::test]
async fn anthropic_first_requests_of_two_sessions_share_tools_and_system() {
    prefix_covers_system_and_tools(WireApi::Anthropic).await;
}

#[tokio::test]
async fn gemini_first_requests_of_two_sessions_share_system_instruction_and_tools() {
    prefix_covers_system_and_tools(WireApi::Gemini).await;
}
