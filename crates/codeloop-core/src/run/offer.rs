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
        // A tool_search that loaded tools changes the offer once, from the next step on.
        self.scan_loaded_tools();
        // The language-server tools join once a server runs for the project (started by an edit).
        let has_lsp = self.services.lsp.running_in(&self.project.root);
        let key = (agent.name.clone(), model.reference.clone(), has_jobs, self.loaded_tools.len(), has_lsp);
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
        let tools = self.tools_for(agent, model, !skills.is_empty(), has_jobs, has_lsp);
        let offer = Arc::new(Offer { system, tools });
        self.offers.insert(key, offer.clone());
        offer
    }

    /// Takes the names `tool_search` calls loaded from the history not looked at yet (the last message is
    /// looked at again: its parts grow while a step runs).
    fn scan_loaded_tools(&mut self) {
        if self.loaded_scanned > self.history.len() {
            // The history was rebuilt (a compaction): look at all of it again.
            self.loaded_scanned = 0;
        }
        let from = self.loaded_scanned.saturating_sub(1);
        for part in self.history[from..].iter().flat_map(|m| &m.parts) {
            if let codeloop_types::PartKind::Tool(tool) = &part.kind
                && tool.tool == crate::mcp::TOOL_SEARCH
                && let codeloop_types::ToolState::Completed(done) = &tool.state
            {
                let names = done.metadata.get("loaded").and_then(serde_json::Value::as_array);
                for name in names.into_iter().flatten().filter_map(serde_json::Value::as_str) {
                    if !self.loaded_tools.iter().any(|n| n == name) {
                        self.loaded_tools.push(name.to_owned());
                    }
                }
            }
        }
        self.loaded_scanned = self.history.len();
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
        has_lsp: bool,
    ) -> Vec<ToolSpec> {
        let subagents = self.startable_subagents(agent);
        let offered: Vec<ToolSpec> = self
            .tools
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
                    Needs::LanguageServer => has_lsp,
                };
                works
                    && tool.profile().is_none_or(|profile| profile == model.tools)
                    && self.offers_permission(agent, tool.permission())
            })
            .cloned()
            .collect();
        self.within_mcp_budget(offered)
    }

    /// The offered tools with the MCP ones over the `[mcp]` budget held back behind `tool_search`
    /// (DESIGN.md §5o): the first ones, in the registry's order, up to the budget are sent; the rest are
    /// named in `tool_search`'s description, and those it loaded follow it at the end of the list (so
    /// the prefix before them stays the same). Under the budget, `tool_search` is not offered.
    fn within_mcp_budget(&self, offered: Vec<ToolSpec>) -> Vec<ToolSpec> {
        let is_mcp = |spec: &ToolSpec| {
            self.tools.registry.get(&spec.name).and_then(|t| t.hook_name().map(|h| h.starts_with("mcp__")))
                == Some(true)
        };
        let size =
            |spec: &ToolSpec| spec.name.len() + spec.description.len() + spec.parameters.to_string().len();
        let (max_bytes, max_tools) = self.services.config.mcp.budget();
        let mcp: Vec<&ToolSpec> = offered.iter().filter(|s| is_mcp(s)).collect();
        let total: usize = mcp.iter().map(|s| size(s)).sum();
        let search = crate::mcp::TOOL_SEARCH;
        if mcp.len() <= max_tools && total <= max_bytes {
            return offered.into_iter().filter(|s| s.name != search).collect();
        }
        let (mut used_bytes, mut used_tools) = (0, 0);
        let mut kept = Vec::new();
        let mut deferred = Vec::new();
        let mut search_spec = None;
        for spec in offered {
            if spec.name == search {
                search_spec = Some(spec);
            } else if !is_mcp(&spec) {
                kept.push(spec);
            } else if used_tools < max_tools && used_bytes + size(&spec) <= max_bytes {
                used_tools += 1;
                used_bytes += size(&spec);
                kept.push(spec);
            } else {
                deferred.push(spec);
            }
        }
        let Some(mut search_spec) = search_spec else { return kept };
        let listed: Vec<String> = deferred
            .iter()
            .map(|s| {
                let line = s.description.lines().next().unwrap_or("");
                let line: String = line.chars().take(60).collect();
                format!("- {}: {line}", s.name)
            })
            .collect();
        search_spec.description = format!(
            "{}\nTools not listed with every request:\n{}",
            search_spec.description,
            listed.join("\n")
        );
        kept.push(search_spec);
        for name in &self.loaded_tools {
            if let Some(index) = deferred.iter().position(|s| &s.name == name) {
                kept.push(deferred.swap_remove(index));
            }
        }
        kept
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
