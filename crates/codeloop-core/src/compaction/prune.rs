//! Prune (DESIGN.md §4 "Prune", reference §5): after a run, old tool outputs are hidden from the model
//! (`time.compacted`); the stored output stays. Unlike OpenCode, an already pruned part does not stop the
//! walk, so older prunable outputs are not missed.

use codeloop_store::MessageWithParts;
use codeloop_types::{Message, PartKind, ToolState};

/// Newest tool output kept visible, in estimated tokens.
pub const PRUNE_PROTECT: u64 = 40_000;
/// Prune only when at least this much would be freed.
pub const PRUNE_MINIMUM: u64 = 20_000;
/// User turns never pruned (the current and the previous one).
pub const PROTECTED_TURNS: usize = 2;
/// Tools whose output is never pruned.
pub const PROTECTED_TOOLS: &[&str] = &["skill"];

/// chars / 4, the estimate used when the provider's usage does not apply.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// `(message index, part index)` of every tool part to prune, or nothing when less than
/// [`PRUNE_MINIMUM`] would be freed. `history` is the visible history, oldest first.
pub fn prune_candidates(history: &[&MessageWithParts]) -> Vec<(usize, usize)> {
    let mut turns = 0;
    let mut total = 0u64;
    let mut pruned = 0u64;
    let mut candidates = Vec::new();
    'walk: for (m, message) in history.iter().enumerate().rev() {
        match &message.info {
            Message::User(_) => {
                if !message.parts.iter().any(|p| p.as_compaction().is_some()) {
                    turns += 1;
                }
                continue;
            }
            Message::Assistant(info) if info.summary => break 'walk,
            Message::Assistant(_) => {}
        }
        if turns < PROTECTED_TURNS {
            continue;
        }
        for (p, part) in message.parts.iter().enumerate().rev() {
            let PartKind::Tool(tool) = &part.kind else { continue };
            let ToolState::Completed(done) = &tool.state else { continue };
            if PROTECTED_TOOLS.contains(&tool.tool.as_str()) || done.time.compacted.is_some() {
                continue;
            }
            let estimate = estimate_tokens(&done.output);
            total += estimate;
            if total > PRUNE_PROTECT {
                pruned += estimate;
                candidates.push((m, p));
            }
        }
    }
    if pruned > PRUNE_MINIMUM { candidates } else { Vec::new() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codeloop_types::{
        AssistantMessage, MessageId, MessagePath, MessageTime, ModelRef, Part, SessionId, ToolPart,
        UserMessage,
    };
    use serde_json::json;

    fn user(session: &SessionId) -> MessageWithParts {
        let id = MessageId::new();
        MessageWithParts {
            info: Message::User(UserMessage {
                id: id.clone(),
                session_id: session.clone(),
                time: MessageTime { created: 0, completed: None },
                agent: "build".into(),
                model: ModelRef::new("p", "m"),
                system: None,
                format: None,
                command: None,
                effort: None,
                allowed_tools: Vec::new(),
            }),
            parts: vec![Part::user_text(session.clone(), id, "go")],
        }
    }

    /// An assistant message with one completed call of `tool` whose output is `tokens` estimated tokens.
    fn call(session: &SessionId, tool: &str, tokens: usize, compacted: bool) -> MessageWithParts {
        let info = AssistantMessage::new(
            session.clone(),
            MessageId::new(),
            "build",
            ModelRef::new("p", "m"),
            MessagePath { cwd: ".".into(), root: ".".into() },
        );
        let mut state = ToolState::default();
        state.start(json!({}), 1).unwrap();
        state.complete("x".repeat(tokens * 4), "t".into(), json!({}), vec![], 2).unwrap();
        if compacted {
            state.mark_compacted(3).unwrap();
        }
        let part = Part::new(
            session.clone(),
            info.id.clone(),
            PartKind::Tool(ToolPart {
                call_id: "c".into(),
                tool: tool.into(),
                state,
                metadata: None,
                ignored: false,
            }),
        );
        MessageWithParts { info: Message::Assistant(info), parts: vec![part] }
    }

    #[test]
    fn skill_outputs_and_the_last_two_turns_are_never_pruned_and_pruned_parts_do_not_stop_the_walk() {
        let s = SessionId::new();
        let history = vec![
            user(&s),
            call(&s, "read", 30_000, false),  // 1: old, prunable
            call(&s, "skill", 30_000, false), // 2: protected tool
            call(&s, "read", 10_000, true),   // 3: already pruned: skipped, the walk goes on
            call(&s, "read", 35_000, false),  // 4: within the protected 40 000
            user(&s),
            call(&s, "read", 50_000, false), // 6: previous turn, protected
            user(&s),
            call(&s, "read", 50_000, false), // 8: current turn, protected
        ];
        let visible: Vec<&MessageWithParts> = history.iter().collect();
        assert_eq!(prune_candidates(&visible), vec![(1, 0)]);
    }

    #[test]
    fn nothing_is_pruned_below_the_minimum() {
        let s = SessionId::new();
        let history =
            [user(&s), call(&s, "read", 15_000, false), call(&s, "read", 40_000, false), user(&s), user(&s)];
        let visible: Vec<&MessageWithParts> = history.iter().collect();
        assert!(prune_candidates(&visible).is_empty(), "only 15 000 would be freed");
    }
}
