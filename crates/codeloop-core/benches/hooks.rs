//! What a hook adds to an event (DESIGN.md §7: ≤ 5 ms per matching command hook, process start
//! included; nothing when none matches): one firing of a matching `sh -c true` command hook with its
//! input on stdin and its transcript file, and a firing where no hook matches.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codeloop_core::hooks::{HookEnv, HookEvent, HookLayer, HookSource, Hooks, HooksSettings, fire};
use codeloop_types::SessionId;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

fn hooks(toml: &str) -> Hooks {
    let settings: HooksSettings = toml::from_str(toml).unwrap();
    Hooks::compile(&[HookLayer { source: HookSource::User, path: "bench.toml".into(), settings }])
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let project = tempfile::tempdir().unwrap();
    let env = HookEnv {
        session_id: SessionId::new(),
        project_dir: project.path().to_owned(),
        bus: None,
        store: None,
        permission_mode: "default",
        transcripts: None,
        env_file: None,
        writer: None,
        prompt_id: None,
        effort: None,
    };
    let matching = hooks("[[PreToolUse]]\nmatcher = \"Bash\"\n[[PreToolUse.hooks]]\ncommand = \"true\"\n");
    let other_tool = hooks("[[PreToolUse]]\nmatcher = \"Edit\"\n[[PreToolUse.hooks]]\ncommand = \"true\"\n");
    let other_event = hooks("[[Stop]]\n[[Stop.hooks]]\ncommand = \"true\"\n");
    let input = || json!({"tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "call_1"});
    let mut group = c.benchmark_group("hooks");
    group.bench_function("matching_command_hook", |b| {
        b.iter(|| runtime.block_on(fire(&matching, HookEvent::PreToolUse, &["Bash", "bash"], input(), &env)))
    });
    group.bench_function("no_matching_tool", |b| {
        b.iter(|| std::hint::black_box(other_tool.matches(HookEvent::PreToolUse, &["Bash", "bash"])))
    });
    group.bench_function("no_hook_for_event", |b| {
        b.iter(|| std::hint::black_box(other_event.any(HookEvent::PreToolUse)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
