//! The user + mount namespace of the helper: protected paths become read-only bind mounts, masked paths
//! are covered by an empty tmpfs (dirs) or `/dev/null` (files). Landlock cannot make a subpath read-only
//! inside a writable tree, a mount can. It must run before Landlock (which forbids mounting) and must not
//! change anything outside the new namespace (mounts are made private first).

use std::path::Path;

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::statvfs::{FsFlags, statvfs};
use nix::unistd::{getgid, getuid};

/// Enters a new user + mount namespace as the same user (uid and gid map to themselves, so files keep
/// their owner) with every mount private to it.
pub(super) fn enter_namespace() -> Result<(), String> {
    let (uid, gid) = (getuid(), getgid());
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS)
        .map_err(|e| format!("cannot create a user + mount namespace: {e}"))?;
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
