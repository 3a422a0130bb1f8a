//! The `task` tool: runs a subagent in a child session (reference §8.3 task) and returns its answer.
//!
//! The tool only reads its arguments; the run's [`ToolHost`] runs the subtask ([`run_subtask`]), going
//! through the coordinator like any other prompt, so the child has its own lock, history and events.
//! Subagents cannot start subagents (depth limit 1), and the child is interrupted when the parent's call
//! is cancelled.

use async_trait::async_trait;
use codeloop_tools::{
    CallInfo, PermissionAsk, Subtask, Tool, ToolContext, ToolFailure, ToolHost, ToolOutput, decode,
    schema_for,
};
use codeloop_types::{
    EventPayload, Message, PartKind, PermissionAction, PermissionRule, Session, SessionId, now_ms,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::agents::{Agent, AgentMode};
use crate::input::{Delivery, PromptInput};
use crate::outcome::StopReason;
use crate::runs::Runs;
use crate::services::Services;

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
struct Params {
    /// A short (3-5 words) description of the task.
    description: String,
    /// The task for the subagent: everything it needs to know, and what to report back.
    prompt: String,
    /// Which subagent runs it.
    subagent_type: String,
    /// Continue an earlier task's session instead of starting a new one.
    #[serde(default, deserialize_with = "codeloop_tools::opt_text")]
    task_id: Option<String>,
}

pub struct TaskTool {
    description: String,
    parameters: Value,
}

impl TaskTool {
    pub fn new(subagents: &[&Agent]) -> Self {
        let list: String = subagents.iter().map(|a| format!("\n- {}: {}", a.name, a.description)).collect();
        let description = format!(
            "Start a subagent in its own session for a self-contained task (search, research, a separate change). \
It sees none of this conversation: put everything it needs in `prompt` and say what to report back. Its final answer \
is returned. Available subagents:{list}"
        );
        Self { description, parameters: schema_for::<Params>() }
    }
}

fn failed(message: impl Into<String>) -> ToolFailure {
    ToolFailure::Failed(message.into())
}

#[async_trait]
impl Tool for TaskTool {
    fn name(&self) -> &str {
        "task"
    }

    fn needs(&self) -> codeloop_tools::Needs {
        codeloop_tools::Needs::Subagents
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let params: Params = decode("task", args)?;
        let task = Subtask {
            description: params.description,
            prompt: params.prompt,
            agent: params.subagent_type,
            task_id: params.task_id,
        };
        ctx.host.run_subtask(&ctx.call, task, &ctx.cancel).await
    }
}

/// Runs `task` for the call `call` of a run: asks the `task` permission through `host`, starts (or
/// continues) the child session and waits for its answer.
/// `started` is told of the child session once it exists and is about to run (SubagentStart): never for a
/// subagent that does not exist or was refused.
pub(crate) async fn run_subtask(
    services: &Services,
    runs: &dyn Runs,
    host: &dyn ToolHost,
    call: &CallInfo,
    task: Subtask,
    cancel: &CancellationToken,
    started: impl AsyncFnOnce(&Session, &Agent),
) -> Result<ToolOutput, ToolFailure> {
    let parent = services
        .store
        .get_session(&call.session_id)
        .map_err(|e| failed(format!("cannot read the session: {e}")))?
        .ok_or_else(|| failed("the session no longer exists"))?;
    if parent.parent_id.is_some() {
        return Err(failed("Subagents cannot start subagents: do this part of the work yourself."));
    }
    let agent = match services.agents.get(&task.agent) {
        Some(agent) if agent.mode == AgentMode::Subagent => agent.clone(),
        _ => {
            let available: Vec<&str> = services
                .agents
                .values()
                .filter(|a| a.mode == AgentMode::Subagent)
                .map(|a| a.name.as_str())
                .collect();
            return Err(failed(format!(
                "Unknown subagent \"{}\". Available subagents: {}. Set subagent_type to one of these.",
                task.agent,
                available.join(", ")
            )));
        }
    };
    host.ask(
        call,
        PermissionAsk {
            grant: Default::default(),
            permission: "task".into(),
            patterns: vec![agent.name.clone()],
            always: vec![agent.name.clone()],
            metadata: json!({"description": task.description}),
        },
    )
    .await?;
    let child = child_session(services, &parent, &agent, &task)?;
    host.progress(
        call,
        Some(task.description.clone()),
        Some(json!({"session_id": child.id, "agent": agent.name})),
    );
    started(&child, &agent).await;
    let run = runs.prompt(&child.id, PromptInput::text(task.prompt.clone()), Delivery::Queue);
    let outcome = tokio::select! {
        outcome = run => outcome,
        _ = cancel.cancelled() => {
            runs.interrupt(&child.id).await;
            return Err(ToolFailure::Cancelled);
        }
    };
    let outcome = outcome.map_err(|e| failed(format!("the subagent could not run: {e}")))?;
    let text = last_text(services, &child.id);
    let (state, body) = match &outcome.stop {
        StopReason::Completed | StopReason::StepLimit(_) | StopReason::HookStopped(_) => {
            ("completed", format!("<task_result>\n{text}\n</task_result>"))
        }
        StopReason::Interrupted => {
            ("error", "<task_error>\nThe subagent was interrupted.\n</task_error>".to_owned())
        }
        StopReason::Blocked(message) => ("error", format!("<task_error>\n{message}\n</task_error>")),
        StopReason::Error(error) => ("error", format!("<task_error>\n{}\n</task_error>", error.message())),
        StopReason::Limit(reached) => ("error", format!("<task_error>\n{reached}\n</task_error>")),
    };
    Ok(ToolOutput {
        title: task.description,
        output: format!("<task id=\"{}\" state=\"{state}\">\n{body}\n</task>", child.id),
        metadata: json!({"session_id": child.id, "agent": agent.name, "state": state}),
        attachments: Vec::new(),
    })
}

/// A new child session of `parent` for command `command` run as a subtask by `agent` (DESIGN.md §5g).
pub(crate) fn command_child(
    services: &Services,
    parent: &Session,
    agent: &Agent,
    command: &str,
) -> Result<Session, ToolFailure> {
    let task = Subtask {
        description: format!("/{command}"),
        prompt: String::new(),
        agent: agent.name.clone(),
        task_id: None,
    };
    child_session(services, parent, agent, &task)
}

/// The child session: a new one, or the earlier task's when `task_id` names a child of this session.
fn child_session(
    services: &Services,
    parent: &Session,
    agent: &Agent,
    task: &Subtask,
) -> Result<Session, ToolFailure> {
    if let Some(id) = &task.task_id {
        let existing = services.store.get_session(&SessionId::from(id.as_str())).map_err(|e| {
            failed(format!("cannot read task {id}'s session: {e}; try again, or leave task_id out"))
        })?;
        return match existing {
            Some(session) if session.parent_id.as_ref() == Some(&parent.id) => Ok(session),
            _ => Err(failed(format!(
                "task_id {id} is not a task of this session: leave task_id out to start a new task (only the \
                 id in an earlier task result's <task id=\"…\"> continues one)"
            ))),
        };
    }
    let mut child = Session::new(
        parent.directory.clone(),
        agent.name.clone(),
        agent.model.clone().or(parent.model.clone()),
    );
    child.parent_id = Some(parent.id.clone());
    child.title = format!("{} (@{} subagent)", task.description, agent.name);
    // The parent's denials hold for the child; a child never plans work for others or starts subagents.
    child.permission =
        parent.permission.iter().filter(|r| r.action == PermissionAction::Deny).cloned().collect();
    child.permission.push(PermissionRule::new("task", "*", PermissionAction::Deny));
    child.permission.push(PermissionRule::new("todowrite", "*", PermissionAction::Deny));
    child.time.updated = now_ms();
    services
        .store
        .apply(&[codeloop_store::Write::Session(child.clone())])
        .map_err(|e| failed(format!("cannot create the subagent's session: {e}")))?;
    services.bus.publish(EventPayload::SessionCreated { session_id: child.id.clone(), info: child.clone() });
    Ok(child)
}

fn last_text(services: &Services, session: &SessionId) -> String {
    let history = match services.store.load_history(session) {
        Ok(history) => history,
        Err(e) => {
            return format!(
                "(the subagent finished, but its answer could not be read: {e}; see session {session})"
            );
        }
    };
    history
        .iter()
        .rev()
        .find(|m| matches!(m.info, Message::Assistant(_)) && m.parts.iter().any(|p| p.as_text().is_some()))
        .map(|m| {
            m.parts
                .iter()
                .filter_map(|p| match &p.kind {
                    PartKind::Text(t) if !t.ignored => Some(t.text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}
