//! Two `codeloop` processes on one data dir: reads and runs of other sessions never see "database is
//! locked"; a second run of the same session is refused with a clear message while the first holds it,
//! and accepted once the first exits or is killed (the session lock is an OS file lock).

use codeloop_testkit::{Reply, Script, Turn};

use crate::support::{Env, Running, is_delta};

fn slow_answer() -> Turn {
    let text: String = (0..100).map(|i| format!("w{i:03}. ")).collect();
    Turn::from(Reply::text(text).with_text_chunks(100).with_chunk_delay_ms(15))
}

fn assert_not_locked(stderr: &str) {
    assert!(!stderr.to_lowercase().contains("database is locked"), "{stderr}");
}

/// Starts a slow run and waits until it streams (so it holds its session and writes as we go).
async fn slow_run(env: &Env) -> Running {
    let mut run = env.spawn_run(&["tell a story"]);
    run.until("the first delta", is_delta).await;
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_and_running_another_session_while_a_run_writes_never_hit_a_locked_database() {
    let env = Env::new(Script::new([slow_answer(), Turn::from(Reply::text("Second session."))])).await;
    let mut first = slow_run(&env).await;
    let session = first.session();
    for _ in 0..5 {
        let list = env.output(&["session", "list", "--format", "json"]).await;
        assert!(list.status.success(), "session list failed: {}", list.stderr);
        assert_not_locked(&list.stderr);
        assert!(list.stdout.contains(&session), "the running session is listed");
        let export = env.output(&["session", "export", &session]).await;
        assert!(export.status.success(), "{}", export.stderr);
        assert_not_locked(&export.stderr);
    }
    let second = env.output(&["run", "answer in another session"]).await;
    assert!(second.status.success(), "a run on another session failed: {}", second.stderr);
    assert_not_locked(&second.stderr);
    assert!(second.stdout.contains("Second session."));
    let status = first.wait().await;
    assert!(status.success(), "the first run failed: {}", first.stderr());
    assert_not_locked(&first.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_of_the_same_session_is_refused_until_the_first_exits() {
    let env = Env::new(Script::new([slow_answer(), Turn::from(Reply::text("After the first."))])).await;
    let mut first = slow_run(&env).await;
    let session = first.session();
    let refused = env.output(&["run", "--session", &session, "me too"]).await;
    assert_eq!(refused.status.code(), Some(1), "{}", refused.stderr);
    assert!(
        refused.stderr.contains(&session) && refused.stderr.contains("already running"),
        "the refusal says the session is busy: {}",
        refused.stderr
    );
    assert_eq!(env.fake.request_count(), 1, "the refused run sent nothing");
    assert!(first.wait().await.success());

    let after = env.output(&["run", "--session", &session, "now?"]).await;
    assert!(after.status.success(), "{}", after.stderr);
    assert!(after.stdout.contains("After the first."));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_run_releases_its_session_at_once() {
    let env = Env::new(Script::new([slow_answer(), Turn::from(Reply::text("Recovered."))])).await;
    let mut first = slow_run(&env).await;
    let session = first.session();
    let refused = env.output(&["run", "--session", &session, "me too"]).await;
    assert!(!refused.status.success());
    first.kill9();
    first.wait().await;

    let after = env.output(&["run", "--session", &session, "still there?"]).await;
    assert!(after.status.success(), "{}", after.stderr);
    assert!(after.stdout.contains("Recovered."));
    crate::support::assert_paired(&env.bodies());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_streaming_fast_and_a_lister_share_the_database_without_lock_errors() {
    let fast = || Turn::from(Reply::text("abcd".repeat(10_000)).with_text_chunks(10_000));
    let env = Env::new(Script::new([fast(), fast()])).await;
    let mut first = env.spawn_run(&["write a lot"]);
    let mut second = env.spawn_run(&["write a lot too"]);
    first.until("the first delta", is_delta).await;
    second.until("the first delta", is_delta).await;
    for _ in 0..5 {
        let list = env.output(&["session", "list"]).await;
        assert!(list.status.success(), "{}", list.stderr);
        assert_not_locked(&list.stderr);
    }
    for run in [&mut first, &mut second] {
        let status = run.wait().await;
        assert!(status.success(), "{}", run.stderr());
        assert_not_locked(&run.stderr());
    }
    assert_ne!(first.session(), second.session());
    for run in [&first, &second] {
        let export = env.export(&run.session()).await;
        let text: String = crate::support::messages(&export)
            .iter()
            .flat_map(|m| m["parts"].as_array().cloned().unwrap_or_default())
            .filter(|p| p["type"] == "text" && p["message_id"] != export["messages"][0]["info"]["id"])
            .map(|p| p["text"].as_str().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(text.len(), 40_000, "each answer is stored whole");
    }
}
