//! The outer helper (see the parent module): namespaces and mounts, then the init as its only child,
//! watched until it exits. Without user namespaces: Landlock, seccomp and the process rlimit on itself,
//! then an exec of PROGRAM.

use std::io::{Read as _, Write as _};
use std::os::fd::AsFd as _;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::process::{Child, Command, ExitStatus, Stdio};

use crate::command::{HELPER_ARG, Namespace};
use crate::policy::SandboxMode;

use super::{Failure, INIT_ARG, Invocation, landlock_rules, mounts, seccomp};

pub(super) fn run(inv: Invocation) -> Result<u8, Failure> {
    let policy = &inv.plan.policy;
    if policy.mode == SandboxMode::Off {
        return Err(Failure::spawn(&inv.program, &Command::new(&inv.program).args(&inv.args).exec()));
    }
    match inv.plan.namespace {
        Namespace::Skip => {
            landlock_rules::restrict(policy).map_err(Failure::setup)?;
            if !policy.network {
                seccomp::deny_sockets().map_err(Failure::setup)?;
            }
            super::init::limit_by_rlimit(policy.max_processes);
            Err(Failure::spawn(&inv.program, &Command::new(&inv.program).args(&inv.args).exec()))
        }
        Namespace::Private => walled_tree(&inv),
    }
}

fn walled_tree(inv: &Invocation) -> Result<u8, Failure> {
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
    init.arg(HELPER_ARG)
        .arg(INIT_ARG)
        .arg(&inv.plan_text)
        .arg("--")
        .arg(&inv.program)
        .args(&inv.args)
        .stdin(Stdio::from(report_out));
    let child = init.spawn().map_err(|e| Failure::setup(format!("cannot start the sandbox's init: {e}")))?;
    // The command holds our copy of the pipe's write end: drop it, or the report never ends.
    drop(init);
    let owner = owner_socket();
    let status = wait_watching(child, owner.as_ref())
        .map_err(|e| Failure::setup(format!("cannot wait for the sandbox's init: {e}")))?;
    let mut report = String::new();
    let _ = (&report_in).read_to_string(&mut report);
    if let Some(mut owner) = owner {
        // The owner may be gone already; the report is then for no one.
        let _ = owner.write_all(report.trim().as_bytes()).and_then(|()| owner.write_all(b"\n"));
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

/// Our stdin when codeloop gave us a socket ([`crate::CallChannel`]): its end-of-file means the owner
/// is gone. `None` for anything else (`/dev/null` in tests and `sandbox check`).
fn owner_socket() -> Option<UnixStream> {
    let stdin = std::io::stdin();
    let stat = rustix::fs::fstat(stdin.as_fd()).ok()?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::Socket {
        return None;
    }
    stdin.as_fd().try_clone_to_owned().ok().map(UnixStream::from)
}

/// Waits for the init; if the owner's socket ends first (codeloop died, even by SIGKILL), kills it,
/// which ends every process of its namespace. Threads cannot be made after `unshare(CLONE_NEWPID)`, so
/// this polls the init's pidfd and the socket together.
fn wait_watching(mut child: Child, owner: Option<&UnixStream>) -> std::io::Result<ExitStatus> {
    use rustix::event::{PollFd, PollFlags, poll};
    let (Some(owner), Ok(pidfd)) = (
        owner,
        rustix::process::pidfd_open(
            rustix::process::Pid::from_child(&child),
            rustix::process::PidfdFlags::empty(),
        ),
    ) else {
        return child.wait();
    };
    loop {
        let mut fds = [PollFd::new(&pidfd, PollFlags::IN), PollFd::new(owner, PollFlags::IN)];
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
        if !fds[0].revents().is_empty() {
            return child.wait();
        }
        if !fds[1].revents().is_empty() && owner_gone(owner) {
            let _ = child.kill();
            return child.wait();
        }
    }
}

/// Whether the owner's end closed (data on the socket is for later uses and is skipped).
fn owner_gone(owner: &UnixStream) -> bool {
    let mut buf = [0u8; 64];
    !matches!((&*owner).read(&mut buf), Ok(n) if n > 0)
}

/// The init's exit code, or 128 + the signal that killed it.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(255),
        (None, None) => 1,
    }
}
