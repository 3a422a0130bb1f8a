//! File arguments of the commands of a script: which paths a command names, where they really are
//! (symlinks resolved through the deepest existing ancestor), and the `external_directory` and `read`
//! patterns that follow. The tool asks; the rules decide (`*.env` asks by default).

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
}

/// One path a command names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PathArg {
    /// Resolved lexically against the command's directory; may hold glob characters.
    pub path: PathBuf,
    /// Where the shell will look for the file: `path` up to its first glob character.
    pub literal: PathBuf,
    pub kind: PathKind,
}

/// The `external_directory` and `read` asks for every path argument of every command.
pub(crate) fn file_asks(ctx: &ToolContext, cwd: &Path, commands: &[Command]) -> FileAsks {
    let project = Project::new(ctx);
    let mut asks = FileAsks::default();
    for command in commands {
        for arg in path_arguments(&command_dir(cwd, command), command) {
            let real = real_path(&arg.path);
            let literal_real = real_path(&arg.literal);
            for literal in [&arg.literal, &literal_real] {
                if !project.contains(literal) {
                    let kind = if literal.is_dir() { PathKind::Directory } else { arg.kind };
                    asks.external.insert(paths::external_pattern(literal, kind));
                }
            }
            for path in [&arg.path, &real] {
                let pattern = project.relative(path);
                if !asks.read.contains(&pattern) {
                    asks.read.push(pattern);
                }
            }
        }
    }
    asks
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
    let mut raw: Vec<(String, PathKind)> = Vec::new();
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
                    raw.push((value.to_string(), PathKind::File));
                }
                continue;
            }
            if std::mem::take(&mut skip_mode) || text == "-" || text == "{}" {
                continue;
            }
            if file_command || looks_like_path(base, &text) {
                raw.push((text, kind));
            }
        }
    }
    for target in &command.redirects {
        if let Some(text) = known_text(target)
            && !DEVICES.contains(&text.as_str())
            && !text.starts_with("/dev/fd/")
        {
            raw.push((text, PathKind::File));
        }
    }
    raw.into_iter()
        .filter(|(text, _)| !text.is_empty() && !DEVICES.contains(&text.as_str()))
        .map(|(text, kind)| {
            let path = paths::resolve_from(base, &text);
            match text.find(['*', '?', '[', '{']) {
                Some(idx) => {
                    let dir = text[..idx]
                        .rsplit_once('/')
                        .map_or(".", |(dir, _)| if dir.is_empty() { "/" } else { dir });
                    PathArg { path, literal: paths::resolve_from(base, dir), kind: PathKind::Directory }
                }
                None => PathArg { literal: path.clone(), path, kind },
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
