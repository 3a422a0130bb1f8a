//! What `codeloop run` tells the user about provider faults: the retry line, and a clear error with exit
//! code 1 when it gives up, when the key is rejected, or when the context overflows with compaction off.

use codeloop_testkit::{Fault, Reply, Script, Turn};

use crate::support::{Env, Output};

async fn run_with_env(env: &Env, args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut command = env.command(args);
    for (name, value) in vars {
        command.env(name, value);
    }
    let output = tokio::time::timeout(crate::support::DEADLINE, command.output()).await.unwrap().unwrap();
    Output {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_is_announced_with_its_wait_attempt_and_reason() {
    let env =
        Env::new(Script::new([Turn::from(Fault::rate_limited(1)), Turn::from(Reply::text("Answered."))]))
            .await;
    let out = env.output(&["run", "hello"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("Answered."));
    let line = out
        .stderr
        .lines()
        .find(|l| l.starts_with("retrying in "))
        .unwrap_or_else(|| panic!("{}", out.stderr));
    assert!(line.ends_with("s (attempt 2/8): rate limited"), "{line}");
    assert_eq!(env.fake.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn giving_up_exits_1_and_says_after_how_many_attempts() {
    let mut turns: Vec<Turn> =
        (0..3).map(|_| Turn::from(Fault::status(503).header("retry-after-ms", "1"))).collect();
    turns.push(Turn::from(Reply::text("never sent")));
    let env = Env::with(Script::new(turns), 128_000, "[retry]\nmax_attempts = 3\n").await;
    let out = env.output(&["run", "hello"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("error: provider error (HTTP 503)"), "{}", out.stderr);
    assert!(out.stderr.contains("gave up after 3 attempts"), "{}", out.stderr);
    assert_eq!(env.fake.request_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_key_exits_1_naming_the_variable_without_retrying() {
    let env = Env::with(
        Script::new([Turn::from(Fault::unauthorized()), Turn::from(Reply::text("never sent"))]),
        128_000,
        "",
    )
    .await;
    // api_key_env goes into [provider.fake]: rewrite the config with it.
    let config = std::fs::read_to_string(&env.config).unwrap();
    let config = config
        .replace("api = \"openai-chat\"", "api = \"openai-chat\"\napi_key_env = \"CODELOOP_CRASH_KEY\"");
    std::fs::write(&env.config, config).unwrap();
    let out = run_with_env(&env, &["run", "hello"], &[("CODELOOP_CRASH_KEY", "sk-wrong")]).await;
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("check your API key in $CODELOOP_CRASH_KEY"), "{}", out.stderr);
    assert!(!out.stderr.contains("retrying"), "{}", out.stderr);
    assert_eq!(env.fake.request_count(), 1);
    assert_eq!(env.fake.requests()[0].header("authorization"), Some("Bearer sk-wrong"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overflow_with_compaction_off_exits_1_saying_how_to_compact() {
    let env = Env::with(
        Script::new([Turn::from(Fault::context_overflow()), Turn::from(Reply::text("never sent"))]),
        128_000,
        "[compaction]\nauto = false\n",
    )
    .await;
    let out = env.output(&["run", "hello"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("Run `codeloop session compact ses_"), "{}", out.stderr);
    assert_eq!(env.fake.request_count(), 1);
}
