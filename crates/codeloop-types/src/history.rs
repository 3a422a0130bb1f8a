//! What clients and the engine read of a session's history and its tools: a message with its parts, the
//! filter of a session listing, and a tool as the model sees it. Shared by every client, so no client
//! needs the store's or the tools' crates to read a session.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Message, MessageId, Part, PermissionRule, SessionId};

/// A message with its parts, in id order: the unit of history reads (`{info, parts}` in JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageWithParts {
    pub info: Message,
    pub parts: Vec<Part>,
}

/// Which sessions to list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionFilter {
    /// Only children of this session; `None` lists root sessions only unless `include_children`.
    pub parent: Option<SessionId>,
    pub include_children: bool,
    pub directory: Option<String>,
    pub limit: Option<usize>,
}

/// A tool as the model sees it: its name, what it does, and the JSON Schema of its arguments object.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// A page of history, newest first: messages strictly older than `before`. `limit == 0` means no limit.
/// With `max_parts`, the page also ends once its messages hold that many parts (it always holds at least
/// one message), so a page of a few very long messages stays as light as one of many short ones.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    pub before: Option<MessageId>,
    pub limit: usize,
    pub max_parts: Option<usize>,
}

impl Page {
    /// How many of `part_counts` (the page's messages, newest first) the page keeps under `max_parts`.
    pub fn keep(&self, part_counts: impl IntoIterator<Item = usize>) -> usize {
        let Some(max) = self.max_parts else { return usize::MAX };
        let mut total = 0usize;
        let mut kept = 0usize;
        for count in part_counts {
            if kept > 0 && total + count > max {
                break;
            }
            total += count;
            kept += 1;
        }
        kept
    }
}

/// A saved "always" approval: a permission rule remembered for one project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    pub id: i64,
    pub project: String,
    pub rule: PermissionRule,
    pub created: i64,
}
