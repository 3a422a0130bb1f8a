//! Turning one session's bus events (live) or stored history (on `session/load`) into `session/update`s.
//!
//! Owns: which events become which update, and sending each piece once — text as chunks, each tool
//! call announced once and then updated only when something the client shows changed, the plan.
//! Must not: talk to the client or the engine; the caller sends what this returns.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use codeloop_types::MessageWithParts;
use codeloop_types::{
    EventPayload, Message, MessageId, Part, PartId, PartKind, SessionId, Todo, TodoPriority, TodoStatus,
    ToolCallRef, ToolPart,
};

use crate::protocol::{ContentBlock, PlanEntry, SessionUpdate, ToolCallUpdate};
use crate::tools;

/// What a client last saw of one tool call.
#[derive(Debug, Clone, PartialEq)]
struct Shown {
    update: ToolCallUpdate,
}

pub struct Stream {
    session: SessionId,
    cwd: PathBuf,
    /// Assistant messages of the session (not compaction summaries): only their parts are shown.
    assistant: HashSet<MessageId>,
    kinds: HashMap<PartId, &'static str>,
    /// Bytes of each text or reasoning part already sent.
    sent: HashMap<PartId, usize>,
    tools: HashMap<PartId, Shown>,
    calls: HashMap<(MessageId, String), PartId>,
}

impl Stream {
    pub fn new(session: SessionId, cwd: PathBuf) -> Self {
        Self {
            session,
            cwd,
            assistant: HashSet::new(),
            kinds: HashMap::new(),
            sent: HashMap::new(),
            tools: HashMap::new(),
            calls: HashMap::new(),
        }
    }

    /// The updates one live event makes (none for other sessions' events).
    pub fn event(&mut self, payload: &EventPayload) -> Vec<SessionUpdate> {
        if payload.session_id() != Some(&self.session) {
            return Vec::new();
        }
        match payload {
            EventPayload::MessageUpdated { info: Message::Assistant(info), .. } if !info.summary => {
                self.assistant.insert(info.id.clone());
                Vec::new()
            }
            EventPayload::PartDelta { part_id, delta, field, .. } if field == "text" => {
                match self.kinds.get(part_id) {
                    Some(&"text") => self.text_delta(part_id, delta, Chunk::Message),
                    Some(&"reasoning") => self.text_delta(part_id, delta, Chunk::Thought),
                    _ => Vec::new(),
                }
            }
            EventPayload::PartUpdated { part, .. } => self.part(part),
            EventPayload::TodoUpdated { todos, .. } => vec![plan(todos)],
            _ => Vec::new(),
        }
    }

    fn text_delta(&mut self, part: &PartId, delta: &str, chunk: Chunk) -> Vec<SessionUpdate> {
        if delta.is_empty() {
            return Vec::new();
        }
        *self.sent.entry(part.clone()).or_insert(0) += delta.len();
        vec![chunk.update(delta)]
    }

    /// A part's stored state: whatever text the deltas did not carry, or a tool call's changes.
    pub fn part(&mut self, part: &Part) -> Vec<SessionUpdate> {
        if !self.assistant.contains(&part.message_id) {
            return Vec::new();
        }
        self.kinds.insert(part.id.clone(), part.kind_name());
        match &part.kind {
            PartKind::Text(text) if !text.synthetic && !text.ignored => {
                self.rest(&part.id, &text.text, Chunk::Message)
            }
            PartKind::Reasoning(reasoning) if !reasoning.ignored => {
                self.rest(&part.id, &reasoning.text, Chunk::Thought)
            }
            PartKind::Tool(tool) if !tool.ignored => self.tool(&part.id, &part.message_id, tool),
            _ => Vec::new(),
        }
    }

    fn rest(&mut self, part: &PartId, text: &str, chunk: Chunk) -> Vec<SessionUpdate> {
        let sent = self.sent.get(part).copied().unwrap_or(0);
        if text.len() <= sent || !text.is_char_boundary(sent) {
            return Vec::new();
        }
        self.sent.insert(part.clone(), text.len());
        vec![chunk.update(&text[sent..])]
    }

    fn tool(&mut self, id: &PartId, message: &MessageId, tool: &ToolPart) -> Vec<SessionUpdate> {
        self.calls.insert((message.clone(), tool.call_id.clone()), id.clone());
        let update = tools::full_update(id.as_str(), tool, &self.cwd);
        let Some(shown) = self.tools.get(&id.clone()) else {
            self.tools.insert(id.clone(), Shown { update });
            return vec![SessionUpdate::ToolCall(tools::tool_call(id.as_str(), tool, &self.cwd))];
        };
        let changes = changes(&shown.update, &update);
        self.tools.insert(id.clone(), Shown { update });
        changes.map(SessionUpdate::ToolCallUpdate).into_iter().collect()
    }

    /// The ACP id of the tool call a permission request is about, if the call was seen.
    pub fn call_id(&self, call: &ToolCallRef) -> Option<&PartId> {
        self.calls.get(&(call.message_id.clone(), call.call_id.clone()))
    }

    /// Everything shown of a call so far (for a permission request).
    pub fn shown_call(&self, id: &PartId) -> Option<ToolCallUpdate> {
        self.tools.get(id).map(|s| s.update.clone())
    }

    /// Whatever live events missed (a lagging subscriber), from the stored messages of the turn.
    pub fn catch_up(&mut self, history: &[MessageWithParts]) -> Vec<SessionUpdate> {
        let mut updates = Vec::new();
        for message in history {
            if let Message::Assistant(info) = &message.info
                && self.assistant.contains(&info.id)
            {
                for part in &message.parts {
                    updates.extend(self.part(part));
                }
            }
        }
        updates
    }
}

/// Only the fields that changed, or `None` when nothing the client shows did.
fn changes(old: &ToolCallUpdate, new: &ToolCallUpdate) -> Option<ToolCallUpdate> {
    fn diff<T: PartialEq + Clone>(old: &Option<T>, new: &Option<T>) -> Option<T> {
        if old == new { None } else { new.clone() }
    }
    let update = ToolCallUpdate {
        tool_call_id: new.tool_call_id.clone(),
        title: diff(&old.title, &new.title),
        kind: diff(&old.kind, &new.kind),
        status: diff(&old.status, &new.status),
        content: diff(&old.content, &new.content),
        locations: diff(&old.locations, &new.locations),
        raw_input: diff(&old.raw_input, &new.raw_input),
        raw_output: diff(&old.raw_output, &new.raw_output),
    };
    let empty = ToolCallUpdate { tool_call_id: new.tool_call_id.clone(), ..Default::default() };
    (update != empty).then_some(update)
}

#[derive(Clone, Copy)]
enum Chunk {
    Message,
    Thought,
}

impl Chunk {
    fn update(self, text: &str) -> SessionUpdate {
        let content = ContentBlock::text(text);
        match self {
            Chunk::Message => SessionUpdate::AgentMessageChunk { content },
            Chunk::Thought => SessionUpdate::AgentThoughtChunk { content },
        }
    }
}

/// A todo list as an ACP plan (cancelled items are left out: a plan has no such status).
pub fn plan(todos: &[Todo]) -> SessionUpdate {
    let entries = todos
        .iter()
        .filter_map(|todo| {
            let status = match todo.status {
                TodoStatus::Pending => "pending",
                TodoStatus::InProgress => "in_progress",
                TodoStatus::Completed => "completed",
                TodoStatus::Cancelled => return None,
            };
            let priority = match todo.priority {
                TodoPriority::High => "high",
                TodoPriority::Medium => "medium",
                TodoPriority::Low => "low",
            };
            Some(PlanEntry { content: todo.content.clone(), priority, status })
        })
        .collect();
    SessionUpdate::Plan { entries }
}

/// A stored session as the updates that show it again: the person's messages, the answers, their
/// thoughts and tool calls in their final state, and the latest plan.
pub fn replay(history: &[MessageWithParts], cwd: PathBuf) -> Vec<SessionUpdate> {
    let mut updates = Vec::new();
    let mut latest_plan = None;
    for message in history {
        match &message.info {
            Message::User(_) => {
                for part in &message.parts {
                    if let Some(content) = user_content(part) {
                        updates.push(SessionUpdate::UserMessageChunk { content });
                    }
                }
            }
            Message::Assistant(info) if info.summary => {}
            Message::Assistant(info) => {
                let mut stream = Stream::new(info.session_id.clone(), cwd.clone());
                stream.assistant.insert(info.id.clone());
                for part in &message.parts {
                    updates.extend(stream.part(part));
                    if let PartKind::Tool(tool) = &part.kind
                        && tool.tool == "todowrite"
                        && let codeloop_types::ToolState::Completed(done) = &tool.state
                        && let Some(todos) = done.metadata.get("todos")
                        && let Ok(todos) = serde_json::from_value::<Vec<Todo>>(todos.clone())
                    {
                        latest_plan = Some(plan(&todos));
                    }
                }
            }
        }
    }
    updates.extend(latest_plan);
    updates
}

fn user_content(part: &Part) -> Option<ContentBlock> {
    match &part.kind {
        PartKind::Text(text) if !text.synthetic && !text.ignored && !text.text.is_empty() => {
            Some(ContentBlock::text(text.text.clone()))
        }
        PartKind::File(file) => Some(ContentBlock::ResourceLink {
            uri: file.url.clone(),
            name: file.filename.clone().unwrap_or_else(|| file.mime.clone()),
            mime_type: Some(file.mime.clone()),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use codeloop_types::{PartTime, TextPart};
    use pretty_assertions::assert_eq;

    use super::*;

    fn text_part(session: &SessionId, message: &MessageId, id: &str, text: &str) -> Part {
        Part {
            id: id.into(),
            session_id: session.clone(),
            message_id: message.clone(),
            kind: PartKind::Text(TextPart {
                text: text.into(),
                time: PartTime::default(),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn text_goes_out_once_whether_by_delta_or_by_catch_up() {
        let session = SessionId::from("ses_1");
        let message = MessageId::from("msg_1");
        let mut stream = Stream::new(session.clone(), "/p".into());
        stream.assistant.insert(message.clone());
        assert!(stream.part(&text_part(&session, &message, "prt_1", "")).is_empty());
        let delta = EventPayload::PartDelta {
            session_id: session.clone(),
            message_id: message.clone(),
            part_id: "prt_1".into(),
            field: "text".into(),
            delta: "Hel".into(),
        };
        assert_eq!(stream.event(&delta), vec![Chunk::Message.update("Hel")]);
        assert_eq!(
            stream.part(&text_part(&session, &message, "prt_1", "Hello")),
            vec![Chunk::Message.update("lo")]
        );
        assert!(stream.part(&text_part(&session, &message, "prt_1", "Hello")).is_empty());
        let other = EventPayload::PartDelta {
            session_id: "ses_2".into(),
            message_id: message,
            part_id: "prt_1".into(),
            field: "text".into(),
            delta: "x".into(),
        };
        assert!(stream.event(&other).is_empty());
    }

    #[test]
    fn cancelled_todos_leave_the_plan() {
        let todos = vec![
            Todo { content: "a".into(), status: TodoStatus::Completed, priority: TodoPriority::High },
            Todo { content: "b".into(), status: TodoStatus::Cancelled, priority: TodoPriority::Low },
            Todo { content: "c".into(), status: TodoStatus::InProgress, priority: TodoPriority::Medium },
        ];
        let SessionUpdate::Plan { entries } = plan(&todos) else { panic!("a plan") };
        assert_eq!(
            entries,
            vec![
                PlanEntry { content: "a".into(), priority: "high", status: "completed" },
                PlanEntry { content: "c".into(), priority: "medium", status: "in_progress" },
            ]
        );
    }
}
