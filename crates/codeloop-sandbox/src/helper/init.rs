//! The init of a call's PID namespace (see the parent module), forked by the outer helper: its own
//! `/proc`, the process limit, its hardening, the Landlock and seccomp walls, then PROGRAM; when PROGRAM
//! exits, whatever is left of the tree is counted and ended, and the count goes to the outer helper on
//! the report pipe. It reaps every
//! orphan meanwhile, as an init must, and a SIGTERM from the outer helper ends the namespace gracefully
//! (see [`super::supervise`]).

use std::io::Write as _;
use std::process::Command;

use nix::sys::signal::Signal;

use crate::command::{CallReport, ProcessLimit};

use super::supervise::{program_stdin, spawn_unblocked, supervise, watch_signals};
use super::tree::Tree;
use super::{Failure, Invocation, landlock_rules, mounts, seccomp};

/// The kernel's smallest `pid_max` (`RESERVED_PIDS + 1`).
const MIN_PID_MAX: u32 = 301;

/// `cgroup`: the outer helper already bounds the call by a pids cgroup; `report` is where the tree's end
/// is told.
pub(super) fn run(inv: &Invocation, cgroup: bool, report: std::io::PipeWriter) -> Result<u8, Failure> {
    let policy = &inv.plan.policy;
    // If the outer helper dies (codeloop's group kill), so does this init, and with it the namespace.
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    let own_proc = mounts::mount_proc().is_ok();
    let process_limit =
        if cgroup { ProcessLimit::Cgroup } else { bound_processes(policy.max_processes, own_proc) };
    harden().map_err(Failure::setup)?;
    landlock_rules::restrict(policy).map_err(Failure::setup)?;
    if !policy.network {
        seccomp::deny_sockets().map_err(Failure::setup)?;
    }
    let signals = watch_signals().map_err(Failure::setup)?;
    let child =
        spawn_unblocked(Command::new(&inv.program).args(&inv.args).stdin(program_stdin(&inv.plan.policy)))
            .map_err(|e| Failure::spawn(&inv.program, &e))?;
    let ended = supervise(&child, Tree::Namespace, &signals, None);
    // Without its own /proc the namespace's processes cannot be counted (they are still ended).
    let leftovers = if own_proc { ended.leftovers } else { 0 };
    let mut report = report;
    let _ =
        serde_json::to_vec(&CallReport { leftovers, process_limit }).map(|bytes| report.write_all(&bytes));
    Ok(ended.code)
}

/// Below a pids cgroup: the namespace's `pid_max` when it can express `max`, else `RLIMIT_NPROC` (a
/// `pid_max` above the setting still keeps a fork bomb to a few hundred).
fn bound_processes(max: u32, own_proc: bool) -> ProcessLimit {
    if own_proc && max.saturating_add(1) >= MIN_PID_MAX && set_pid_max(max).is_ok() {
        return ProcessLimit::PidNamespace;
    }
    if own_proc {
        let _ = set_pid_max(max);
    }
    limit_by_rlimit(max)
}

/// Nothing PROGRAM runs may reach into this init, which holds the namespace's capabilities: it is not
/// dumpable (no `ptrace`, no `/proc/1/mem` or `environ` for a process without `CAP_SYS_PTRACE`), and
/// PROGRAM starts with no capability at all — the bounding and inheritable sets are emptied, so even root
/// of this namespace gets none at exec. Signals from inside the namespace are ignored by
/// [`super::supervise`].
fn harden() -> Result<(), String> {
    use rustix::thread::{
        CapabilitySet, capabilities, remove_capability_from_bounding_set, set_capabilities,
    };
    nix::sys::prctl::set_dumpable(false)
        .map_err(|e| format!("cannot make the sandbox's init undumpable: {e}"))?;
    let _ = rustix::thread::clear_ambient_capability_set();
    let root = nix::unistd::getuid().is_root();
    for capability in CapabilitySet::all().iter() {
        match remove_capability_from_bounding_set(capability) {
            // A capability this kernel does not know.
            Ok(()) | Err(rustix::io::Errno::INVAL) => {}
            Err(e) if root => return Err(format!("cannot drop the capabilities of the command: {e}")),
            // Not root: PROGRAM's exec gives it no capability anyway (the ambient set is empty).
            Err(_) => {}
        }
    }
    if let Ok(mut sets) = capabilities(None) {
        sets.inheritable = CapabilitySet::empty();
        let _ = set_capabilities(None, sets);
    }
    Ok(())
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

/// `RLIMIT_NPROC` for the command: the last bound. It does not bind root; for anyone else it counts the
/// user's processes in the call's own user namespace (kernels since 5.14), else all of them.
pub(super) fn limit_by_rlimit(max: u32) -> ProcessLimit {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let limit = u64::from(max);
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NPROC) {
        let _ = setrlimit(Resource::RLIMIT_NPROC, soft.min(limit), hard.min(limit));
    }
    if nix::unistd::getuid().is_root() { ProcessLimit::NotEnforced } else { ProcessLimit::Rlimit }
}
