//! What MCP servers ask the person mid-call (MCP elicitation, DESIGN.md §5o): pending until any client
//! (terminal, HTTP) answers, announced on the bus like questions.
//!
//! Owns: the pending requests, the answer an accepted form gets (the schema's defaults for fields left
//! out), and the headless decline (one warning per server and session, naming it). Must not: open a URL
//! (a URL-mode request is shown, never followed) or decide which session a server's request belongs to
//! (the MCP layer routes it to the call that is running).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use codeloop_types::{
    ElicitationAction, ElicitationAsk, ElicitationId, ElicitationReply, ElicitationRequest, EventPayload,
    LockExt, SessionId, ToolCallRef,
};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::Bus;
use crate::permission::AskPolicy;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ElicitationError {
    #[error(
        "no pending elicitation {0} in this session (already answered, or unknown): see GET /session/ID/elicitation"
    )]
    NotPending(ElicitationId),
}

struct Pending {
    request: ElicitationRequest,
    answer: oneshot::Sender<ElicitationReply>,
}

pub struct Elicitations {
    bus: Bus,
    policy: AskPolicy,
    pending: Mutex<HashMap<ElicitationId, Pending>>,
    /// (session, server) pairs already told that a headless run declines.
    warned: Mutex<HashSet<(SessionId, String)>>,
}

impl Elicitations {
    pub fn new(bus: Bus, policy: AskPolicy) -> Self {
        Self { bus, policy, pending: Mutex::new(HashMap::new()), warned: Mutex::new(HashSet::new()) }
    }

    /// Asks and waits for the person's answer; declines at once where no one can answer.
    pub async fn ask(
        &self,
        session: &SessionId,
        tool: Option<ToolCallRef>,
        ask: ElicitationAsk,
    ) -> ElicitationReply {
        if self.policy != AskPolicy::Wait {
            if self.warned.locked().insert((session.clone(), ask.server.clone())) {
                self.bus.publish(EventPayload::SessionWarning {
                    session_id: session.clone(),
                    message: format!(
                        "MCP server {} asked for input (\"{}\"); no one can answer in this headless run, so it was declined",
                        ask.server,
                        codeloop_types::escape_controls(&ask.message)
                    ),
                });
            }
            return ElicitationReply::decline();
        }
        let request = ElicitationRequest { id: ElicitationId::new(), session_id: session.clone(), ask, tool };
        let (tx, rx) = oneshot::channel();
        let id = request.id.clone();
        let schema = request.ask.schema.clone();
        self.pending.locked().insert(id.clone(), Pending { request: request.clone(), answer: tx });
        self.bus.publish(EventPayload::ElicitationAsked(request));
        let guard = Forget { elicitations: self, id };
        // A dropped sender (the session stopped) is a cancel.
        let reply = rx.await.unwrap_or(ElicitationReply { action: ElicitationAction::Cancel, content: None });
        drop(guard);
        match reply.action {
            ElicitationAction::Accept => ElicitationReply {
                action: ElicitationAction::Accept,
                content: Some(with_defaults(reply.content, schema.as_ref())),
            },
            _ => ElicitationReply { action: reply.action, content: None },
        }
    }

    pub fn pending(&self, session: Option<&SessionId>) -> Vec<ElicitationRequest> {
        let pending = self.pending.locked();
        let mut list: Vec<ElicitationRequest> = pending
            .values()
            .filter(|p| session.is_none_or(|s| &p.request.session_id == s))
            .map(|p| p.request.clone())
            .collect();
        list.sort_by(|a, b| a.id.cmp(&b.id));
        list
    }

    /// Answers a pending request of `session`.
    pub fn reply(
        &self,
        session: &SessionId,
        id: &ElicitationId,
        reply: ElicitationReply,
    ) -> Result<(), ElicitationError> {
        let entry = {
            let mut pending = self.pending.locked();
            match pending.get(id) {
                Some(p) if &p.request.session_id == session => pending.remove(id),
                _ => None,
            }
        };
        let entry = entry.ok_or_else(|| ElicitationError::NotPending(id.clone()))?;
        let action = reply.action;
        let _ = entry.answer.send(reply);
        self.bus.publish(EventPayload::ElicitationReplied {
            session_id: session.clone(),
            request_id: id.clone(),
            action,
        });
        Ok(())
    }

    /// Cancels every pending request of a session (its run is stopping).
    pub fn cancel_session(&self, session: &SessionId) {
        for request in self.pending(Some(session)) {
            let cancel = ElicitationReply { action: ElicitationAction::Cancel, content: None };
            let _ = self.reply(session, &request.id, cancel);
        }
    }
}

/// An accepted form's content with the schema's `default` for every field the person left out (the
/// MCP 2025-11-25 rule, SEP-1034).
fn with_defaults(content: Option<Value>, schema: Option<&Value>) -> Value {
    let mut content = match content {
        Some(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    let properties = schema.and_then(|s| s.get("properties")).and_then(Value::as_object);
    for (field, spec) in properties.into_iter().flatten() {
        if let Some(default) = spec.get("default")
            && !content.contains_key(field)
        {
            content.insert(field.clone(), default.clone());
        }
    }
    Value::Object(content)
}

/// Withdraws a request whose asker stopped waiting (the call was cancelled, or a sign-in it asked for
/// came back by itself): clients are told, so no one answers a question that is gone.
struct Forget<'a> {
    elicitations: &'a Elicitations,
    id: ElicitationId,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        let withdrawn = self.elicitations.pending.locked().remove(&self.id);
        if let Some(entry) = withdrawn {
            self.elicitations.bus.publish(EventPayload::ElicitationReplied {
                session_id: entry.request.session_id,
                request_id: self.id.clone(),
                action: ElicitationAction::Cancel,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_accepted_form_takes_the_schemas_defaults_for_what_was_left_out() {
        let schema = json!({"type": "object", "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "note": {"type": "string"},
        }});
        let filled = with_defaults(Some(json!({"name": "Ada"})), Some(&schema));
        assert_eq!(filled, json!({"name": "Ada", "age": 30}));
        assert_eq!(with_defaults(None, Some(&schema)), json!({"name": "John Doe", "age": 30}));
    }
}
