//! `codeloop sandbox check`: what the walls are here (platform, Landlock ABI, namespaces, mode, paths,
//! network) and a self-test that really runs the helper. It must not leave files behind: every probe file it
//! may create is removed, and the probe outside the writable set lives in a fresh directory it deletes.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use crate::command::{CallChannel, CallReport, ProcessLimit, wrap_command};
use crate::policy::{SandboxMode, SandboxPolicy};
use crate::probe::probe;

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckLine {
    pub kind: CheckKind,
    pub ok: bool,
    pub text: String,
}

/// Whether a line states a fact about this machine and policy or the outcome of a self-test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckKind {
    Fact,
    SelfTest,
}

/// What `check` found, printed one line per fact with ✓ or ✗.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CheckReport {
    pub lines: Vec<CheckLine>,
}

impl CheckReport {
    /// Whether every self-test held (a missing kernel feature alone does not fail the check).
    pub fn passed(&self) -> bool {
        self.lines.iter().filter(|l| l.kind == CheckKind::SelfTest).all(|l| l.ok)
    }

    fn fact(&mut self, ok: bool, text: impl Into<String>) {
        self.push(CheckKind::Fact, ok, text);
    }

    fn test(&mut self, ok: bool, text: impl Into<String>) {
        self.push(CheckKind::SelfTest, ok, text);
    }

    fn push(&mut self, kind: CheckKind, ok: bool, text: impl Into<String>) {
        self.lines.push(CheckLine { kind, ok, text: text.into() });
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in &self.lines {
            let mark = if line.ok { '✓' } else { '✗' };
            writeln!(f, "{mark} {}", line.text)?;
        }
        Ok(())
    }
}

/// Reports the walls `policy` gets here and runs the self-test through `helper`.
pub fn check(helper: &Path, policy: &SandboxPolicy) -> CheckReport {
    let mut report = CheckReport::default();
    facts(&mut report, policy);
    if policy.mode == SandboxMode::Off {
        report.fact(false, "self-test skipped: mode \"off\" lifts the walls");
        return report;
    }
    let support = probe();
    if !support.landlock() {
        report.fact(false, "self-test skipped: no Landlock here, so nothing walls writes");
        return report;
    }
    let runner = Runner { helper, policy };
    test_outside(&mut report, &runner);
    test_temp_dir(&mut report, &runner);
    test_protected(&mut report, &runner);
    if !policy.network {
        test_network(&mut report, &runner);
    }
    test_tree(&mut report, &runner);
    report
}

/// The call's own process tree: what bounds it, and which UNIX sockets outside the project it can reach.
fn test_tree(report: &mut CheckReport, runner: &Runner<'_>) {
    let Ok(mut channel) = CallChannel::new() else { return };
    // Sockets the command can still connect to: what `/proc/net/unix` lists that is a socket in there.
    let script = "while read -r _ _ _ _ _ _ _ path; do case $path in /*) [ -S \"$path\" ] && echo \"$path\";; esac; \
                  done < /proc/net/unix 2>/dev/null; exit 0";
    let args: Vec<OsString> = ["-c", script].iter().map(OsString::from).collect();
    let outcome = wrap_command(runner.helper, runner.policy, OsStr::new("sh"), &args)
        .stdin(channel.stdin())
        .stdout(Stdio::piped())
        .output();
    let Ok(out) = outcome else { return };
    test_process_limit(report, runner, channel.report());
    // Sockets are listed by the host's /proc; what the command sees of them after the masks is what counts.
    let mut reachable: Vec<String> =
        String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
    reachable.sort();
    reachable.dedup();
    let writable = runner.policy.writable_paths();
    reachable.retain(|s| !writable.iter().any(|w| Path::new(s).starts_with(w)));
    if reachable.is_empty() {
        report.fact(true, "UNIX sockets outside the writable roots: none reachable");
    } else {
        report.fact(
            true,
            format!(
                "UNIX sockets outside the writable roots still reachable ([sandbox] allow_unix_sockets): {}",
                reachable.join(", ")
            ),
        );
    }
}

/// The limit a call may test in a moment, and how many more processes it tries to start than that. A
/// namespace's `pid_max` cannot go below 300, so that mechanism is tried at 300.
const PROBE_LIMIT: u32 = 16;
const PID_MAX_PROBE_LIMIT: u32 = 300;
const PROBE_BEYOND: u32 = 24;

/// What bounds the process count under the real policy (`reported` by its helper), and a call with a
/// small limit that tries to start more processes than that: the line says what really happened.
fn test_process_limit(report: &mut CheckReport, runner: &Runner<'_>, reported: Option<CallReport>) {
    let max = runner.policy.max_processes;
    let Some(reported) = reported else {
        report.test(
            false,
            format!("processes: at most {max} per call was asked, but the helper did not report"),
        );
        return;
    };
    let mut probe = runner.policy.clone();
    probe.max_processes =
        if reported.process_limit == ProcessLimit::PidNamespace { PID_MAX_PROBE_LIMIT } else { PROBE_LIMIT };
    let (limit, starts) = (probe.max_processes, probe.max_processes + PROBE_BEYOND);
    let mut channel = match CallChannel::new() {
        Ok(channel) => channel,
        Err(e) => return report.test(false, format!("processes: cannot test the limit: {e}")),
    };
    // A shell that does not retry a refused fork (bash waits 15 s): each started `sleep` prints its
    // number, and the first refusal ends the loop; the call's init ends the sleeps.
    let script = format!("i=0; while [ $i -lt {starts} ]; do sleep 30 & i=$((i+1)); echo $i; done");
    let args: Vec<OsString> = ["-c", script.as_str()].iter().map(OsString::from).collect();
    let outcome = wrap_command(runner.helper, &probe, plain_shell().as_os_str(), &args)
        .stdin(channel.stdin())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output();
    let started: u32 = match &outcome {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .max()
            .unwrap_or(0),
        Err(e) => return report.test(false, format!("processes: cannot test the limit: {e}")),
    };
    let how = channel.report().map(|r| r.process_limit).unwrap_or_default();
    let tried = format!("a call limited to {limit} tried to start {starts} and started {started}");
    let namespace = if reported.process_limit == ProcessLimit::Unbounded {
        ""
    } else {
        "; each call has its own PID namespace and /proc"
    };
    if started < starts && how.binds() && reported.process_limit.binds() {
        report.test(
            true,
            format!(
                "processes: at most {max} per call, by {} ({tried}){namespace}",
                reported.process_limit.describe()
            ),
        );
    } else {
        report.test(
            false,
            format!(
                "processes: NOT bounded: [sandbox] max_processes = {max} is not enforced here, by {} ({tried})",
                reported.process_limit.describe()
            ),
        );
    }
}

/// `dash` where there is one (Debian's `sh`): it gives up on a refused fork at once.
fn plain_shell() -> PathBuf {
    ["/bin/dash", "/usr/bin/dash", "/bin/sh"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| "sh".into())
}

fn facts(report: &mut CheckReport, policy: &SandboxPolicy) {
    let support = probe();
    report.fact(true, format!("platform: {}", support.platform));
    match support.landlock_abi {
        Some(abi) => report.fact(true, format!("Landlock: ABI {abi}")),
        None => report
            .fact(false, "Landlock: not available (no file-system or network walls; permission rules only)"),
    }
    if support.user_namespaces {
        report
            .fact(true, "user namespaces: available (protected paths are read-only mounts, secrets masked)");
    } else {
        report.fact(
            false,
            "user namespaces: unavailable (protected paths are checked after each call, secrets not masked)",
        );
    }
    report.fact(true, format!("mode: {}", policy.mode));
    report.fact(
        true,
        if policy.network {
            "network: open".to_owned()
        } else {
            let tcp = if support.landlock_abi.is_some_and(|abi| abi >= 4) {
                "TCP bind/connect refused by Landlock, "
            } else {
                ""
            };
            format!("network: closed ({tcp}sockets other than AF_UNIX refused by seccomp)")
        },
    );
    let overlays: Vec<&Path> = policy.cache_overlays.iter().map(|c| c.path.as_path()).collect();
    let writable = match policy.mode {
        SandboxMode::Off => "everything".to_owned(),
        SandboxMode::WorkspaceWrite | SandboxMode::ReadOnly => {
            let direct: Vec<&Path> =
                policy.writable_paths().into_iter().filter(|p| !overlays.contains(p)).collect();
            list(&direct)
        }
    };
    report.fact(true, format!("writable: {writable}"));
    if policy.mode == SandboxMode::WorkspaceWrite && !overlays.is_empty() {
        report.fact(
            true,
            format!(
                "package caches (overlays: writes stay in codeloop's layer, never in yours; [sandbox] cache_dirs \
                 writes through): {}",
                list(&overlays)
            ),
        );
    }
    let protected: Vec<&Path> = policy.protected.iter().map(PathBuf::as_path).collect();
    report.fact(true, format!("protected (read-only): {}", list(&protected)));
    let masked: Vec<&Path> = policy.masked.iter().map(PathBuf::as_path).collect();
    report.fact(true, format!("masked: {}", list(&masked)));
}

/// Paths joined by ", "; missing ones are marked, since the walls skip them.
fn list(paths: &[&Path]) -> String {
    if paths.is_empty() {
        return "none".to_owned();
    }
    paths
        .iter()
        .map(|p| if p.exists() { p.display().to_string() } else { format!("{} (missing)", p.display()) })
        .collect::<Vec<_>>()
        .join(", ")
}

struct Runner<'a> {
    helper: &'a Path,
    policy: &'a SandboxPolicy,
}

impl Runner<'_> {
    /// Runs `program args…` inside the walls with no input.
    fn run(&self, program: &str, args: &[&OsStr]) -> std::io::Result<Output> {
        let args: Vec<OsString> = args.iter().map(|a| a.to_os_string()).collect();
        wrap_command(self.helper, self.policy, OsStr::new(program), &args).stdin(Stdio::null()).output()
    }

    /// `sh -c script sh path`: the path travels as `$1`, so no quoting is needed.
    fn sh(&self, script: &str, path: &Path) -> std::io::Result<Output> {
        self.run("sh", &[OsStr::new("-c"), OsStr::new(script), OsStr::new("sh"), path.as_os_str()])
    }
}

fn probe_name() -> String {
    format!(".codeloop-sandbox-check-{}", std::process::id())
}

fn test_outside(report: &mut CheckReport, runner: &Runner<'_>) {
    let writable = runner.policy.writable_paths();
    let Some(base) = [std::env::temp_dir(), PathBuf::from("/var/tmp")]
        .into_iter()
        .find(|b| b.is_dir() && !writable.iter().any(|w| b.starts_with(w)))
    else {
        report.test(false, "write outside: skipped (no directory outside the writable set to try)");
        return;
    };
    let dir = base.join(probe_name());
    if let Err(e) = std::fs::create_dir(&dir) {
        report.test(false, format!("write outside: skipped (cannot create {}: {e})", dir.display()));
        return;
    }
    let target = dir.join("probe");
    let outcome = runner.sh("printf x > \"$1\"", &target);
    let written = target.exists();
    let _ = std::fs::remove_dir_all(&dir);
    match outcome {
        Ok(out) if !out.status.success() && !written => {
            report.test(true, format!("a write to {} is blocked", target.display()));
        }
        Ok(_) => report.test(false, format!("a write to {} was NOT blocked", target.display())),
        Err(e) => report.test(false, format!("cannot run the helper: {e}")),
    }
}

fn test_temp_dir(report: &mut CheckReport, runner: &Runner<'_>) {
    let target = runner.policy.temp_dir.join(probe_name());
    let outcome = runner.sh("printf x > \"$1\"", &target);
    let written = target.exists();
    let _ = std::fs::remove_file(&target);
    match outcome {
        Ok(out) if out.status.success() && written => {
            report.test(true, format!("a write to the temp dir {} works", runner.policy.temp_dir.display()))
        }
        Ok(out) => report.test(
            false,
            format!(
                "a write to the temp dir {} failed: {}",
                runner.policy.temp_dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ),
        Err(e) => report.test(false, format!("cannot run the helper: {e}")),
    }
}

fn test_protected(report: &mut CheckReport, runner: &Runner<'_>) {
    let Some(protected) = runner.policy.protected.iter().find(|p| p.exists()) else {
        return;
    };
    // Appending nothing to a file changes nothing if the wall fails; a probe file in a dir is removed.
    let (script, target) = if protected.is_dir() {
        ("printf x > \"$1\"", protected.join(probe_name()))
    } else {
        (": >> \"$1\"", protected.clone())
    };
    let outcome = runner.sh(script, &target);
    if protected.is_dir() {
        let _ = std::fs::remove_file(&target);
    }
    match outcome {
        Ok(out) if !out.status.success() => {
            report.test(true, format!("the protected path {} cannot be written", protected.display()))
        }
        Ok(_) => report.test(false, format!("the protected path {} CAN be written", protected.display())),
        Err(e) => report.test(false, format!("cannot run the helper: {e}")),
    }
}

fn test_network(report: &mut CheckReport, runner: &Runner<'_>) {
    let listener = match std::net::TcpListener::bind("127.0.0.1:0") {
        Ok(l) => l,
        Err(e) => {
            report.test(false, format!("network: skipped (cannot listen on loopback: {e})"));
            return;
        }
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    let script = format!("exec 3<>/dev/tcp/127.0.0.1/{port}");
    match runner.run("bash", &[OsStr::new("-c"), OsStr::new(&script)]) {
        Ok(out) if !out.status.success() => {
            report.test(true, format!("a TCP connect to 127.0.0.1:{port} is blocked"));
        }
        Ok(_) => report.test(false, format!("a TCP connect to 127.0.0.1:{port} was NOT blocked")),
        Err(e) => report.test(false, format!("network: skipped (cannot run bash: {e})")),
    }
}
