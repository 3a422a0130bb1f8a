//! OS walls for the processes codeloop's tools start (bash and everything it spawns), DESIGN.md §5a "The
//! sandbox". On Linux: Landlock for the file system and TCP, read-only bind mounts in a user + mount
//! namespace for protected paths inside writable trees, and seccomp for socket families when the network is
//! closed. The walls are put up by a helper mode of an executable that then execs the command, so no
//! `unsafe` pre-exec hook is needed; the one `unsafe` call is the helper's fork of its namespace's init,
//! in a process that is single-threaded by construction.
//!
//! This crate owns the policy shape, the probe, the wrapped command, the helper, failure notes and the
//! self-check. It must not decide the policy (the caller resolves config and trust), spawn the tool's
//! process, or read configuration.
//!
//! Use: the binary's `main` calls [`helper_main`] when `argv[1] == "__sandbox"` (before starting any thread);
//! a tool builds its command with [`wrap_command`] (passing `std::env::current_exe()` as the helper), sets
//! stdio, working dir and process group on it, spawns it, and on failure adds [`explain_failure`]'s note.

mod check;
mod command;
mod explain;
mod fingerprint;
mod helper;
mod policy;
mod probe;

pub use check::{CheckKind, CheckLine, CheckReport, check};
pub use command::{
    CallChannel, CallReport, HELPER_ARG, ProcessLimit, carries_credentials, carries_url_credentials,
    looks_secret, withheld, wrap_command,
};
pub use explain::explain_failure;
pub use fingerprint::{Fingerprint, fingerprint};
pub use helper::{EXIT_SETUP_FAILED, helper_main};
pub use policy::{CacheOverlay, DEFAULT_MAX_PROCESSES, ProgramStdin, SandboxMode, SandboxPolicy};
pub use probe::{NO_CGROUP_ENV, NO_USER_NAMESPACES_ENV, Support, probe};
