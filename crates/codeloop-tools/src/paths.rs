//! Path resolution and the `external_directory` check shared by the file tools.
//!
//! Paths from the model may be absolute or relative to the session directory. Anything that resolves
//! outside the project (its root or the session directory) needs an `external_directory` permission before
//! a tool touches it; tools never decide that themselves, they only ask.

use std::path::{Component, Path, PathBuf};

use serde_json::json;

use crate::{PermissionAsk, ToolContext, ToolFailure};

/// Whether a path names a file (the ask covers its parent directory) or a directory (the ask covers it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathKind {
    File,
    Directory,
}

/// Resolves `raw` against the session directory (expanding a leading `~/`) and removes `.`/`..` lexically.
pub(crate) fn resolve(ctx: &ToolContext, raw: &str) -> PathBuf {
    resolve_from(&ctx.project.directory, raw)
}

/// Like [`resolve`], with an explicit base directory.
pub(crate) fn resolve_from(base: &Path, raw: &str) -> PathBuf {
    let expanded = expand_home(raw);
    let joined = if expanded.is_absolute() { expanded } else { base.join(expanded) };
    normalize(&joined)
}

fn expand_home(raw: &str) -> PathBuf {
    let home = || std::env::var_os("HOME").map(PathBuf::from);
    if raw == "~" {
        if let Some(home) = home() {
            return home;
        }
    } else if let Some(rest) = raw.strip_prefix("~/")
        && let Some(home) = home()
    {
        return home.join(rest);
    }
    PathBuf::from(raw)
}

/// Lexical normalisation: drops `.` and applies `..` without touching the file system.
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Whether `path` is inside the project root or the session directory.
pub(crate) fn is_inside_project(ctx: &ToolContext, path: &Path) -> bool {
    let path = normalize(path);
    path.starts_with(normalize(&ctx.project.root)) || path.starts_with(normalize(&ctx.project.directory))
}

/// The permission pattern for a path: relative to the project root with `/` separators, or the absolute
/// path when it lies outside.
pub(crate) fn relative(ctx: &ToolContext, path: &Path) -> String {
    let path = normalize(path);
    match path.strip_prefix(normalize(&ctx.project.root)) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => slashed(rel),
        Err(_) => slashed(&path),
    }
}

fn slashed(path: &Path) -> String {
    path.to_string_lossy().replace('\\', "/")
}

/// The `external_directory` pattern for a path: `<parent>/*` for a file, `<dir>/*` for a directory.
pub(crate) fn external_pattern(path: &Path, kind: PathKind) -> String {
    let dir = match kind {
        PathKind::Directory => path.to_path_buf(),
        PathKind::File => path.parent().map(Path::to_path_buf).unwrap_or_else(|| path.to_path_buf()),
    };
    format!("{}/*", slashed(&dir).trim_end_matches('/'))
}

/// Asks `external_directory` when `path` lies outside the project; a no-op inside it.
pub(crate) async fn check_external(
    ctx: &ToolContext,
    path: &Path,
    kind: PathKind,
) -> Result<(), ToolFailure> {
    if is_inside_project(ctx, path) {
        return Ok(());
    }
    let pattern = external_pattern(path, kind);
    let parent = pattern.trim_end_matches("/*").to_string();
    ctx.ask(PermissionAsk {
        grant: Default::default(),
        permission: "external_directory".to_string(),
        patterns: vec![pattern.clone()],
        always: vec![pattern],
        metadata: json!({"filepath": slashed(path), "parentDir": parent}),
    })
    .await?;
    Ok(())
}

/// Asks `external_directory` once for a set of patterns (used by bash for its path arguments).
pub(crate) async fn ask_external_patterns(
    ctx: &ToolContext,
    patterns: Vec<String>,
) -> Result<(), ToolFailure> {
    if patterns.is_empty() {
        return Ok(());
    }
    ctx.ask(PermissionAsk {
        grant: Default::default(),
        permission: "external_directory".to_string(),
        patterns: patterns.clone(),
        always: patterns,
        metadata: json!({}),
    })
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_applies_parent_components() {
        assert_eq!(normalize(Path::new("/a/b/../c/./d")), PathBuf::from("/a/c/d"));
        assert_eq!(resolve_from(Path::new("/proj"), "../x/y.txt"), PathBuf::from("/x/y.txt"));
        assert_eq!(resolve_from(Path::new("/proj"), "/abs/f"), PathBuf::from("/abs/f"));
    }

    #[test]
    fn external_patterns_cover_the_parent_of_a_file() {
        assert_eq!(external_pattern(Path::new("/etc/hosts"), PathKind::File), "/etc/*");
        assert_eq!(external_pattern(Path::new("/etc"), PathKind::Directory), "/etc/*");
    }
}
