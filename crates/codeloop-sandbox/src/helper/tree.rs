//! Finding and ending a call's process tree (DESIGN.md §5f). Two shapes:
//! - [`Tree::Namespace`]: the helper is the init of the call's own PID namespace, so the tree is every
//!   process of the namespace but itself (`/proc` is the namespace's own), and `kill(-1)` reaches all;
//! - [`Tree::Descendants`]: no PID namespace (no user namespaces, or `[sandbox] mode = "off"`); the helper
//!   is a child subreaper, so every process of the tree stays its descendant whatever it does (a double
//!   fork is reparented to the helper, `setsid` leaves the parentage alone). The tree is found by walking
//!   `/proc/PID/task/TID/children` down from the helper (a scan of every `/proc/PID/stat` where the kernel
//!   lacks that file), and each process is signalled by pid.
//!
//! It must not signal anything outside the tree: in the descendant walk a pid comes only from a parent
//! the walk already reached.

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tree {
    /// The helper is PID 1 of the call's namespace.
    Namespace,
    /// The helper is a child subreaper; the tree is its descendants.
    Descendants,
}

impl Tree {
    /// The processes of the tree still alive (zombies are not), the helper itself left out.
    pub(super) fn live(self) -> Vec<Pid> {
        let pids = match self {
            Tree::Namespace => namespace_pids(),
            Tree::Descendants => descendants(std::process::id()),
        };
        pids.into_iter().filter(|pid| !is_zombie(*pid)).map(to_pid).collect()
    }

    /// Sends `signal` to every process of the tree.
    pub(super) fn signal(self, signal: Signal) {
        match self {
            // From the namespace's init, -1 means every process of the namespace but itself.
            Tree::Namespace => {
                let _ = kill(Pid::from_raw(-1), signal);
            }
            Tree::Descendants => {
                for pid in descendants(std::process::id()) {
                    // ESRCH: it exited meanwhile.
                    let _ = kill(to_pid(pid), signal);
                }
            }
        }
    }
}

fn to_pid(pid: u32) -> Pid {
    Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX))
}

/// Every numeric entry of `/proc` but 1 (the init).
fn namespace_pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| *pid != 1)
        .collect()
}

/// The descendants of `root`, parents before their children.
pub(super) fn descendants(root: u32) -> Vec<u32> {
    // Without the `children` files (CONFIG_PROC_CHILDREN off), every process is looked at.
    if !std::path::Path::new("/proc/thread-self/children").exists() {
        return descendants_by_scan(root);
    }
    let mut out = Vec::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        for child in children_of(pid) {
            if !out.contains(&child) {
                out.push(child);
                queue.push(child);
            }
        }
    }
    out
}

/// The children of every thread of `pid` (none when it exited meanwhile).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut out = Vec::new();
    for task in tasks.filter_map(Result::ok) {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(text.split_ascii_whitespace().filter_map(|n| n.parse::<u32>().ok()));
        }
    }
    out
}

/// The descendants of `root` from the parent pid of every process in `/proc`.
fn descendants_by_scan(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = namespace_pids()
        .into_iter()
        .chain(std::iter::once(1))
        .filter_map(|pid| stat_fields(pid).map(|(_, ppid)| (pid, ppid)))
        .collect();
    let mut out: Vec<u32> = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for &(pid, ppid) in &parents {
            if ppid == parent && !out.contains(&pid) {
                out.push(pid);
                frontier.push(pid);
            }
        }
    }
    out
}

fn is_zombie(pid: u32) -> bool {
    stat_fields(pid).is_none_or(|(state, _)| state == 'Z' || state == 'X')
}

/// The state letter and the parent pid of `pid` from `/proc/PID/stat` (the command name, in brackets, may
/// hold spaces and brackets itself: the fields start after the last `)`).
fn stat_fields(pid: u32) -> Option<(char, u32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Whether the helper has no children left (none running, none unreaped).
pub(super) fn no_children() -> bool {
    use nix::sys::wait::{Id, WaitPidFlag, waitid};
    matches!(
        waitid(Id::All, WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT),
        Err(Errno::ECHILD)
    )
}
