//! Commands (DESIGN.md §5g): Markdown prompt files in the user's and the project's folders, MCP prompts
//! and the built-ins, expanded into the text of one user message.
//!
//! Owns: finding and reading command files ([`load`]), their templates ([`template`]), and expanding
//! one for a session — `@path` read under the project's bounds and the read rules, `` !`cmd` `` run
//! as the bash tool runs it (walls, rules), only for the user's and a trusted project's commands.
//! Must not: send anything or decide agent and model rules (the engine's command validation does).
//! Named `file_commands` beside [`crate::command`], which is the engine's vocabulary of client requests.

pub mod load;
mod shell;
pub mod template;

pub use load::{CommandFile, CommandSource};
pub(crate) use shell::CommandShell;

/// Whether a project directory is trusted: the CLI answers from the user's trust records.
pub type ProjectTrust = std::sync::Arc<dyn Fn(&std::path::Path) -> bool + Send + Sync>;

/// The built-in commands.
pub const COMPACT: &str = "compact";
pub const INIT: &str = "init";

/// What `/init` asks the model to do.
pub const INIT_PROMPT: &str = "Please analyze this codebase and create an AGENTS.md file in the project root, \
or improve the one that exists. It is read by coding agents working in this repository. Include:\n\
1. The commands to build, lint and test (including how to run a single test).\n\
2. The architecture: the main parts, how they fit together, and where to find things.\n\
3. Code style and conventions (formatting, naming, error handling, imports) that are not obvious from one file.\n\
Keep it concise (about 20-40 lines). If there are Cursor rules (.cursor/rules/, .cursorrules), Copilot \
instructions (.github/copilot-instructions.md) or a CLAUDE.md, include what matters from them. If AGENTS.md \
exists, keep what is still right and fix what is not. Write the file with the write or edit tool.";

/// One command a client may offer: what `/help`, completion, `GET /command` and ACP list.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CommandInfo {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argument_hint: Option<String>,
    pub source: CommandSource,
}

impl From<&CommandFile> for CommandInfo {
    fn from(file: &CommandFile) -> Self {
        Self {
            name: file.name.clone(),
            description: file.description.clone(),
            argument_hint: file.argument_hint.clone(),
            source: file.source,
        }
    }
}

/// The built-ins, as listed.
pub fn builtins() -> Vec<CommandInfo> {
    vec![
        CommandInfo {
            name: COMPACT.into(),
            description: Some("Summarise the session now (the focus goes to the summariser)".into()),
            argument_hint: Some("[focus]".into()),
            source: CommandSource::Builtin,
        },
        CommandInfo {
            name: INIT.into(),
            description: Some("Write or improve AGENTS.md for this project".into()),
            argument_hint: None,
            source: CommandSource::Builtin,
        },
    ]
}

/// Expands `file` with `arguments` for a session: each `@path` and `` !`cmd` `` the template holds, with
/// the arguments in as data (one pass: what an argument, a file or a command's output holds is never
/// expanded).
pub(crate) async fn expand(file: &CommandFile, arguments: &str, shell: &CommandShell) -> String {
    let may_run = file.source == CommandSource::User || shell.trusted();
    let mut out = String::with_capacity(file.body.len() + arguments.len());
    for piece in template::fill(&file.body, arguments) {
        match piece {
            template::Piece::Text(text) => out.push_str(&text),
            template::Piece::File(path) => out.push_str(&shell.inline_file(&path)),
            template::Piece::Shell(_) if !may_run => out.push_str(template::NOT_TRUSTED),
            template::Piece::Shell(command) => out.push_str(&shell.run(&command).await),
        }
    }
    out
}
