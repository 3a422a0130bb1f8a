//! A pids cgroup of the call's own (DESIGN.md §5c "Bounded processes"): where this user may make children
//! of its own cgroup in a hierarchy with the pids controller (cgroup v1's `pids` hierarchy, or v2 where
//! the controller reaches below this process's cgroup), the outer helper makes `codeloop/<pid>` there, sets
//! `pids.max` and moves itself in before anything else starts, so the kernel bounds the whole call — the
//! helper, the init and PROGRAM's tree — whoever runs it, root included. When the call is over it moves
//! back and removes the cgroup.
//!
//! Must not: fail a call. Where no such cgroup can be made, [`PidsCgroup::join`] returns `None` and the
//! next bound down is used (the PID namespace's `pid_max`, then `RLIMIT_NPROC`).

use std::path::{Path, PathBuf};

/// The helper and the init, which the cgroup counts besides PROGRAM's tree.
const HELPERS: u32 = 2;

/// The cgroup this process moved into; [`PidsCgroup::leave`] takes it down.
pub(super) struct PidsCgroup {
    dir: PathBuf,
    /// The cgroup the helper came from, to go back to.
    home: PathBuf,
}

impl PidsCgroup {
    /// Makes a cgroup that lets PROGRAM's tree have `max` processes (threads count too) and moves this
    /// process into it.
    pub(super) fn join(max: u32) -> Option<Self> {
        if std::env::var_os(crate::probe::NO_CGROUP_ENV).is_some_and(|v| v == "1") {
            return None;
        }
        let home = own_pids_cgroup()?;
        let parent = home.join("codeloop");
        match std::fs::create_dir(&parent) {
            Ok(()) => {
                // cgroup v2: the controller must reach the new level's children (v1 has no such file).
                let control = parent.join("cgroup.subtree_control");
                if control.exists() {
                    let _ = std::fs::write(&control, "+pids");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => sweep(&parent),
            Err(_) => return None,
        }
        let dir = parent.join(std::process::id().to_string());
        std::fs::create_dir(&dir).ok()?;
        let cgroup = PidsCgroup { dir, home };
        let limit = max.saturating_add(HELPERS).to_string();
        let joined = std::fs::write(cgroup.dir.join("pids.max"), limit)
            .and_then(|()| std::fs::write(cgroup.dir.join("cgroup.procs"), std::process::id().to_string()));
        match joined {
            Ok(()) => Some(cgroup),
            Err(_) => {
                cgroup.leave();
                None
            }
        }
    }

    /// Moves this process back where it came from and removes the cgroup (empty once the call's tree is
    /// gone). A cgroup left by a helper that was killed is removed by a later call's [`sweep`].
    pub(super) fn leave(self) {
        let _ = std::fs::write(self.home.join("cgroup.procs"), std::process::id().to_string());
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Removes the cgroups of helpers that are gone (`rmdir` refuses one that still has processes).
fn sweep(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// The directory of this process's cgroup in a hierarchy that has the pids controller.
fn own_pids_cgroup() -> Option<PathBuf> {
    let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    // cgroup v1: the line whose controllers include pids, under the mount of that hierarchy.
    for line in membership.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        if controllers.split(',').any(|c| c == "pids")
            && let Some(dir) = mounted(&mounts, |fstype, options| {
                fstype == "cgroup" && options.split(',').any(|o| o == "pids")
            })
            .and_then(|(root, point)| under(&point, &root, path))
        {
            return Some(dir);
        }
    }
    // cgroup v2: the unified hierarchy, when pids is among the controllers its children may use.
    let path = membership.lines().find_map(|l| l.strip_prefix("0::"))?;
    let (root, point) = mounted(&mounts, |fstype, _| fstype == "cgroup2")?;
    let dir = under(&point, &root, path)?;
    let controllers = std::fs::read_to_string(dir.join("cgroup.subtree_control")).ok()?;
    controllers.split_whitespace().any(|c| c == "pids").then_some(dir)
}

/// `(root inside the file system, mount point)` of the first mount that `wanted(fstype, super options)`.
fn mounted(mountinfo: &str, wanted: impl Fn(&str, &str) -> bool) -> Option<(String, PathBuf)> {
    mountinfo.lines().find_map(|line| {
        // `id parent major:minor root point options [optional…] - fstype source super-options`
        let (before, after) = line.split_once(" - ")?;
        let fields: Vec<&str> = before.split(' ').collect();
        let mut after = after.split(' ');
        let (fstype, _source, options) = (after.next()?, after.next()?, after.next().unwrap_or(""));
        let (root, point) = (fields.get(3)?, fields.get(4)?);
        wanted(fstype, options).then(|| (root.to_string(), PathBuf::from(point)))
    })
}

/// Where cgroup `path` (as `/proc/self/cgroup` names it) is under a mount of `root` at `point`.
fn under(point: &Path, root: &str, path: &str) -> Option<PathBuf> {
    let rel = Path::new(path).strip_prefix(root).ok()?;
    let dir = point.join(rel);
    dir.is_dir().then_some(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pids_hierarchy_is_found_in_mountinfo() {
        let mountinfo = "30 25 0:26 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n\
                         37 25 0:33 / /sys/fs/cgroup/pids rw,relatime shared:9 - cgroup cgroup rw,pids\n\
                         38 25 0:34 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        let pids = mounted(mountinfo, |t, o| t == "cgroup" && o.split(',').any(|o| o == "pids"));
        assert_eq!(pids, Some(("/".to_owned(), PathBuf::from("/sys/fs/cgroup/pids"))));
        let v2 = mounted(mountinfo, |t, _| t == "cgroup2");
        assert_eq!(v2, Some(("/".to_owned(), PathBuf::from("/sys/fs/cgroup/unified"))));
    }
}
