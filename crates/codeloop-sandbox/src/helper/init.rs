//! The init of a call's PID namespace (see the parent module): its own `/proc`, the process limit, the
//! Landlock and seccomp walls, then PROGRAM; when PROGRAM exits, whatever is left of the tree is counted
//! and ended, and the count goes to the outer helper on this process's stdin (a pipe). It reaps every
//! orphan meanwhile, as an init must, and a SIGTERM from the outer helper ends the namespace gracefully
//! (see [`super::supervise`]).

use std::io::Write as _;
use std::os::fd::AsFd as _;
use std::process::{Command, Stdio};

use nix::sys::signal::Signal;

use crate::command::{CallReport, ProcessLimit};

use super::supervise::{spawn_unblocked, supervise, watch_signals};
use super::tree::Tree;
use super::{Failure, Invocation, landlock_rules, mounts, seccomp};

/// The kernel's smallest `pid_max` (`RESERVED_PIDS + 1`).
const MIN_PID_MAX: u32 = 301;

pub(super) fn run(inv: Invocation) -> Result<u8, Failure> {
    let policy = &inv.plan.policy;
    // If the outer helper dies (codeloop's group kill), so does this init, and with it the namespace.
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    let own_proc = mounts::mount_proc().is_ok();
    let process_limit = if own_proc && set_pid_max(policy.max_processes).is_ok() {
        ProcessLimit::PidNamespace
    } else {
        limit_by_rlimit(policy.max_processes);
        ProcessLimit::Rlimit
    };
    let _ = rustix::thread::clear_ambient_capability_set();
    landlock_rules::restrict(policy).map_err(Failure::setup)?;
    if !policy.network {
        seccomp::deny_sockets().map_err(Failure::setup)?;
    }
    let report_to = std::io::stdin().as_fd().try_clone_to_owned().ok().map(std::fs::File::from);
    let signals = watch_signals().map_err(Failure::setup)?;
    let child = spawn_unblocked(Command::new(&inv.program).args(&inv.args).stdin(Stdio::null()))
        .map_err(|e| Failure::spawn(&inv.program, &e))?;
    let ended = supervise(&child, Tree::Namespace, &signals, None);
    // Without its own /proc the namespace's processes cannot be counted (they are still ended).
    let leftovers = if own_proc { ended.leftovers } else { 0 };
    if let Some(mut out) = report_to {
        let report = CallReport { leftovers, process_limit };
        let _ = serde_json::to_vec(&report).map(|bytes| out.write_all(&bytes));
    }
    Ok(ended.code)
}

/// `pid_max` of this PID namespace (kernels since 6.14 have one per namespace): at most `max` processes
/// at once, never below the kernel's minimum.
fn set_pid_max(max: u32) -> std::io::Result<()> {
    let value = max.saturating_add(1).max(MIN_PID_MAX);
    std::fs::write("/proc/sys/kernel/pid_max", value.to_string())?;
    // An older kernel has one global pid_max that this namespace may not change: the write fails there.
    let now = std::fs::read_to_string("/proc/sys/kernel/pid_max")?;
    if now.trim() == value.to_string() {
        Ok(())
    } else {
        Err(std::io::Error::other("pid_max did not change"))
    }
}

/// `RLIMIT_NPROC` for the command: the fallback bound (it counts all of the user's processes and does not
/// bind root).
pub(super) fn limit_by_rlimit(max: u32) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let max = u64::from(max);
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NPROC) {
        let _ = setrlimit(Resource::RLIMIT_NPROC, soft.min(max), hard.min(max));
    }
}
