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
