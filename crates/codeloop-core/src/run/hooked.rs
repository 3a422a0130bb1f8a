//! The run loop's hook points (DESIGN.md §5d): Stop (or SubagentStop) when the loop would end — a block
//! continues with its reason as the next instruction, at most [`MAX_STOP_BLOCKS`] times in a row —
//! PreCompact (a block skips the compaction) and PostCompact around a summary, and StopFailure.

use codeloop_types::{AssistantError, Finish, Message};
use serde_json::json;

use super::{Flow, MAX_STOP_BLOCKS, Run};
use crate::error::RunError;
use crate::hooks::HookEvent;
use crate::hooks::TurnHooks;
use crate::input::{InputPart, PromptInput, create_user_message};
use crate::outcome::StopReason;

impl Run<'_> {
    pub(super) fn hooks(&self) -> TurnHooks {
        let mut hooks = self.services.turn_hooks(
            &self.session.id,
            &self.project.directory,
            self.policy.hooks.clone(),
            self.hook_stop.clone(),
        );
        // The prompt being answered, and the effort asked for it (the prompt's, the agent's, the model's).
        if let Some(user) = self.history.iter().rev().find_map(|m| m.info.as_user()) {
            hooks.env.prompt_id = Some(user.id.to_string());
            let agent = self.services.agents.get(&user.agent).and_then(|a| a.effort);
            let model = self.models.get(&user.model).and_then(|m| m.effort);
            hooks.env.effort = user.effort.or(agent).or(model);
        }
        hooks
    }

    /// The loop would end: the Stop hooks may keep it going.
    pub(super) async fn stop_hooks(&mut self) -> Result<Flow, RunError> {
        let event = if self.session.parent_id.is_some() { HookEvent::SubagentStop } else { HookEvent::Stop };
        if !self.policy.hooks.any(event) {
            return Ok(Flow::Stop(StopReason::Completed));
        }
        // The session's background jobs still running, as Claude Code lists its background tasks (it
        // has scheduled prompts too, `session_crons`; codeloop has none).
        let jobs: Vec<serde_json::Value> = self
            .services
            .jobs
            .list(&self.session.id)
            .into_iter()
            .filter(|job| job.state.is_running())
            .map(|job| json!({"id": job.id, "type": "bash", "status": "running", "description": job.command}))
            .collect();
        let mut input = json!({
            "stop_hook_active": self.stop_blocks > 0,
            "last_assistant_message": self.last_assistant_text(),
            "background_tasks": jobs,
            "session_crons": [],
        });
        if event == HookEvent::SubagentStop {
            // The subagent's own session: its id and its transcript, as Claude Code names them.
            let transcripts = self.services.data_dir.join("transcripts");
            input["agent_id"] = json!(self.session.id);
            input["agent_type"] = json!(self.session.agent);
            input["agent_transcript_path"] =
                json!(crate::hooks::transcript::path(&transcripts, &self.session.id).display().to_string());
        }
        let outcome = self.hooks().fire(event, &[], input).await;
        if let Some(reason) = outcome.stop {
            return Ok(Flow::Stop(StopReason::HookStopped(reason)));
        }
        let Some(reason) = outcome.block else { return Ok(Flow::Stop(StopReason::Completed)) };
        if self.stop_blocks >= MAX_STOP_BLOCKS {
            // As Claude Code does: the hook is still asked once more (it may log, or say continue: false),
            // and a block past the cap is overridden, said once.
            self.services.bus.publish(codeloop_types::EventPayload::SessionWarning {
                session_id: self.session.id.clone(),
                message: format!(
                    "{} hook blocked the end {} times in a row: overridden, the run ends ({reason})",
                    event.name(),
                    self.stop_blocks + 1
                ),
            });
            return Ok(Flow::Stop(StopReason::Completed));
        }
        self.stop_blocks += 1;
        let text = if reason.trim().is_empty() { "Continue.".to_owned() } else { reason };
        let input =
            PromptInput { parts: vec![InputPart::Text { text, synthetic: false }], ..Default::default() };
        let message = create_user_message(&self.services, &mut self.session, &input)?;
        self.history.push(message);
        Ok(Flow::Continue)
    }

    /// PreCompact before the summary of the request at `index`: true when a hook blocks it. The
    /// request is then answered by a note, so it is not taken up again.
    pub(super) async fn compaction_blocked(&mut self, index: usize) -> Result<bool, RunError> {
        if !self.policy.hooks.any(HookEvent::PreCompact) {
            return Ok(false);
        }
        let auto = self.history[index].parts.iter().find_map(|p| p.as_compaction()).is_some_and(|c| c.auto);
        let trigger = if auto { "auto" } else { "manual" };
        let input = json!({"trigger": trigger, "custom_instructions": ""});
        let outcome = self.hooks().fire(HookEvent::PreCompact, &[trigger], input).await;
        let Some(reason) = outcome.block else { return Ok(false) };
        let Message::User(user) = self.history[index].info.clone() else { return Ok(false) };
        let model = self.resolve_model(&user.model)?;
        let mut note = self.new_assistant(&user, &user.agent, &model);
        note.finish = Some(Finish::Stop);
        note.time.completed = Some(codeloop_types::now_ms());
        let text = format!("Compaction skipped by a PreCompact hook: {reason}");
        let part = codeloop_types::Part::synthetic_text(self.session.id.clone(), note.id.clone(), text);
        self.services.journal.save_message(&Message::Assistant(note.clone()));
        self.services.journal.save_part(&part);
        self.history
            .push(codeloop_store::MessageWithParts { info: Message::Assistant(note), parts: vec![part] });
        self.services.bus.publish(codeloop_types::EventPayload::SessionWarning {
            session_id: self.session.id.clone(),
            message: format!("hook PreCompact blocked the compaction: {reason}"),
        });
        Ok(true)
    }

    /// PostCompact after a summary, then SessionStart with `compact`.
    pub(super) async fn compacted_hooks(&mut self, auto: bool) {
        let hooks = &self.policy.hooks;
        if !hooks.any(HookEvent::PostCompact) && !hooks.any(HookEvent::SessionStart) {
            return;
        }
        let trigger = if auto { "auto" } else { "manual" };
        let summary = self.carried_text();
        let input = json!({"trigger": trigger, "compact_summary": summary});
        let turn_hooks = self.hooks();
        // Claude Code's order: the session starts again from the summary, then PostCompact.
        let outcome =
            turn_hooks.fire(HookEvent::SessionStart, &["compact"], json!({"source": "compact"})).await;
        turn_hooks.fire(HookEvent::PostCompact, &[trigger], input).await;
        if let Some(context) = outcome.context_text() {
            self.session_context(context);
        }
    }

    /// Context a hook gave the model: a synthetic part on the newest user message.
    pub(super) fn session_context(&mut self, context: String) {
        let Some(message) = self.history.iter_mut().rev().find(|m| matches!(m.info, Message::User(_))) else {
            return;
        };
        let part =
            codeloop_types::Part::synthetic_text(self.session.id.clone(), message.info.id().clone(), context);
        self.services.journal.save_part(&part);
        message.parts.push(part);
    }

    /// StopFailure: the run ends in error.
    pub(super) async fn stop_failure(&self, error: &AssistantError) {
        if !self.policy.hooks.any(HookEvent::StopFailure) {
            return;
        }
        let input = json!({"error": error.message(), "stop_hook_active": false});
        self.hooks().fire(HookEvent::StopFailure, &[], input).await;
    }

    /// The newest summary as PostCompact's `compact_summary`: the summariser's text, codeloop's work
    /// state, and one line per block carried after it (the user's words, the files restored).
    fn carried_text(&self) -> String {
        let text = |text: &codeloop_types::TextPart| match text.carried_label() {
            _ if text.ignored => None,
            Some(label) => Some(format!("[{label}]")),
            None => Some(text.text.trim().to_owned()).filter(|t| !t.is_empty()),
        };
        self.newest_texts(|a| a.summary, text, "\n\n")
    }

    fn last_assistant_text(&self) -> String {
        self.newest_texts(|_| true, |text| (!text.synthetic).then(|| text.text.clone()), "\n")
    }

    /// The text parts of the newest assistant message `which` accepts, each as `text` gives it, joined.
    fn newest_texts(
        &self,
        which: impl Fn(&codeloop_types::AssistantMessage) -> bool,
        text: impl Fn(&codeloop_types::TextPart) -> Option<String>,
        separator: &str,
    ) -> String {
        let newest = self.history.iter().rev().find(|m| matches!(&m.info, Message::Assistant(a) if which(a)));
        let Some(message) = newest else { return String::new() };
        let texts: Vec<String> = message.parts.iter().filter_map(|p| p.as_text()).filter_map(text).collect();
        texts.join(separator)
    }
}
