//! The tool registry: the built-in set, lookup with the unknown-tool and case repairs, and the generic
//! wrapper around every call (reference §8.1): run, then truncate the output unless the tool did.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::locks::FileLocks;
use crate::tools::{
    ApplyPatchTool, BashKillTool, BashOutputTool, BashTool, EditTool, GlobTool, GrepTool, InvalidTool,
    QuestionTool, ReadTool, SkillTool, TodoWriteTool, WebFetchTool, WriteTool,
};
use crate::truncate::{Keep, truncate_output};
use crate::{Tool, ToolContext, ToolFailure, ToolOutput, ToolSpec};

/// Name of the repair target for bad calls; never offered to the model.
pub const INVALID_TOOL: &str = "invalid";

/// Construction options for the built-in set.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltinConfig {
    /// Folders searched for `<name>/SKILL.md`, in order; relative entries are resolved against the project
    /// root at call time.
    pub skill_dirs: Vec<PathBuf>,
}

impl Default for BuiltinConfig {
    /// `.codeloop/skills` in the project, then `$XDG_CONFIG_HOME/codeloop/skills` (or
    /// `~/.config/codeloop/skills`).
    fn default() -> Self {
        Self { skill_dirs: SkillTool::default_dirs() }
    }
}

/// Every tool the model may call, by name.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// All built-in tools with default options. Schemas are generated here, once.
    pub fn builtin() -> Self {
        Self::builtin_with(BuiltinConfig::default())
    }

    /// All built-in tools.
    pub fn builtin_with(config: BuiltinConfig) -> Self {
        let locks = FileLocks::default();
        let mut registry = Self::new();
        registry.register(Arc::new(InvalidTool::new()));
        registry.register(Arc::new(BashTool::new()));
        registry.register(Arc::new(BashOutputTool::new()));
        registry.register(Arc::new(BashKillTool::new()));
        registry.register(Arc::new(ReadTool::new()));
        registry.register(Arc::new(WriteTool::new(locks.clone())));
        registry.register(Arc::new(EditTool::new(locks.clone())));
        registry.register(Arc::new(ApplyPatchTool::new(locks)));
        registry.register(Arc::new(GrepTool::new()));
        registry.register(Arc::new(GlobTool::new()));
        registry.register(Arc::new(TodoWriteTool::new()));
        registry.register(Arc::new(WebFetchTool::new()));
        registry.register(Arc::new(QuestionTool::new()));
        registry.register(Arc::new(SkillTool::new(config.skill_dirs)));
        registry
    }

    /// Adds a tool, replacing one with the same name.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name().to_string(), tool);
    }

    /// Removes a tool (e.g. `edit` and `write` when `apply_patch` replaces them).
    pub fn remove(&mut self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.remove(name)
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
    }

    /// Names of the tools offered to the model, sorted.
    /// The permissions the tools ask under (each tool's own `permission()`), sorted, each once.
    pub fn permissions(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .tools
            .values()
            .filter(|t| t.name() != INVALID_TOOL)
            .map(|t| t.permission().to_owned())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    pub fn names(&self) -> Vec<&str> {
        self.tools.keys().map(String::as_str).filter(|n| *n != INVALID_TOOL).collect()
    }

    /// What the model sees, sorted by name; `invalid` is left out.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .values()
            .filter(|t| t.name() != INVALID_TOOL)
            .map(|t| ToolSpec {
                name: t.name().to_string(),
                description: t.description().to_string(),
                parameters: t.parameters().clone(),
            })
            .collect()
    }

    /// Runs one call: finds the tool (a name that differs only by case is lowercased), runs it, and cuts
    /// an over-long output, spilling the full text to `ctx.tool_output_dir`.
    pub async fn execute(
        &self,
        name: &str,
        args: Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolFailure> {
        let tool = self.lookup(name).ok_or_else(|| self.unknown(name))?;
        if ctx.cancel.is_cancelled() {
            return Err(ToolFailure::Cancelled);
        }
        let output = tool.execute(args, ctx).await?;
        Ok(finish(output, ctx).await)
    }

    fn lookup(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.get(name).or_else(|| self.get(&name.to_lowercase()))
    }

    fn unknown(&self, name: &str) -> ToolFailure {
        ToolFailure::Failed(format!(
            "Unknown tool \"{name}\". Available tools: {}. Call one of these instead.",
            self.names().join(", ")
        ))
    }
}

/// Applies the output limits unless the tool already did (it set `metadata.truncated`).
async fn finish(mut output: ToolOutput, ctx: &ToolContext) -> ToolOutput {
    let mut metadata = match std::mem::take(&mut output.metadata) {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        other => Map::from_iter([("value".to_string(), other)]),
    };
    if !metadata.contains_key("truncated") {
        let cut = truncate_output(&output.output, ctx.limits, &ctx.tool_output_dir, Keep::Head).await;
        metadata.insert("truncated".to_string(), json!(cut.truncated));
        if let Some(path) = &cut.output_path {
            metadata.insert("outputPath".to_string(), json!(path.to_string_lossy()));
        }
        output.output = cut.content;
    }
    output.metadata = Value::Object(metadata);
    output
}
