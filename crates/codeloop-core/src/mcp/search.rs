//! `tool_search` (DESIGN.md §5o): when the MCP tools' schemas exceed the `[mcp]` budget, the rest are not
//! sent with every request; the model finds them here by words (or by name with `select:`), gets their
//! schemas in the answer, and from its next request on they are offered like the others.
//!
//! Owns: matching and the answer (`metadata.loaded` names what the run offers from then on). Must not:
//! decide what is deferred (the run's offer does, from the budget), or call anything.

use std::sync::Arc;

use async_trait::async_trait;
use codeloop_tools::{Effect, Tool, ToolContext, ToolFailure, ToolOutput};
use serde_json::{Value, json};

/// The tool's name, and the permission it asks under (none: it only reads the tool list).
pub const TOOL_SEARCH: &str = "tool_search";
/// Tools one search loads at most.
const MAX_MATCHES: usize = 5;

pub(crate) struct ToolSearch {
    /// Every MCP tool offered now (the deferred ones among them).
    tools: Arc<[Arc<dyn Tool>]>,
    parameters: Value,
}

impl ToolSearch {
    pub fn new(tools: Arc<[Arc<dyn Tool>]>) -> Self {
        let parameters = json!({
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "Words the tool's name or description should contain, or `select:NAME,NAME` to load those tools by name"
                }
            },
            "required": ["query"],
            "additionalProperties": false
        });
        Self { tools, parameters }
    }

    /// The tools `query` finds, best first.
    fn find(&self, query: &str) -> Vec<&Arc<dyn Tool>> {
        if let Some(names) = query.trim().strip_prefix("select:") {
            let wanted: Vec<&str> = names.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
            return wanted.iter().filter_map(|name| self.tools.iter().find(|t| t.name() == *name)).collect();
        }
        let words: Vec<String> = query
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        let mut scored: Vec<(usize, &Arc<dyn Tool>)> = self
            .tools
            .iter()
            .filter_map(|tool| {
                let name = tool.name().to_lowercase();
                let description = tool.description().to_lowercase();
                // A word in the name counts more than one in the description.
                let score: usize = words
                    .iter()
                    .map(|w| {
                        if name.contains(w.as_str()) {
                            3
                        } else {
                            usize::from(description.contains(w.as_str()))
                        }
                    })
                    .sum();
                (score > 0).then_some((score, tool))
            })
            .collect();
        scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name().cmp(b.1.name())));
        scored.into_iter().take(MAX_MATCHES).map(|(_, tool)| tool).collect()
    }
}

#[async_trait]
impl Tool for ToolSearch {
    fn name(&self) -> &str {
        TOOL_SEARCH
    }

    fn description(&self) -> &str {
        "Find MCP tools that are not listed with every request and make them callable: give words their name or description contains (or `select:NAME,NAME`); the answer has each tool's parameters, and from the next step on you can call it."
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    fn effect(&self) -> Effect {
        Effect::ReadOnly
    }

    async fn execute(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let Some(query) = args.get("query").and_then(Value::as_str) else {
            return Err(ToolFailure::InvalidArguments {
                tool: TOOL_SEARCH.into(),
                detail: "`query` (text) is required".into(),
            });
        };
        let found = self.find(query);
        if found.is_empty() {
            return Ok(ToolOutput {
                title: format!("no tool matches {query:?}"),
                output: format!(
                    "No MCP tool matches {query:?}. The tools not listed are named in this tool's description: try their words."
                ),
                metadata: json!({"loaded": []}),
                attachments: Vec::new(),
            });
        }
        let loaded: Vec<&str> = found.iter().map(|t| t.name()).collect();
        let output = found
            .iter()
            .map(|t| format!("{}: {}\nparameters: {}", t.name(), t.description(), t.parameters()))
            .collect::<Vec<_>>()
            .join("\n\n");
        Ok(ToolOutput {
            title: format!("{} tools loaded", loaded.len()),
            output: format!("{output}\n\nThese tools can be called from the next step on."),
            metadata: json!({"loaded": loaded}),
            attachments: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Named(&'static str, &'static str, Value);

    #[async_trait]
    impl Tool for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn description(&self) -> &str {
            self.1
        }
        fn parameters(&self) -> &Value {
            &self.2
        }
        async fn execute(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolFailure> {
            Err(ToolFailure::Failed("not here".into()))
        }
    }

    #[test]
    fn words_in_the_name_rank_first_and_select_loads_by_name() {
        let tools: Vec<Arc<dyn Tool>> = vec![
            Arc::new(Named("gh_create_issue", "Open an issue", json!({}))),
            Arc::new(Named("gh_list_pulls", "List pull requests and issue links", json!({}))),
            Arc::new(Named("db_query", "Run SQL", json!({}))),
        ];
        let search = ToolSearch::new(tools.into());
        let names =
            |found: Vec<&Arc<dyn Tool>>| found.iter().map(|t| t.name().to_owned()).collect::<Vec<_>>();
        assert_eq!(names(search.find("issue")), ["gh_create_issue", "gh_list_pulls"]);
        assert_eq!(names(search.find("SQL")), ["db_query"]);
        assert_eq!(names(search.find("select:db_query, gh_list_pulls")), ["db_query", "gh_list_pulls"]);
        assert!(search.find("weather").is_empty());
    }
}
