//! SIGINT and SIGTERM end a run cleanly: the process itself settles everything before it exits (the file
//! has nothing open for recovery to fix), kills the `bash` process group, and SIGINT exits with 130.

use std::time::{Duration, Instant};

use codeloop_testkit::{Reply, Script, Turn};
use serde_json::json;

use crate::support::{
    Env, assert_continue_works, integrity, is_tool_in, left_open, marker, messages, poll_until,
    processes_with, stored_text,
};

/// Interrupts a run while `bash` sleeps; returns the exit code.
async fn interrupt_bash(signal: &str) -> Option<i32> {
    let marker = marker(&format!("sig{signal}"));
    let command = format!("(exec -a {marker} sleep 30); echo done");
    let env = Env::new(Script::new([
        Turn::from(Reply::tool_call("bash", json!({ "command": command })).with_text("Running it.")),
        Turn::from(Reply::text("It was interrupted.")),
    ]))
    .await;
    let mut run = env.spawn_run(&["run the slow command"]);
    run.until("the bash call running", |e| is_tool_in(e, "running")).await;
    assert!(poll_until(|| processes_with(&marker).len() >= 2).await, "bash never started its child");
    let sent = Instant::now();
    run.signal(signal);
    let status = run.wait().await;
    let took = sent.elapsed();
    assert!(took < Duration::from_secs(5), "SIG{signal} took {took:?} to end the run");
    assert!(
        poll_until(|| processes_with(&marker).is_empty()).await,
        "the bash process group outlived SIG{signal}"
    );

    let db = env.db_path();
    assert_eq!(integrity(&db), "ok");
    let open = left_open(&db);
    assert!(open.tool_parts.is_empty() && open.messages.is_empty(), "cleanup left {open:?} for recovery");
    let export = env.export(&run.session()).await;
    let all = messages(&export);
    let answer = all.iter().find(|m| m["info"]["role"] == "assistant").unwrap();
    assert_eq!(answer["info"]["error"]["name"], "Aborted", "{}", answer["info"]);
    assert!(answer["info"]["time"]["completed"].is_i64());
    let tool = answer["parts"].as_array().unwrap().iter().find(|p| p["type"] == "tool").unwrap();
    assert_eq!(tool["state"]["status"], "error", "{tool}");
    assert_eq!(tool["state"]["metadata"]["interrupted"], true, "{tool}");
    assert_continue_works(&env, "what happened?").await;
    status.code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_during_bash_exits_130_after_cleanup() {
    assert_eq!(interrupt_bash("INT").await, Some(130));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_bash_ends_the_run_after_cleanup() {
    let code = interrupt_bash("TERM").await;
    assert_eq!(code, Some(143), "128 + SIGTERM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_while_text_streams_keeps_every_delta_it_showed() {
    let text: String = (0..100).map(|i| format!("w{i:03}. ")).collect();
    // Four seconds of stream: under a loaded test machine the terminal may lag the server by more than a
    // second, and a run that had already ended would rightly exit 0.
    let env = Env::new(Script::new([
        Turn::from(Reply::text(text).with_text_chunks(100).with_chunk_delay_ms(40)),
        Turn::from(Reply::text("Continuing.")),
    ]))
    .await;
    let mut run = env.spawn_run(&["tell a story"]);
    run.until_deltas(10).await;
    run.signal("INT");
    let status = run.wait().await;
    assert_eq!(status.code(), Some(130));

    let db = env.db_path();
    let open = left_open(&db);
    assert!(open.tool_parts.is_empty() && open.messages.is_empty(), "cleanup left {open:?} for recovery");
    let deltas = run.deltas();
    let part = deltas[0].1.clone();
    let shown: String = deltas.iter().filter(|d| d.1 == part).map(|d| d.2.as_str()).collect();
    assert_eq!(stored_text(&db, &part).unwrap(), shown, "every delta shown is stored");
    let export = env.export(&run.session()).await;
    let answer = messages(&export).into_iter().find(|m| m["info"]["role"] == "assistant").unwrap();
    assert_eq!(answer["info"]["error"]["name"], "Aborted");
    let text_part = answer["parts"].as_array().unwrap().iter().find(|p| p["type"] == "text").unwrap().clone();
    assert!(text_part["time"]["end"].is_i64(), "the text part is closed: {text_part}");
    assert_continue_works(&env, "go on").await;
}
