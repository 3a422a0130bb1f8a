//! The event grammar every decoder shares: `Start`, `StartStep`, text and reasoning blocks with stable
//! ids, tool calls assembled from argument fragments, `FinishStep`, `Finish`; and the mapping of raw
//! finish reasons to [`Finish`].
//!
//! Owns: the order of events within one step. Must not: parse any wire format.

use codeloop_types::Finish;
use serde_json::Value;

use crate::{StreamEvent, ToolCall, Usage, parse_arguments};

/// The state of the one step a provider call produces.
#[derive(Debug, Default)]
pub(crate) struct Step {
    started: bool,
    step_finished: bool,
    finished: bool,
    next_block: u32,
    /// Id of the open text block.
    text: Option<String>,
    /// Id of the open reasoning block.
    reasoning: Option<String>,
    tool_calls: usize,
}

impl Step {
    /// `Start` and `StartStep`, once.
    pub(crate) fn start(&mut self, out: &mut Vec<StreamEvent>) {
        if !self.started {
            self.started = true;
            out.push(StreamEvent::Start);
            out.push(StreamEvent::StartStep);
        }
    }

    pub(crate) fn finished(&self) -> bool {
        self.finished
    }

    pub(crate) fn made_tool_calls(&self) -> bool {
        self.tool_calls > 0
    }

    fn block_id(&mut self, prefix: &str) -> String {
        let id = format!("{prefix}-{}", self.next_block);
        self.next_block += 1;
        id
    }

    /// Opens a new text block (closing whatever is open); `prefix` names its kind (`text`, `refusal`).
    pub(crate) fn open_text(&mut self, prefix: &str, out: &mut Vec<StreamEvent>) -> String {
        self.close_blocks(out);
        let id = self.block_id(prefix);
        out.push(StreamEvent::TextStart { id: id.clone() });
        self.text = Some(id.clone());
        id
    }

    /// Appends to the open text block, opening one if needed.
    pub(crate) fn text_delta(&mut self, text: &str, out: &mut Vec<StreamEvent>) {
        if text.is_empty() {
            return;
        }
        let id = match &self.text {
            Some(id) => id.clone(),
            None => self.open_text("text", out),
        };
        out.push(StreamEvent::TextDelta { id, text: text.to_owned() });
    }

    pub(crate) fn in_text(&self, prefix: &str) -> bool {
        self.text.as_deref().is_some_and(|id| id.starts_with(prefix))
    }

    pub(crate) fn close_text(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(id) = self.text.take() {
            out.push(StreamEvent::TextEnd { id });
        }
    }

    /// Opens a new reasoning block (closing whatever is open).
    pub(crate) fn open_reasoning(&mut self, metadata: Option<Value>, out: &mut Vec<StreamEvent>) {
        self.close_blocks(out);
        let id = self.block_id("reasoning");
        out.push(StreamEvent::ReasoningStart { id: id.clone(), metadata });
        self.reasoning = Some(id);
    }

    /// Appends to the open reasoning block, opening one if needed.
    pub(crate) fn reasoning_delta(&mut self, text: &str, out: &mut Vec<StreamEvent>) {
        if text.is_empty() {
            return;
        }
        if self.reasoning.is_none() {
            self.open_reasoning(None, out);
        }
        if let Some(id) = &self.reasoning {
            out.push(StreamEvent::ReasoningDelta { id: id.clone(), text: text.to_owned() });
        }
    }

    pub(crate) fn in_reasoning(&self) -> bool {
        self.reasoning.is_some()
    }

    pub(crate) fn close_reasoning(&mut self, metadata: Option<Value>, out: &mut Vec<StreamEvent>) {
        if let Some(id) = self.reasoning.take() {
            out.push(StreamEvent::ReasoningEnd { id, metadata });
        }
    }

    /// Closes the open text and reasoning blocks (reasoning without metadata).
    pub(crate) fn close_blocks(&mut self, out: &mut Vec<StreamEvent>) {
        self.close_text(out);
        self.close_reasoning(None, out);
    }

    pub(crate) fn tool_start(&mut self, call_id: &str, name: &str, out: &mut Vec<StreamEvent>) {
        self.close_blocks(out);
        out.push(StreamEvent::ToolInputStart { call_id: call_id.to_owned(), name: name.to_owned() });
    }

    pub(crate) fn tool_delta(&mut self, call_id: &str, delta: &str, out: &mut Vec<StreamEvent>) {
        if !delta.is_empty() {
            out.push(StreamEvent::ToolInputDelta { call_id: call_id.to_owned(), delta: delta.to_owned() });
        }
    }

    /// `ToolInputEnd` and the complete `ToolCall` with its arguments parsed.
    pub(crate) fn tool_end(
        &mut self,
        call_id: &str,
        name: &str,
        arguments: &str,
        metadata: Option<Value>,
        out: &mut Vec<StreamEvent>,
    ) {
        self.tool_calls += 1;
        out.push(StreamEvent::ToolInputEnd { call_id: call_id.to_owned() });
        out.push(StreamEvent::ToolCall(ToolCall {
            call_id: call_id.to_owned(),
            name: name.to_owned(),
            input: parse_arguments(arguments),
            metadata,
        }));
    }

    /// Closes open blocks and emits `FinishStep`, once. Alone when an error follows (so the usage of a
    /// step that did finish is kept), else followed by [`Step::finish`].
    pub(crate) fn finish_step(
        &mut self,
        finish: Finish,
        raw: Option<String>,
        usage: Option<Usage>,
        out: &mut Vec<StreamEvent>,
    ) {
        if self.step_finished {
            return;
        }
        self.start(out);
        self.close_blocks(out);
        self.step_finished = true;
        out.push(StreamEvent::FinishStep { finish, raw_finish: raw, usage });
    }

    /// `Finish`, once, after the step's `FinishStep`.
    pub(crate) fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        if self.finished {
            return;
        }
        self.finish_step(Finish::Unknown, None, None, out);
        self.finished = true;
        out.push(StreamEvent::Finish);
    }
}

/// Maps a provider's finish reason. A missing reason means tool calls if the step made any (some
/// servers never send one), else unknown.
pub(crate) fn map_finish(raw: Option<&str>, made_tool_calls: bool) -> Finish {
    let Some(raw) = raw else {
        return if made_tool_calls { Finish::ToolCalls } else { Finish::Unknown };
    };
    match raw {
        "stop" | "end_turn" | "stop_sequence" | "completed" | "eos" => Finish::Stop,
        "length" | "max_tokens" | "max_output_tokens" | "model_context_window_exceeded" => Finish::Length,
        "tool_calls" | "function_call" | "tool_use" => Finish::ToolCalls,
        "content_filter" | "refusal" | "safety" => Finish::ContentFilter,
        "error" | "failed" => Finish::Error,
        // `pause_turn` (Anthropic) asks the client to send the turn back to continue: unknown keeps
        // the run loop going.
        _ if made_tool_calls => Finish::ToolCalls,
        _ => Finish::Unknown,
    }
}

/// A tool call whose arguments are still streaming.
#[derive(Debug, Default)]
pub(crate) struct PendingCall {
    pub(crate) call_id: String,
    pub(crate) name: String,
    pub(crate) arguments: String,
    /// `ToolInputStart` was emitted.
    pub(crate) started: bool,
    /// `ToolCall` was emitted.
    pub(crate) done: bool,
}

impl PendingCall {
    pub(crate) fn new(call_id: String, name: String) -> Self {
        Self { call_id, name, ..Self::default() }
    }

    /// Emits `ToolInputStart` once the name is known, with the arguments buffered so far.
    pub(crate) fn start_if_named(&mut self, step: &mut Step, out: &mut Vec<StreamEvent>) {
        if self.started || self.name.is_empty() {
            return;
        }
        self.started = true;
        step.tool_start(&self.call_id, &self.name, out);
        step.tool_delta(&self.call_id, &self.arguments, out);
    }

    pub(crate) fn push_arguments(&mut self, fragment: &str, step: &mut Step, out: &mut Vec<StreamEvent>) {
        if self.done || fragment.is_empty() {
            return;
        }
        self.arguments.push_str(fragment);
        if self.started {
            step.tool_delta(&self.call_id, fragment, out);
        }
    }

    /// Emits the complete call, once.
    pub(crate) fn complete(&mut self, metadata: Option<Value>, step: &mut Step, out: &mut Vec<StreamEvent>) {
        if self.done {
            return;
        }
        if !self.started {
            self.started = true;
            step.tool_start(&self.call_id, &self.name, out);
            step.tool_delta(&self.call_id, &self.arguments, out);
        }
        self.done = true;
        step.tool_end(&self.call_id, &self.name, &self.arguments, metadata, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_finish_reason_depends_on_tool_calls() {
        assert_eq!(map_finish(None, true), Finish::ToolCalls);
        assert_eq!(map_finish(None, false), Finish::Unknown);
        assert_eq!(map_finish(Some("stop"), true), Finish::Stop);
        assert_eq!(map_finish(Some("max_tokens"), false), Finish::Length);
        assert_eq!(map_finish(Some("refusal"), false), Finish::ContentFilter);
        assert_eq!(map_finish(Some("function_call"), false), Finish::ToolCalls);
    }
}
