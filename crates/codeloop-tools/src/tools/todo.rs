//! `todowrite`: replaces the session's todo list through the host.

use async_trait::async_trait;
use codeloop_types::{Todo, TodoPriority, TodoStatus};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::schema::{decode, schema_for};
use crate::{Tool, ToolContext, ToolFailure, ToolOutput};

const DESCRIPTION: &str = "Create and update a structured task list for the current session (replaces the whole list). \
Use it for multi-step work: keep exactly one task in_progress, mark tasks completed as soon as they are done, \
and add follow-up tasks as you discover them. Skip it for trivial single-step requests.";

#[derive(Deserialize, JsonSchema)]
struct Params {
    /// The complete, updated todo list.
    todos: Vec<Item>,
}

#[derive(Deserialize, JsonSchema)]
struct Item {
    /// Brief task description.
    content: String,
    status: Status,
    priority: Priority,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Status {
    Pending,
    InProgress,
    Completed,
    Cancelled,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Priority {
    High,
    Medium,
    Low,
}

impl From<Item> for Todo {
    fn from(item: Item) -> Self {
        let status = match item.status {
            Status::Pending => TodoStatus::Pending,
            Status::InProgress => TodoStatus::InProgress,
            Status::Completed => TodoStatus::Completed,
            Status::Cancelled => TodoStatus::Cancelled,
        };
        let priority = match item.priority {
            Priority::High => TodoPriority::High,
            Priority::Medium => TodoPriority::Medium,
            Priority::Low => TodoPriority::Low,
        };
        Todo { content: item.content, status, priority }
    }
}

/// Writes the session's todo list.
pub struct TodoWriteTool {
    parameters: Value,
}

impl TodoWriteTool {
    pub fn new() -> Self {
        Self { parameters: schema_for::<Params>() }
    }
}

impl Default for TodoWriteTool {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for TodoWriteTool {
    fn name(&self) -> &str {
        "todowrite"
    }

    fn effect(&self) -> crate::Effect {
        crate::Effect::ReadOnly
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let params: Params = decode(self.name(), args)?;
        let todos: Vec<Todo> = params.todos.into_iter().map(Todo::from).collect();
        ctx.host.set_todos(&ctx.call, todos.clone()).await.map_err(ToolFailure::Failed)?;
        let open = todos.iter().filter(|t| t.status != TodoStatus::Completed).count();
        let list = json!(todos);
        Ok(ToolOutput {
            title: format!("{open} todos"),
            output: serde_json::to_string_pretty(&list).unwrap_or_default(),
            metadata: json!({"todos": list}),
            attachments: Vec::new(),
        })
    }
}
