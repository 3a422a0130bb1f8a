//! The engine side of [`ToolHost`]: permission asks under the run's layered rules, live progress routed
//! to the processor that owns the part, and the session's todo list.

use std::sync::Arc;

use async_trait::async_trait;
use codeloop_tools::{CallInfo, PermissionAsk, PermissionError, Subtask, ToolFailure, ToolHost, ToolOutput};
use codeloop_types::{EventPayload, PermissionRule, SessionId, Todo, ToolCallRef};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use std::collections::HashMap;

use codeloop_tools::Grant;
use codeloop_types::{LockExt, PermissionAction};
use serde_json::json;

use crate::hooks::{Decision, HookEvent, TurnHooks};
use crate::permission::AskContext;
use crate::runs::Runs;
use crate::services::Services;

/// What running tools tell the processor.
#[derive(Debug)]
pub enum ToolEvent {
    Progress { call_id: String, title: Option<String>, metadata: Option<Value> },
    Done { call_id: String, result: Result<ToolOutput, ToolFailure> },
}

/// A turn's permission gate, and what its tools reach through their host: the layered rules, the
/// permission and question engines, the todo list, subagent runs. Everything of the services a
/// processor's tools may touch goes through here.
pub struct ToolGate {
    services: Arc<Services>,
    /// Where a task's child session runs.
    runs: Arc<dyn Runs>,
    session_id: SessionId,
    /// The session's parent, when it is a subagent's.
    parent_id: Option<SessionId>,
    /// Agent, config and session rules, in that order.
    layers: Arc<Vec<PermissionRule>>,
    /// An untrusted project's rules: each call gets the stricter of these and `layers`.
    narrowing: Arc<Vec<PermissionRule>>,
    /// The project key approvals are saved under (the worktree root).
    project: String,
    /// The session's hooks and what they run with.
    hooks: TurnHooks,
    /// What the hooks know of the calls that are running, by call id: the names and arguments a
    /// PermissionRequest hook sees, and a PreToolUse hook's ask or allow.
    calls: std::sync::Mutex<HashMap<String, HookedCall>>,
    /// The turn's model: what answers an MCP server's sampling request.
    model: Option<codeloop_types::ModelRef>,
}

/// A running call as its hooks see it.
#[derive(Debug, Clone)]
pub struct HookedCall {
    /// Claude Code's name first, then codeloop's (what matchers match).
    pub names: Vec<String>,
    /// The arguments in Claude Code's shape.
    pub input: serde_json::Value,
    /// What a PreToolUse hook said: ask, or allow.
    pub verdict: Option<Decision>,
}

impl ToolGate {
    pub fn new(
        services: Arc<Services>,
        runs: Arc<dyn Runs>,
        session_id: SessionId,
        parent_id: Option<SessionId>,
        layers: Arc<Vec<PermissionRule>>,
        narrowing: Arc<Vec<PermissionRule>>,
        project: String,
    ) -> Self {
        let hooks = TurnHooks::none(session_id.clone());
        Self {
            services,
            runs,
            session_id,
            parent_id,
            layers,
            narrowing,
            project,
            hooks,
            calls: Default::default(),
            model: None,
        }
    }

    /// The gate of a turn on `model` (MCP sampling is answered with it).
    pub fn with_model(mut self, model: codeloop_types::ModelRef) -> Self {
        self.model = Some(model);
        self
    }

    /// The gate with the session's hooks (without: none fire).
    pub fn with_hooks(mut self, hooks: TurnHooks) -> Self {
        self.hooks = hooks;
        self
    }

    pub fn hooks(&self) -> &TurnHooks {
        &self.hooks
    }

    /// Records a running call for its hooks (`None`: it ended).
    pub fn set_call(&self, call_id: &str, call: Option<HookedCall>) {
        let mut calls = self.calls.locked();
        match call {
            Some(call) => calls.insert(call_id.to_owned(), call),
            None => calls.remove(call_id),
        };
    }

    fn call(&self, tool: Option<&ToolCallRef>) -> Option<HookedCall> {
        tool.and_then(|t| self.calls.locked().get(&t.call_id).cloned())
    }

    /// False when the rules switch `permission` off: its tools are then not offered to the model.
    pub fn offers(&self, permission: &str) -> bool {
        crate::permission::offered(
            permission,
            self.services.permissions.defaults(),
            &self.layers,
            &self.narrowing,
        )
    }

    /// Asks under the turn's rules: a tool's ask, or the processor's own (the doom-loop guard). The
    /// rule and a PreToolUse verdict merge (DESIGN.md §5d): a deny rule always holds; a hook's ask asks;
    /// a hook's allow answers an ask (never an explicit-only one). Before anyone is asked, the
    /// PermissionRequest hooks may answer.
    pub async fn ask(&self, tool: Option<ToolCallRef>, ask: PermissionAsk) -> Result<(), PermissionError> {
        let layers: [&[PermissionRule]; 1] = [&self.layers];
        let permissions = &self.services.permissions;
        let hooks = &self.hooks.hooks;
        let call = self.call(tool.as_ref());
        let verdict = call.as_ref().and_then(|c| c.verdict);
        if !hooks.any(HookEvent::PermissionRequest)
            && !hooks.any(HookEvent::Notification)
            && verdict.is_none()
        {
            return permissions.ask(self.context(&layers, tool), ask).await;
        }
        let action = permissions.decision(&self.context(&layers, None), &ask);
        let grantable = ask.grant != Grant::Explicit;
        match (action, verdict) {
            (PermissionAction::Deny, _) => return permissions.ask(self.context(&layers, tool), ask).await,
            (PermissionAction::Allow, Some(Decision::Ask)) => {}
            (PermissionAction::Allow, _) => return Ok(()),
            (PermissionAction::Ask, Some(Decision::Allow)) if grantable => return Ok(()),
            (PermissionAction::Ask, _) => {}
        }
        // A tool call's hooks see it as Claude Code shows it (`tool_name` "Bash", its arguments); the
        // engine's own asks (the doom-loop brake) by their permission.
        let (names, tool_input) = match call {
            Some(call) => (call.names, call.input),
            None => (vec![ask.permission.clone()], ask.metadata.clone()),
        };
        let input = json!({
            "tool_name": names[0],
            "tool_input": tool_input,
            "permission_suggestions": suggestions(&names[0], &ask),
            "permission": ask.permission,
            "patterns": ask.patterns,
            "operation_id": tool.as_ref().map(|t| t.call_id.clone()),
        });
        let mut subjects: Vec<&str> = names.iter().map(String::as_str).collect();
        subjects.push(&ask.permission);
        let outcome = self.hooks.fire(HookEvent::PermissionRequest, &subjects, input).await;
        if grantable {
            if let Some(reason) = outcome.denial() {
                let reason =
                    if reason.is_empty() { "a PermissionRequest hook denied it".into() } else { reason };
                return Err(PermissionError::Denied { message: format!("Permission denied: {reason}") });
            }
            if outcome.decision == Some(Decision::Allow) {
                return Ok(());
            }
        }
        if permissions.policy() == crate::permission::AskPolicy::Wait && hooks.any(HookEvent::Notification) {
            let hooks = self.hooks.clone();
            let message = format!("codeloop needs your permission to use {}", ask.permission);
            tokio::spawn(async move {
                let input = json!({"message": message, "notification_type": "permission_prompt"});
                hooks.fire(HookEvent::Notification, &["permission_prompt"], input).await;
            });
        }
        permissions.ask_with(self.context(&layers, tool), ask, true).await
    }

    /// Whether the turn's rules allow `ask` without asking anyone.
    pub fn allows(&self, ask: &PermissionAsk) -> bool {
        let layers: [&[PermissionRule]; 1] = [&self.layers];
        self.services.permissions.allows(&self.context(&layers, None), ask)
    }

    fn context<'a>(
        &'a self,
        layers: &'a [&'a [PermissionRule]],
        tool: Option<ToolCallRef>,
    ) -> AskContext<'a> {
        AskContext {
            session_id: &self.session_id,
            parent: self.parent_id.as_ref(),
            project: &self.project,
            layers,
            narrowing: &self.narrowing,
            tool,
        }
    }

    /// The host a processor's tools run with; their progress and results go to `events`.
    pub fn host(self: &Arc<Self>, events: mpsc::UnboundedSender<ToolEvent>) -> Arc<RunToolHost> {
        Arc::new(RunToolHost { gate: self.clone(), events })
    }
}

pub struct RunToolHost {
    gate: Arc<ToolGate>,
    events: mpsc::UnboundedSender<ToolEvent>,
}

#[async_trait]
impl ToolHost for RunToolHost {
    async fn ask(&self, call: &CallInfo, ask: PermissionAsk) -> Result<(), PermissionError> {
        let tool = ToolCallRef { message_id: call.message_id.clone(), call_id: call.call_id.clone() };
        self.gate.ask(Some(tool), ask).await
    }

    fn allows(&self, _call: &CallInfo, permission: &str, pattern: &str) -> bool {
        self.gate.allows(&PermissionAsk {
            permission: permission.to_owned(),
            patterns: vec![pattern.to_owned()],
            always: Vec::new(),
            metadata: Value::Null,
            grant: Default::default(),
        })
    }

    fn progress(&self, call: &CallInfo, title: Option<String>, metadata: Option<Value>) {
        let _ = self.events.send(ToolEvent::Progress { call_id: call.call_id.clone(), title, metadata });
    }

    async fn check_changes(
        &self,
        _call: &CallInfo,
        project: &codeloop_tools::ProjectPaths,
        files: &[std::path::PathBuf],
    ) -> Option<codeloop_tools::Checked> {
        self.gate.services.lsp.check(project, files).await
    }

    async fn ask_questions(
        &self,
        call: &CallInfo,
        questions: Vec<codeloop_types::Question>,
    ) -> Result<Vec<Vec<String>>, PermissionError> {
        let tool = ToolCallRef { message_id: call.message_id.clone(), call_id: call.call_id.clone() };
        let parent = self.gate.parent_id.as_ref();
        let hooks = self.gate.hooks.clone();
        if hooks.hooks.any(HookEvent::Notification) {
            let message = "codeloop has a question for you".to_owned();
            tokio::spawn(async move {
                let input = json!({"message": message, "notification_type": "question"});
                hooks.fire(HookEvent::Notification, &["question"], input).await;
            });
        }
        self.gate.services.questions.ask(&self.gate.session_id, parent, Some(tool), questions).await
    }

    async fn elicit(
        &self,
        call: &CallInfo,
        ask: codeloop_types::ElicitationAsk,
    ) -> codeloop_types::ElicitationReply {
        let tool = ToolCallRef { message_id: call.message_id.clone(), call_id: call.call_id.clone() };
        let hooks = self.gate.hooks.clone();
        if hooks.hooks.any(HookEvent::Notification) {
            let message = format!("MCP server {} asks for input", ask.server);
            tokio::spawn(async move {
                let input = json!({"message": message, "notification_type": "elicitation_dialog"});
                hooks.fire(HookEvent::Notification, &["elicitation_dialog"], input).await;
            });
        }
        self.gate.services.elicitations.ask(&self.gate.session_id, Some(tool), ask).await
    }

    async fn sample(
        &self,
        _call: &CallInfo,
        request: codeloop_tools::SampleRequest,
    ) -> Result<codeloop_tools::Sampled, String> {
        let services = &self.gate.services;
        let Some(reference) = self.gate.model.clone() else {
            return Err("no model answers sampling requests here".into());
        };
        // The session's spending as of its last step: a session at its limit samples no more.
        if let Some(max) = services.config.limits.session_max_cost_usd
            && let Ok(Some(session)) =
                codeloop_store::Store::get_session(services.store.as_ref(), &self.gate.session_id)
            && session.cost >= max
        {
            return Err(format!(
                "the session reached its cost limit (${:.4} of ${max:.4}, [limits] session_max_cost_usd)",
                session.cost
            ));
        }
        let model = services.models.resolve(&reference).map_err(|e| e.to_string())?;
        crate::sampling::answer(&model, &self.gate.session_id, request).await
    }

    async fn run_subtask(
        &self,
        call: &CallInfo,
        task: Subtask,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolFailure> {
        let hooks = &self.gate.hooks;
        let (description, prompt) = (task.description.clone(), task.prompt.clone());
        // As Claude Code: the child's id as `agent_id`, once the subagent exists and starts.
        let started = async |child: &codeloop_types::Session, agent: &crate::agents::Agent| {
            if hooks.hooks.any(HookEvent::SubagentStart) {
                let input = json!({
                    "agent_id": child.id,
                    "agent_type": agent.name,
                    "description": description,
                    "prompt": prompt,
                });
                hooks.fire(HookEvent::SubagentStart, &[&agent.name], input).await;
            }
        };
        let (services, runs) = (&self.gate.services, self.gate.runs.as_ref());
        crate::subagent::run_subtask(services, runs, self, call, task, cancel, started).await
    }

    fn jobs(&self) -> Option<Arc<codeloop_tools::jobs::Jobs>> {
        Some(self.gate.services.jobs.clone())
    }

    async fn set_todos(&self, _call: &CallInfo, todos: Vec<Todo>) -> Result<(), String> {
        let gate = &self.gate;
        codeloop_store::Store::set_todos(gate.services.store.as_ref(), &gate.session_id, &todos)
            .map_err(|e| format!("could not save the todo list: {e}"))?;
        gate.services.bus.publish(EventPayload::TodoUpdated { session_id: gate.session_id.clone(), todos });
        Ok(())
    }
}

/// What answering "always" would add, as Claude Code's `permission_suggestions` (`addRules`); none for an
/// ask only a person or a rule naming it may grant.
fn suggestions(tool: &str, ask: &PermissionAsk) -> serde_json::Value {
    if ask.grant == Grant::Explicit || ask.always.is_empty() {
        return json!([]);
    }
    let rules: Vec<serde_json::Value> =
        ask.always.iter().map(|pattern| json!({"toolName": tool, "ruleContent": pattern})).collect();
    json!([{"type": "addRules", "rules": rules, "behavior": "allow", "destination": "session"}])
}
