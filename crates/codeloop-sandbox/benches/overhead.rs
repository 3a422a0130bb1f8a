//! Per-call cost of the walls: spawning and waiting for `true` directly, and through the helper in
//! workspace-write with the three protected paths (namespace + bind mounts + Landlock), with the network
//! open and closed (adds seccomp). Target: ≤ 2 ms added per call (issue 11).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use codeloop_sandbox::{SandboxPolicy, probe, wrap_command};
use criterion::{Criterion, criterion_group, criterion_main};

const HELPER: &str = env!("CARGO_BIN_EXE_codeloop-sandbox-helper");

fn run(mut cmd: Command) {
    let status = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status().unwrap();
    assert!(status.success());
}

fn overhead(c: &mut Criterion) {
    let project = tempfile::TempDir::new().unwrap();
    let temp = tempfile::TempDir::new().unwrap();
    for protected in [".git", ".codeloop"] {
        std::fs::create_dir(project.path().join(protected)).unwrap();
    }
    std::fs::write(project.path().join("codeloop.toml"), "").unwrap();
    let mut policy = SandboxPolicy::new(project.path(), temp.path());
    policy.protected =
        ["codeloop.toml", ".codeloop", ".git"].iter().map(|p| project.path().join(p)).collect();
    let mut closed = policy.clone();
    closed.network = false;
    eprintln!("walls here: {:?}", probe());

    let mut group = c.benchmark_group("spawn_true");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("direct", |b| b.iter(|| run(Command::new("true"))));
    group.bench_function("workspace_write", |b| {
        b.iter(|| run(wrap_command(Path::new(HELPER), &policy, OsStr::new("true"), &[])))
    });
    group.bench_function("workspace_write_network_closed", |b| {
        b.iter(|| run(wrap_command(Path::new(HELPER), &closed, OsStr::new("true"), &[])))
    });
    group.finish();
}

criterion_group!(benches, overhead);
criterion_main!(benches);
