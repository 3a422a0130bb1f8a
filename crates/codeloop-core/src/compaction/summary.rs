//! Summary compaction (DESIGN.md §4 "Summary", reference §6): which messages are summarised (the head),
//! which stay verbatim (the tail, recorded as explicit ids), and the summary request itself.

use codeloop_provider::{ChatMessage, UserContent};
use codeloop_store::MessageWithParts;
use codeloop_types::{Message, MessageId, ModelRef, PartKind, ToolState};

use crate::projection::{ProjectionOptions, to_provider_messages};

/// Tool outputs in the summary input are cut to this many characters.
pub const SUMMARY_TOOL_OUTPUT_CHARS: usize = 2_000;
pub const TAIL_BUDGET_MIN: u64 = 2_000;
pub const TAIL_BUDGET_MAX: u64 = 15_000;

pub const SUMMARY_SYSTEM_PROMPT: &str = "You summarise a coding session so that work can continue after older history is removed.
Summarise only the history you are given; the newest turns are kept verbatim elsewhere and must not be repeated.
When a <previous-summary> is given, treat it as the anchor: update it, keep what is still true, drop what is stale, and merge new facts.
Follow the requested structure exactly. Do not answer the conversation, do not call tools, and write in the language of the conversation.";

/// The sections, described in prose: a template with `<…>` placeholders gets copied, placeholders and
/// invented progress included, by small models.
const SECTIONS: &str = "Write it in Markdown with exactly these headings, in this order: ## Objective, ## Important details, \
## Next move, ## Relevant files. (codeloop adds the work state from its own record: do not write one.)

What goes under each, taken only from the conversation above:
- Objective: what the user asked for, in one or two sentences.
- Important details: the constraints, preferences and decisions (with their reasons) the conversation states, and what \
the tool results showed (errors, findings).
- Next move: the next actions, numbered, in order.
- Relevant files: each path the conversation names, with why it matters.

Write (none) under a heading the conversation gives nothing for. A change counts as done only when a tool result above \
shows it: never describe work, results or files the conversation does not show, and do not copy these instructions. Keep \
exact file paths, symbols, commands, error strings, URLs and identifiers; use terse bullets; never mention summarising or \
compaction.";

/// Calls listed by name in the summariser's tool record, at most.
const RECORDED_CALLS: usize = 30;

/// What the tool calls of the summarised history did, as codeloop recorded them: the summariser is
/// told, so it cannot claim work no tool did, and the summary carries the count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkRecord {
    /// `(tool, what it worked on, completed | failed | interrupted)`, oldest first.
    pub calls: Vec<(String, String, &'static str)>,
}

impl WorkRecord {
    /// The record of the tool calls in `head` (calls a retried attempt discarded are left out).
    pub fn of(head: &[&MessageWithParts]) -> WorkRecord {
        let calls = head
            .iter()
            .flat_map(|m| &m.parts)
            .filter_map(|p| p.as_tool())
            .filter(|tool| !tool.ignored)
            .map(|tool| {
                let status = match &tool.state {
                    ToolState::Completed(_) => "completed",
                    ToolState::Error(_) if tool.state.is_interrupted() => "interrupted",
                    ToolState::Error(_) => "failed",
                    ToolState::Pending(_) | ToolState::Running(_) => "interrupted",
                };
                let subject = codeloop_tools::call_summary(&tool.tool, tool.state.input());
                (tool.tool.clone(), subject, status)
            })
            .collect();
        WorkRecord { calls }
    }

    /// What the summariser is told.
    fn for_prompt(&self) -> String {
        if self.calls.is_empty() {
            return "Tool results in the conversation above: none. No tool ran, so nothing was changed, run or checked \
                    yet."
                .to_owned();
        }
        let mut text =
            String::from("Tool results in the conversation above (codeloop's record, oldest first):");
        for (tool, subject, status) in self.calls.iter().take(RECORDED_CALLS) {
            let subject = if subject.is_empty() { String::new() } else { format!(" {subject}") };
            text.push_str(&format!("\n- {tool}{subject}: {status}"));
        }
        if self.calls.len() > RECORDED_CALLS {
            text.push_str(&format!("\n- … and {} more", self.calls.len() - RECORDED_CALLS));
        }
        text
    }

    /// The line codeloop adds to the summary itself (after a blank line: formats that join a message's
    /// texts join them as they are).
    pub fn note(&self) -> String {
        let count = |status: &str| self.calls.iter().filter(|(_, _, s)| *s == status).count();
        match self.calls.len() {
            0 => "\n\n(codeloop's record: no tool ran in the conversation this summary replaces.)".to_owned(),
            n => format!(
                "\n\n(codeloop's record of the conversation this summary replaces: {n} tool call(s), {} completed, {} \
                 failed, {} interrupted.)",
                count("completed"),
                count("failed"),
                count("interrupted")
            ),
        }
    }
}

/// The final user message of a summary request.
pub fn summary_prompt(previous: Option<&str>, record: &WorkRecord) -> String {
    let record = record.for_prompt();
    match previous {
        Some(previous) => format!(
            "Update the anchored summary below with the conversation above: keep what is still true, drop what is \
             stale, add what is new. {SECTIONS}\n\n{record}\n\n<previous-summary>\n{previous}\n</previous-summary>"
        ),
        None => format!(
            "Write an anchored summary of the conversation above, so that the work can go on without it. \
             {SECTIONS}\n\n{record}"
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

/// The text of a finished summary message, as the summariser wrote it (codeloop's own note about the
/// history it replaced is left out: the next summary gets a note of its own).
pub fn summary_text(message: &MessageWithParts) -> String {
    message
        .parts
        .iter()
        .filter_map(|p| match &p.kind {
            PartKind::Text(t) if !t.ignored && !t.synthetic => Some(t.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}
