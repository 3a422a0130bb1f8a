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

/// Words that make an environment variable's name look like a secret anywhere in it (DESIGN.md §5a).
const SECRET_WORDS: [&str; 5] = ["KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL"];

/// Words that make a name look like a secret when they are a whole part of it (`NPM_CONFIG__AUTH`,
/// `DB_PASS`, `SENTRY_DSN`), so `GIT_AUTHOR_NAME` or `SSH_ASKPASS` are left alone.
const SECRET_PARTS: [&str; 9] =
    ["AUTH", "PASS", "PASSWD", "PW", "PASSPHRASE", "COOKIE", "PAT", "DSN", "CREDS"];

/// Prefixes of the tokens services hand out, with the least length a whole token has: a value made of
/// one is a credential whatever its variable is called.
const TOKEN_PREFIXES: [(&str, usize); 20] = [
    ("sk-ant-", 40),
    ("sk-proj-", 40),
    ("sk-", 40),
    ("ghp_", 40),
    ("gho_", 40),
    ("ghu_", 40),
    ("ghs_", 40),
    ("ghr_", 40),
    ("github_pat_", 50),
    ("glpat-", 26),
    ("xoxb-", 24),
    ("xoxp-", 24),
    ("xoxa-", 24),
    ("xoxs-", 24),
    ("npm_", 40),
    ("AKIA", 20),
    ("ASIA", 20),
    ("AIza", 39),
    ("hf_", 34),
    ("pypi-", 60),
];

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
/// the call owns every process it starts (DESIGN.md §5f). In every mode the child's environment drops what
/// [`withheld`] names unless `env_keep` names it, and `TMPDIR` points at the session temp dir. stdio, the working directory and
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
        if withheld(&name, &value, &policy.env_drop) && !policy.env_keep.iter().any(|k| OsStr::new(k) == name)
        {
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

/// Whether a child must not get `name=value` (before `env_keep`, DESIGN.md §5a, §5c, §5j): a name that looks
/// secret, one of the variables that lead to an agent, one of `drop` (what codeloop reads credentials
/// from), or a value that carries a credential.
pub fn withheld(name: &OsStr, value: &OsStr, drop: &[String]) -> bool {
    looks_secret(name)
        || AGENT_VARIABLES.iter().any(|v| OsStr::new(v) == name)
        || drop.iter().any(|d| OsStr::new(d) == name)
        || carries_credentials(value)
}

/// Whether a value carries a credential: a URL with credentials in it ([`carries_url_credentials`]), a
/// private key, or a word shaped like a token a service hands out (`ghp_…`, `sk-ant-…`, `AKIA…`).
pub fn carries_credentials(value: &OsStr) -> bool {
    if carries_url_credentials(value) {
        return true;
    }
    let value = value.to_string_lossy();
    if value.contains("-----BEGIN") && value.contains("PRIVATE KEY") {
        return true;
    }
    value.split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '=' | '"' | '\'' | ':')).any(|word| {
        TOKEN_PREFIXES.iter().any(|(prefix, len)| {
            word.len() >= *len
                && word.starts_with(prefix)
                && word.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
    })
}

/// Whether a value holds a URL with credentials in it, anywhere (`JAVA_OPTS=-Dp=http://u:pw@h`): a
/// password (`scheme://user:secret@host`), or any user part of a web URL, where it is always a token
/// (`https://TOKEN@github.com`, a Sentry DSN). `postgres://user@host` alone names only a user.
pub fn carries_url_credentials(value: &OsStr) -> bool {
    let value = value.to_string_lossy();
    let mut rest = value.as_ref();
    while let Some(at) = rest.find("://") {
        let scheme: String = rest[..at]
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            .collect::<String>()
            .chars()
            .rev()
            .collect::<String>()
            .to_ascii_lowercase();
        let after = &rest[at + 3..];
        let authority = after.split(['/', '?', '#', ' ', ',', ';', '"', '\'']).next().unwrap_or("");
        if let Some((userinfo, _)) = authority.rsplit_once('@') {
            let web = matches!(scheme.as_str(), "http" | "https" | "ws" | "wss");
            if userinfo.contains(':') || (web && !userinfo.is_empty()) {
                return true;
            }
        }
        rest = after;
    }
    false
}

/// How the helper's process tree ended, as it reports on its stdin (a socket from [`CallChannel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CallReport {
    /// Processes still alive when the command exited, which the helper then ended.
    pub leftovers: u32,
    /// How the call's process count was bounded.
    pub process_limit: ProcessLimit,
}

/// What bounded a call's process count (`sandbox check` says which, and tests it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProcessLimit {
    /// A pids cgroup of the call's own: the kernel refuses the fork past the limit, root included.
    Cgroup,
    /// The `pid_max` of the call's own PID namespace (only limits of 300 and more: the kernel's least
    /// `pid_max` is 301).
    PidNamespace,
    /// `RLIMIT_NPROC`, which does not bind root.
    #[default]
    Rlimit,
    /// Nothing binds: root, no pids cgroup to be made, and a limit `pid_max` cannot express.
    NotEnforced,
    /// None: `[sandbox] mode = "off"`.
    Unbounded,
}

impl ProcessLimit {
    pub fn describe(self) -> &'static str {
        match self {
            Self::Cgroup => "a pids cgroup of the call's own",
            Self::PidNamespace => "the pid_max of the call's own PID namespace",
            Self::Rlimit => "RLIMIT_NPROC (does not bind root)",
            Self::NotEnforced => {
                "nothing: no pids cgroup can be made here, pid_max cannot go below 300, and RLIMIT_NPROC does \
                 not bind root"
            }
            Self::Unbounded => "nothing ([sandbox] mode = \"off\")",
        }
    }

    /// Whether the kernel refuses a process past the limit.
    pub fn binds(self) -> bool {
        matches!(self, Self::Cgroup | Self::PidNamespace | Self::Rlimit)
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

/// Whether an environment variable's name contains KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL, or has
/// AUTH, PASS, DSN, … as a whole part, in any case.
pub fn looks_secret(name: &OsStr) -> bool {
    let upper = name.to_string_lossy().to_ascii_uppercase();
    SECRET_WORDS.iter().any(|w| upper.contains(w))
        || upper.split(|c: char| !c.is_ascii_alphanumeric()).any(|part| SECRET_PARTS.contains(&part))
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
        for name in ["NPM_CONFIG__AUTH", "DB_PASS", "SENTRY_DSN", "GITHUB_PAT", "basic-auth"] {
            assert!(looks_secret(OsStr::new(name)), "{name}");
        }
        for name in
            ["PATH", "HOME", "CARGO_TARGET_DIR", "LANG", "GIT_AUTHOR_NAME", "SSH_ASKPASS", "PWD", "PATCH"]
        {
            assert!(!looks_secret(OsStr::new(name)), "{name}");
        }
    }

    #[test]
    fn url_credentials_are_recognised_in_values() {
        for value in [
            "postgres://u:pw@db/x",
            "https://user:tok@github.com/a.git",
            "redis://:pw@h:6379",
            "https://0123abcd@o1.ingest.sentry.io/42",
            "-Dhttp.proxy=http://u:pw@proxy:3128 -Xmx1g",
            "a,https://tok@h",
        ] {
            assert!(carries_url_credentials(OsStr::new(value)), "{value}");
        }
        for value in
            ["https://github.com/a.git", "git@github.com:a/b", "postgres://u@db/x", "/usr/bin", "a:b@c"]
        {
            assert!(!carries_url_credentials(OsStr::new(value)), "{value}");
        }
    }

    #[test]
    fn token_shaped_values_and_private_keys_are_credentials() {
        for value in [
            "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB",
            "sk-ant-api03-0123456789abcdefghijklmnopqrstuvwxyz",
            "AKIAIOSFODNN7EXAMPLE",
            "Bearer glpat-0123456789abcdefghij",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nabc",
        ] {
            assert!(carries_credentials(OsStr::new(value)), "{value}");
        }
        for value in ["sk-short", "/usr/local/bin:/usr/bin", "en_US.UTF-8", "AKIA", "ghp_ not a token"] {
            assert!(!carries_credentials(OsStr::new(value)), "{value}");
        }
    }

    #[test]
    fn variables_codeloop_reads_credentials_from_are_withheld_whatever_their_name() {
        let drop = vec!["OTEL_EXPORTER_OTLP_HEADERS".to_owned(), "MY_PROVIDER_CRED".to_owned()];
        assert!(withheld(
            OsStr::new("OTEL_EXPORTER_OTLP_HEADERS"),
            OsStr::new("x-honeycomb-team=abc"),
            &drop
        ));
        assert!(withheld(OsStr::new("MY_PROVIDER_CRED"), OsStr::new("abc"), &drop));
        assert!(!withheld(OsStr::new("OTEL_SERVICE_NAME"), OsStr::new("codeloop"), &drop));
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
