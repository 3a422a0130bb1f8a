//! Cost truth (DESIGN.md §5h): when codeloop itself changes what a request starts with — another model
//! or agent, a changed tool list, edited instructions — the step says so with a `session.cache` event,
//! so the prompt-cache miss that follows is explained. Compactions and prunes announce themselves where
//! they happen.
//!
//! Owns: the fingerprint of a request's prefix and the comparison. Must not: change any request.

use std::hash::{Hash, Hasher};

use codeloop_provider::ProviderRequest;
use codeloop_types::{CacheReason, Message, MessageWithParts, ModelRef};

/// What a provider's prompt cache keys on, first to last: the model, then the tools, the system prompt
/// and the `<context>` block (the agent picks the first two).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Prefix {
    model: ModelRef,
    agent: String,
    tools: u64,
    system: u64,
}

impl Prefix {
    /// `context` is the `<context>` block that leads the conversation (instructions, environment, date).
    pub fn of(request: &ProviderRequest, context: &str, model: &ModelRef, agent: &str) -> Prefix {
        let mut tools = std::collections::hash_map::DefaultHasher::new();
        for tool in &request.tools {
            tool.name.hash(&mut tools);
            tool.description.hash(&mut tools);
        }
        let mut system = std::collections::hash_map::DefaultHasher::new();
        request.system.hash(&mut system);
        context.hash(&mut system);
        Prefix {
            model: model.clone(),
            agent: agent.to_owned(),
            tools: tools.finish(),
            system: system.finish(),
        }
    }

    /// The prefix the session's last answer was sent with, as far as the stored history tells (model
    /// and agent; the rest taken as `now`'s): what a new process compares its first step with.
    pub fn from_history(history: &[MessageWithParts], now: &Prefix) -> Option<Prefix> {
        history.iter().rev().find_map(|m| match &m.info {
            Message::Assistant(a) if !a.summary => {
                Some(Prefix { model: a.model.clone(), agent: a.agent.clone(), ..now.clone() })
            }
            _ => None,
        })
    }

    /// Why `self` does not start as `before` did, the earliest difference first.
    pub fn changed_from(&self, before: &Prefix) -> Option<CacheReason> {
        if self.model != before.model {
            Some(CacheReason::Model)
        } else if self.agent != before.agent {
            Some(CacheReason::Agent)
        } else if self.tools != before.tools {
            Some(CacheReason::Tools)
        } else if self.system != before.system {
            Some(CacheReason::Instructions)
        } else {
            None
        }
    }
}
