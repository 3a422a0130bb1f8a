//! The outer helper (see the parent module): namespaces and mounts, then the init as its only child,
//! watched until it exits. Without user namespaces: Landlock, seccomp and the process rlimit on itself,
//! then PROGRAM under the subreaper; in mode off, only the subreaper.

use std::io::Read as _;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Child, Command, ExitStatus, Stdio};

use nix::sys::signal::Signal;
use nix::sys::signalfd::SignalFd;

use crate::command::{CallReport, HELPER_ARG, Namespace, ProcessLimit};
use crate::policy::SandboxMode;

use super::cgroup::PidsCgroup;
use super::supervise::{owner_gone, owner_socket, watch_signals};
use super::{CGROUP_ARG, Failure, INIT_ARG, Invocation, landlock_rules, mounts, seccomp, subreaper};

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
    pass_mount_right_to_init().map_err(Failure::setup)?;

    let (report_in, report_out) =
        std::io::pipe().map_err(|e| Failure::setup(format!("cannot make the report pipe: {e}")))?;
    let mut init = Command::new("/proc/self/exe");
    init.arg(HELPER_ARG).arg(INIT_ARG);
    if cgroup {
        init.arg(CGROUP_ARG);
    }
    init.arg(&inv.plan_text).arg("--").arg(&inv.program).args(&inv.args).stdin(Stdio::from(report_out));
    let signals = watch_signals().map_err(Failure::setup)?;
    let child = super::supervise::spawn_unblocked(&mut init)
        .map_err(|e| Failure::setup(format!("cannot start the sandbox's init: {e}")))?;
    // The command holds our copy of the pipe's write end: drop it, or the report never ends.
    drop(init);
    let owner = owner_socket();
    let status = wait_watching(child, &signals, owner.as_ref())
        .map_err(|e| Failure::setup(format!("cannot wait for the sandbox's init: {e}")))?;
    let mut report = String::new();
    let _ = (&report_in).read_to_string(&mut report);
    if let Ok(report) = serde_json::from_str::<CallReport>(report.trim()) {
        subreaper::report(owner, &report);
    }
    Ok(exit_code(status))
}

/// The init must mount `/proc` and set `pid_max` after its exec; a user other than root loses every
/// capability at exec, so `CAP_SYS_ADMIN` (of the new user namespace only) goes on as an ambient one. The
/// init drops it before it starts PROGRAM.
fn pass_mount_right_to_init() -> Result<(), String> {
    use rustix::thread::{
        CapabilitySet, capabilities, configure_capability_in_ambient_set, set_capabilities,
    };
    let mut sets = capabilities(None).map_err(|e| format!("cannot read capabilities: {e}"))?;
    sets.inheritable |= CapabilitySet::SYS_ADMIN;
    set_capabilities(None, sets).map_err(|e| format!("cannot set capabilities: {e}"))?;
    configure_capability_in_ambient_set(CapabilitySet::SYS_ADMIN, true)
        .map_err(|e| format!("cannot pass CAP_SYS_ADMIN to the sandbox's init: {e}"))
}

/// Waits for the init. SIGTERM (and SIGINT, SIGHUP) go on to it: it ends the namespace's processes
/// gracefully. If the owner's socket ends first (codeloop died, even by SIGKILL), the init is killed,
/// which ends every process of its namespace. Threads cannot be made after `unshare(CLONE_NEWPID)`, so
/// this polls the init's pidfd, the signals and the socket together.
fn wait_watching(
    mut child: Child,
    signals: &SignalFd,
    owner: Option<&UnixStream>,
) -> std::io::Result<ExitStatus> {
    use rustix::event::{PollFd, PollFlags, poll};
    let Ok(pidfd) = rustix::process::pidfd_open(
        rustix::process::Pid::from_child(&child),
        rustix::process::PidfdFlags::empty(),
    ) else {
        return child.wait();
    };
    let init = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
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
            return child.wait();
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
            let _ = child.kill();
            owner = None;
        }
    }
}

/// The init's exit code, or 128 + the signal that killed it.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(255),
        (None, None) => 1,
    }
}
