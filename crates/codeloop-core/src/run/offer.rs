//! What a turn offers the model, worked out once per run for each agent and model: the system prompt
//! and context block, and the tools that can work — those the rules do not switch off, of the model's
//! file-editing profile ([`ToolProfile`]), and with something behind them (no `skill` without skills,
//! no `task` without a subagent the agent may start, no `bash_output`/`bash_kill` before a background job).

use std::sync::Arc;

use codeloop_provider::ToolSpec;
use codeloop_tools::{Needs, SkillInfo};
use codeloop_types::PermissionAction;

use super::{Offer, Run};
use crate::agents::{Agent, AgentMode};
use crate::instructions::{instruction_files, system_prompt};
use crate::models::ResolvedModel;
use crate::permission::{evaluate, offered};

impl Run<'_> {
    /// The offer for `agent` on `model`, computed on first use in the run.
    pub(super) fn offer(&mut self, agent: &Agent, model: &ResolvedModel) -> Arc<Offer> {
        // The job tools join once the session has a background job: one prefix change, not one per step.
        let has_jobs = !self.services.jobs.list(&self.session.id).is_empty();
        let key = (agent.name.clone(), model.reference.clone(), has_jobs);
        if let Some(offer) = self.offers.get(&key) {
            return offer.clone();
        }
        let skills = self.skills(agent);
        let system = system_prompt(
            agent.prompt.as_deref(),
            &model.reference.to_string(),
            &self.project,
            self.session.time.created,
            &instruction_files(
                &self.project,
                self.services.global_instructions.as_deref(),
                &self.policy.instructions,
            ),
            &skills,
            self.paths.temp_dir.as_deref(),
        );
        let tools = self.tools_for(agent, model, !skills.is_empty(), has_jobs);
        let offer = Arc::new(Offer { system, tools });
        self.offers.insert(key, offer.clone());
        offer
    }

    /// The installed skills, when the agent may load them.
    fn skills(&self, agent: &Agent) -> Vec<SkillInfo> {
        if !self.offers_permission(agent, "skill") {
            return Vec::new();
        }
        codeloop_tools::list_skills(&self.services.skill_dirs, &self.project.root)
    }

    fn offers_permission(&self, agent: &Agent, permission: &str) -> bool {
        let defaults = self.services.permissions.defaults();
        offered(permission, defaults, &self.layers(agent), &self.policy.narrowing)
    }

    fn tools_for(
        &self,
        agent: &Agent,
        model: &ResolvedModel,
        has_skills: bool,
        has_jobs: bool,
    ) -> Vec<ToolSpec> {
        let subagents = self.startable_subagents(agent);
        self.tools
            .specs
            .iter()
            .filter(|spec| {
                let Some(tool) = self.tools.registry.get(&spec.name) else {
                    return self.offers_permission(agent, &spec.name);
                };
                let works = match tool.needs() {
                    Needs::Nothing => true,
                    Needs::Skills => has_skills,
                    Needs::Subagents => subagents > 0,
                    Needs::Jobs => has_jobs,
                };
                works
                    && tool.profile().is_none_or(|profile| profile == model.tools)
                    && self.offers_permission(agent, tool.permission())
            })
            .cloned()
            .collect()
    }

    /// Subagents `agent` may start with the `task` tool: not denied by name (`task = { NAME = "deny" }`)
    /// by the rules or the project's narrowing.
    fn startable_subagents(&self, agent: &Agent) -> usize {
        let layers = self.layers(agent);
        let defaults = self.services.permissions.defaults();
        let narrowing: &[codeloop_types::PermissionRule] = &self.policy.narrowing;
        self.services
            .agents
            .values()
            .filter(|a| a.mode == AgentMode::Subagent)
            .filter(|a| {
                evaluate("task", &a.name, [defaults, layers.as_slice()]).0 != PermissionAction::Deny
                    && evaluate("task", &a.name, [narrowing]).0 != PermissionAction::Deny
            })
            .count()
    }
}
