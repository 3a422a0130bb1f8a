//! Projection (reference §6.4, §7): stored history → the provider-neutral messages of the next request.
//!
//! Owns: the summary boundary (`[compaction question, summary, tail…, newer…]`, tail by explicit ids),
//! skipping errored turns, pruned outputs, giving every tool call exactly one result, and the place of
//! the run's context block (first in the conversation).
//! Must not: write anything; it reads history and returns messages.

use std::collections::HashSet;

use codeloop_provider::{AssistantContent, ChatMessage, FileContent, ToolResult, UserContent};
use codeloop_store::MessageWithParts;
use codeloop_types::{FilePart, Message, MessageId, ModelRef, PartKind, ToolState};

pub const COMPACTION_QUESTION: &str = "What did we do so far?";
pub const PRUNED_OUTPUT: &str = "[Old tool result content cleared]";
pub const INTERRUPTED_RESULT: &str = "[Tool execution was interrupted]";
/// An interrupted call that had started (DESIGN.md §5m): not a failure, an unknown outcome.
pub const MAY_HAVE_ACTED_RESULT: &str =
    "This call was interrupted after it started and may have acted: check its effects before repeating it.";
/// An interrupted call that never started.
pub const NOT_STARTED_RESULT: &str =
    "This call was interrupted before it started: nothing ran, and it is safe to repeat.";

pub const SUBTASK_TEXT: &str = "The following tool was executed by the user";
/// The metadata key of a summary's part that is carried after it as a user message (the user's words).
pub const CARRIED_KEY: &str = "carried";

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProjectionOptions {
    /// Replace media by a note (summary input).
    pub strip_media: bool,
    /// Cut tool outputs to this many characters (summary input).
    pub tool_output_max_chars: Option<usize>,
}

/// A finished, error-free summary and the compaction request it answers.
fn is_finished_summary(message: &MessageWithParts) -> bool {
    matches!(&message.info, Message::Assistant(a)
        if a.summary && a.error.is_none() && a.finish.is_some() && a.time.completed.is_some())
}

/// The messages the model sees, in order. Everything before the newest summary is hidden except the
/// compaction request, the summary and the explicit tail.
pub fn visible_history(history: &[MessageWithParts]) -> Vec<&MessageWithParts> {
    let Some(summary_index) = history.iter().rposition(is_finished_summary) else {
        return history.iter().collect();
    };
    let summary = &history[summary_index];
    let Message::Assistant(summary_info) = &summary.info else { return history.iter().collect() };
    let Some(request_index) = history.iter().position(|m| m.info.id() == &summary_info.parent_id) else {
        return history.iter().collect();
    };
    let request = &history[request_index];
    let tail: HashSet<&MessageId> = request
        .parts
        .iter()
        .find_map(|p| p.as_compaction())
        .map(|c| c.tail.iter().collect())
        .unwrap_or_default();
    let mut visible = vec![request, summary];
    visible.extend(history[..request_index].iter().filter(|m| tail.contains(m.info.id())));
    visible.extend(history[request_index + 1..].iter().filter(|m| m.info.id() != summary.info.id()));
    visible
}

/// Ids of stored messages the model no longer sees (for `session show` / export).
pub fn hidden_ids(history: &[MessageWithParts]) -> HashSet<MessageId> {
    let visible: HashSet<&MessageId> = visible_history(history).iter().map(|m| m.info.id()).collect();
    history.iter().map(|m| m.info.id()).filter(|id| !visible.contains(id)).cloned().collect()
}

/// Puts the run's context block (see [`crate::instructions::SystemPrompt`]) first in the conversation:
/// the first text of the first user message, or a user message of its own when the history starts
/// otherwise. Every step of a session sends it in the same place, so a prefix cache keeps covering it.
pub fn lead_with_context(messages: &mut Vec<ChatMessage>, context: String) {
    match messages.first_mut() {
        Some(ChatMessage::User(content)) => content.insert(0, UserContent::Text(context)),
        _ => messages.insert(0, ChatMessage::User(vec![UserContent::Text(context)])),
    }
}

/// Turns visible history into provider messages for `model`.
pub fn to_provider_messages(
    visible: &[&MessageWithParts],
    model: &ModelRef,
    options: ProjectionOptions,
) -> Vec<ChatMessage> {
    let mut out = Vec::with_capacity(visible.len() * 2);
    for message in visible {
        match &message.info {
            Message::User(_) => {
                if let Some(user) = user_message(message, options) {
                    out.push(user);
                }
            }
            Message::Assistant(info) => {
                if let Some(error) = &info.error {
                    let has_content = message.parts.iter().any(|p| {
                        !matches!(
                            p.kind,
                            PartKind::StepStart(_) | PartKind::Reasoning(_) | PartKind::StepFinish(_)
                        )
                    });
                    if !(error.is_aborted() && has_content) {
                        continue;
                    }
                }
                let same_model = &info.model == model;
                assistant_messages(message, same_model, options, &mut out);
                if info.summary {
                    out.extend(carried_after_summary(message));
                }
            }
        }
    }
    out
}

/// A part carried after a summary as a user message (see [`CARRIED_KEY`]).
fn is_carried(part: &codeloop_types::Part) -> bool {
    matches!(&part.kind, PartKind::Text(t) if t.metadata.as_ref().is_some_and(|m| m.get(CARRIED_KEY).is_some()))
}

/// The user's words a summary carries, as the user message after it.
fn carried_after_summary(message: &MessageWithParts) -> Option<ChatMessage> {
    let content: Vec<UserContent> = message
        .parts
        .iter()
        .filter(|p| is_carried(p))
        .filter_map(|p| match &p.kind {
            PartKind::Text(t) if !t.ignored => Some(UserContent::Text(t.text.clone())),
            _ => None,
        })
        .collect();
    (!content.is_empty()).then_some(ChatMessage::User(content))
}

fn user_message(message: &MessageWithParts, options: ProjectionOptions) -> Option<ChatMessage> {
    let mut content = Vec::new();
    for part in &message.parts {
        match &part.kind {
            PartKind::Text(text) if !text.ignored && !text.text.is_empty() => {
                content.push(UserContent::Text(text.text.clone()))
            }
            PartKind::File(file) => content.push(file_content(file, options)),
            PartKind::Compaction(_) => content.push(UserContent::Text(COMPACTION_QUESTION.into())),
            PartKind::Subtask(_) => content.push(UserContent::Text(SUBTASK_TEXT.into())),
            _ => {}
        }
    }
    (!content.is_empty()).then_some(ChatMessage::User(content))
}

fn media_note(file: &FilePart) -> String {
    format!("[Attached {}: {}]", file.mime, file.filename.as_deref().unwrap_or("file"))
}

fn file_content(file: &FilePart, options: ProjectionOptions) -> UserContent {
    if options.strip_media && !file.mime.starts_with("text/") {
        return UserContent::Text(media_note(file));
    }
    UserContent::File(FileContent {
        mime: file.mime.clone(),
        url: file.url.clone(),
        filename: file.filename.clone(),
    })
}

fn cut(text: &str, max: Option<usize>) -> String {
    match max.map(|max| codeloop_tools::cut_chars(text, max)) {
        Some((kept, true)) => {
            let omitted = text[kept.len()..].chars().count();
            format!("{kept}\n[Tool output truncated for compaction: omitted {omitted} chars]")
        }
        _ => text.to_owned(),
    }
}

fn assistant_messages(
    message: &MessageWithParts,
    same_model: bool,
    options: ProjectionOptions,
    out: &mut Vec<ChatMessage>,
) {
    let mut content = Vec::new();
    let mut results = Vec::new();
    for part in message.parts.iter().filter(|p| !is_carried(p)) {
        match &part.kind {
            PartKind::Text(text) if !text.ignored && !text.text.is_empty() => {
                content.push(AssistantContent::Text {
                    text: text.text.clone(),
                    metadata: if same_model { text.metadata.clone() } else { None },
                })
            }
            PartKind::Reasoning(reasoning) if reasoning.ignored => {}
            PartKind::Tool(tool) if tool.ignored => {}
            PartKind::Reasoning(reasoning) => {
                if same_model {
                    content.push(AssistantContent::Reasoning {
                        text: reasoning.text.clone(),
                        metadata: reasoning.metadata.clone(),
                    });
                } else if !reasoning.text.trim().is_empty() {
                    content.push(AssistantContent::Text { text: reasoning.text.clone(), metadata: None });
                }
            }
            PartKind::Tool(tool) => {
                content.push(AssistantContent::ToolCall {
                    call_id: tool.call_id.clone(),
                    name: tool.tool.clone(),
                    input: tool.state.input().clone(),
                    metadata: if same_model { tool.metadata.clone() } else { None },
                });
                results.push(tool_result(&tool.call_id, &tool.tool, &tool.state, options));
            }
            _ => {}
        }
    }
    if content.is_empty() {
        return;
    }
    out.push(ChatMessage::Assistant(content));
    out.extend(results.into_iter().map(ChatMessage::Tool));
}

/// A command that ran and failed (exited non-zero, timed out or was interrupted) is a failed call for the
/// model (Anthropic's `is_error`), though its output is kept whole (DESIGN.md §5l). A job that started
/// (`background`) is no failure.
fn failed_command(metadata: &serde_json::Value) -> bool {
    let background = metadata.get("background").and_then(serde_json::Value::as_bool).unwrap_or(false);
    match metadata.get("exit") {
        Some(serde_json::Value::Number(code)) => code.as_i64() != Some(0),
        Some(serde_json::Value::Null) => !background,
        _ => false,
    }
}

fn tool_result(call_id: &str, name: &str, state: &ToolState, options: ProjectionOptions) -> ToolResult {
    let (output, is_error, attachments) = match state {
        ToolState::Completed(done) if done.time.compacted.is_some() => {
            (PRUNED_OUTPUT.to_owned(), false, Vec::new())
        }
        ToolState::Completed(done) => {
            let attachments = if options.strip_media {
                Vec::new()
            } else {
                done.attachments
                    .iter()
                    .map(|f| FileContent {
                        mime: f.mime.clone(),
                        url: f.url.clone(),
                        filename: f.filename.clone(),
                    })
                    .collect()
            };
            let mut output = cut(&done.output, options.tool_output_max_chars);
            if options.strip_media {
                for file in &done.attachments {
                    output.push('\n');
                    output.push_str(&media_note(file));
                }
            }
            (output, failed_command(&done.metadata), attachments)
        }
        ToolState::Error(error) if state.is_interrupted() => {
            // What the model is told depends on what is known: a call that never ran is safe to repeat;
            // one that started may have acted (its output so far is replayed with it).
            let metadata = error.metadata.as_ref();
            let outcome = metadata.and_then(|m| m.get("outcome")).and_then(|o| o.as_str());
            let partial =
                metadata.and_then(|m| m.get("output")).and_then(|o| o.as_str()).filter(|o| !o.is_empty());
            let sent = metadata
                .filter(|m| m.get(crate::mcp::REQUEST_SENT_KEY).and_then(|s| s.as_bool()) == Some(true))
                .and_then(|m| {
                    Some((m.get("server")?.as_str()?, m.get(crate::mcp::OPERATION_KEY)?.as_str()?))
                });
            let text = match (outcome, partial) {
                (Some(codeloop_types::OUTCOME_NOT_STARTED), _) => NOT_STARTED_RESULT.to_owned(),
                (Some(codeloop_types::OUTCOME_UNKNOWN), None) if let Some((server, operation)) = sent => {
                    format!(
                        "This call was interrupted after its request reached the MCP server `{server}` (operation id \
                     {operation}): it may have acted. Check its effects before repeating it."
                    )
                }
                (Some(codeloop_types::OUTCOME_UNKNOWN), None) => MAY_HAVE_ACTED_RESULT.to_owned(),
                (Some(codeloop_types::OUTCOME_UNKNOWN), Some(output)) => {
                    format!("{}\n\n[{MAY_HAVE_ACTED_RESULT}]", cut(output, options.tool_output_max_chars))
                }
                // Recorded before outcomes were: as it was sent then.
                (_, Some(output)) => {
                    format!("{}\n\n[{}]", cut(output, options.tool_output_max_chars), error.error)
                }
                (_, None) => error.error.clone(),
            };
            (text, partial.is_none(), Vec::new())
        }
        ToolState::Error(error) => (error.error.clone(), true, Vec::new()),
        ToolState::Pending(_) => (NOT_STARTED_RESULT.to_owned(), true, Vec::new()),
        ToolState::Running(_) => (INTERRUPTED_RESULT.to_owned(), true, Vec::new()),
    };
    ToolResult { call_id: call_id.to_owned(), name: name.to_owned(), output, is_error, attachments }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_command_that_failed_is_a_failed_call_for_the_model_but_a_started_job_is_not() {
        assert!(failed_command(&json!({"exit": 3})));
        assert!(failed_command(&json!({"exit": null})), "timed out or interrupted");
        assert!(!failed_command(&json!({"exit": 0})));
        assert!(!failed_command(&json!({"exit": null, "background": true})));
        assert!(!failed_command(&json!({"filepath": "a.txt"})), "not a command");
    }
}
