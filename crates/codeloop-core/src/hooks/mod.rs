//! Hooks (DESIGN.md §5d): the user's programs that run around the pipeline's events, in Claude Code's
//! format — matching ([`config`]), running command and HTTP handlers in parallel ([`run`]), and reading
//! and merging what they answer ([`merge`]).
//!
//! Owns: which handlers an event runs, their processes and requests, their decisions.
//! Must not: decide what the pipeline does with a decision (the processor, the run loop and the
//! permission gate apply it), or load config files (that is [`crate::config`]'s). Hooks are not walled:
//! they are the user's programs, and never come from an untrusted project.

pub(crate) mod claude;
mod config;
mod merge;
mod run;
pub(crate) mod transcript;
mod turn;

pub use config::{
    DEFAULT_TIMEOUT_SECS, Handler, HandlerKind, HandlerSettings, HookLayer, HookSource, Hooks, HooksSettings,
    MatcherGroup, OnError, read_claude_settings,
};
pub use merge::{Decision, HookOutcome, MAX_TEXT};
pub use run::{HookEnv, fire};
pub use turn::TurnHooks;

/// The events of Claude Code that codeloop fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr)]
pub enum HookEvent {
    SessionStart,
    UserPromptSubmit,
    PreToolUse,
    PermissionRequest,
    PostToolUse,
    PostToolUseFailure,
    Stop,
    StopFailure,
    SubagentStart,
    SubagentStop,
    PreCompact,
    PostCompact,
    Notification,
    SessionEnd,
}

impl HookEvent {
    pub const COUNT: usize = 14;
    pub const ALL: [HookEvent; HookEvent::COUNT] = [
        HookEvent::SessionStart,
        HookEvent::UserPromptSubmit,
        HookEvent::PreToolUse,
        HookEvent::PermissionRequest,
        HookEvent::PostToolUse,
        HookEvent::PostToolUseFailure,
        HookEvent::Stop,
        HookEvent::StopFailure,
        HookEvent::SubagentStart,
        HookEvent::SubagentStop,
        HookEvent::PreCompact,
        HookEvent::PostCompact,
        HookEvent::Notification,
        HookEvent::SessionEnd,
    ];

    pub fn name(self) -> &'static str {
        self.into()
    }

    pub fn parse(name: &str) -> Option<HookEvent> {
        HookEvent::ALL.into_iter().find(|e| e.name() == name)
    }

    /// Events whose hooks can stop what is about to happen (where `on_error = "block"` bites).
    pub fn can_block(self) -> bool {
        matches!(
            self,
            HookEvent::UserPromptSubmit
                | HookEvent::PreToolUse
                | HookEvent::PermissionRequest
                | HookEvent::PostToolUse
                | HookEvent::PostToolUseFailure
                | HookEvent::Stop
                | HookEvent::SubagentStop
                | HookEvent::PreCompact
        )
    }

    /// Events of a model turn: Claude Code sends the turn's `effort` with these.
    pub fn in_model_turn(self) -> bool {
        matches!(
            self,
            HookEvent::PreToolUse
                | HookEvent::PermissionRequest
                | HookEvent::PostToolUse
                | HookEvent::PostToolUseFailure
                | HookEvent::Stop
                | HookEvent::SubagentStop
        )
    }

    /// Events whose plain stdout (exit 0, not JSON) is context for the model.
    pub fn stdout_is_context(self) -> bool {
        matches!(self, HookEvent::UserPromptSubmit | HookEvent::SessionStart)
    }
}

/// The names a tool answers to in matchers and `tool_name`: Claude's where one exists, else the hook
/// name the tool declares, else its own. The first is `tool_name`; codeloop's own name always matches.
pub fn tool_names(tool: &str, declared: Option<&str>) -> Vec<String> {
    let claude = match tool {
        "bash" => Some("Bash"),
        "read" => Some("Read"),
        "write" => Some("Write"),
        "edit" => Some("Edit"),
        "grep" => Some("Grep"),
        "glob" => Some("Glob"),
        "webfetch" => Some("WebFetch"),
        "todowrite" => Some("TodoWrite"),
        // Claude Code 2.1 calls it `Agent`; a `Task` matcher still matches it (recorded).
        "task" => Some("Agent"),
        "question" => Some("AskUserQuestion"),
        "skill" => Some("Skill"),
        "apply_patch" => Some("ApplyPatch"),
        _ => None,
    };
    let mut names: Vec<String> = Vec::with_capacity(4);
    match (declared, claude) {
        (Some(declared), _) => names.push(declared.to_owned()),
        (None, Some(claude)) => names.push(claude.to_owned()),
        (None, None) => {}
    }
    if tool == "apply_patch" {
        names.extend(["Edit".to_owned(), "Write".to_owned()]);
    }
    if tool == "task" {
        names.push("Task".to_owned());
    }
    if !names.iter().any(|n| n == tool) {
        names.push(tool.to_owned());
    }
    names
}

/// Codeloop's own name of a tool Claude names `claude` (`Bash` → `bash`), if it has one.
fn codeloop_name(claude: &str) -> Option<&'static str> {
    [
        "bash",
        "read",
        "write",
        "edit",
        "grep",
        "glob",
        "webfetch",
        "todowrite",
        "task",
        "question",
        "skill",
        "apply_patch",
    ]
    .into_iter()
    .find(|tool| tool_names(tool, None).iter().any(|name| name == claude))
}

/// What the matchers of `event` see for a hook input given from outside (`codeloop hooks test`).
pub fn subjects(event: HookEvent, tool: Option<&str>, input: &serde_json::Value) -> Vec<String> {
    let field = |key: &str| input.get(key).and_then(serde_json::Value::as_str).map(str::to_owned);
    match event {
        HookEvent::PreToolUse
        | HookEvent::PostToolUse
        | HookEvent::PostToolUseFailure
        | HookEvent::PermissionRequest => {
            let Some(name) = tool.map(str::to_owned).or_else(|| field("tool_name")) else {
                return Vec::new();
            };
            if name.starts_with("mcp__") {
                return vec![name];
            }
            tool_names(codeloop_name(&name).unwrap_or(&name), None)
        }
        HookEvent::SessionStart => field("source").into_iter().collect(),
        HookEvent::PreCompact | HookEvent::PostCompact => field("trigger").into_iter().collect(),
        HookEvent::Notification => field("notification_type").into_iter().collect(),
        HookEvent::SessionEnd => field("reason").into_iter().collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_are_claudes_and_codeloops() {
        assert_eq!(tool_names("bash", None), ["Bash", "bash"]);
        assert_eq!(tool_names("apply_patch", None), ["ApplyPatch", "Edit", "Write", "apply_patch"]);
        assert_eq!(tool_names("fs_read", Some("mcp__fs__read")), ["mcp__fs__read", "fs_read"]);
        assert_eq!(tool_names("custom", None), ["custom"]);
    }

    #[test]
    fn matchers_are_unanchored_case_sensitive_and_identical_handlers_run_once() {
        let layer = |source, toml: &str| HookLayer {
            source,
            path: "x.toml".into(),
            settings: toml::from_str(toml).unwrap(),
        };
        let user = layer(
            HookSource::User,
            "[[PreToolUse]]\nmatcher = \"Edit|Write\"\n[[PreToolUse.hooks]]\ncommand = \"a\"\n\
             [[PreToolUse]]\nmatcher = \"ash\"\n[[PreToolUse.hooks]]\ncommand = \"b\"\n\
             [[PreToolUse]]\n[[PreToolUse.hooks]]\ncommand = \"all\"\n",
        );
        let claude = layer(
            HookSource::ClaudeUser,
            "[[PreToolUse]]\nmatcher = \"*\"\n[[PreToolUse.hooks]]\ncommand = \"all\"\n",
        );
        let hooks = Hooks::compile(&[user, claude]);
        let names = |tool: &str| {
            let subjects = tool_names(tool, None);
            let subjects: Vec<&str> = subjects.iter().map(String::as_str).collect();
            hooks.matching(HookEvent::PreToolUse, &subjects).into_iter().map(|h| h.target).collect::<Vec<_>>()
        };
        assert_eq!(names("apply_patch"), ["a", "all"]);
        assert_eq!(names("bash"), ["b", "all"]);
        assert_eq!(names("read"), ["all"]);
        assert!(hooks.any(HookEvent::PreToolUse));
        assert!(!hooks.any(HookEvent::Stop));
    }
}
