//! A warning per permission rule whose name nothing asks for (a typo such as `bahs`): the names come
//! from the built-in tools' own `permission()` and the asks the engine makes itself, not a hand-kept list.

use super::schema::Config;

/// Permissions asked outside any one tool: by the engine itself (paths outside the project, the doom-loop
/// brake, sandbox escapes), by the task tool, which the engine defines, and by the MCP resource tools.
const ENGINE_PERMISSIONS: [&str; 8] = [
    "external_directory",
    "doom_loop",
    "sandbox_escalate",
    "task",
    crate::mcp::LIST_RESOURCES,
    crate::mcp::READ_RESOURCE,
    crate::mcp::SAMPLING_PERMISSION,
    crate::mcp::TOOL_SEARCH,
];

/// Every permission codeloop asks for: the built-in tools' own (`write` and `apply_patch` ask as `edit`),
/// then the engine's. Built once.
pub fn known_permissions() -> &'static [String] {
    static KNOWN: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    KNOWN.get_or_init(|| {
        let mut known = codeloop_tools::ToolRegistry::builtin().permissions();
        known.extend(ENGINE_PERMISSIONS.iter().map(|p| (*p).to_owned()));
        known.dedup();
        known
    })
}

/// A warning per permission rule whose name nothing asks for (a typo such as `bahs`), naming the known ones.
pub(super) fn unknown_permissions(config: &Config) -> Vec<String> {
    let agent_rules = config.agent.values().flat_map(|a| a.permission.0.iter());
    let known_names = known_permissions();
    let mut unknown: Vec<&str> = Vec::new();
    for rule in config.permission.0.iter().chain(agent_rules).chain(&config.project_rules) {
        let name = rule.permission.as_str();
        let known = known_names.iter().any(|k| k == name)
            || name.contains('*')
            || name.contains('?')
            || config.mcp.keys().any(|server| name.starts_with(&format!("{server}_")));
        if !known && !unknown.contains(&name) {
            unknown.push(name);
        }
    }
    unknown
        .into_iter()
        .map(|name| {
            let hint = match name {
                "write" | "apply_patch" | "patch" => " (writes ask as `edit`)".to_string(),
                _ => String::new(),
            };
            format!(
                "[permission] `{name}` is not a permission codeloop asks for{hint}, so its rules never match; \
                 known: {}, and NAME_TOOL for MCP tools",
                known_names.join(", ")
            )
        })
        .collect()
}
