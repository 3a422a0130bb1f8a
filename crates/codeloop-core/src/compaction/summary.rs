//! Summary compaction (DESIGN.md §4 "Summary", reference §6): which messages are summarised (the head),
//! which stay verbatim (the tail, recorded as explicit ids), and the summary request itself.

use codeloop_provider::{ChatMessage, UserContent};
use codeloop_store::MessageWithParts;
use codeloop_types::{Message, MessageId, ModelRef, PartKind};

use crate::projection::{ProjectionOptions, to_provider_messages};

/// Tool outputs in the summary input are cut to this many characters.
pub const SUMMARY_TOOL_OUTPUT_CHARS: usize = 2_000;
pub const TAIL_BUDGET_MIN: u64 = 2_000;
pub const TAIL_BUDGET_MAX: u64 = 15_000;

pub const SUMMARY_SYSTEM_PROMPT: &str = "You summarise a coding session so that work can continue after older history is removed.
Summarise only the history you are given; the newest turns are kept verbatim elsewhere and must not be repeated.
When a <previous-summary> is given, treat it as the anchor: update it, keep what is still true, drop what is stale, and merge new facts.
Follow the requested structure exactly. Do not answer the conversation, do not call tools, and write in the language of the conversation.";

const TEMPLATE: &str = "## Objective
<1-2 sentences: what the user wants>

## Important details
- <constraints, preferences, decisions with their reasons, facts needed to continue>

## Work state
### Completed
- <done, with exact paths and results>
### Active
- <in progress>
### Blocked
- <blocked items and why, or (none)>

## Next move
1. <the immediate next actions, in order>

## Relevant files
- <path>: <why it matters>";

/// The final user message of a summary request.
pub fn summary_prompt(previous: Option<&str>) -> String {
    let rules = "Rules: keep every section (write (none) when empty); terse bullets; preserve exact file paths, symbols, commands, error strings, URLs and identifiers; never mention summarising or compaction.";
    match previous {
        Some(previous) => format!(
            "Update the anchored summary below using the conversation above. Output exactly this Markdown structure:\n\n{TEMPLATE}\n\n{rules}\n\n<previous-summary>\n{previous}\n</previous-summary>"
        ),
        None => format!(
            "Create an anchored summary of the conversation above. Output exactly this Markdown structure:\n\n{TEMPLATE}\n\n{rules}"
        ),
    }
}

/// Text of the synthetic message that resumes work after an automatic compaction.
pub const CONTINUE_TEXT: &str = "Continue with the task if you have next steps. If you are unsure how to proceed, stop and ask the user for clarification.";
pub const OVERFLOW_MEDIA_NOTE: &str = "The previous request was too large for the model's context window, most likely because of attached media. The media were removed from the history. Tell the user to retry with smaller or fewer files if they are still needed.\n\n";

/// The tail budget: `usable × 0.25` clamped to 2 000–15 000 tokens unless configured.
pub fn tail_budget(usable: u64, configured: Option<u64>) -> u64 {
    configured.unwrap_or((usable / 4).clamp(TAIL_BUDGET_MIN, TAIL_BUDGET_MAX))
}

/// Estimated tokens of one message as the model would see it (JSON chars / 4).
fn estimate(message: &MessageWithParts, model: &ModelRef) -> u64 {
    let projected = to_provider_messages(&[message], model, ProjectionOptions::default());
    let chars: usize = projected.iter().map(chat_chars).sum();
    (chars as u64).div_ceil(4)
}

pub(crate) fn chat_chars(message: &ChatMessage) -> usize {
    match message {
        ChatMessage::User(content) => content
            .iter()
            .map(|c| match c {
                UserContent::Text(t) => t.len(),
                UserContent::File(f) => f.url.len().min(4_000),
            })
            .sum(),
        ChatMessage::Assistant(content) => content
            .iter()
            .map(|c| match c {
                codeloop_provider::AssistantContent::Text { text, .. }
                | codeloop_provider::AssistantContent::Reasoning { text, .. } => text.len(),
                codeloop_provider::AssistantContent::ToolCall { input, name, .. } => {
                    input.to_string().len() + name.len()
                }
            })
            .sum(),
        ChatMessage::Tool(result) => result.output.len() + 32,
    }
}

fn is_real_user(message: &MessageWithParts) -> bool {
    matches!(message.info, Message::User(_)) && !message.parts.iter().any(|p| p.as_compaction().is_some())
}

/// Splits `history` (what the summary may see, oldest first) into head and tail: the last `tail_turns`
/// turns kept whole while they fit `budget`, then the longest fitting suffix of the first turn that does
/// not. Returns the tail's message ids (possibly empty: everything is head).
pub fn select_tail(
    history: &[&MessageWithParts],
    tail_turns: usize,
    budget: u64,
    model: &ModelRef,
) -> Vec<MessageId> {
    if tail_turns == 0 || history.is_empty() {
        return Vec::new();
    }
    let turn_starts: Vec<usize> =
        history.iter().enumerate().filter(|(_, m)| is_real_user(m)).map(|(i, _)| i).collect();
    let sizes: Vec<u64> = history.iter().map(|m| estimate(m, model)).collect();
    let mut start = history.len();
    let mut used = 0u64;
    for (taken, &turn_start) in turn_starts.iter().rev().enumerate() {
        if taken >= tail_turns {
            break;
        }
        let turn_size: u64 = sizes[turn_start..start].iter().sum();
        if used + turn_size <= budget {
            used += turn_size;
            start = turn_start;
            continue;
        }
        // Keep the longest suffix of this turn (after its user message) that still fits.
        let mut suffix_start = start;
        let mut suffix = 0u64;
        for index in (turn_start + 1..start).rev() {
            if used + suffix + sizes[index] > budget {
                break;
            }
            suffix += sizes[index];
            suffix_start = index;
        }
        start = suffix_start;
        break;
    }
    if start == 0 || start >= history.len() {
        return Vec::new();
    }
    history[start..].iter().map(|m| m.info.id().clone()).collect()
}

/// The text of a finished summary message.
pub fn summary_text(message: &MessageWithParts) -> String {
    message
        .parts
        .iter()
        .filter_map(|p| match &p.kind {
            PartKind::Text(t) if !t.ignored => Some(t.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}
