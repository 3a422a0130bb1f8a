//! The helper that stays as PROGRAM's parent until the call's whole tree is gone (DESIGN.md §5f): the
//! init of the call's PID namespace, or the child subreaper where there is none. One event loop, no
//! thread: a signalfd (SIGCHLD to reap, SIGTERM/SIGINT/SIGHUP to end the tree) and, on the subreaper path,
//! the owner's socket (its end-of-file means codeloop is gone).
//!
//! - PROGRAM exits: what is left of the tree is counted, killed and reaped; the call is complete only then.
//! - SIGTERM (a `bash_kill`, a timeout, an abort): SIGTERM to every process of the tree, SIGKILL to what is
//!   left [`KILL_GRACE`] later.
//! - The owner's end closes: SIGKILL to the tree at once.
//!
//! It must not return before every process of the tree has been reaped.

use std::io::Read as _;
use std::os::fd::AsFd as _;
use std::os::unix::net::UnixStream;
use std::process::Child;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use rustix::event::{PollFd, PollFlags, Timespec, poll};

use super::tree::{Tree, no_children};

/// Time between SIGTERM and SIGKILL when the tree is ended gracefully (as `bash_kill` promises).
pub(super) const KILL_GRACE: Duration = Duration::from_secs(2);

/// How often, while ending a tree, it is walked again for processes forked during the kill.
const REWALK_EVERY: Duration = Duration::from_millis(20);

/// How the supervised call ended.
pub(super) struct Ended {
    /// PROGRAM's exit code, or 128 + the signal that killed it.
    pub code: u8,
    /// Processes still alive when PROGRAM exited (ended then).
    pub leftovers: u32,
}

fn watched() -> SigSet {
    let mut set = SigSet::empty();
    for signal in [Signal::SIGCHLD, Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        set.add(signal);
    }
    set
}

/// The signals the loop takes through its signalfd; they are blocked for the helper. Start children with
/// [`spawn_unblocked`]: a blocked mask is inherited across exec.
pub(super) fn watch_signals() -> Result<SignalFd, String> {
    let set = watched();
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None).map_err(|e| format!("cannot block signals: {e}"))?;
    SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(|e| format!("cannot watch signals: {e}"))
}

/// Spawns `command` with the watched signals unblocked for it (the child inherits the mask of the moment
/// it forks). A SIGCHLD in that moment is not lost: the loop reaps before it first waits. A SIGTERM in
/// it ends the helper, and the caller's group kill reaches the rest.
pub(super) fn spawn_unblocked(command: &mut std::process::Command) -> std::io::Result<Child> {
    let set = watched();
    let _ = sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&set), None);
    let child = command.spawn();
    let _ = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None);
    child
}

/// Runs the loop until PROGRAM (`main`) and every other process of `tree` are gone.
pub(super) fn supervise(
    main: &Child,
    tree: Tree,
    signals: &SignalFd,
    mut owner: Option<&UnixStream>,
) -> Ended {
    let main = Pid::from_raw(i32::try_from(main.id()).unwrap_or(i32::MAX));
    let mut code = None;
    let mut kill_at: Option<Instant> = None;
    loop {
        reap_ready(main, &mut code);
        // After a SIGTERM the rest of the tree keeps its grace, even when PROGRAM is already gone.
        if let Some(code) = code
            && (kill_at.is_none() || tree.live().is_empty())
        {
            let leftovers = end_tree(tree, signals);
            return Ended { code, leftovers };
        }
        if kill_at.is_some_and(|at| at <= Instant::now()) {
            tree.signal(Signal::SIGKILL);
            kill_at = None;
        }
        let timeout = kill_at.map(|at| at.saturating_duration_since(Instant::now()));
        let (signalled, owner_event) = wait(signals, owner, timeout);
        if signalled && drain(signals, tree).contains(&Signal::SIGTERM) && kill_at.is_none() {
            tree.signal(Signal::SIGTERM);
            kill_at = Some(Instant::now() + KILL_GRACE);
        }
        if owner_event && owner.is_some_and(owner_gone) {
            // codeloop is gone (even by SIGKILL): nothing may outlive it.
            tree.signal(Signal::SIGKILL);
            owner = None;
        }
    }
}

/// Waits for a signal or the owner's socket (or the timeout); which of the two woke it.
fn wait(signals: &SignalFd, owner: Option<&UnixStream>, timeout: Option<Duration>) -> (bool, bool) {
    let timeout =
        timeout.map(|t| Timespec { tv_sec: t.as_secs() as i64, tv_nsec: i64::from(t.subsec_nanos()) });
    let mut fds = vec![PollFd::new(signals, PollFlags::IN)];
    if let Some(owner) = owner {
        fds.push(PollFd::new(owner, PollFlags::IN));
    }
    match poll(&mut fds, timeout.as_ref()) {
        Ok(_) => (!fds[0].revents().is_empty(), fds.get(1).is_some_and(|f| !f.revents().is_empty())),
        Err(_) => (false, false),
    }
}

/// The signals waiting on the signalfd (SIGTERM, SIGINT and SIGHUP all read as SIGTERM). As the init of
/// the call's namespace, an ending signal counts only from outside it (the outer helper, codeloop's group
/// kill: the sender's pid is 0 here); PROGRAM may not end or steer its own init.
fn drain(signals: &SignalFd, tree: Tree) -> Vec<Signal> {
    let mut out = Vec::new();
    while let Ok(Some(info)) = signals.read_signal() {
        match Signal::try_from(i32::try_from(info.ssi_signo).unwrap_or(0)) {
            Ok(Signal::SIGCHLD) => out.push(Signal::SIGCHLD),
            Ok(_) if tree == Tree::Namespace && info.ssi_pid != 0 => {}
            Ok(_) => out.push(Signal::SIGTERM),
            Err(_) => {}
        }
    }
    out
}

/// Reaps every child that has exited; sets `code` when `main` is among them.
fn reap_ready(main: Pid, code: &mut Option<u8>) {
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, status)) if pid == main => {
                *code = Some(u8::try_from(status).unwrap_or(1))
            }
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == main => {
                *code = Some(u8::try_from(128 + signal as i32).unwrap_or(255));
            }
            Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return,
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => return,
        }
    }
}

/// Counts what is left of the tree, kills it and reaps it (walking it again for what was forked during the
/// kill) until the helper has no child left.
fn end_tree(tree: Tree, signals: &SignalFd) -> u32 {
    let leftovers = u32::try_from(tree.live().len()).unwrap_or(u32::MAX);
    loop {
        let mut ignored = None;
        reap_ready(Pid::from_raw(0), &mut ignored);
        if no_children() {
            return leftovers;
        }
        tree.signal(Signal::SIGKILL);
        let _ = wait(signals, None, Some(REWALK_EVERY));
        drain(signals, tree);
    }
}

/// Whether the owner's end closed (data on the socket is for later uses and is skipped).
pub(super) fn owner_gone(owner: &UnixStream) -> bool {
    let mut buf = [0u8; 64];
    !matches!((&*owner).read(&mut buf), Ok(n) if n > 0)
}

/// PROGRAM's stdin as the policy says.
pub(super) fn program_stdin(policy: &crate::SandboxPolicy) -> std::process::Stdio {
    match policy.stdin {
        crate::ProgramStdin::Null => std::process::Stdio::null(),
        crate::ProgramStdin::Caller => std::process::Stdio::inherit(),
    }
}

/// Our stdin when codeloop gave us a socket ([`crate::CallChannel`]): its end-of-file means the owner
/// is gone. `None` for anything else (`/dev/null` in tests and `sandbox check`), and when the stdin is
/// PROGRAM's.
pub(super) fn owner_socket(policy: &crate::SandboxPolicy) -> Option<UnixStream> {
    if policy.stdin == crate::ProgramStdin::Caller {
        return None;
    }
    let stdin = std::io::stdin();
    let stat = rustix::fs::fstat(stdin.as_fd()).ok()?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::Socket {
        return None;
    }
    stdin.as_fd().try_clone_to_owned().ok().map(UnixStream::from)
}
