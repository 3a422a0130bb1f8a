//! What the running kernel offers: the Landlock ABI and whether an unprivileged user + mount namespace can be
//! made. Cheap and cached. It must not restrict the calling process: the one Landlock call it makes runs on
//! a throwaway thread.

use std::sync::OnceLock;

/// What the walls can use here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Support {
    /// `std::env::consts::OS`.
    pub platform: &'static str,
    /// The Landlock ABI the kernel offers (`None`: no Landlock, so no file-system or TCP walls).
    pub landlock_abi: Option<i32>,
    /// Whether a user + mount namespace can be made (for read-only protected paths and masks).
    pub user_namespaces: bool,
}

impl Support {
    /// Whether the file-system walls are enforced.
    pub fn landlock(&self) -> bool {
        self.landlock_abi.is_some()
    }
}

/// Set to `1`, the walls are put up without user namespaces, as on a kernel that refuses them (protected
/// paths checked after each call, the call's tree owned by a subreaper instead of a PID namespace).
pub const NO_USER_NAMESPACES_ENV: &str = "CODELOOP_SANDBOX_NO_USERNS";

/// Set to `1` (in the helper's environment), no pids cgroup is made, as on a machine without one: for
/// measuring what the cgroup costs and testing the bounds below it.
pub const NO_CGROUP_ENV: &str = "CODELOOP_SANDBOX_NO_CGROUP";

/// Probes once per process; later calls return the cached answer.
pub fn probe() -> Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    *SUPPORT.get_or_init(|| Support {
        platform: std::env::consts::OS,
        landlock_abi: landlock_abi(),
        user_namespaces: user_namespaces(),
    })
}

/// The landlock crate keeps its ABI query private (callers are meant to be best-effort, not to branch on the
/// version), and the raw syscall would need `unsafe`. Its restriction status reports the ABI, so a throwaway
/// thread restricts itself with a ruleset that only forbids making block devices and then ends; Landlock and
/// `no_new_privs` are per thread, so the rest of the process is untouched.
#[cfg(target_os = "linux")]
fn landlock_abi() -> Option<i32> {
    use landlock::{ABI, AccessFs, LandlockStatus, Ruleset, RulesetAttr};

    let status = std::thread::spawn(|| {
        Ruleset::default()
            .handle_access(AccessFs::MakeBlock)
            .and_then(|r| r.create())
            .and_then(|r| r.restrict_self())
            .ok()
            .map(|s| s.landlock)
    })
    .join()
    .ok()
    .flatten()?;
    match status {
        LandlockStatus::Available { effective_abi, kernel_abi } => {
            let effective = effective_abi as i32;
            (effective > ABI::Unsupported as i32).then_some(kernel_abi.unwrap_or(effective))
        }
        LandlockStatus::NotEnabled | LandlockStatus::NotImplemented => None,
    }
}

#[cfg(not(target_os = "linux"))]
fn landlock_abi() -> Option<i32> {
    None
}

/// `unshare(CLONE_NEWUSER)` fails in a multi-threaded process, so this cannot simply try it; it reads the
/// knobs distributions use to close unprivileged user namespaces instead. The helper still fails loudly if
/// the namespace cannot be made after all.
#[cfg(target_os = "linux")]
fn user_namespaces() -> bool {
    let read = |path: &str| std::fs::read_to_string(path).ok().map(|s| s.trim().to_owned());
    // The user may turn them off (a kernel that offers them but breaks in them; tests of the other path).
    if std::env::var_os(NO_USER_NAMESPACES_ENV).is_some_and(|v| v == "1") {
        return false;
    }
    if !std::path::Path::new("/proc/self/ns/user").exists() {
        return false;
    }
    if read("/proc/sys/user/max_user_namespaces").is_some_and(|v| v == "0") {
        return false;
    }
    let root = nix::unistd::geteuid().is_root();
    // Debian's switch and Ubuntu's AppArmor restriction only bind unprivileged users.
    if !root
        && (read("/proc/sys/kernel/unprivileged_userns_clone").is_some_and(|v| v == "0")
            || read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").is_some_and(|v| v == "1"))
    {
        return false;
    }
    true
}

#[cfg(not(target_os = "linux"))]
fn user_namespaces() -> bool {
    false
}
