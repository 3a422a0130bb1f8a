//! What a background job costs over a foreground call (DESIGN.md §5f: ≤ 5 ms): one run whose single tool
//! call is `bash true`, in the foreground and with `run_in_background`, against the fake provider over
//! HTTP. The difference of the two is the job's start (its recorder, ring and saved file included).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use codeloop_core::{Delivery, PromptInput};
use codeloop_testkit::{FakeProvider, Recording, Reply, Script, Turn};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let fake = |arguments: serde_json::Value| {
        runtime
            .block_on(FakeProvider::start_with(
                "127.0.0.1:0".parse().unwrap(),
                Script::new([Turn::from(Reply::tool_call("bash", arguments)), Turn::from(Reply::text("ok"))])
                    .repeating(),
                Recording::CountOnly,
            ))
            .unwrap()
    };
    let foreground = fake(json!({"command": "true"}));
    let background = fake(json!({"command": "true", "run_in_background": true}));
    let data = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let mut group = c.benchmark_group("bash_call");
    group.sample_size(20);
    for (name, fake) in [("foreground", &foreground), ("run_in_background", &background)] {
        let mut config = common::config(&fake.base_url());
        config.bash.max_jobs = usize::MAX;
        let mut options = codeloop_core::EngineOptions::new(data.path().join(name), config);
        options.ask_policy = codeloop_core::permission::AskPolicy::Allow;
        options.env = std::sync::Arc::new(|_| None);
        options.skill_dirs = Some(Vec::new());
        let engine = codeloop_core::Engine::open(options).unwrap();
        group.bench_function(name, |b| {
            b.iter_batched(
                || runtime.block_on(engine.create_session(project.path(), None, None, None)).unwrap().id,
                |session| {
                    runtime.block_on(async {
                        engine.prompt(&session, PromptInput::text("go"), Delivery::Queue).await.unwrap();
                    })
                },
                criterion::BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
