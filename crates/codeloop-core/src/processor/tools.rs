//! The tool-call lifecycle inside one turn: pending → running → completed | error, the doom-loop guard,
//! tools started as soon as their call is complete, and a watchdog for tools that hang.

use codeloop_provider::ToolCall;
use codeloop_tools::{CallInfo, PermissionAsk, PermissionError, ToolContext, ToolFailure};
use codeloop_types::{EventPayload, Part, PartKind, ToolPart, ToolState, now_ms};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{AttemptEnd, Processor, TOOL_WATCHDOG};
use crate::doom_loop::{DoomLoop, DoomLoopGuard};
use crate::outcome::Blocked;
use crate::tool_host::ToolEvent;

impl Processor {
    pub(super) fn ensure_call(&mut self, call_id: &str, name: &str) -> usize {
        if let Some(index) = self.calls.get(call_id) {
            return *index;
        }
        let index = self.push_part(PartKind::Tool(ToolPart {
            call_id: call_id.to_owned(),
            tool: name.to_owned(),
            state: ToolState::default(),
            metadata: None,
            ignored: false,
        }));
        self.calls.insert(call_id.to_owned(), index);
        index
    }

    pub(super) fn tool_mut(&mut self, index: usize) -> Option<&mut ToolPart> {
        self.parts.get_mut(index).and_then(Part::as_tool_mut)
    }

    pub(super) fn summary_guard(&self, name: &str) -> Result<(), AttemptEnd> {
        if self.ctx.summary {
            return Err(AttemptEnd::Halted(Blocked::ToolCallDuringSummary { tool: name.to_owned() }));
        }
        Ok(())
    }

    pub(super) fn tool_input_start(&mut self, call_id: String, name: String) -> Result<(), AttemptEnd> {
        self.summary_guard(&name)?;
        self.ensure_call(&call_id, &name);
        Ok(())
    }

    pub(super) fn tool_input_delta(&mut self, call_id: &str, delta: &str) {
        let Some(index) = self.calls.get(call_id).copied() else { return };
        if let Some(tool) = self.tool_mut(index) {
            let _ = tool.state.append_raw(delta);
        }
        self.mark_dirty(index);
    }

    pub(super) async fn tool_call(
        &mut self,
        call: ToolCall,
        cancel: &CancellationToken,
        doom: &mut DoomLoopGuard,
    ) -> Result<(), AttemptEnd> {
        self.summary_guard(&call.name)?;
        let index = self.ensure_call(&call.call_id, &call.name);
        let (input, invalid) = match call.input {
            Ok(input) => (input, None),
            Err(invalid) => (Value::Object(Default::default()), Some(invalid)),
        };
        let now = now_ms();
        let started = match self.tool_mut(index) {
            Some(tool) => {
                if call.metadata.is_some() {
                    tool.metadata = call.metadata.clone();
                }
                tool.state.start(input.clone(), now).is_ok()
            }
            None => false,
        };
        if !started {
            // A repeated call event for a call already running or settled: it runs once.
            return Ok(());
        }
        self.write_now(index);

        if let Some(invalid) = invalid {
            let message = format!(
                "The arguments provided to the tool are invalid: {}. The arguments received were: {}\nPlease rewrite the call with a valid JSON object.",
                invalid.error,
                codeloop_tools::ellipsize(&invalid.raw, 500)
            );
            self.settle(index, Err(ToolFailure::Failed(message)));
            return Ok(());
        }
        if !self.ctx.tools_enabled {
            let message =
                "Tools are disabled: the maximum number of steps for this task was reached. Answer in text.";
            self.settle(index, Err(ToolFailure::Failed(message.into())));
            return Ok(());
        }
        if self.ctx.tools.get(&call.name).or_else(|| self.ctx.tools.get(&call.name.to_lowercase())).is_none()
        {
            let message = format!(
                "Unknown tool \"{}\". Available tools: {}. Call one of these instead.",
                call.name,
                self.ctx.offered.join(", ")
            );
            self.settle(index, Err(ToolFailure::Failed(message)));
            return Ok(());
        }
        if let Some(found) = doom.record(&call.name, &input) {
            if matches!(found, DoomLoop::Repeat { .. }) && doom.repeats_success() {
                // Work already done, repeated: the model is told so and the run goes on.
                self.settle(index, Ok(already_done()));
                return Ok(());
            }
            match self.ask_doom_loop(&found, index, cancel).await {
                Ok(()) => doom.reset(),
                Err(failure) => {
                    let message = match &failure {
                        PermissionError::Corrected { .. } | PermissionError::Denied { .. } => None,
                        _ => Some(format!(
                            "Stopped: doom loop detected: {}. The model keeps repeating itself; fix what it keeps \
                             running into or say more precisely what to do, then continue the session \
                             (codeloop run --continue). If the repetition is intended, add [permission] doom_loop = \"allow\".",
                            found.describe()
                        )),
                    };
                    self.settle(index, Err(ToolFailure::Permission(failure)));
                    if let Some(message) = message {
                        let blocked = Blocked::DoomLoop { message };
                        self.blocked = Some(blocked.clone());
                        return Err(AttemptEnd::Halted(blocked));
                    }
                    return Ok(());
                }
            }
        }
        self.spawn_tool(call.call_id, call.name, input);
        Ok(())
    }

    pub(super) async fn ask_doom_loop(
        &self,
        found: &DoomLoop,
        index: usize,
        cancel: &CancellationToken,
    ) -> Result<(), PermissionError> {
        let tool = found.tool().to_owned();
        let call_id = self.parts[index].as_tool().map(|t| t.call_id.clone()).unwrap_or_default();
        let call = codeloop_types::ToolCallRef { message_id: self.message.id.clone(), call_id };
        let ask = PermissionAsk {
            // A brake, not a question: `--on-ask allow` does not answer it (DESIGN.md §4 "Doom loop").
            grant: codeloop_tools::Grant::Brake,
            permission: "doom_loop".into(),
            patterns: vec![tool.clone()],
            always: vec![tool.clone()],
            metadata: serde_json::json!({ "tool": tool, "description": found.describe() }),
        };
        tokio::select! {
            result = self.ctx.gate.ask(Some(call), ask) => result,
            _ = cancel.cancelled() => Err(PermissionError::Rejected),
        }
    }

    pub(super) fn spawn_tool(&mut self, call_id: String, name: String, input: Value) {
        let ctx = ToolContext {
            call: CallInfo {
                session_id: self.message.session_id.clone(),
                message_id: self.message.id.clone(),
                call_id: call_id.clone(),
                agent: self.message.agent.clone(),
            },
            project: self.ctx.project.clone(),
            tool_output_dir: self.ctx.tool_output_dir.clone(),
            limits: self.ctx.limits,
            cancel: self.tools_cancel.child_token(),
            host: self.host.clone(),
            walls: self.ctx.walls.clone(),
            seen: self.ctx.seen.clone(),
        };
        let tools = self.ctx.tools.clone();
        let events = self.tool_tx.clone();
        self.running.insert(call_id.clone());
        let limit = tools.get(&name).and_then(|tool| tool.deadline(&input)).unwrap_or(TOOL_WATCHDOG);
        let gate = self.ctx.gate.clone();
        tokio::spawn(async move {
            let result = super::hooked::execute(gate, tools, name, input, ctx, limit).await;
            let _ = events.send(ToolEvent::Done { call_id, result });
        });
    }

    /// Handles a tool's event; a settled call's tool, input and success are returned for the doom-loop
    /// guard.
    pub(super) fn on_tool_event(&mut self, event: ToolEvent) -> Option<(String, Value, bool)> {
        match event {
            ToolEvent::Progress { call_id, title, metadata } => {
                let index = self.calls.get(&call_id).copied()?;
                let changed = self.tool_mut(index).is_some_and(|t| t.state.progress(title, metadata).is_ok());
                if changed {
                    // Watchers see progress live; the store gets it with the next coalesced flush.
                    if let Some(part) = self.parts.get(index) {
                        self.ctx.journal.publish(EventPayload::PartUpdated {
                            session_id: part.session_id.clone(),
                            part: part.clone(),
                        });
                    }
                    self.mark_dirty(index);
                }
                None
            }
            ToolEvent::Done { call_id, result } => {
                self.running.remove(&call_id);
                let index = self.calls.get(&call_id).copied()?;
                if self.cleaning {
                    // The turn ended while this call ran: it was cut short, whatever it reports.
                    self.interrupt_call(index, result.ok().map(|o| o.output));
                    return None;
                }
                self.settle(index, result);
                let tool = self.parts.get(index)?.as_tool()?;
                let succeeded = matches!(tool.state, codeloop_types::ToolState::Completed(_));
                Some((tool.tool.clone(), tool.state.input().clone(), succeeded))
            }
        }
    }

    /// Completes or fails a running call; a terminal call is never rewritten.
    pub(super) fn settle(&mut self, index: usize, result: Result<codeloop_tools::ToolOutput, ToolFailure>) {
        let now = now_ms();
        let mut block = None;
        let continue_on_reject = self.ctx.continue_on_reject;
        let Some(tool) = self.tool_mut(index) else { return };
        let ok = match result {
            Ok(output) => {
                tool.state.complete(output.output, output.title, output.metadata, output.attachments, now)
            }
            Err(failure) => {
                if let ToolFailure::Permission(PermissionError::Rejected) = &failure
                    && !continue_on_reject
                {
                    block = Some(Blocked::Rejected { tool: tool.tool.clone() });
                }
                if let ToolFailure::Permission(PermissionError::Blocked { message }) = &failure {
                    block = Some(Blocked::Unanswerable { message: message.clone() });
                }
                tool.state.fail(failure.to_string(), now)
            }
        };
        if ok.is_ok() {
            self.write_now(index);
            if block.is_some() && self.blocked.is_none() {
                self.blocked = block;
            }
        }
    }
}

/// The answer to a call identical to the ones just before it, which succeeded: not run again.
fn already_done() -> codeloop_tools::ToolOutput {
    codeloop_tools::ToolOutput {
        title: "already done".into(),
        output: "Not run: this exact call just succeeded twice in a row, so it is already done. Do not repeat it: \
                 go on with the next step, or answer if the task is complete."
            .into(),
        metadata: serde_json::json!({"repeat": true}),
        attachments: Vec::new(),
    }
}
