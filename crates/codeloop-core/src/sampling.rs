//! MCP sampling (DESIGN.md §5o): a server's `sampling/createMessage` answered with the session's own
//! model — one request without tools, its text collected, its usage priced.
//!
//! Owns: the request (the server's system prompt and messages, its token cap within the model's) and
//! the answer. Must not: ask anyone (the MCP layer asks the person first, under `mcp_sampling`), or
//! record cost (the call's part carries it and the run adds it to the session like a step's).

use futures::StreamExt as _;

use codeloop_provider::{
    AssistantContent, ChatMessage, ProviderRequest, StreamEvent, ToolChoice, UserContent,
};
use codeloop_tools::{SampleRequest, Sampled};
use codeloop_types::{Finish, SessionId};

use crate::models::ResolvedModel;

/// Asks `model` and collects its answer.
pub async fn answer(
    model: &ResolvedModel,
    session: &SessionId,
    request: SampleRequest,
) -> Result<Sampled, String> {
    let messages = request
        .messages
        .into_iter()
        .map(|(role, text)| match role.as_str() {
            "assistant" => ChatMessage::Assistant(vec![AssistantContent::Text { text, metadata: None }]),
            _ => ChatMessage::User(vec![UserContent::Text(text)]),
        })
        .collect();
    let cap = crate::compaction::max_output(&model.limits);
    let provider_request = ProviderRequest {
        model: model.api_id.clone(),
        system: request.system.into_iter().collect(),
        messages,
        tools: Vec::new(),
        tool_choice: ToolChoice::None,
        max_output_tokens: Some(request.max_tokens.clamp(1, cap.max(1))),
        temperature: model.temperature,
        top_p: model.top_p,
        tool_call_text: codeloop_provider::ToolCallText::Off,
        session_id: Some(session.to_string()),
        reasoning: None,
        cache: None,
    };
    let mut stream = model
        .provider
        .stream(std::sync::Arc::new(provider_request))
        .await
        .map_err(|e| format!("the model could not be asked: {e}"))?;
    let mut text = String::new();
    let mut usage = codeloop_provider::Usage::default();
    let mut stop = "endTurn";
    while let Some(event) = stream.next().await {
        match event.map_err(|e| format!("the model's answer broke off: {e}"))? {
            StreamEvent::TextDelta { text: delta, .. } => text.push_str(&delta),
            StreamEvent::FinishStep { finish, usage: step, .. } => {
                if finish == Finish::Length {
                    stop = "maxTokens";
                }
                if let Some(step) = step {
                    usage = step;
                }
            }
            _ => {}
        }
    }
    Ok(Sampled {
        text,
        model: model.reference.to_string(),
        stop: stop.into(),
        input_tokens: usage.input + usage.cache_read + usage.cache_write,
        output_tokens: usage.output + usage.reasoning,
        cost: codeloop_provider::catalogue::cost(&model.info, &usage),
    })
}
