//! The helper without a PID namespace (no user namespaces, or `[sandbox] mode = "off"`): a child
//! subreaper that starts PROGRAM and stays as its parent, so every process of the call's tree (a double
//! fork, a `setsid`, a `nohup`) stays its descendant and is ended with the call (DESIGN.md §5f). The walls
//! that apply (Landlock, seccomp, the process rlimit) are on the helper before PROGRAM starts, so PROGRAM
//! inherits them. It must not exec PROGRAM in its own place: then nothing would own the tree.

use std::io::Write as _;
use std::os::unix::net::UnixStream;
use std::process::Command;

use crate::command::{CallReport, ProcessLimit};

use super::supervise::{owner_socket, program_stdin, spawn_unblocked, supervise, watch_signals};
use super::tree::Tree;
use super::{Failure, Invocation};

pub(super) fn run(inv: &Invocation, process_limit: ProcessLimit) -> Result<u8, Failure> {
    let owner = owner_socket(&inv.plan.policy);
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| Failure::setup(format!("cannot become the subreaper of the call's processes: {e}")))?;
    let signals = watch_signals().map_err(Failure::setup)?;
    let child =
        spawn_unblocked(Command::new(&inv.program).args(&inv.args).stdin(program_stdin(&inv.plan.policy)))
            .map_err(|e| Failure::spawn(&inv.program, &e))?;
    let ended = supervise(&child, Tree::Descendants, &signals, owner.as_ref());
    report(owner, &CallReport { leftovers: ended.leftovers, process_limit });
    Ok(ended.code)
}

/// Sends the report to the owner, one JSON line (the owner may be gone already: then it is for no one).
pub(super) fn report(owner: Option<UnixStream>, report: &CallReport) {
    if let (Some(mut owner), Ok(bytes)) = (owner, serde_json::to_vec(report)) {
        let _ = owner.write_all(&bytes).and_then(|()| owner.write_all(b"\n"));
    }
}
