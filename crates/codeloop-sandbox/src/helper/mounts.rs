//! The user + mount + PID namespace of the helper: protected paths become read-only bind mounts, package
//! caches overlays (or read-only), masked paths (credentials, agents' and daemons' sockets) are covered by
//! an empty tmpfs (dirs) or `/dev/null` (files), and the init mounts the namespace's own `/proc`. Landlock
//! cannot make a subpath read-only inside a writable tree, a mount can. It must run before Landlock (which
//! forbids mounting) and must not change anything outside the new namespace (mounts are made private
//! first).

use std::path::{Path, PathBuf};

use crate::policy::{CacheOverlay, SandboxPolicy};

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::statvfs::{FsFlags, statvfs};
use nix::unistd::{getgid, getuid};

/// Enters a new user + mount namespace as the same user (uid and gid map to themselves, so files keep
/// their owner) with every mount private to it; the next child starts a new PID namespace.
pub(super) fn enter_namespace() -> Result<(), String> {
    let (uid, gid) = (getuid(), getgid());
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID)
        .map_err(|e| format!("cannot create a user + mount + PID namespace: {e}"))?;
    // Without "deny" an unprivileged process may not write gid_map.
    write_proc("/proc/self/setgroups", "deny")?;
    write_proc("/proc/self/uid_map", &format!("{uid} {uid} 1"))?;
    write_proc("/proc/self/gid_map", &format!("{gid} {gid} 1"))?;
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
        .map_err(|e| format!("cannot make mounts private: {e}"))
}

fn write_proc(path: &str, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("cannot write {path}: {e}"))
}

/// Bind-mounts each existing path on itself read-only. Missing paths are skipped (nothing to protect; the
/// caller checks after the call whether one was created).
pub(super) fn protect(paths: &[impl AsRef<Path>]) -> Result<(), String> {
    for path in paths.iter().map(AsRef::as_ref).filter(|p| p.exists()) {
        bind_read_only(path, path).map_err(|e| format!("cannot make {} read-only: {e}", path.display()))?;
    }
    Ok(())
}

/// Hides each existing path: an empty read-only tmpfs over a directory, `/dev/null` over anything else.
pub(super) fn mask(paths: &[impl AsRef<Path>]) -> Result<(), String> {
    for path in paths.iter().map(AsRef::as_ref) {
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        let result = if meta.is_dir() {
            mount(
                Some("tmpfs"),
                path,
                Some("tmpfs"),
                MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                Some("size=4k,mode=0755"),
            )
        } else {
            bind_read_only(Path::new("/dev/null"), path)
        };
        result.map_err(|e| format!("cannot mask {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Puts an overlay over each existing cache: commands read the user's cache and write to `state/upper`.
/// Where the kernel refuses an overlay, the cache is made read-only instead (never written through).
pub(super) fn overlay_caches(caches: &[CacheOverlay]) -> Result<(), String> {
    for cache in caches.iter().filter(|c| c.path.is_dir()) {
        if overlay(cache).is_err() {
            bind_read_only(&cache.path, &cache.path)
                .map_err(|e| format!("cannot make the cache {} read-only: {e}", cache.path.display()))?;
        }
    }
    Ok(())
}

fn overlay(cache: &CacheOverlay) -> Result<(), String> {
    let (upper, work) = (cache.state.join("upper"), cache.state.join("work"));
    for dir in [&upper, &work] {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let lower = cache.path.display();
    let base = format!("lowerdir={lower},upperdir={},workdir={}", upper.display(), work.display());
    // `userxattr` lets an unprivileged overlay keep its metadata in user.* attributes; older kernels
    // that lack it mount without.
    [format!("{base},userxattr"), base]
        .iter()
        .find_map(|options| {
            mount(Some("overlay"), &cache.path, Some("overlay"), MsFlags::empty(), Some(options.as_str()))
                .ok()
        })
        .ok_or_else(|| format!("cannot put an overlay over {}", cache.path.display()))
}

/// UNIX sockets with a path that `/proc/net/unix` lists now, outside the writable paths and not allowed
/// or already under a mask: Landlock cannot stop a `connect()` to them, a mask can (DESIGN.md §5c).
pub(super) fn listed_sockets(policy: &SandboxPolicy, masked: &[PathBuf]) -> Vec<PathBuf> {
    let Ok(table) = std::fs::read_to_string("/proc/net/unix") else { return Vec::new() };
    let writable = policy.writable_paths();
    let mut out: Vec<PathBuf> = Vec::new();
    for line in table.lines().skip(1) {
        // The path is whatever follows the seventh field (abstract names start with `@` and are left out).
        let path = PathBuf::from(line.split_whitespace().skip(7).collect::<Vec<_>>().join(" "));
        let skip = !path.is_absolute()
            || writable.iter().any(|w| path.starts_with(w))
            || policy.allow_unix_sockets.iter().any(|a| path.starts_with(a))
            || masked.iter().any(|m| path.starts_with(m))
            || out.contains(&path);
        if !skip {
            out.push(path);
        }
    }
    out
}

/// A fresh `/proc` for the PID namespace this process is the init of: only the call's own processes.
pub(super) fn mount_proc() -> nix::Result<()> {
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
}

fn bind_read_only(source: &Path, target: &Path) -> nix::Result<()> {
    mount(Some(source), target, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REC, None::<&str>)?;
    // A user namespace may not clear nosuid/nodev/noexec that the outer mount has (EPERM), so the remount
    // repeats them. The atime flags are kept by the kernel when none is given.
    let outer = statvfs(target)?.flags();
    let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
    for (has, keep) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
    ] {
        if outer.contains(has) {
            flags |= keep;
        }
    }
    mount(None::<&str>, target, None::<&str>, flags, None::<&str>)
}
