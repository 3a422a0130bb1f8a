//! Builds the `std::process::Command` that runs a tool's program inside the walls: `HELPER __sandbox <plan>
//! -- PROGRAM ARGS…`, with a filtered environment. It must not spawn anything itself, so the caller keeps
//! control of stdio, the process group and the async runtime.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::policy::{SandboxMode, SandboxPolicy};
use crate::probe::probe;

/// The argument after which the codeloop binary hands over to [`crate::helper_main`].
pub const HELPER_ARG: &str = "__sandbox";

/// Words that make an environment variable's name look like a secret (DESIGN.md §5a).
const SECRET_WORDS: [&str; 5] = ["KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL"];

/// What the parent tells the helper: the policy plus what the parent decided from the probe, so the helper
/// does the same thing the parent reports and fails loudly if it cannot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct HelperPlan {
    pub policy: SandboxPolicy,
    pub namespace: Namespace,
}

/// Whether the helper sets up the user + mount namespace for protected and masked paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Namespace {
    /// Read-only binds and masks in a fresh user + mount namespace.
    Private,
    /// Nothing to bind, or the kernel refuses user namespaces (the caller checks protected paths instead).
    Skip,
}

/// Builds the Command that runs `program args` inside the walls of `policy`, with `helper` being an
/// executable whose `argv[1] == "__sandbox"` calls [`crate::helper_main`].
///
/// Mode `Off` runs the program directly. In every mode the child's environment drops variables whose name
/// contains KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL (any case) unless `env_keep` names them, and `TMPDIR`
/// points at the session temp dir. stdio, the working directory and the process group stay for the caller
/// to set (also after `tokio::process::Command::from`).
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
    for (name, _) in std::env::vars_os() {
        if looks_secret(&name) && !policy.env_keep.iter().any(|k| OsStr::new(k) == name) {
            cmd.env_remove(&name);
        }
    }
    cmd.env("TMPDIR", &policy.temp_dir);
    cmd
}

/// `None` when no wall applies (mode off, or a platform without any).
fn helper_plan(policy: &SandboxPolicy) -> Option<HelperPlan> {
    if policy.mode == SandboxMode::Off || probe().platform != "linux" {
        return None;
    }
    let wants_namespace = !policy.protected.is_empty() || !policy.masked.is_empty();
    let namespace =
        if wants_namespace && probe().user_namespaces { Namespace::Private } else { Namespace::Skip };
    Some(HelperPlan { policy: policy.clone(), namespace })
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
    fn mode_off_runs_the_program_directly() {
        let mut policy = SandboxPolicy::new("/p", "/t");
        policy.mode = SandboxMode::Off;
        let cmd = wrap_command(Path::new("/helper"), &policy, OsStr::new("true"), &[]);
        assert_eq!(cmd.get_program(), "true");
    }
}
