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
use crate::services::Services;

/// What running tools tell the processor.
#[derive(Debug)]
pub enum ToolEvent {
    Progress { call_id: String, title: Option<String>, metadata: Option<Value> },
    Done { call_id: String, result: Result<ToolOutput, ToolFailure> },
}

pub struct RunToolHost {
    pub services: Arc<Services>,
    /// Runs subagents' child sessions.
    pub coordinator: crate::Coordinator,
    pub session_id: SessionId,
    /// Agent, config and session rules, in that order.
    pub layers: Arc<Vec<PermissionRule>>,
    /// The project key approvals are saved under (the worktree root).
    pub project: String,
    pub events: mpsc::UnboundedSender<ToolEvent>,
}

#[async_trait]
impl ToolHost for RunToolHost {
    async fn ask(&self, call: &CallInfo, ask: PermissionAsk) -> Result<(), PermissionError> {
        let layers: [&[PermissionRule]; 1] = [&self.layers];
        let ctx = AskContext {
            session_id: &self.session_id,
            project: &self.project,
            layers: &layers,
            narrowing: &self.services.config.project_rules,
            tool: Some(ToolCallRef { message_id: call.message_id.clone(), call_id: call.call_id.clone() }),
        };
        self.services.permissions.ask(ctx, ask).await
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
        self.services.questions.ask(&self.session_id, Some(tool), questions).await
    }

    async fn run_subtask(
        &self,
        call: &CallInfo,
        task: Subtask,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolFailure> {
        crate::subagent::run_subtask(&self.services, &self.coordinator, self, call, task, cancel).await
    }

    async fn set_todos(&self, _call: &CallInfo, todos: Vec<Todo>) -> Result<(), String> {
        codeloop_store::Store::set_todos(self.services.store.as_ref(), &self.session_id, &todos)
            .map_err(|e| format!("could not save the todo list: {e}"))?;
        self.services.bus.publish(EventPayload::TodoUpdated { session_id: self.session_id.clone(), todos });
        Ok(())
    }
}
