//! The helper mode: a fresh single-threaded process (`HELPER __sandbox <plan> -- PROGRAM ARGS…`) that puts
//! up the walls and runs PROGRAM inside them. It must not run anything before the walls are up, and it
//! never falls back to running PROGRAM unwalled when a wall it was asked for fails.
//!
//! Before either, the helper puts the call in a pids cgroup of its own where the machine lets it
//! ([`cgroup`]), which bounds the process count for root too.
//!
//! With user namespaces (the usual case) there are three processes:
//! - the **outer helper** makes a user + mount + PID namespace, mounts the read-only, overlay and masking
//!   layers, and starts the init below; it stays as its parent, watches its stdin (a socket from codeloop)
//!   for the owner's end, and passes the init's report and exit code on;
//! - the **init** (the outer helper's fork, PID 1 of the new namespace) mounts the namespace's own `/proc`,
//!   bounds the process count, makes itself unreachable from PROGRAM (not dumpable, no capability left
//!   for PROGRAM, signals from inside the namespace ignored), applies Landlock and seccomp to itself and
//!   starts PROGRAM; when PROGRAM exits it counts and ends whatever else is left, so a call owns its whole
//!   tree (DESIGN.md §5f);
//! - **PROGRAM**, which sees only its own processes.
//!
//! Without them, the outer helper applies Landlock, seccomp and the process rlimit to itself and starts
//! PROGRAM as a child subreaper ([`subreaper`]), staying as its parent; in mode off it is only that
//! subreaper. Either way the helper returns only when the call's whole tree is gone ([`supervise`]).
//!
//! Exit codes when PROGRAM does not run: [`EXIT_SETUP_FAILED`] (125) when a wall could not be put up,
//! 126 when PROGRAM exists but cannot be executed, 127 when PROGRAM is not found (as shells do). PROGRAM
//! killed by a signal exits 128 + the signal, as in a shell.

use std::ffi::OsString;
use std::process::ExitCode;

#[cfg(target_os = "linux")]
mod cgroup;
#[cfg(target_os = "linux")]
mod init;
#[cfg(target_os = "linux")]
mod landlock_rules;
#[cfg(target_os = "linux")]
mod mounts;
#[cfg(target_os = "linux")]
mod outer;
#[cfg(target_os = "linux")]
mod seccomp;
#[cfg(target_os = "linux")]
mod subreaper;
#[cfg(target_os = "linux")]
mod supervise;
#[cfg(target_os = "linux")]
mod tree;

/// The helper could not set up the sandbox (bad arguments, namespace, mount, Landlock or seccomp failure).
/// Distinct from 126/127 so the caller can tell a broken sandbox from a broken command.
pub const EXIT_SETUP_FAILED: u8 = 125;

/// What stderr lines from the helper start with, so they are easy to tell from the program's own output.
pub(crate) const MESSAGE_PREFIX: &str = "codeloop sandbox:";

/// Entry of the helper mode: `args` are the arguments after `__sandbox`. Returns PROGRAM's exit code, or
/// prints one line to stderr and returns 125, 126 or 127.
///
/// Call it first thing in `main`, before any runtime, logger thread or other thread starts: the kernel
/// refuses a user namespace to a multi-threaded process.
pub fn helper_main(args: Vec<OsString>) -> ExitCode {
    match run(args) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("{MESSAGE_PREFIX} {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn setup(message: impl Into<String>) -> Self {
        Self { code: EXIT_SETUP_FAILED, message: message.into() }
    }

    /// PROGRAM could not be started.
    #[cfg(target_os = "linux")]
    fn spawn(program: &std::ffi::OsStr, err: &std::io::Error) -> Self {
        let code = if err.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 };
        Self { code, message: format!("cannot run {}: {err}", program.to_string_lossy()) }
    }
}

/// The parsed arguments: the plan and the command.
#[cfg(target_os = "linux")]
struct Invocation {
    plan: crate::command::HelperPlan,
    program: OsString,
    args: Vec<OsString>,
}

#[cfg(target_os = "linux")]
fn parse(args: impl Iterator<Item = OsString>) -> Result<Invocation, Failure> {
    let mut args = args;
    let plan_text = args.next().ok_or_else(|| Failure::setup("missing policy argument"))?;
    let plan = plan_text
        .to_str()
        .and_then(|s| serde_json::from_str(s).ok())
        .ok_or_else(|| Failure::setup("the policy could not be read (are all sandbox paths UTF-8?)"))?;
    if args.next().as_deref() != Some(std::ffi::OsStr::new("--")) {
        return Err(Failure::setup("expected `--` after the policy"));
    }
    let program = args.next().ok_or_else(|| Failure::setup("missing program after `--`"))?;
    Ok(Invocation { plan, program, args: args.collect() })
}

#[cfg(target_os = "linux")]
fn run(args: Vec<OsString>) -> Result<u8, Failure> {
    outer::run(parse(args.into_iter())?)
}

#[cfg(not(target_os = "linux"))]
fn run(_args: Vec<OsString>) -> Result<u8, Failure> {
    Err(Failure::setup(format!("no sandbox on {}; run with [sandbox] mode = \"off\"", std::env::consts::OS)))
}
