//! Finding the Markdown command files and reading their front matter (DESIGN.md §5g): the user's folders
//! and the project's, `.codeloop/` over `.claude/` over `.opencode/` in one scope, the project over the
//! user, a sub-folder giving `dir:NAME`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where a command comes from: who wrote it decides whether its `` !`cmd` `` parts may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CommandSource {
    /// The user's own folders (trusted).
    User,
    /// The project's folders (its shell parts run only once the project is trusted).
    Project,
    /// An MCP server's prompt (`mcp__SERVER__PROMPT`).
    Mcp,
    /// Built into codeloop (`/compact`, `/init`).
    Builtin,
}

/// One command file, read.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandFile {
    pub name: String,
    pub description: Option<String>,
    pub argument_hint: Option<String>,
    pub agent: Option<String>,
    /// `provider/model`, as written.
    pub model: Option<String>,
    pub subtask: bool,
    /// `allowed-tools` (Claude's rule syntax: `Bash(git add:*)`, `Read`): pre-approved for the command's
    /// turn, within deny rules.
    pub allowed_tools: Vec<String>,
    /// The template.
    pub body: String,
    pub source: CommandSource,
    pub path: PathBuf,
}

/// The project's command folders under `dir`, highest precedence first.
pub fn project_dirs(dir: &Path) -> [PathBuf; 4] {
    [
        dir.join(".codeloop").join("commands"),
        dir.join(".claude").join("commands"),
        dir.join(".opencode").join("command"),
        dir.join(".opencode").join("commands"),
    ]
}

/// The user's command folders in `config_dir` (codeloop's) and `home`, highest precedence first.
pub fn user_dirs(config_dir: Option<&Path>, home: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = config_dir.map(|d| d.join("commands")).into_iter().collect();
    if let Some(home) = home {
        dirs.push(home.join(".claude").join("commands"));
        dirs.push(home.join(".config").join("opencode").join("command"));
    }
    dirs
}

/// Every command: the user's folders, then the project's (from the project root down to `directory`),
/// each later scope winning over the earlier on the same name.
pub fn load_all(user: &[PathBuf], root: &Path, directory: &Path) -> BTreeMap<String, CommandFile> {
    let mut all = BTreeMap::new();
    load_scope(&mut all, user, CommandSource::User, None);
    // A project's folders count only where their real path is inside the project (a `.claude/commands`
    // that links out could read any folder's files into the prompt).
    let bound = root.canonicalize().unwrap_or_else(|_| root.to_owned());
    // Nearer folders win: the root's first, then each folder down to the working directory.
    let mut chain: Vec<&Path> = directory.ancestors().take_while(|d| d.starts_with(root)).collect();
    chain.reverse();
    if chain.is_empty() {
        chain.push(directory);
    }
    for dir in chain {
        load_scope(&mut all, &project_dirs(dir), CommandSource::Project, Some(&bound));
    }
    all
}

/// One scope's folders (highest precedence first) into `all`, replacing what an earlier scope named;
/// with `bound`, only folders whose real path is inside it.
fn load_scope(
    all: &mut BTreeMap<String, CommandFile>,
    dirs: &[PathBuf],
    source: CommandSource,
    bound: Option<&Path>,
) {
    let mut scope: BTreeMap<String, CommandFile> = BTreeMap::new();
    for dir in dirs {
        if let Some(bound) = bound
            && !dir.canonicalize().is_ok_and(|real| real.starts_with(bound))
        {
            continue;
        }
        for (name, path) in files_in(dir) {
            if scope.contains_key(&name) {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else { continue };
            scope.insert(name.clone(), parse(&name, &text, source, path));
        }
    }
    all.extend(scope);
}

/// `(name, file)` for every `*.md` under `dir`, `sub/NAME.md` named `sub:NAME`. A file or folder that
/// links out of `dir` does not count (a repository's command could otherwise read any file into the
/// prompt), nor does anything but a regular file (a FIFO would block the read).
fn files_in(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(root) = dir.canonicalize() else { return Vec::new() };
    let mut found = Vec::new();
    let mut stack = vec![(root.clone(), String::new())];
    while let Some((folder, prefix)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        for entry in entries.flatten() {
            let file_name = entry.file_name().to_string_lossy().into_owned();
            if file_name.starts_with('.') {
                continue;
            }
            let Ok(real) = entry.path().canonicalize() else { continue };
            if !real.starts_with(&root) {
                continue;
            }
            if real.is_dir() {
                // Bounded depth: a few levels of grouping, never a loop.
                if prefix.matches(':').count() < 4 {
                    stack.push((real, format!("{prefix}{file_name}:")));
                }
            } else if !real.is_file() {
                continue;
            } else if let Some(stem) = file_name.strip_suffix(".md").filter(|s| !s.is_empty()) {
                found.push((format!("{prefix}{stem}"), real));
            }
        }
    }
    found
}

/// A command file's front matter and body.
pub fn parse(name: &str, text: &str, source: CommandSource, path: PathBuf) -> CommandFile {
    let (front, body) = split_front_matter(text);
    let mut file = CommandFile {
        name: name.to_owned(),
        description: None,
        argument_hint: None,
        agent: None,
        model: None,
        subtask: false,
        allowed_tools: Vec::new(),
        body: body.to_owned(),
        source,
        path,
    };
    for line in front.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        let value = unquote(value.trim());
        let value = (!value.is_empty()).then(|| value.to_owned());
        match key.trim() {
            "description" => file.description = value,
            "argument-hint" | "argument_hint" => file.argument_hint = value,
            "agent" => file.agent = value,
            "model" => file.model = value,
            "subtask" => file.subtask = value.as_deref() == Some("true"),
            "allowed-tools" | "allowed_tools" => {
                file.allowed_tools = value.as_deref().map(rule_list).unwrap_or_default()
            }
            _ => {}
        }
    }
    file
}

/// `Bash(git add:*), Bash(git status:*), Read` (or a `[…]` list) as its rules, split at top-level commas.
fn rule_list(text: &str) -> Vec<String> {
    let text = text.trim().trim_start_matches('[').trim_end_matches(']');
    let (mut rules, mut current, mut depth) = (Vec::new(), String::new(), 0usize);
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                rules.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    rules.push(current);
    rules.into_iter().map(|r| unquote(r.trim()).to_owned()).filter(|r| !r.is_empty()).collect()
}

/// `(front matter, body)`; no front matter gives an empty one and the whole text.
pub(crate) fn split_front_matter(text: &str) -> (&str, &str) {
    let Some(rest) = text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n")) else {
        return ("", text);
    };
    if let Some(body) = rest.strip_prefix("---") {
        return ("", body.trim_start_matches(['\r', '\n']));
    }
    match rest.find("\n---") {
        Some(end) => {
            let after = &rest[end + 4..];
            let body = after.split_once('\n').map_or("", |(_, body)| body);
            (&rest[..end], body)
        }
        None => ("", text),
    }
}

pub(crate) fn unquote(value: &str) -> &str {
    for quote in ['"', '\''] {
        if let Some(inner) = value.strip_prefix(quote).and_then(|v| v.strip_suffix(quote)) {
            return inner;
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_project_command_folder_that_links_out_of_the_project_does_not_count() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("leak.md"), "leak\n").unwrap();
        let project = tempfile::tempdir().unwrap();
        let root = project.path();
        std::fs::create_dir_all(root.join(".claude")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join(".claude/commands")).unwrap();
        std::fs::create_dir_all(root.join(".codeloop/commands")).unwrap();
        std::fs::write(root.join(".codeloop/commands/mine.md"), "mine\n").unwrap();
        let all = load_all(&[], root, root);
        assert!(all.contains_key("mine"), "{:?}", all.keys());
        assert!(!all.contains_key("leak"), "{:?}", all.keys());
        // The user's own folders may be links: they are the user's.
        let user = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), user.path().join("commands")).unwrap();
        let all = load_all(&[user.path().join("commands")], root, root);
        assert!(all.contains_key("leak"), "{:?}", all.keys());
    }

    #[test]
    fn front_matter_is_read_and_removed() {
        let text = "---\ndescription: \"Review a file\"\nargument-hint: [file]\nmodel: p/m\nsubtask: true\n---\nReview $1\n";
        let file = parse("review", text, CommandSource::User, PathBuf::new());
        assert_eq!(file.description.as_deref(), Some("Review a file"));
        assert_eq!(file.argument_hint.as_deref(), Some("[file]"));
        assert_eq!(file.model.as_deref(), Some("p/m"));
        assert!(file.subtask);
        assert_eq!(file.body, "Review $1\n");
        let plain = parse("x", "just text", CommandSource::User, PathBuf::new());
        assert_eq!((plain.body.as_str(), plain.description), ("just text", None));
    }
}
