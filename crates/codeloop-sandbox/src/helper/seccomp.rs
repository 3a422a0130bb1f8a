//! The seccomp filter for `network = false`: `socket()` with any family but AF_UNIX fails with EACCES, and
//! io_uring (which can create sockets without calling `socket()`) is refused. Landlock only covers TCP on
//! the kernels we target; this closes UDP, raw and other families. It must not touch any other syscall.

use std::collections::BTreeMap;

use nix::libc;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};

pub(super) fn deny_sockets() -> Result<(), String> {
    let program = filter().map_err(|e| format!("cannot build the network filter: {e}"))?;
    seccompiler::apply_filter(&program).map_err(|e| format!("cannot apply the network filter: {e}"))
}

fn filter() -> Result<BpfProgram, String> {
    build_filter()?.try_into().map_err(|e: seccompiler::BackendError| e.to_string())
}

fn build_filter() -> Result<SeccompFilter, String> {
    let text = |e: seccompiler::BackendError| e.to_string();
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(text)?;
    let not_unix = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, libc::AF_UNIX as u64)
        .and_then(|c| SeccompRule::new(vec![c]))
        .map_err(text)?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_socket, vec![not_unix.clone()]);
    // An empty rule list matches unconditionally.
    rules.insert(libc::SYS_io_uring_setup, Vec::new());
    // x32 syscalls carry the same audit arch as x86_64 but their own numbers; cover them where x32 exists.
    #[cfg(target_arch = "x86_64")]
    {
        const X32_SYSCALL_BIT: i64 = 0x4000_0000;
        rules.insert(X32_SYSCALL_BIT | libc::SYS_socket, vec![not_unix]);
        rules.insert(X32_SYSCALL_BIT | libc::SYS_io_uring_setup, Vec::new());
    }
    SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EACCES as u32), arch)
        .map_err(text)
}
