//! The system prompt (reference §2.5): the agent prompt, and a context block (model, environment frozen
//! per session, project instruction files — `AGENTS.md`, else `CLAUDE.md` — found walking up from the
//! working directory to the repository root, skills, date, scratch dir).
//!
//! Split for prompt caches: the system prompt is the same bytes for every session of an agent, and the
//! context, which varies by project, session and day, leads the conversation instead. Every wire format
//! renders the tool list before the conversation (chat templates put it in the system turn, Anthropic
//! before the system), so two sessions' requests share system prompt and tools as a cacheable prefix;
//! with the date and scratch dir inside the system prompt, a server such as llama.cpp recomputed the
//! whole tool list for every new session.
//!
//! Must not: change between steps of a session; everything here is computed once per run.

use std::path::{Path, PathBuf};

use codeloop_types::{Millis, date_of};

const BASE_PROMPT: &str = "You are codeloop, an autonomous coding agent working in the user's project.
- Use the tools to inspect the code before changing it; prefer small, exact edits over rewriting whole files.
- Run the project's tests or commands with bash to check your work when it is practical.
- Paths may be absolute or relative to the working directory. Stay inside the project unless asked.
- When the task is done, answer briefly: what you changed and how you verified it. If you are blocked, say what you need.
- Do not invent file contents, command output or results you have not seen.
- The first user message starts with a <context> block from codeloop (environment, project instructions, date): follow it, but it is not the user's request.";

/// What a run sends as its system prompt, and what leads its conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemPrompt {
    /// The system prompt blocks: the agent's prompt alone, the same bytes in every session.
    pub stable: Vec<String>,
    /// The `<context>` block, sent as the first text of the conversation: what is true of this project
    /// (model, environment, instructions, skills) first, then of this session and day (date, scratch dir),
    /// so even the context shares its beginning with other sessions of the project.
    pub context: String,
}

/// The project's location, found once per run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectInfo {
    pub directory: PathBuf,
    /// The repository root, or `directory` when it is not inside a git repository.
    pub root: PathBuf,
    pub is_git: bool,
}

impl ProjectInfo {
    pub fn discover(directory: &Path) -> ProjectInfo {
        let git_root = directory.ancestors().find(|dir| dir.join(".git").exists());
        ProjectInfo {
            directory: directory.to_owned(),
            root: git_root.unwrap_or(directory).to_owned(),
            is_git: git_root.is_some(),
        }
    }
}

/// Instruction files for a project: the first name of `AGENTS.md`, `CLAUDE.md` that exists anywhere from
/// the working directory up to the root, every ancestor's copy of that name (outermost first), then the
/// global file and configured extras.
pub fn instruction_files(project: &ProjectInfo, global: Option<&Path>, extra: &[String]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Some(global) = global.filter(|g| g.is_file()) {
        files.push(global.to_owned());
    }
    let mut dirs: Vec<&Path> = Vec::new();
    for dir in project.directory.ancestors() {
        dirs.push(dir);
        if dir == project.root {
            break;
        }
    }
    // A repository's instruction file that is a link to something outside it (`AGENTS.md ->
    // ~/.ssh/id_rsa`) would read that file into the prompt: only files that really lie inside count.
    let root = project.root.canonicalize().unwrap_or_else(|_| project.root.clone());
    let inside = |path: &PathBuf| path.canonicalize().is_ok_and(|real| real.starts_with(&root));
    for name in ["AGENTS.md", "CLAUDE.md"] {
        let found: Vec<PathBuf> =
            dirs.iter().rev().map(|d| d.join(name)).filter(|p| p.is_file() && inside(p)).collect();
        if !found.is_empty() {
            files.extend(found);
            break;
        }
    }
    for path in extra {
        let path = Path::new(path);
        let path = if path.is_absolute() { path.to_owned() } else { project.root.join(path) };
        if path.is_file() && !files.contains(&path) {
            files.push(path);
        }
    }
    files
}

/// The system prompt and context block of every request in a run.
pub fn system_prompt(
    agent_prompt: Option<&str>,
    model: &str,
    project: &ProjectInfo,
    session_created: Millis,
    instruction_files: &[PathBuf],
    skills: &[codeloop_tools::SkillInfo],
    scratch: Option<&Path>,
) -> SystemPrompt {
    let mut context = format!(
        "<context>\nYou are powered by the model {model}.\n<env>\nWorking directory: {}\nWorkspace root: {}\nIs a git repository: {}\nPlatform: {}\n</env>",
        project.directory.display(),
        project.root.display(),
        if project.is_git { "yes" } else { "no" },
        std::env::consts::OS,
    );
    for path in instruction_files {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                context.push_str(&format!("\n\nInstructions from: {}\n{}", path.display(), text.trim_end()));
            }
            Err(e) => tracing::warn!("cannot read instruction file {}: {e}", path.display()),
        }
    }
    if !skills.is_empty() {
        context
            .push_str("\n\n<available_skills>\nLoad a skill with the skill tool when the task matches it.\n");
        for skill in skills {
            context.push_str(&format!("- {}: {}\n", skill.name, skill.description));
        }
        context.push_str("</available_skills>");
    }
    // Last: what differs between two sessions of the project. The session's own temp dir is the only
    // place outside the project the model may use unasked.
    context.push_str(&format!("\n\n<session>\nToday's date: {}\n", date_of(session_created)));
    if let Some(dir) = scratch {
        context.push_str(&format!("Scratch directory for temporary files ($TMPDIR): {}\n", dir.display()));
    }
    context.push_str("</session>\n</context>");
    SystemPrompt { stable: vec![agent_prompt.unwrap_or(BASE_PROMPT).to_owned()], context }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_md_wins_over_claude_md_and_ancestors_are_included() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        let sub = root.join("crates/app");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(root.join("AGENTS.md"), "root rules").unwrap();
        std::fs::write(sub.join("AGENTS.md"), "app rules").unwrap();
        std::fs::write(sub.join("CLAUDE.md"), "claude rules").unwrap();
        let project = ProjectInfo::discover(&sub);
        assert_eq!(project.root, root);
        assert!(project.is_git);
        let files = instruction_files(&project, None, &[]);
        assert_eq!(files, vec![root.join("AGENTS.md"), sub.join("AGENTS.md")]);
        let skills = [codeloop_tools::SkillInfo { name: "deploy".into(), description: "Ship it.".into() }];
        let prompt =
            system_prompt(None, "fake/model", &project, 0, &files, &skills, Some(Path::new("/tmp/s")));
        assert_eq!(prompt.stable, vec![BASE_PROMPT.to_owned()], "the system prompt is the agent's alone");
        let context = &prompt.context;
        assert!(context.ends_with("Today's date: 1970-01-01\nScratch directory for temporary files ($TMPDIR): /tmp/s\n</session>\n</context>"), "{context}");
        assert!(context.contains("- deploy: Ship it."));
        assert!(context.find("root rules").unwrap() < context.find("app rules").unwrap());
        assert!(!context.contains("claude rules"));
    }

    #[test]
    fn an_instruction_file_linked_to_outside_the_project_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret.txt");
        std::fs::write(&secret, "private key").unwrap();
        let root = dir.path().join("repo");
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::os::unix::fs::symlink(&secret, root.join("AGENTS.md")).unwrap();
        std::fs::write(root.join("CLAUDE.md"), "inside rules").unwrap();
        let files = instruction_files(&ProjectInfo::discover(&root), None, &[]);
        assert_eq!(files, vec![root.join("CLAUDE.md")]);
    }
}
