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
