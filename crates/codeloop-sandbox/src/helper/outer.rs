//! The outer helper (see the parent module): namespaces and mounts, then the init as its only child (a
//! fork), watched until it exits. Without user namespaces: Landlock, seccomp and the process rlimit on itself,
//! then PROGRAM under the subreaper; in mode off, only the subreaper.

use std::io::Read as _;
use std::os::unix::net::UnixStream;

use nix::sys::signal::Signal;
use nix::sys::signalfd::SignalFd;
use nix::unistd::Pid;

use crate::command::{CallReport, Namespace, ProcessLimit};
use crate::policy::SandboxMode;

use super::cgroup::PidsCgroup;
use super::supervise::{owner_gone, owner_socket, watch_signals};
use super::{Failure, Invocation, landlock_rules, mounts, seccomp, subreaper};

pub(super) fn run(inv: Invocation) -> Result<u8, Failure> {
    let policy = &inv.plan.policy;
    if policy.mode == SandboxMode::Off {
        return subreaper::run(&inv, ProcessLimit::Unbounded);
    }
    let cgroup = PidsCgroup::join(policy.max_processes);
    match inv.plan.namespace {
        Namespace::Skip => {
            landlock_rules::restrict(policy).map_err(Failure::setup)?;
            if !policy.network {
                seccomp::deny_sockets().map_err(Failure::setup)?;
            }
            // Landlock now keeps this helper out of the cgroup file system: a later call's sweep removes
            // the cgroup once it is empty.
            let limit = match cgroup {
                Some(_) => ProcessLimit::Cgroup,
                None => super::init::limit_by_rlimit(policy.max_processes),
            };
            subreaper::run(&inv, limit)
        }
        Namespace::Private => {
            let code = walled_tree(&inv, cgroup.is_some());
            if let Some(cgroup) = cgroup {
                cgroup.leave();
            }
            code
        }
    }
}

fn walled_tree(inv: &Invocation, cgroup: bool) -> Result<u8, Failure> {
    let policy = &inv.plan.policy;
    mounts::enter_namespace().map_err(Failure::setup)?;
    mounts::protect(&policy.protected).map_err(Failure::setup)?;
    mounts::overlay_caches(&policy.cache_overlays).map_err(Failure::setup)?;
    let mut masks = policy.masked.clone();
    masks.extend(inv.plan.socket_masks.iter().cloned());
    masks.extend(mounts::listed_sockets(policy, &masks));
    mounts::mask(&masks).map_err(Failure::setup)?;

    let (report_in, report_out) =
        std::io::pipe().map_err(|e| Failure::setup(format!("cannot make the report pipe: {e}")))?;
    let signals = watch_signals().map_err(Failure::setup)?;
    let init = fork_init(inv, cgroup, report_out)?;
    let owner = owner_socket(&inv.plan.policy);
    let code = wait_watching(init, &signals, owner.as_ref())
        .map_err(|e| Failure::setup(format!("cannot wait for the sandbox's init: {e}")))?;
    let mut report = String::new();
    let _ = (&report_in).read_to_string(&mut report);
    if let Ok(report) = serde_json::from_str::<CallReport>(report.trim()) {
        subreaper::report(owner, &report);
    }
    Ok(code)
}

/// Forks the init: the first child after `unshare(CLONE_NEWPID)` is PID 1 of the new namespace, and a
/// fork (not a second exec of this binary) keeps the namespace's capabilities it needs to mount `/proc`
/// and costs one exec less on every call. The child never returns: it runs the init and exits.
#[allow(unsafe_code)]
fn fork_init(inv: &Invocation, cgroup: bool, report: std::io::PipeWriter) -> Result<Pid, Failure> {
    use nix::unistd::{ForkResult, fork};
    // SAFETY: the helper is single-threaded (`helper_main` runs first thing in `main`, before any thread
    // starts; the user namespace it entered would have been refused otherwise), so the child holds no
    // lock another thread took and may run anything the parent could.
    match unsafe { fork() } {
        Ok(ForkResult::Parent { child }) => Ok(child),
        Ok(ForkResult::Child) => {
            let code = match super::init::run(inv, cgroup, report) {
                Ok(code) => code,
                Err(failure) => {
                    eprintln!("{} {}", super::MESSAGE_PREFIX, failure.message);
                    failure.code
                }
            };
            std::process::exit(i32::from(code))
        }
        Err(e) => Err(Failure::setup(format!("cannot start the sandbox's init: {e}"))),
    }
}

/// Waits for the init. SIGTERM (and SIGINT, SIGHUP) go on to it: it ends the namespace's processes
/// gracefully. If the owner's socket ends first (codeloop died, even by SIGKILL), the init is killed,
/// which ends every process of its namespace. Threads cannot be made after `unshare(CLONE_NEWPID)`, so
/// this polls the init's pidfd, the signals and the socket together. Returns the init's exit code.
fn wait_watching(init: Pid, signals: &SignalFd, owner: Option<&UnixStream>) -> std::io::Result<u8> {
    use rustix::event::{PollFd, PollFlags, poll};
    let pidfd = rustix::process::Pid::from_raw(init.as_raw())
        .map(|pid| rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()));
    let Some(Ok(pidfd)) = pidfd else {
        return reap(init);
    };
    let mut owner = owner;
    loop {
        let mut fds = vec![PollFd::new(&pidfd, PollFlags::IN), PollFd::new(signals, PollFlags::IN)];
        if let Some(owner) = owner {
            fds.push(PollFd::new(owner, PollFlags::IN));
        }
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
        let (exited, signalled) = (!fds[0].revents().is_empty(), !fds[1].revents().is_empty());
        let owner_event = fds.get(2).is_some_and(|f| !f.revents().is_empty());
        drop(fds);
        if exited {
            return reap(init);
        }
        if signalled {
            let mut term = false;
            while let Ok(Some(info)) = signals.read_signal() {
                term |= info.ssi_signo != Signal::SIGCHLD as u32;
            }
            if term {
                let _ = nix::sys::signal::kill(init, Signal::SIGTERM);
            }
        }
        if owner_event && owner.is_some_and(owner_gone) {
            let _ = nix::sys::signal::kill(init, Signal::SIGKILL);
            owner = None;
        }
    }
}

/// Waits for the init to end: its exit code, or 128 + the signal that killed it.
fn reap(init: Pid) -> std::io::Result<u8> {
    use nix::sys::wait::{WaitStatus, waitpid};
    loop {
        match waitpid(init, None) {
            Ok(WaitStatus::Exited(_, code)) => return Ok(u8::try_from(code).unwrap_or(1)),
            Ok(WaitStatus::Signaled(_, signal, _)) => {
                return Ok(u8::try_from(128 + signal as i32).unwrap_or(255));
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}
