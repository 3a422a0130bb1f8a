//! Path resolution, the `external_directory` check, protected paths and atomic writes shared by the file
//! tools (DESIGN.md §5a).
//!
//! Paths from the model may be absolute or relative to the session directory. They are resolved on the
//! file system (`..`, then every symlink of the deepest existing ancestor) before any check, so a link
//! inside the project that points outside counts as outside, and the tools then act on that real path.
//! Anything outside the project (its root, the session directory, the session's temp dir) needs an
//! `external_directory` permission; tools never decide that themselves, they only ask. Writes replace the
//! file through a temp file renamed into place: atomic, and never through a hard link to an outside file.

use std::io::Write as _;
use std::path::{Component, Path, PathBuf};

use serde_json::json;

use crate::{Grant, PermissionAsk, ToolContext, ToolFailure};

/// Whether a path names a file (the ask covers its parent directory) or a directory (the ask covers it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathKind {
    File,
    Directory,
}

/// Resolves `raw` against the session directory (expanding a leading `~/`) to the real path it names:
/// `.`/`..` applied, then the deepest existing ancestor's symlinks resolved.
pub(crate) fn resolve(ctx: &ToolContext, raw: &str) -> PathBuf {
    resolve_in(&ctx.project.directory, raw)
}

/// Up to three existing paths named like the missing `path`: in its folder, or (when that is missing too)
/// in its deepest existing ancestor, named like the first missing part.
pub(crate) async fn nearest(path: &Path) -> Vec<String> {
    let mut wanted = path;
    let mut dir = path.parent();
    while let Some(d) = dir {
        if d.is_dir() {
            break;
        }
        wanted = d;
        dir = d.parent();
    }
    let (Some(dir), Some(base)) = (dir, wanted.file_name()) else { return Vec::new() };
    let base = base.to_string_lossy().to_lowercase();
    let Ok(mut entries) = tokio::fs::read_dir(dir).await else { return Vec::new() };
    let mut names = Vec::new();
    while let Ok(Some(entry)) = entries.next_entry().await {
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    names
        .into_iter()
        .filter(|name| is_similar(&name.to_lowercase(), &base))
        .take(3)
        .map(|name| dir.join(name).display().to_string())
        .collect()
}

fn is_similar(name: &str, wanted: &str) -> bool {
    let stem = |s: &str| s.rsplit_once('.').map_or(s, |(stem, _)| stem).to_string();
    name.contains(wanted)
        || wanted.contains(name)
        || stem(name) == stem(wanted)
        || crate::text::levenshtein(name, wanted) <= 2.max(wanted.chars().count() / 5)
}

/// A path as a tool of a session in `directory` resolves `raw`: relative to it, `~` expanded, real.
pub fn resolve_in(directory: &Path, raw: &str) -> PathBuf {
    real_path(&resolve_from(directory, raw))
}

/// The path with its deepest existing ancestor canonicalised and the missing rest appended. A dangling
/// symlink at the end stays as it is: writes replace the link itself, never its target.
pub fn real_path(path: &Path) -> PathBuf {
    let path = normalize(path);
    let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
    let mut base = path.as_path();
    loop {
        if let Ok(real) = base.canonicalize() {
            let mut out = real;
            out.extend(rest.iter().rev());
            return out;
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                base = parent;
            }
            _ => return path.clone(),
        }
    }
}

/// Like [`resolve`], with an explicit base directory.
pub(crate) fn resolve_from(base: &Path, raw: &str) -> PathBuf {
    let expanded = expand_home(raw);
    let joined = if expanded.is_absolute() { expanded } else { base.join(expanded) };
    normalize(&joined)
}

/// `~` and `~/…` under the home directory (the one the process started with); anything else as it is.
pub fn expand_home(raw: &str) -> PathBuf {
    let home = std::env::home_dir;
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

/// Whether the real `path` is inside the project root, the session directory or the session's temp dir.
pub(crate) fn is_inside_project(ctx: &ToolContext, path: &Path) -> bool {
    let path = normalize(path);
    let project = &ctx.project;
    [Some(&project.root), Some(&project.directory), project.temp_dir.as_ref()]
        .into_iter()
        .flatten()
        .any(|dir| path.starts_with(normalize(dir)) || path.starts_with(real_path(dir)))
}

/// Files in `.claude/` that carry hooks, which run unwalled (DESIGN.md §5d).
pub const CLAUDE_SETTINGS: [&str; 2] = ["settings.json", "settings.local.json"];

/// Whether a tool may write `path` only with an explicit grant (DESIGN.md §5a): codeloop's and git's
/// config inside the project (`codeloop.toml`, `.codeloop/`, `.git/` at any depth, and
/// `.claude/settings*.json`, which can carry hooks), and the user's config and data dirs wherever they are.
pub fn is_protected(project: &crate::ProjectPaths, path: &Path) -> bool {
    let path = normalize(path);
    if project.protected.iter().any(|dir| path.starts_with(dir) || path.starts_with(real_path(dir))) {
        return true;
    }
    let inside = [&project.root, &project.directory]
        .into_iter()
        .find_map(|dir| path.strip_prefix(real_path(dir)).ok().or_else(|| path.strip_prefix(dir).ok()));
    let Some(rel) = inside else { return false };
    let names: Vec<&std::ffi::OsStr> = rel.iter().collect();
    let claude_settings = names.len() >= 2
        && names[names.len() - 2] == ".claude"
        && CLAUDE_SETTINGS.iter().any(|s| names[names.len() - 1] == *s);
    names.iter().any(|n| *n == ".git" || *n == ".codeloop")
        || names.last().is_some_and(|n| *n == "codeloop.toml")
        || claude_settings
}

/// In the session's temp dir: where a SessionStart hook writes `export NAME=value` lines (Claude Code's
/// `CLAUDE_ENV_FILE`), read before each of the session's later bash calls.
pub const SESSION_ENV_FILE: &str = "claude-env.sh";

/// The session's own temp dir, `<system temp>/codeloop-<uid>/<session>`, created with mode 0700. The
/// per-user parent must be a real directory owned by this user (not a link someone planted in `/tmp`).
pub fn session_temp_dir(session: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let uid = nix::unistd::getuid().as_raw();
    let parent = std::env::temp_dir().join(format!("codeloop-{uid}"));
    let mut builder = std::fs::DirBuilder::new();
    builder.mode(0o700);
    match builder.create(&parent) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(&parent)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "{} is not a private directory of this user: remove it",
            parent.display()
        )));
    }
    let dir = parent.join(session);
    match builder.create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    Ok(dir)
}

/// Whether a file likely holds secrets (the default secret rules of DESIGN.md §4 by name): `*.env`,
/// `*.env.*` but not `*.env.example`, `*.pem`, `*.key`, `.netrc`, and anything under `.ssh`, `.aws` or
/// `.gnupg`. Walking tools leave these out; reading one goes through the `read` rules.
pub fn is_secret(path: &Path) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    let env_file = name.ends_with(".env") || (name.contains(".env.") && !name.ends_with(".env.example"));
    let key_file = name.ends_with(".pem") || name.ends_with(".key") || name == ".netrc";
    let secret_dir = path.iter().any(|c| c == ".ssh" || c == ".aws" || c == ".gnupg");
    env_file || key_file || secret_dir
}

/// How a write to `path` is granted: protected paths only explicitly.
pub(crate) fn write_grant(ctx: &ToolContext, path: &Path) -> Grant {
    if is_protected(&ctx.project, path) { Grant::Explicit } else { Grant::Rules }
}

/// Replaces `path` with `contents` atomically: a temp file in the same directory, synced, given the old
/// file's mode, owner and extended attributes, then renamed over the old name. Missing parent directories
/// are created. The directory is opened once without following any symlink, and the temp file and the
/// rename go through that handle, so nothing swapped in after the path was checked is written through. A
/// hard link to the old file keeps the old contents.
pub(crate) async fn write_atomic(path: &Path, contents: Vec<u8>) -> std::io::Result<()> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        write_atomic_blocking(&path, &contents)?;
        crate::guard::note_written(&path);
        Ok(())
    })
    .await
    .map_err(std::io::Error::other)?
}

fn write_atomic_blocking(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use rustix::fs::{AtFlags, Mode, OFlags};
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| std::io::Error::other("not a file name"))?;
    std::fs::create_dir_all(dir)?;
    let dirfd = open_no_symlinks(dir, OFlags::DIRECTORY | OFlags::RDONLY)?;
    let old =
        rustix::fs::openat(&dirfd, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
            .ok()
            .filter(|fd| {
                rustix::fs::fstat(fd)
                    .is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_file())
            });
    let temp_name = format!(".codeloop-write-{}", crate::text::random_suffix());
    // New files get the usual 0666 less the umask; a replaced file's mode is copied below.
    let fd = rustix::fs::openat(
        &dirfd,
        temp_name.as_str(),
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o666),
    )?;
    let written = (|| {
        let mut file = std::fs::File::from(fd);
        file.write_all(contents)?;
        if let Some(old) = &old {
            copy_attributes(old, &file)?;
        }
        file.sync_all()?;
        rustix::fs::renameat(&dirfd, temp_name.as_str(), &dirfd, name)?;
        Ok(())
    })();
    if written.is_err() {
        let _ = rustix::fs::unlinkat(&dirfd, temp_name.as_str(), AtFlags::empty());
    }
    written
}

/// Copies mode, owner (where allowed) and extended attributes from the file being replaced.
fn copy_attributes(old: &rustix::fd::OwnedFd, new: &std::fs::File) -> std::io::Result<()> {
    let stat = rustix::fs::fstat(old)?;
    rustix::fs::fchmod(new, rustix::fs::Mode::from_raw_mode(stat.st_mode & 0o7777))?;
    // Only root (or the owner, for the group) may hand a file to someone else: best effort.
    let _ = rustix::fs::fchown(
        new,
        Some(rustix::fs::Uid::from_raw(stat.st_uid)),
        Some(rustix::fs::Gid::from_raw(stat.st_gid)),
    );
    let mut names = vec![0u8; 4096];
    let Ok(len) = rustix::fs::flistxattr(old, &mut names) else { return Ok(()) };
    for attr in names[..len].split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let Ok(attr) = std::ffi::CStr::from_bytes_with_nul(&[attr, &[0]].concat()).map(|c| c.to_owned())
        else {
            continue;
        };
        let mut value = vec![0u8; 64 * 1024];
        if let Ok(n) = rustix::fs::fgetxattr(old, attr.as_c_str(), &mut value) {
            let _ = rustix::fs::fsetxattr(new, attr.as_c_str(), &value[..n], rustix::fs::XattrFlags::empty());
        }
    }
    Ok(())
}

/// Opens `path` refusing any symlink on the way (`openat2` with `RESOLVE_NO_SYMLINKS`): the path was
/// resolved to its real form before the permission check, so a link found now was swapped in since.
/// Kernels without `openat2` (before 5.6) fall back to a plain open.
pub(crate) fn open_no_symlinks(
    path: &Path,
    flags: rustix::fs::OFlags,
) -> std::io::Result<rustix::fd::OwnedFd> {
    use rustix::fs::{CWD, Mode, OFlags, ResolveFlags};
    match rustix::fs::openat2(CWD, path, flags | OFlags::CLOEXEC, Mode::empty(), ResolveFlags::NO_SYMLINKS) {
        Err(rustix::io::Errno::NOSYS) => {
            Ok(rustix::fs::openat(CWD, path, flags | OFlags::CLOEXEC, Mode::empty())?)
        }
        Err(rustix::io::Errno::LOOP) => Err(std::io::Error::other(format!(
            "{} changed into a symbolic link after it was checked; not following it",
            path.display()
        ))),
        other => Ok(other?),
    }
}

/// The permission pattern for a path: relative to the project root with `/` separators, or the absolute
/// path when it lies outside.
pub(crate) fn relative(ctx: &ToolContext, path: &Path) -> String {
    let path = normalize(path);
    let root = real_path(&ctx.project.root);
    match path.strip_prefix(&root).or_else(|_| path.strip_prefix(normalize(&ctx.project.root))) {
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
    fn a_path_that_became_a_link_after_the_check_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("swapped")).unwrap();
        // The check saw `swapped` as a directory inside; it is a link by the time of the write.
        let flags = rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY;
        let err = open_no_symlinks(&dir.path().join("swapped"), flags).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        let err = write_atomic_blocking(&dir.path().join("swapped/x.txt"), b"x").unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(!outside.path().join("x.txt").exists());
    }

    #[test]
    fn external_patterns_cover_the_parent_of_a_file() {
        assert_eq!(external_pattern(Path::new("/etc/hosts"), PathKind::File), "/etc/*");
        assert_eq!(external_pattern(Path::new("/etc"), PathKind::Directory), "/etc/*");
    }
}
