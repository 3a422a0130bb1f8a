//! Per-call cost of the walls, one wall at a time: spawning and waiting for `true` directly; through the
//! helper in mode off (the subreaper that owns the tree); walled without the pids cgroup (user + mount +
//! PID namespaces, read-only binds, the init's own /proc, its hardening, Landlock); with the pids
//! cgroup too (every wall of a call); with the network closed (adds seccomp); and with two package
//! caches behind overlays and three masked directories. Target (DESIGN.md §7): ≤ 5 ms added per call
//! with every wall. `scripts/bench_sandbox.sh` runs it idle and under load.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use codeloop_sandbox::{CacheOverlay, NO_CGROUP_ENV, SandboxMode, SandboxPolicy, probe, wrap_command};
use criterion::{Criterion, criterion_group, criterion_main};

const HELPER: &str = env!("CARGO_BIN_EXE_codeloop-sandbox-helper");

fn run(mut cmd: Command) {
    let status = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status().unwrap();
    assert!(status.success());
}

fn walled(policy: &SandboxPolicy) -> Command {
    wrap_command(Path::new(HELPER), policy, OsStr::new("true"), &[])
}

fn overhead(c: &mut Criterion) {
    let project = tempfile::TempDir::new().unwrap();
    let temp = tempfile::TempDir::new().unwrap();
    let outside = tempfile::TempDir::new().unwrap();
    for protected in [".git", ".codeloop"] {
        std::fs::create_dir(project.path().join(protected)).unwrap();
    }
    std::fs::write(project.path().join("codeloop.toml"), "").unwrap();
    let mut policy = SandboxPolicy::new(project.path(), temp.path());
    policy.protected =
        ["codeloop.toml", ".codeloop", ".git"].iter().map(|p| project.path().join(p)).collect();
    let mut off = policy.clone();
    off.mode = SandboxMode::Off;
    let mut closed = policy.clone();
    closed.network = false;
    let mut layered = policy.clone();
    for name in ["cargo-registry", "npm"] {
        let cache = outside.path().join(name);
        std::fs::create_dir_all(&cache).unwrap();
        let state = outside.path().join("layers").join(name);
        layered.cache_overlays.push(CacheOverlay { path: cache, state });
    }
    for name in ["ssh", "aws", "config"] {
        let masked = outside.path().join(name);
        std::fs::create_dir_all(&masked).unwrap();
        layered.masked.push(masked);
    }
    eprintln!("walls here: {:?}", probe());

    let mut group = c.benchmark_group("spawn_true");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("direct", |b| b.iter(|| run(Command::new("true"))));
    group.bench_function("mode_off_subreaper", |b| b.iter(|| run(walled(&off))));
    group.bench_function("walled_without_cgroup", |b| {
        b.iter(|| {
            let mut cmd = walled(&policy);
            cmd.env(NO_CGROUP_ENV, "1");
            run(cmd)
        })
    });
    group.bench_function("walled", |b| b.iter(|| run(walled(&policy))));
    group.bench_function("walled_network_closed", |b| b.iter(|| run(walled(&closed))));
    group.bench_function("walled_overlays_and_masks", |b| b.iter(|| run(walled(&layered))));
    group.finish();
}

criterion_group!(benches, overhead);
criterion_main!(benches);
