//! Builds the `std::process::Command` that runs a tool's program inside the walls: `HELPER __sandbox <plan>
//! -- PROGRAM ARGS…`, with a filtered environment, and the channel on which the helper reports how the
//! call's process tree ended. It must not spawn anything itself, so the caller keeps control of stdio,
//! the process group and the async runtime.

use std::ffi::{OsStr, OsString};
use std::io::Read as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::policy::{SandboxMode, SandboxPolicy};
use crate::probe::probe;

/// The argument after which the codeloop binary hands over to [`crate::helper_main`].
pub const HELPER_ARG: &str = "__sandbox";

/// Words that make an environment variable's name look like a secret (DESIGN.md §5a).
const SECRET_WORDS: [&str; 5] = ["KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL"];

/// Variables that lead a command to an agent or a session bus that acts for the user (DESIGN.md §5c).
const AGENT_VARIABLES: [&str; 6] = [
    "SSH_AUTH_SOCK",
    "GPG_AGENT_INFO",
    "DBUS_SESSION_BUS_ADDRESS",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XDG_RUNTIME_DIR",
];

/// Where the usual agents, buses and daemons listen; masked unless `allow_unix_sockets` names them.
const SOCKET_PLACES: [&str; 4] = ["/run/dbus", "/var/run/docker.sock", "/run/docker.sock", "/tmp/.X11-unix"];

/// What the parent tells the helper: the policy plus what the parent decided from the probe, so the helper
/// does the same thing the parent reports and fails loudly if it cannot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct HelperPlan {
    pub policy: SandboxPolicy,
    pub namespace: Namespace,
    /// Sockets and socket directories hidden besides the policy's masks (agents, buses, displays); the
    /// helper adds every other socket outside the writable roots it finds in `/proc/net/unix`.
    pub socket_masks: Vec<PathBuf>,
}

/// Whether the helper sets up the user + mount + PID namespace for protected and masked paths and the
/// call's own process tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Namespace {
    /// Read-only binds and masks in a fresh user + mount namespace, the command in a PID namespace of its
    /// own (with its own `/proc`).
    Private,
    /// The kernel refuses user namespaces (the caller checks protected paths instead), or mode off: the
    /// helper is the child subreaper of the command's tree.
    Skip,
}

/// Builds the Command that runs `program args` inside the walls of `policy`, with `helper` being an
/// executable whose `argv[1] == "__sandbox"` calls [`crate::helper_main`].
///
/// Mode `Off` puts up no wall, but the helper still runs the program as the child subreaper of its tree, so
/// the call owns every process it starts (DESIGN.md §5f). In every mode the child's environment drops variables whose name
/// contains KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL (any case), whose value carries URL credentials
/// (`postgres://user:secret@…`), or that lead to an agent or bus (`SSH_AUTH_SOCK`, `DISPLAY`, …) unless
/// `env_keep` names them, and `TMPDIR` points at the session temp dir. stdio, the working directory and
/// the process group stay for the caller to set (also after `tokio::process::Command::from`); give the
/// helper [`CallChannel`]'s stdin to learn how the call's tree ended.
pub fn wrap_command(helper: &Path, policy: &SandboxPolicy, program: &OsStr, args: &[OsString]) -> Command {
    let mut cmd = match helper_plan(policy) {
        Some(plan) => {
            // A path that is not UTF-8 cannot be serialised; the empty plan makes the helper refuse to run
            // rather than run the program unwalled.
            let plan = serde_json::to_string(&plan).unwrap_or_default();
            let mut cmd = Command::new(helper);
            cmd.arg(HELPER_ARG).arg(plan).arg("--").arg(program).args(args);
            cmd
        }
        None => {
            let mut cmd = Command::new(program);
            cmd.args(args);
            cmd
        }
    };
    for (name, value) in std::env::vars_os() {
        let dropped = looks_secret(&name)
            || AGENT_VARIABLES.iter().any(|v| OsStr::new(v) == name)
            || carries_url_credentials(&value);
        if dropped && !policy.env_keep.iter().any(|k| OsStr::new(k) == name) {
            cmd.env_remove(&name);
        }
    }
    cmd.env("TMPDIR", &policy.temp_dir);
    cmd
}

/// `None` on a platform without a helper.
fn helper_plan(policy: &SandboxPolicy) -> Option<HelperPlan> {
    if probe().platform != "linux" {
        return None;
    }
    // The namespace also gives the call its own process tree and /proc, so it is wanted for every walled
    // call; mode off has only the subreaper.
    let namespace = if probe().user_namespaces && policy.mode != SandboxMode::Off {
        Namespace::Private
    } else {
        Namespace::Skip
    };
    Some(HelperPlan { policy: policy.clone(), namespace, socket_masks: socket_masks(policy) })
}

/// The agent, bus and display sockets of DESIGN.md §5c that `allow_unix_sockets` does not name (a place
/// that holds an allowed socket stays, and its other sockets are masked one by one from `/proc/net/unix`).
fn socket_masks(policy: &SandboxPolicy) -> Vec<PathBuf> {
    #[cfg(target_os = "linux")]
    let uid = nix::unistd::getuid().as_raw();
    #[cfg(not(target_os = "linux"))]
    let uid = 0;
    let mut places: Vec<PathBuf> = SOCKET_PLACES.iter().map(PathBuf::from).collect();
    places.push(PathBuf::from(format!("/run/user/{uid}")));
    if let Some(agent) = std::env::var_os("SSH_AUTH_SOCK").map(PathBuf::from)
        && let Some(dir) = agent.parent().filter(|d| !d.as_os_str().is_empty())
    {
        places.push(dir.to_owned());
    }
    let writable = policy.writable_paths();
    places.retain(|place| {
        !policy
            .allow_unix_sockets
            .iter()
            .any(|allowed| allowed.starts_with(place) || place.starts_with(allowed))
            && !writable.iter().any(|w| w.starts_with(place) || place.starts_with(w))
    });
    places.dedup();
    places
}

/// Whether a value looks like a URL with a password in it (`scheme://user:secret@host…`).
pub fn carries_url_credentials(value: &OsStr) -> bool {
    let value = value.to_string_lossy();
    let Some((_, rest)) = value.split_once("://") else { return false };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    authority.rsplit_once('@').is_some_and(|(userinfo, _)| userinfo.contains(':'))
}

/// How the helper's process tree ended, as it reports on its stdin (a socket from [`CallChannel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CallReport {
    /// Processes still alive when the command exited, which the helper then ended.
    pub leftovers: u32,
    /// How the call's process count was bounded.
    pub process_limit: ProcessLimit,
}

/// What bounded a call's process count (`sandbox check` says which).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProcessLimit {
    /// The `pid_max` of the call's own PID namespace.
    PidNamespace,
    /// `RLIMIT_NPROC`, which counts all of the user's processes and does not bind root.
    #[default]
    Rlimit,
    /// None: `[sandbox] mode = "off"`.
    Unbounded,
}

impl ProcessLimit {
    pub fn describe(self) -> &'static str {
        match self {
            Self::PidNamespace => "the pid_max of the call's own PID namespace",
            Self::Rlimit => "RLIMIT_NPROC (counts all of the user's processes; does not bind root)",
            Self::Unbounded => "nothing ([sandbox] mode = \"off\")",
        }
    }
}

/// The caller's end of the channel to one helper: give [`CallChannel::stdin`] to the helper as its
/// stdin. The helper reports on it before it exits, and takes its end-of-file as "the owner is gone"
/// (it then ends the call's tree), so keep this alive for as long as the call runs.
#[derive(Debug)]
pub struct CallChannel {
    ours: UnixStream,
    theirs: Option<UnixStream>,
}

impl CallChannel {
    pub fn new() -> std::io::Result<Self> {
        let (ours, theirs) = UnixStream::pair()?;
        Ok(Self { ours, theirs: Some(theirs) })
    }

    /// The helper's stdin (once; the command itself gets `/dev/null`).
    pub fn stdin(&mut self) -> Stdio {
        match self.theirs.take() {
            Some(theirs) => Stdio::from(std::os::fd::OwnedFd::from(theirs)),
            None => Stdio::null(),
        }
    }

    /// What the helper reported, once it has exited; `None` when it reported nothing (no PID namespace,
    /// or it was killed).
    pub fn report(&self) -> Option<CallReport> {
        self.ours.set_nonblocking(true).ok()?;
        let mut buf = [0u8; 512];
        let mut len = 0;
        while len < buf.len() {
            match (&self.ours).read(&mut buf[len..]) {
                Ok(0) => break,
                Ok(n) => len += n,
                Err(_) => break,
            }
        }
        serde_json::from_slice(buf[..len].trim_ascii()).ok()
    }
}

/// Whether an environment variable's name contains KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL, in any case.
pub fn looks_secret(name: &OsStr) -> bool {
    let upper = name.to_string_lossy().to_ascii_uppercase();
    SECRET_WORDS.iter().any(|w| upper.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_looking_names_are_recognised_in_any_case() {
        for name in
            ["OPENAI_API_KEY", "github_token", "Db_Password", "AWS_SECRET_ACCESS_KEY", "GCP_CREDENTIALS"]
        {
            assert!(looks_secret(OsStr::new(name)), "{name}");
        }
        for name in ["PATH", "HOME", "CARGO_TARGET_DIR", "LANG"] {
            assert!(!looks_secret(OsStr::new(name)), "{name}");
        }
    }

    #[test]
    fn url_credentials_are_recognised_in_values() {
        for value in ["postgres://u:pw@db/x", "https://user:tok@github.com/a.git", "redis://:pw@h:6379"] {
            assert!(carries_url_credentials(OsStr::new(value)), "{value}");
        }
        for value in
            ["https://github.com/a.git", "git@github.com:a/b", "postgres://u@db/x", "/usr/bin", "a:b@c"]
        {
            assert!(!carries_url_credentials(OsStr::new(value)), "{value}");
        }
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn mode_off_still_runs_through_the_helper_without_a_namespace() {
        let mut policy = SandboxPolicy::new("/p", "/t");
        policy.mode = SandboxMode::Off;
        let cmd = wrap_command(Path::new("/helper"), &policy, OsStr::new("true"), &[]);
        assert_eq!(cmd.get_program(), "/helper");
        let plan: Vec<_> = cmd.get_args().collect();
        let plan: HelperPlan = serde_json::from_str(plan[1].to_str().unwrap()).unwrap();
        assert_eq!(plan.namespace, Namespace::Skip);
    }
}
