//! The engine side of [`ToolHost`]: permission asks under the run's layered rules, live progress routed
//! to the processor that owns the part, and the session's todo list.

use std::sync::Arc;

use async_trait::async_trait;
use codeloop_tools::{CallInfo, PermissionAsk, PermissionError, Subtask, ToolFailure, ToolHost, ToolOutput};
use codeloop_types::{EventPayload, PermissionRule, SessionId, Todo, ToolCallRef};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

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
        Self { services, runs, session_id, parent_id, layers, narrowing, project }
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

    /// Asks under the turn's rules: a tool's ask, or the processor's own (the doom-loop guard).
    pub async fn ask(&self, tool: Option<ToolCallRef>, ask: PermissionAsk) -> Result<(), PermissionError> {
        let layers: [&[PermissionRule]; 1] = [&self.layers];
        self.services.permissions.ask(self.context(&layers, tool), ask).await
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

    async fn ask_questions(
        &self,
        call: &CallInfo,
        questions: Vec<codeloop_types::Question>,
    ) -> Result<Vec<Vec<String>>, PermissionError> {
        let tool = ToolCallRef { message_id: call.message_id.clone(), call_id: call.call_id.clone() };
        let parent = self.gate.parent_id.as_ref();
        self.gate.services.questions.ask(&self.gate.session_id, parent, Some(tool), questions).await
    }

    async fn run_subtask(
        &self,
        call: &CallInfo,
        task: Subtask,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolFailure> {
        crate::subagent::run_subtask(&self.gate.services, self.gate.runs.as_ref(), self, call, task, cancel)
            .await
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
