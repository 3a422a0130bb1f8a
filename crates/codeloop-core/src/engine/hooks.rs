//! The facade's hook points (DESIGN.md §5d): SessionStart (`startup` | `resume`, once per session in
//! this process) and UserPromptSubmit before a prompt is stored, SessionEnd when a client is done with
//! a session, and `codeloop hooks test`'s one firing.

use std::path::Path;

use codeloop_types::{MessageId, SessionId};
use serde_json::{Value, json};

use super::Engine;
use crate::error::EngineError;
use crate::hooks::{HookEnv, HookEvent, HookOutcome, Hooks};
use crate::input::{InputPart, PromptInput};
use crate::outcome::{RunOutcome, StopReason};

/// What the prompt hooks made of a prompt.
pub(super) enum Admitted {
    /// Store and run it (with the hooks' context added).
    Run(PromptInput),
    /// A hook's `continue: false`: nothing runs.
    Stopped(Box<RunOutcome>),
}

impl Engine {
    pub(super) async fn prompt_hooks(
        &self,
        id: &SessionId,
        mut input: PromptInput,
    ) -> Result<Admitted, EngineError> {
        let session = self.session(id).await?;
        let mut hooks =
            self.services.session_hooks(id, Path::new(&session.directory)).await.map_err(|e| {
                EngineError::Config {
                    origin: "the config of the session's project".into(),
                    reason: e.to_string(),
                }
            })?;
        if hooks.hooks.any(HookEvent::SessionEnd) {
            self.services.live.owe_end(id);
        }
        let (start, submit) =
            (hooks.hooks.any(HookEvent::SessionStart), hooks.hooks.any(HookEvent::UserPromptSubmit));
        if !start && !submit {
            return Ok(Admitted::Run(input));
        }
        // The prompt's id is its user message's, named now so UserPromptSubmit can carry it.
        hooks.env.prompt_id = Some(input.message_id.get_or_insert_with(MessageId::new).to_string());
        hooks.env.effort = input.effort;
        let mut context = Vec::new();
        let stopped = |reason: String| {
            Ok(Admitted::Stopped(Box::new(RunOutcome {
                session_id: id.clone(),
                message: None,
                stop: StopReason::HookStopped(reason),
            })))
        };
        if start && self.services.live.start(id) {
            let wanted = id.clone();
            let fresh = self.read(move |store| store.load_history(&wanted)).await?.is_empty();
            let source = if fresh { "startup" } else { "resume" };
            let outcome = hooks.fire(HookEvent::SessionStart, &[source], json!({"source": source})).await;
            if let Some(reason) = outcome.stop {
                return stopped(reason);
            }
            context.extend(outcome.context);
        }
        if submit {
            let prompt: Vec<&str> = input
                .parts
                .iter()
                .filter_map(|p| match p {
                    InputPart::Text { text, synthetic: false } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            let outcome =
                hooks.fire(HookEvent::UserPromptSubmit, &[], json!({"prompt": prompt.join("\n")})).await;
            if let Some(reason) = outcome.stop {
                return stopped(reason);
            }
            if let Some(reason) = outcome.block {
                return Err(EngineError::PromptRefused(reason));
            }
            context.extend(outcome.context);
        }
        if !context.is_empty() {
            input.parts.push(InputPart::Text { text: context.join("\n\n"), synthetic: true });
        }
        Ok(Admitted::Run(input))
    }

    /// A client is done with a session (`codeloop run` ends, the TUI quits): the SessionEnd hooks run.
    /// `reason` is Claude's: `prompt_input_exit`, `clear`, `logout` or `other`.
    pub async fn end_session(&self, id: &SessionId, reason: &str) {
        self.services.live.settle_end(id);
        let Ok(session) = self.session(id).await else { return };
        let Ok(hooks) = self.services.session_hooks(id, Path::new(&session.directory)).await else { return };
        if hooks.hooks.any(HookEvent::SessionEnd) {
            let mut hooks = hooks;
            let wanted = id.clone();
            let last_prompt =
                self.read(move |store| store.load_history(&wanted)).await.ok().and_then(|history| {
                    history.iter().rev().find_map(|m| m.info.as_user().map(|u| u.id.to_string()))
                });
            hooks.env.prompt_id = last_prompt;
            hooks.fire(HookEvent::SessionEnd, &[reason], json!({"reason": reason})).await;
        }
    }

    /// This process is done with every session it started (the TUI quits, the ACP agent's editor goes):
    /// each one's SessionEnd hooks run, once.
    pub async fn end_started_sessions(&self, reason: &str) {
        let open = self.services.live.take_ends_owed();
        for id in &open {
            self.end_session(id, reason).await;
        }
    }

    /// Runs the hooks of `event` configured for `directory` with `input`, as `codeloop hooks test`
    /// does: nothing is announced, no session is needed. `tool` names the tool for the matcher.
    pub async fn test_hooks(
        hooks: &Hooks,
        event: HookEvent,
        directory: &Path,
        tool: Option<&str>,
        input: Value,
    ) -> HookOutcome {
        let session_id = input
            .get("session_id")
            .and_then(Value::as_str)
            .map(SessionId::from)
            .unwrap_or_else(|| SessionId::from("ses_hooks_test"));
        let env = HookEnv {
            session_id,
            project_dir: directory.to_owned(),
            bus: None,
            store: None,
            permission_mode: "default",
            transcripts: None,
            env_file: None,
            writer: None,
            prompt_id: None,
            effort: None,
        };
        let subjects = crate::hooks::subjects(event, tool, &input);
        let subjects: Vec<&str> = subjects.iter().map(String::as_str).collect();
        crate::hooks::fire(hooks, event, &subjects, input, &env).await
    }
}
