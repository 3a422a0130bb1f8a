//! Turns the output of a failed sandboxed command into a plain note for the model when the failure looks
//! like a wall: what was blocked (a path or the network) and which setting opens it. It only reads text; it
//! must not touch the file system (a path's existence may have changed since the command ran), and it stays
//! silent when the output does not name a blocked path, so ordinary permission errors get no false note.

use std::path::{Component, Path, PathBuf};

use crate::helper::MESSAGE_PREFIX;
use crate::policy::{SandboxMode, SandboxPolicy};

/// Errors a write into a wall produces: Landlock (EACCES, EPERM), a read-only bind mount (EROFS), and
/// unlink or rename of a mount point (EBUSY).
const WRITE_ERRORS: [&str; 4] =
    ["Permission denied", "Read-only file system", "Operation not permitted", "Device or resource busy"];

/// Messages that mean "no network here" whatever the errno: a refused `socket()` shows up as a failed name
/// lookup in most clients because the resolver needs a UDP socket.
const NETWORK_ERRORS: [&str; 7] = [
    "Network is unreachable",
    "Address family not supported",
    "Temporary failure in name resolution",
    "Could not resolve host",
    "Couldn't resolve host",
    "Failed to establish a new connection",
    "failed to lookup address",
];

/// What shells and runtimes print when a fork is refused (the process limit).
const FORK_ERRORS: [&str; 4] =
    ["fork: Resource temporarily unavailable", "fork: retry", "Cannot fork", "can't fork"];

/// Words that make a "Permission denied" line a network one.
const SOCKET_WORDS: [&str; 6] = ["connect", "socket", "/dev/tcp/", "/dev/udp/", "bind", "Errno 13"];

/// A note for the model when `output` (stdout and stderr of a failed command) shows it hit a wall of
/// `policy`; `None` when it does not look like one.
pub fn explain_failure(policy: &SandboxPolicy, output: &str) -> Option<String> {
    if policy.mode == SandboxMode::Off {
        return None;
    }
    output.lines().find_map(|line| explain_line(policy, line))
}

fn explain_line(policy: &SandboxPolicy, line: &str) -> Option<String> {
    if let Some(message) = line.split(MESSAGE_PREFIX).nth(1) {
        return Some(format!(
            "codeloop's sandbox could not be set up, so the command did not run:{message}. \
             Run `codeloop sandbox check`, or set [sandbox] mode = \"off\" to run without walls"
        ));
    }
    if FORK_ERRORS.iter().any(|e| line.contains(e)) {
        return Some(format!(
            "codeloop's sandbox allows at most {} processes at once per command and the command hit that \
             limit (\"{}\"); start fewer processes, or raise [sandbox] max_processes",
            policy.max_processes,
            line.trim()
        ));
    }
    if !policy.network && is_network_error(line) {
        return Some(format!(
            "codeloop's sandbox ({}) blocked network access (\"{}\"): [sandbox] network = false allows \
             only UNIX sockets; `[sandbox] network = true` opens it, or retry with escalate = true",
            policy.mode,
            line.trim()
        ));
    }
    if !WRITE_ERRORS.iter().any(|e| line.contains(e)) {
        return None;
    }
    path_candidates(line)
        .into_iter()
        .filter(|c| !c.starts_with("/dev/tcp/") && !c.starts_with("/dev/udp/"))
        .find_map(|candidate| classify(policy, &candidate))
}

fn is_network_error(line: &str) -> bool {
    NETWORK_ERRORS.iter().any(|e| line.contains(e))
        || (["Permission denied", "Operation not permitted"].iter().any(|e| line.contains(e))
            && SOCKET_WORDS.iter().any(|w| line.contains(w)))
}

/// The note for one path named in an error line, when a wall explains it.
fn classify(policy: &SandboxPolicy, candidate: &str) -> Option<String> {
    let looks_like_path = candidate.contains('/') || candidate.starts_with('.');
    let path = normalize(&policy.project_root.join(candidate));
    let writable = policy.writable_paths().into_iter().any(|w| path.starts_with(normalize(w)));
    let mode = policy.mode;
    if writable {
        if let Some(cache) = policy.cache_overlays.iter().find(|c| path.starts_with(normalize(&c.path))) {
            // An overlay takes every write; a failure there means the cache fell back to read-only.
            return Some(format!(
                "codeloop's sandbox ({mode}) keeps the package cache {} read-only here (overlays are not \
                 available), so nothing a command writes there reaches your own builds; `[sandbox] cache_dirs = \
                 [\"{}\"]` writes it through on purpose",
                cache.path.display(),
                cache.path.display()
            ));
        }
        let protected = policy.protected.iter().find(|p| path.starts_with(normalize(p)))?;
        let opens = if protected.file_name().is_some_and(|n| n == ".git") {
            format!(
                "`[sandbox] git_write = true` or a writable_roots entry for {} opens it, or retry with \
                 escalate = true",
                protected.display()
            )
        } else {
            "retry with escalate = true to ask the user".to_owned()
        };
        return Some(format!(
            "codeloop's sandbox ({mode}) blocked a write to {}: {} stays read-only even inside the \
             project (codeloop's and git's configuration are protected); {opens}",
            path.display(),
            protected.display()
        ));
    }
    if !looks_like_path {
        return None;
    }
    Some(match mode {
        SandboxMode::ReadOnly => format!(
            "codeloop's sandbox (read-only) blocked a write to {}: in read-only mode only the session \
             temp dir {} is writable; retry with escalate = true",
            path.display(),
            policy.temp_dir.display()
        ),
        SandboxMode::WorkspaceWrite | SandboxMode::Off => format!(
            "codeloop's sandbox ({mode}) blocked a write to {}: only the project, its temp dir and \
             [sandbox] writable_roots are writable; add the directory to writable_roots, or retry with \
             escalate = true",
            path.display()
        ),
    })
}

/// Strings in an error line that may be the path it is about: quoted parts, and words or colon-separated
/// fields (tools print `prog: PATH: error`, `cannot touch 'PATH'`, `[Errno 13] …: 'PATH'`).
fn path_candidates(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    for quote in ['\'', '"', '`', '‘', '’'] {
        let parts: Vec<&str> = line.split(quote).collect();
        out.extend(parts.iter().skip(1).step_by(2).map(|s| (*s).to_owned()));
    }
    let trim = |s: &str| {
        s.trim_matches(|c: char| c.is_whitespace() || "'\"`‘’,;()[]".contains(c))
            .trim_end_matches(':')
            .to_owned()
    };
    out.extend(line.split(": ").map(trim));
    out.extend(line.split_whitespace().map(trim));
    out.retain(|s| !s.is_empty() && !s.contains(' ') && s != "." && s != "..");
    out
}

/// Removes `.` and `..` without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> SandboxPolicy {
        let mut policy = SandboxPolicy::new("/work/p", "/tmp/s");
        policy.writable_roots = vec!["/opt/w".into()];
        policy.protected = vec!["/work/p/.git".into(), "/work/p/codeloop.toml".into()];
        policy
    }

    #[test]
    fn a_write_outside_the_project_names_the_path_and_writable_roots() {
        let note = explain_failure(&policy(), "bash: line 1: /etc/x: Permission denied").unwrap();
        assert!(note.contains("blocked a write to /etc/x"), "{note}");
        assert!(note.contains("writable_roots"), "{note}");
        assert!(note.contains("escalate = true"), "{note}");
    }

    #[test]
    fn quoted_paths_from_coreutils_and_python_are_found() {
        for line in [
            "touch: cannot touch '/usr/x': Permission denied",
            "PermissionError: [Errno 13] Permission denied: '/usr/x'",
            "mkdir: cannot create directory ‘/usr/x’: Permission denied",
        ] {
            let note = explain_failure(&policy(), line).unwrap();
            assert!(note.contains("/usr/x"), "{line}: {note}");
        }
    }

    #[test]
    fn a_git_write_says_git_write_opens_it() {
        let note = explain_failure(
            &policy(),
            "error: could not lock config file .git/config: Read-only file system",
        )
        .unwrap();
        assert!(note.contains("git_write = true"), "{note}");
        assert!(note.contains("/work/p/.git/config"), "{note}");
    }

    #[test]
    fn removing_a_protected_file_is_explained() {
        let note =
            explain_failure(&policy(), "rm: cannot remove 'codeloop.toml': Device or resource busy").unwrap();
        assert!(note.contains("/work/p/codeloop.toml stays read-only"), "{note}");
    }

    #[test]
    fn errors_inside_writable_paths_get_no_note() {
        for line in [
            "bash: /work/p/src/x: Permission denied",
            "bash: /tmp/s/x: Permission denied",
            "bash: /opt/w/x: Permission denied",
            "ls: cannot open directory 'src': Permission denied",
            "all good",
        ] {
            assert_eq!(explain_failure(&policy(), line), None, "{line}");
        }
    }

    #[test]
    fn read_only_mode_says_only_the_temp_dir_is_writable() {
        let mut policy = policy();
        policy.mode = SandboxMode::ReadOnly;
        let note = explain_failure(&policy, "bash: src/main.rs: Permission denied").unwrap();
        assert!(note.contains("(read-only)"), "{note}");
        assert!(note.contains("/tmp/s"), "{note}");
    }

    #[test]
    fn network_errors_are_explained_only_when_the_network_is_closed() {
        let line = "bash: /dev/tcp/127.0.0.1/80: Permission denied";
        assert_eq!(explain_failure(&policy(), line), None);
        let mut closed = policy();
        closed.network = false;
        let note = explain_failure(&closed, line).unwrap();
        assert!(note.contains("`[sandbox] network = true` opens it"), "{note}");
        let note = explain_failure(&closed, "curl: (6) Could not resolve host: example.com").unwrap();
        assert!(note.contains("network"), "{note}");
    }

    #[test]
    fn a_refused_fork_names_max_processes_and_a_read_only_cache_names_cache_dirs() {
        let note = explain_failure(&policy(), "bash: fork: retry: Resource temporarily unavailable").unwrap();
        assert!(note.contains("max_processes") && note.contains("1024"), "{note}");
        let mut policy = policy();
        policy.cache_overlays =
            vec![crate::CacheOverlay { path: "/home/u/.npm".into(), state: "/data/layers/npm".into() }];
        let note =
            explain_failure(&policy, "touch: cannot touch '/home/u/.npm/x': Read-only file system").unwrap();
        assert!(note.contains("cache_dirs"), "{note}");
    }

    #[test]
    fn mode_off_never_explains() {
        let mut policy = policy();
        policy.mode = SandboxMode::Off;
        assert_eq!(explain_failure(&policy, "bash: /etc/x: Permission denied"), None);
    }
}
