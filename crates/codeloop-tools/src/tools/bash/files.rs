//! File arguments of the commands of a script: which paths a command names, where they really are
//! (symlinks resolved through the deepest existing ancestor; globs expanded against the file system), and
//! the `external_directory`, `read` and protected-path `edit` patterns that follow. The tool asks; the
//! rules decide (`*.env` asks by default). Reading commands whose operand is only known at run time
//! (`cat $(…)`, `head "$f"`) and `REV:PATH` operands of `git show` / `git cat-file` are asked as reads too
//! (DESIGN.md §5c "Secrets are hidden from processes").

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::parse::Command;
use super::words::{Form, Word};
use crate::ToolContext;
use crate::paths::{self, PathKind};

/// Commands whose operands are all paths.
const FILE_COMMANDS: &[&str] = &[
    ".", "base64", "bat", "cat", "cd", "chgrp", "chmod", "chown", "cmp", "cp", "diff", "du", "file", "head",
    "hexdump", "install", "less", "ln", "ls", "mkdir", "more", "mv", "nano", "nl", "od", "pushd", "readlink",
    "realpath", "rm", "rmdir", "shred", "source", "stat", "strings", "tac", "tail", "tee", "touch",
    "truncate", "vi", "vim", "wc", "xxd",
];
/// File commands that change what they name: an operand that is a protected path asks `edit` with an
/// explicit-only grant (DESIGN.md §5c).
const WRITING_COMMANDS: &[&str] = &[
    "chgrp", "chmod", "chown", "cp", "install", "ln", "mkdir", "mv", "nano", "rm", "rmdir", "shred", "tee",
    "touch", "truncate", "vi", "vim",
];
/// File commands that print what they read: an operand known only at run time asks `read` as written.
const READING_COMMANDS: &[&str] = &[
    "base64", "bat", "cat", "cmp", "cp", "diff", "head", "hexdump", "less", "more", "nl", "od", "strings",
    "tac", "tail", "xxd",
];
/// `git` subcommands whose `REV:PATH` operands print a file's stored contents.
const GIT_OBJECT_READERS: &[&str] = &["cat-file", "show"];
/// A glob operand expands to at most this many paths for the asks (the shell may expand it to more).
const MAX_GLOB_MATCHES: usize = 1000;
/// Commands whose first operand is a mode or an owner, not a path.
const MODE_FIRST: &[&str] = &["chgrp", "chmod", "chown"];
/// Commands that name no file (their redirections still count).
const NO_FILES: &[&str] = &[":", "echo", "false", "printf", "true"];
/// Devices a redirection may name without asking.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/random",
    "/dev/stderr",
    "/dev/stdin",
    "/dev/stdout",
    "/dev/tty",
    "/dev/urandom",
    "/dev/zero",
];

/// What the file arguments of a script ask.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct FileAsks {
    /// `external_directory` patterns (`<dir>/*`).
    pub external: BTreeSet<String>,
    /// `read` patterns: each path relative to the project root, or absolute outside it.
    pub read: Vec<String>,
    /// `edit` patterns (explicit grant only) for protected paths a command writes or a redirect names.
    pub protected: Vec<String>,
}

/// One path a command names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PathArg {
    /// Resolved lexically against the command's directory; may hold glob characters.
    pub path: PathBuf,
    /// Where the shell will look for the file: `path` up to its first glob character.
    pub literal: PathBuf,
    pub kind: PathKind,
    /// Named by a redirection (`> file`), which may create or overwrite it.
    pub redirect: bool,
}

/// The `external_directory` and `read` asks for every path argument of every command.
pub(crate) fn file_asks(ctx: &ToolContext, cwd: &Path, commands: &[Command]) -> FileAsks {
    let project = Project::new(ctx);
    let mut asks = FileAsks::default();
    for command in commands {
        let base = command_dir(cwd, command);
        let name = command.words.first().map(|w| w.value.as_str()).unwrap_or("");
        let writes = WRITING_COMMANDS.contains(&name);
        for arg in path_arguments(&base, command) {
            let real = real_path(&arg.path);
            let literal_real = real_path(&arg.literal);
            for literal in [&arg.literal, &literal_real] {
                if !project.contains(literal) {
                    let kind = if literal.is_dir() { PathKind::Directory } else { arg.kind };
                    asks.external.insert(paths::external_pattern(literal, kind));
                }
            }
            let mut named = vec![arg.path.clone(), real];
            if arg.literal != arg.path {
                named.extend(expand_glob(&arg.path));
            }
            for path in &named {
                push_unique(&mut asks.read, project.relative(path));
                // `.git` is left to the walls (and `git_write`): git itself writes it without naming it.
                let in_git = path.iter().any(|c| c == ".git");
                if (writes || arg.redirect) && !in_git && paths::is_protected(&ctx.project, path) {
                    push_unique(&mut asks.protected, project.relative(path));
                }
            }
        }
        for operand in run_time_operands(command) {
            push_unique(&mut asks.read, operand);
        }
        for path in git_object_paths(&ctx.project.root, command) {
            push_unique(&mut asks.read, project.relative(&path));
        }
    }
    asks
}

fn push_unique(list: &mut Vec<String>, item: String) {
    if !list.contains(&item) {
        list.push(item);
    }
}

/// The paths a glob operand names now (`cat .en?` reads `.env`), so the rules see real names.
fn expand_glob(pattern: &Path) -> Vec<PathBuf> {
    let text = pattern.to_string_lossy();
    let Ok(glob) = globset::GlobBuilder::new(&text).literal_separator(true).build() else {
        return Vec::new();
    };
    let matcher = glob.compile_matcher();
    let Some(idx) = text.find(['*', '?', '[', '{']) else { return Vec::new() };
    let dir =
        PathBuf::from(text[..idx].rsplit_once('/').map_or(".", |(d, _)| if d.is_empty() { "/" } else { d }));
    let depth = text[idx..].matches('/').count() + 1;
    let recursive = text.contains("**");
    let mut out = Vec::new();
    let mut stack = vec![(dir, 1usize)];
    while let Some((dir, level)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if matcher.is_match(&path) {
                out.push(path.clone());
                if out.len() >= MAX_GLOB_MATCHES {
                    return out;
                }
            }
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if is_dir && (recursive || level < depth) {
                stack.push((path, level + 1));
            }
        }
    }
    out
}

/// Operands of a reading command that are only known at run time (`$(…)`, `$var`, backticks), as
/// written: the rules cannot see what they will name, so they are asked as they are.
fn run_time_operands(command: &Command) -> Vec<String> {
    let Some((name, args)) = command.words.split_first() else { return Vec::new() };
    if !READING_COMMANDS.contains(&name.value.as_str()) {
        return Vec::new();
    }
    args.iter()
        .filter(|w| w.form == Form::Dynamic && known_text(w).is_none())
        .map(|w| w.source.clone())
        .collect()
}

/// `PATH` of each `REV:PATH` operand of `git show` / `git cat-file`, relative to the repository root
/// (`REV:./PATH` relative to the command's directory).
fn git_object_paths(root: &Path, command: &Command) -> Vec<PathBuf> {
    let words: Vec<&str> = command.words.iter().map(|w| w.value.as_str()).collect();
    let Some(sub) = words.iter().skip(1).find(|w| !w.starts_with('-')) else { return Vec::new() };
    if words.first() != Some(&"git") || !GIT_OBJECT_READERS.contains(sub) {
        return Vec::new();
    }
    words
        .iter()
        .filter(|w| !w.starts_with('-') && !w.contains("://"))
        .filter_map(|w| w.split_once(':').map(|(_, path)| path))
        .filter(|path| !path.is_empty())
        .map(|path| match path.strip_prefix("./") {
            Some(rel) => {
                command.dirs.iter().fold(root.to_path_buf(), |b, d| paths::resolve_from(&b, d)).join(rel)
            }
            None => root.join(path),
        })
        .collect()
}

/// `path` and its real path, those of them outside the project.
pub(crate) fn outside_project(ctx: &ToolContext, path: &Path) -> Vec<PathBuf> {
    let project = Project::new(ctx);
    let mut outside = Vec::new();
    for candidate in [path.to_path_buf(), real_path(path)] {
        if !project.contains(&candidate) && !outside.contains(&candidate) {
            outside.push(candidate);
        }
    }
    outside
}

/// The directory a command runs in: `cwd` moved by the `cd`s before it.
pub(crate) fn command_dir(cwd: &Path, command: &Command) -> PathBuf {
    command.dirs.iter().fold(cwd.to_path_buf(), |base, dir| paths::resolve_from(&base, dir))
}

/// Paths a command names: operands of file commands, path-like operands of any command (absolute,
/// `~`, `./`, `../`, or naming something that exists), `--opt=PATH` values, and redirection targets.
/// Flags, `chmod`'s mode and words only known at run time are skipped (`$HOME` is expanded).
pub(crate) fn path_arguments(base: &Path, command: &Command) -> Vec<PathArg> {
    let mut raw: Vec<(String, PathKind, bool)> = Vec::new();
    if let Some((name, args)) = command.words.split_first()
        && !NO_FILES.contains(&name.value.as_str())
    {
        let name = name.value.as_str();
        let file_command = FILE_COMMANDS.contains(&name);
        let kind = if matches!(name, "cd" | "pushd") { PathKind::Directory } else { PathKind::File };
        let mut skip_mode = MODE_FIRST.contains(&name);
        let mut options_done = false;
        for word in args {
            let Some(text) = known_text(word) else {
                skip_mode = false;
                continue;
            };
            if !options_done && text == "--" {
                options_done = true;
                continue;
            }
            if !options_done && text.starts_with('-') && text != "-" {
                if let Some((_, value)) = text.split_once('=')
                    && looks_like_path(base, value)
                {
                    raw.push((value.to_string(), PathKind::File, false));
                }
                continue;
            }
            if std::mem::take(&mut skip_mode) || text == "-" || text == "{}" {
                continue;
            }
            if file_command || looks_like_path(base, &text) {
                raw.push((text, kind, false));
            }
        }
    }
    for target in &command.redirects {
        if let Some(text) = known_text(target)
            && !DEVICES.contains(&text.as_str())
            && !text.starts_with("/dev/fd/")
        {
            raw.push((text, PathKind::File, true));
        }
    }
    raw.into_iter()
        .filter(|(text, _, _)| !text.is_empty() && !DEVICES.contains(&text.as_str()))
        .map(|(text, kind, redirect)| {
            let path = paths::resolve_from(base, &text);
            match text.find(['*', '?', '[', '{']) {
                Some(idx) => {
                    let dir = text[..idx]
                        .rsplit_once('/')
                        .map_or(".", |(dir, _)| if dir.is_empty() { "/" } else { dir });
                    let literal = paths::resolve_from(base, dir);
                    PathArg { path, literal, kind: PathKind::Directory, redirect }
                }
                None => PathArg { literal: path.clone(), path, kind, redirect },
            }
        })
        .collect()
}

/// The text of a word whose value is known before it runs: literal or glob words, and `$HOME`/`${HOME}`
/// at the start of a word otherwise literal (as `~`).
fn known_text(word: &Word) -> Option<String> {
    match word.form {
        Form::Literal | Form::Glob => Some(word.value.clone()),
        Form::Dynamic => {
            let source = word.source.as_str();
            let unquoted = source.strip_prefix('"').and_then(|s| s.strip_suffix('"')).unwrap_or(source);
            let rest = ["$HOME", "${HOME}"].iter().find_map(|prefix| unquoted.strip_prefix(prefix))?;
            let simple = rest.is_empty() || rest.starts_with('/');
            let literal = !rest.contains(['$', '`', '"', '\'', '\\']);
            (simple && literal).then(|| format!("~{rest}"))
        }
    }
}

fn looks_like_path(base: &Path, text: &str) -> bool {
    text.starts_with('/')
        || text.starts_with('~')
        || text.starts_with("./")
        || text.starts_with("../")
        || text == "."
        || text == ".."
        || (!text.contains("://") && base.join(text).symlink_metadata().is_ok())
}

pub(crate) use crate::paths::real_path;

/// The project's directories, as given and with symlinks resolved.
struct Project {
    roots: Vec<PathBuf>,
    /// Also inside, but not what patterns are relative to: the session's temp dir.
    temp: Vec<PathBuf>,
}

impl Project {
    fn new(ctx: &ToolContext) -> Self {
        let mut roots = Vec::new();
        for dir in [&ctx.project.root, &ctx.project.directory] {
            for root in [paths::normalize(dir), real_path(dir)] {
                if !roots.contains(&root) {
                    roots.push(root);
                }
            }
        }
        let temp = ctx.project.temp_dir.iter().flat_map(|t| [paths::normalize(t), real_path(t)]).collect();
        Self { roots, temp }
    }

    fn contains(&self, path: &Path) -> bool {
        let path = paths::normalize(path);
        self.roots.iter().chain(&self.temp).any(|root| path.starts_with(root))
    }

    /// Relative to the project root (given or resolved) with `/` separators, else absolute.
    fn relative(&self, path: &Path) -> String {
        let path = paths::normalize(path);
        let rel = self.roots.iter().find_map(|root| path.strip_prefix(root).ok());
        let shown = match rel {
            Some(rel) if rel.as_os_str().is_empty() => return ".".to_string(),
            Some(rel) => rel,
            None => &path,
        };
        shown.to_string_lossy().replace('\\', "/")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::bash::parse::analyse;

    fn paths_of(cwd: &str, script: &str) -> Vec<PathBuf> {
        let cwd = Path::new(cwd);
        analyse(script).iter().flat_map(|c| path_arguments(&command_dir(cwd, c), c)).map(|a| a.path).collect()
    }

    #[test]
    fn path_arguments_skip_flags_modes_and_dynamic_words() {
        let p = PathBuf::from;
        assert_eq!(paths_of("/proj", "rm -rf ../other /tmp/x"), vec![p("/other"), p("/tmp/x")]);
        assert_eq!(paths_of("/proj", "chmod 755 bin/run"), vec![p("/proj/bin/run")]);
        assert_eq!(paths_of("/proj", "rm $X/x /etc/*.conf"), vec![p("/etc/*.conf")]);
        assert!(paths_of("/proj", "echo /etc/passwd").is_empty());
        assert_eq!(paths_of("/proj", "grep -r key /etc"), vec![p("/etc")]);
        assert_eq!(paths_of("/proj", "cargo test --manifest-path=/x/Cargo.toml"), vec![p("/x/Cargo.toml")]);
        assert_eq!(paths_of("/proj", "git log origin/main"), Vec::<PathBuf>::new());
        assert_eq!(paths_of("/proj", "echo hi > out.txt 2>/dev/null 2>&1"), vec![p("/proj/out.txt")]);
        assert_eq!(
            paths_of("/proj", "cd sub && cat ../../etc/passwd"),
            vec![p("/proj/sub"), p("/etc/passwd")]
        );
        assert_eq!(paths_of("/proj", "(cd /x); cat a"), vec![p("/x"), p("/proj/a")]);
        assert_eq!(paths_of("/proj", "cat -- -x"), vec![p("/proj/-x")]);
    }

    #[test]
    fn home_is_expanded_in_path_arguments() {
        let Some(home) = std::env::var_os("HOME").map(PathBuf::from) else { return };
        assert_eq!(
            paths_of("/proj", "cat $HOME/.ssh/id_rsa ~/.aws/credentials"),
            vec![home.join(".ssh/id_rsa"), home.join(".aws/credentials")]
        );
    }

    #[test]
    fn real_path_resolves_links_through_the_deepest_existing_ancestor() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(outside.path(), &link).unwrap();
        let real_outside = outside.path().canonicalize().unwrap();
        assert_eq!(real_path(&link.join("missing/file")), real_outside.join("missing/file"));
    }
}
