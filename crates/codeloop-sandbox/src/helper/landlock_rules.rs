//! The Landlock ruleset of the helper: read and execute everywhere, write only under the writable paths of
//! the policy and a few devices, and (network off) no TCP bind/connect and no abstract UNIX sockets outside.
//! Best effort: the kernel's ABI decides which rights are handled. It must not fail because a path is
//! missing (those are skipped), and must fail when Landlock exists but the ruleset was not enforced.

use std::path::Path;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, LandlockStatus, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};

use crate::policy::SandboxPolicy;

/// The newest ABI this crate knows; best-effort compatibility lowers it to what the kernel offers.
const TARGET_ABI: ABI = ABI::V10;

/// Devices and shared-memory dirs tools need to write whatever the mode (DESIGN.md §5a). `/dev/pts` and
/// `/dev/ptmx` let a tool open a pseudo-terminal (`script`, expect-style tests).
const WRITABLE_DEVICES: [&str; 9] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/urandom",
    "/dev/random",
    "/dev/shm",
    "/dev/pts",
    "/dev/ptmx",
];

pub(super) fn restrict(policy: &SandboxPolicy) -> Result<(), String> {
    let status = build(policy)
        .and_then(|ruleset| ruleset.restrict_self().map_err(|e| e.to_string()))
        .map_err(|e| format!("cannot apply Landlock: {e}"))?;
    match (status.landlock, status.ruleset) {
        (LandlockStatus::Available { .. }, RulesetStatus::NotEnforced) => {
            Err("Landlock is available but the ruleset was not enforced".to_owned())
        }
        // No Landlock in this kernel: the parent's probe says so and the caller warns once per run.
        _ => Ok(()),
    }
}

fn build(policy: &SandboxPolicy) -> Result<RulesetCreated, String> {
    let text = |e: landlock::RulesetError| e.to_string();
    let all = AccessFs::from_all(TARGET_ABI);
    let mut ruleset =
        Ruleset::default().handle_access(all).and_then(|r| r.scope(Scope::Signal)).map_err(text)?;
    if !policy.network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(TARGET_ABI))
            .and_then(|r| r.scope(Scope::AbstractUnixSocket))
            .map_err(text)?;
    }
    let root = PathFd::new("/").map_err(|e| e.to_string())?;
    let mut created = ruleset
        .create()
        .and_then(|r| r.add_rule(PathBeneath::new(root, AccessFs::from_read(TARGET_ABI))))
        .map_err(text)?;
    let writable = policy.writable_paths().into_iter().chain(WRITABLE_DEVICES.iter().map(Path::new));
    for path in writable {
        if let Some(rule) = full_access(path, all) {
            created = created.add_rule(rule).map_err(text)?;
        }
    }
    Ok(created)
}

/// A rule granting `all` beneath `path`, narrowed to the rights a file can have when it is not a directory;
/// `None` when the path does not exist (Landlock needs an open file).
fn full_access(path: &Path, all: BitFlags<AccessFs>) -> Option<PathBeneath<PathFd>> {
    let meta = std::fs::metadata(path).ok()?;
    let fd = PathFd::new(path).ok()?;
    let access = if meta.is_dir() { all } else { all & AccessFs::from_file(TARGET_ABI) };
    Some(PathBeneath::new(fd, access))
}
