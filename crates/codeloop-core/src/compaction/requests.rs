//! The messages that ask for a compaction: a user message carrying a `compaction` part, like the user
//! message it follows. The run loop processes them; a client's `compact` command records one.

use codeloop_types::{
    CompactionPart, Message, MessageId, MessageTime, MessageWithParts, Part, PartKind, SessionId,
    UserMessage, now_ms,
};

/// A user message like `like` (same agent and model), new and empty.
pub(crate) fn user_info(session_id: &SessionId, like: &UserMessage) -> UserMessage {
    UserMessage {
        id: MessageId::new(),
        session_id: session_id.clone(),
        time: MessageTime { created: now_ms(), completed: None },
        agent: like.agent.clone(),
        model: like.model.clone(),
        system: None,
        format: None,
        command: None,
        effort: like.effort,
        allowed_tools: like.allowed_tools.clone(),
    }
}

/// A compaction request: a user message with one `compaction` part, which the run loop processes.
pub fn new_compaction_request(
    session_id: &SessionId,
    like: &UserMessage,
    auto: bool,
    overflow: bool,
) -> MessageWithParts {
    let info = user_info(session_id, like);
    let part = Part::new(
        session_id.clone(),
        info.id.clone(),
        PartKind::Compaction(CompactionPart {
            auto,
            overflow,
            tail_start_id: None,
            tail: Vec::new(),
            focus: None,
        }),
    );
    MessageWithParts { info: Message::User(info), parts: vec![part] }
}
