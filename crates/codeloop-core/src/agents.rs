//! Agents: a prompt, a permission ruleset, a step limit and optionally a model. `build` is the default
//! primary agent; `plan` cannot edit; `compaction` writes summaries and may not call tools.

use std::collections::BTreeMap;

use codeloop_types::{ModelRef, PermissionAction, PermissionRule};

use crate::config::Config;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentMode {
    Primary,
    Subagent,
    /// Used by the runtime only (compaction, titles); not selectable.
    Hidden,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    pub name: String,
    pub description: String,
    /// Replaces the default codeloop prompt when set.
    pub prompt: Option<String>,
    pub model: Option<ModelRef>,
    /// Maximum provider calls per run.
    pub steps: Option<u32>,
    pub temperature: Option<f32>,
    /// How hard the agent's model thinks (DESIGN.md §5l), unless a prompt says otherwise.
    pub effort: Option<codeloop_types::Effort>,
    pub permission: Vec<PermissionRule>,
    pub mode: AgentMode,
}

pub const DEFAULT_AGENT: &str = "build";
pub const COMPACTION_AGENT: &str = "compaction";

fn builtin() -> Vec<Agent> {
    use PermissionAction::*;
    vec![
        Agent {
            name: "build".into(),
            description: "The default agent: reads, edits and runs code to complete the task.".into(),
            prompt: None,
            model: None,
            steps: None,
            temperature: None,
            effort: None,
            permission: Vec::new(),
            mode: AgentMode::Primary,
        },
        Agent {
            name: "plan".into(),
            description: "Investigates and proposes a plan without changing files.".into(),
            prompt: None,
            model: None,
            steps: None,
            temperature: None,
            effort: None,
            permission: vec![PermissionRule::new("edit", "*", Deny), PermissionRule::new("bash", "*", Ask)],
            mode: AgentMode::Primary,
        },
        Agent {
            name: "general".into(),
            description:
                "General-purpose subagent for multi-step research or changes that can run on their own."
                    .into(),
            prompt: None,
            model: None,
            steps: None,
            temperature: None,
            effort: None,
            permission: vec![PermissionRule::new("todowrite", "*", Deny)],
            mode: AgentMode::Subagent,
        },
        Agent {
            name: "explore".into(),
            description: "Fast read-only subagent for finding files, code and answers in the project.".into(),
            prompt: None,
            model: None,
            steps: None,
            temperature: None,
            effort: None,
            permission: vec![
                PermissionRule::new("*", "*", Deny),
                PermissionRule::new("read", "*", Allow),
                PermissionRule::new("grep", "*", Allow),
                PermissionRule::new("glob", "*", Allow),
                PermissionRule::new("bash", "*", Allow),
                PermissionRule::new("skill", "*", Allow),
            ],
            mode: AgentMode::Subagent,
        },
        Agent {
            name: COMPACTION_AGENT.into(),
            description: "Summarises the conversation when the context window fills up.".into(),
            prompt: Some(crate::compaction::SUMMARY_SYSTEM_PROMPT.into()),
            model: None,
            steps: Some(1),
            temperature: None,
            effort: None,
            permission: vec![PermissionRule::new("*", "*", Deny)],
            mode: AgentMode::Hidden,
        },
    ]
}

/// Built-in agents with config overrides applied, and agents defined only in config added.
/// A name that no agent has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Agent not found: \"{name}\". Available agents: {}", available.join(", "))]
pub struct UnknownAgent {
    pub name: String,
    pub available: Vec<String>,
}

/// Why a person may not pick an agent as a session's own (see [`primary`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentRefusal {
    Missing,
    /// It runs only as a subagent, through the task tool.
    Subagent,
    /// codeloop uses it itself (compaction, titles).
    Hidden,
}

/// A refused pick of an agent, naming the ones a person may pick.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("agent \"{name}\" {}: choose one of {}", reason_text(*reason), primary.join(", "))]
pub struct AgentRefused {
    pub name: String,
    pub reason: AgentRefusal,
    pub primary: Vec<String>,
}

fn reason_text(reason: AgentRefusal) -> &'static str {
    match reason {
        AgentRefusal::Missing => "does not exist",
        AgentRefusal::Subagent => "runs only as a subagent, through the task tool",
        AgentRefusal::Hidden => "is used by codeloop itself",
    }
}

/// The one rule for an agent a person picks (a prompt's, a new session's, a client's mode): a primary
/// agent. Subagents run only through the task tool; hidden ones only inside the runtime.
pub fn primary<'a>(agents: &'a BTreeMap<String, Agent>, name: &str) -> Result<&'a Agent, AgentRefused> {
    let reason = match agents.get(name) {
        Some(agent) if agent.mode == AgentMode::Primary => return Ok(agent),
        Some(agent) if agent.mode == AgentMode::Subagent => AgentRefusal::Subagent,
        Some(_) => AgentRefusal::Hidden,
        None => AgentRefusal::Missing,
    };
    let primary = agents.values().filter(|a| a.mode == AgentMode::Primary).map(|a| a.name.clone()).collect();
    Err(AgentRefused { name: name.to_owned(), reason, primary })
}

/// The agent called `name`, or an error that lists the ones there are.
pub fn find<'a>(agents: &'a BTreeMap<String, Agent>, name: &str) -> Result<&'a Agent, UnknownAgent> {
    agents
        .get(name)
        .ok_or_else(|| UnknownAgent { name: name.to_owned(), available: agents.keys().cloned().collect() })
}

pub fn agents(config: &Config) -> BTreeMap<String, Agent> {
    let mut agents: BTreeMap<String, Agent> = builtin().into_iter().map(|a| (a.name.clone(), a)).collect();
    for (name, settings) in &config.agent {
        if settings.disable {
            agents.remove(name);
            continue;
        }
        let agent = agents.entry(name.clone()).or_insert_with(|| Agent {
            name: name.clone(),
            description: String::new(),
            prompt: None,
            model: None,
            steps: None,
            temperature: None,
            effort: None,
            permission: Vec::new(),
            mode: AgentMode::Primary,
        });
        if let Some(prompt) = &settings.prompt {
            agent.prompt = Some(prompt.clone());
        }
        if let Some(description) = &settings.description {
            agent.description = description.clone();
        }
        if let Some(model) = settings.model.as_deref().and_then(|m| m.parse().ok()) {
            agent.model = Some(model);
        }
        if settings.steps.is_some() {
            agent.steps = settings.steps;
        }
        if settings.temperature.is_some() {
            agent.temperature = settings.temperature;
        }
        if settings.effort.is_some() {
            agent.effort = settings.effort;
        }
        match settings.mode {
            Some(crate::config::AgentModeSetting::Primary) => agent.mode = AgentMode::Primary,
            Some(crate::config::AgentModeSetting::Subagent) => agent.mode = AgentMode::Subagent,
            None => {}
        }
        agent.permission.extend(settings.permission.0.iter().cloned());
    }
    if let (Some(model), Some(agent)) =
        (config.compaction.model.as_deref().and_then(|m| m.parse().ok()), agents.get_mut(COMPACTION_AGENT))
    {
        agent.model.get_or_insert(model);
    }
    agents
}
