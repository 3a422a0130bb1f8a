//! The helper mode: a fresh single-threaded process (`HELPER __sandbox <plan> -- PROGRAM ARGS…`) that puts
//! up the walls on itself in order (namespace and mounts, Landlock, seccomp) and then execs PROGRAM, which
//! inherits them along with everything it spawns. It must not run anything before the walls are up, and it
//! never falls back to running PROGRAM unwalled when a wall it was asked for fails.
//!
//! Exit codes when it does not exec: [`EXIT_SETUP_FAILED`] (125) when a wall could not be put up,
//! 126 when PROGRAM exists but cannot be executed, 127 when PROGRAM is not found (as shells do).

use std::ffi::OsString;
use std::process::ExitCode;

#[cfg(target_os = "linux")]
mod landlock_rules;
#[cfg(target_os = "linux")]
mod mounts;
#[cfg(target_os = "linux")]
mod seccomp;

/// The helper could not set up the sandbox (bad arguments, namespace, mount, Landlock or seccomp failure).
/// Distinct from 126/127 so the caller can tell a broken sandbox from a broken command.
pub const EXIT_SETUP_FAILED: u8 = 125;

/// What stderr lines from the helper start with, so they are easy to tell from the program's own output.
pub(crate) const MESSAGE_PREFIX: &str = "codeloop sandbox:";

/// Entry of the helper mode: `args` are the arguments after `__sandbox`. Never returns on success (the
/// process becomes PROGRAM); otherwise prints one line to stderr and returns 125, 126 or 127.
///
/// Call it first thing in `main`, before any runtime, logger thread or other thread starts: the kernel
/// refuses a user namespace to a multi-threaded process.
pub fn helper_main(args: Vec<OsString>) -> ExitCode {
    match run(args) {
        Ok(never) => match never {},
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
}

enum Never {}

#[cfg(target_os = "linux")]
fn run(args: Vec<OsString>) -> Result<Never, Failure> {
    use std::os::unix::process::CommandExt;

    use crate::command::{HelperPlan, Namespace};
    use crate::policy::SandboxMode;

    let mut args = args.into_iter();
    let plan = args.next().ok_or_else(|| Failure::setup("missing policy argument"))?;
    let plan: HelperPlan = plan
        .to_str()
        .and_then(|s| serde_json::from_str(s).ok())
        .ok_or_else(|| Failure::setup("the policy could not be read (are all sandbox paths UTF-8?)"))?;
    if args.next().as_deref() != Some(std::ffi::OsStr::new("--")) {
        return Err(Failure::setup("expected `--` after the policy"));
    }
    let program = args.next().ok_or_else(|| Failure::setup("missing program after `--`"))?;
    let policy = &plan.policy;

    if policy.mode != SandboxMode::Off {
        if plan.namespace == Namespace::Private {
            mounts::enter_namespace().map_err(Failure::setup)?;
            mounts::protect(&policy.protected).map_err(Failure::setup)?;
            mounts::mask(&policy.masked).map_err(Failure::setup)?;
        }
        landlock_rules::restrict(policy).map_err(Failure::setup)?;
        if !policy.network {
            seccomp::deny_sockets().map_err(Failure::setup)?;
        }
    }

    let err = std::process::Command::new(&program).args(args).exec();
    let code = if err.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 };
    Err(Failure { code, message: format!("cannot run {}: {err}", program.to_string_lossy()) })
}

#[cfg(not(target_os = "linux"))]
fn run(_args: Vec<OsString>) -> Result<Never, Failure> {
    Err(Failure::setup(format!("no sandbox on {}; run with [sandbox] mode = \"off\"", std::env::consts::OS)))
}
