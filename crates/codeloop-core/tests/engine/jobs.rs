//! Background jobs through the real pipeline (DESIGN.md §5f): `bash` with `run_in_background`, a server
//! that answers a later call, `bash_output` and `bash_kill`, the note a job's end leaves in the next
//! request, `max_jobs`, interrupts that leave jobs running, and a session's deletion that ends them.
//! (These engines have no walls' helper: the tree cases run against the real binary in the CLI tests.)

use std::time::Duration;

use codeloop_core::{CommandOutcome, SessionCommand, StopReason};
use codeloop_testkit::{Reply, Script, Turn};
use codeloop_types::{EventPayload, JobState, PartKind, ToolState};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::harness::{Harness, wait_for_event};

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The output of every finished tool call, in order.
fn outputs(h: &Harness) -> Vec<String> {
    h.tool_parts()
        .iter()
        .map(|p| match &p.as_tool().unwrap().state {
            ToolState::Completed(c) => c.output.clone(),
            ToolState::Error(e) => format!("ERROR: {}", e.error),
            other => format!("{other:?}"),
        })
        .collect()
}

fn bash_bg(command: &str) -> Turn {
    Turn::from(Reply::tool_call("bash", json!({"command": command, "run_in_background": true})))
}

#[tokio::test]
async fn a_background_server_answers_a_later_call_and_its_output_is_read_then_killed() {
    let port = free_port();
    let server = format!("exec python3 -u -m http.server {port} --bind 127.0.0.1");
    let fetch = format!(
        "python3 -c \"import time, urllib.request as u\nfor _ in range(200):\n  try:\n    print(u.urlopen('http://127.0.0.1:{port}/').status); break\n  except OSError: time.sleep(0.05)\""
    );
    let h = Harness::new(Script::new([
        bash_bg(&server),
        Turn::from(Reply::tool_call("bash", json!({"command": fetch}))),
        Turn::from(Reply::text("the server answers")),
    ]))
    .await;
    let mut events = h.engine.bus().subscribe();
    let outcome = h.prompt("start a server").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    let out = outputs(&h);
    assert!(out[0].contains("Started background job job_"), "{}", out[0]);
    assert!(out[1].starts_with("200"), "a later call reached the job's server: {}", out[1]);
    let started = wait_for_event(&mut events, |p| matches!(p, EventPayload::JobStarted { .. })).await;
    let EventPayload::JobStarted { job_id, session_id, command } = &started.payload else { unreachable!() };
    assert_eq!((session_id, command), (&h.session.id, &server));
    assert!(out[0].contains(job_id.as_str()), "the id is in the call's result");

    let jobs = h.engine.jobs(&h.session.id).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!((&jobs[0].id, jobs[0].state), (job_id, JobState::Running));

    h.fake.push(Reply::tool_call("bash_output", json!({"job_id": job_id, "filter": "GET /"})));
    h.fake.push(Reply::tool_call("bash_output", json!({"job_id": job_id})));
    h.fake.push(Reply::text("nothing new"));
    h.prompt("what did it log?").await;
    let out = outputs(&h);
    let read: Value = serde_json::from_str(&out[2]).unwrap();
    assert_eq!(read["state"], "running");
    assert!(read.get("exit_code").is_none(), "{read}");
    let log = read["output"].as_str().unwrap();
    assert!(log.contains("\"GET / HTTP/1.1\" 200"), "{log}");
    assert!(!log.contains("Serving HTTP"), "the filter keeps matching lines only: {log}");
    let again: Value = serde_json::from_str(&out[3]).unwrap();
    assert_eq!(again["output"], "", "only what came since the last read");

    h.fake.push(Reply::tool_call("bash_kill", json!({"job_id": job_id})));
    h.fake.push(Reply::text("stopped"));
    h.prompt("stop it").await;
    assert!(outputs(&h)[4].contains("was stopped"), "{}", outputs(&h)[4]);
    let ended = wait_for_event(&mut events, |p| matches!(p, EventPayload::JobExited { .. })).await;
    let EventPayload::JobExited { state, exit_code, .. } = &ended.payload else { unreachable!() };
    assert_eq!((*state, *exit_code), (JobState::Killed, None));
    let jobs = h.engine.jobs(&h.session.id).await.unwrap();
    assert_eq!(jobs[0].state, JobState::Killed);
    assert!(jobs[0].ended.is_some());
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "the server is gone");
}

#[tokio::test]
async fn a_jobs_end_is_noted_in_the_next_request() {
    let h = Harness::new(Script::new([
        // Held until the first prompt is answered, so its end falls between the two prompts.
        bash_bg("while [ ! -e go ]; do sleep 0.02; done; echo one; echo two; exit 3"),
        Turn::from(Reply::text("started")),
        Turn::from(Reply::text("noted")),
    ]))
    .await;
    let mut events = h.engine.bus().subscribe();
    h.prompt("run it").await;
    std::fs::write(h.project.path().join("go"), "").unwrap();
    let ended = wait_for_event(&mut events, |p| matches!(p, EventPayload::JobExited { .. })).await;
    let EventPayload::JobExited { job_id, state, exit_code, .. } = &ended.payload else { unreachable!() };
    assert_eq!((*state, *exit_code), (JobState::Exited, Some(3)));
    h.prompt("and now?").await;
    let messages = h.request_messages(2);
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user");
    let text = last["content"].to_string();
    assert!(
        text.contains(&format!("Background job {job_id} exited with code 3; 8 bytes of new output")),
        "{text}"
    );
    let first_of_run = &messages[messages.len() - 2];
    assert!(first_of_run["content"].to_string().contains("and now?"), "the note follows the prompt");
    // Recorded once: the request after it carries it where it was, and no second note.
    assert_eq!(h.engine.jobs(&h.session.id).await.unwrap()[0].exit_code, Some(3));
    let notes = h
        .history()
        .iter()
        .flat_map(|m| m.parts.clone())
        .filter(|p| matches!(&p.kind, PartKind::Text(t) if t.text.contains("<job-notes>")))
        .count();
    assert_eq!(notes, 1);
}

#[tokio::test]
async fn a_start_beyond_max_jobs_is_refused_naming_max_jobs() {
    let h = Harness::with(
        Script::new([bash_bg("sleep 30"), bash_bg("sleep 31"), Turn::from(Reply::text("one runs"))]),
        codeloop_core::permission::AskPolicy::Deny,
        |config| config.bash.max_jobs = 1,
    )
    .await;
    h.prompt("two servers").await;
    let out = outputs(&h);
    assert!(out[0].contains("job_"), "{}", out[0]);
    assert!(out[1].starts_with("ERROR: ") && out[1].contains("max_jobs"), "{}", out[1]);
    assert_eq!(h.engine.running_jobs(&h.session.id).len(), 1);
    h.engine.end_jobs().await;
    assert_eq!(h.engine.jobs(&h.session.id).await.unwrap()[0].state, JobState::Killed);
}

#[tokio::test]
async fn an_interrupt_ends_the_foreground_call_and_leaves_jobs_running_and_says_so() {
    let h = Harness::new(Script::new([
        bash_bg("sleep 30"),
        Turn::from(Reply::tool_call("bash", json!({"command": "sleep 30"}))),
        Turn::from(Reply::text("ok")),
    ]))
    .await;
    let mut events = h.engine.bus().subscribe();
    let (run, _) = h
        .start("go", |p| {
            matches!(p, EventPayload::PartUpdated { part, .. }
                if part.as_tool().is_some_and(|t| matches!(t.state, ToolState::Running(_)) && t.tool == "bash"
                    && t.state.input()["run_in_background"].is_null()))
        })
        .await;
    h.engine.submit(SessionCommand::Abort { session: h.session.id.clone() }).await.unwrap();
    assert_eq!(run.await.unwrap().stop, StopReason::Interrupted);
    let warning = wait_for_event(&mut events, |p| matches!(p, EventPayload::SessionWarning { .. })).await;
    let EventPayload::SessionWarning { message, .. } = &warning.payload else { unreachable!() };
    let running = h.engine.running_jobs(&h.session.id);
    assert_eq!(running.len(), 1, "the job keeps running");
    assert!(
        message.contains("1 background job still running") && message.contains(running[0].as_str()),
        "{message}"
    );
    h.engine.end_jobs().await;
}

#[tokio::test]
async fn deleting_a_session_ends_its_jobs_and_a_kill_command_answers_with_the_job() {
    let h = Harness::new(Script::new([bash_bg("sleep 30"), Turn::from(Reply::text("started"))])).await;
    h.prompt("go").await;
    let job = h.engine.jobs(&h.session.id).await.unwrap().remove(0);
    let unknown = SessionCommand::KillJob { session: h.session.id.clone(), job: "job_none".into() };
    let error = h.engine.submit(unknown).await.unwrap_err();
    assert!(error.to_string().contains("session jobs"), "{error}");
    let mut events = h.engine.bus().subscribe();
    let started = std::time::Instant::now();
    h.engine.delete_session(&h.session.id).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    let ended = wait_for_event(&mut events, |p| matches!(p, EventPayload::JobExited { .. })).await;
    let EventPayload::JobExited { job_id, state, .. } = &ended.payload else { unreachable!() };
    assert_eq!((job_id, *state), (&job.id, JobState::Killed));

    // A kill through the command, on another session.
    let session = h.engine.create_session(h.project.path(), None, None, None).await.unwrap();
    h.fake.push(bash_bg("sleep 30"));
    h.fake.push(Reply::text("started"));
    h.engine
        .prompt(&session.id, codeloop_core::PromptInput::text("go"), codeloop_core::Delivery::Queue)
        .await
        .unwrap();
    let job = h.engine.jobs(&session.id).await.unwrap().remove(0);
    let outcome = h
        .engine
        .submit(SessionCommand::KillJob { session: session.id.clone(), job: job.id.clone() })
        .await
        .unwrap();
    let CommandOutcome::Job(killed) = outcome else { panic!("{outcome:?}") };
    assert_eq!((killed.id, killed.state), (job.id, JobState::Killed));
}

/// The tool names request `n` offered.
fn offered(h: &Harness, n: usize) -> Vec<String> {
    h.fake.requests()[n].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn the_job_tools_are_offered_once_the_session_has_a_job_with_one_prefix_change() {
    let h = Harness::new(Script::new([
        Turn::from(Reply::tool_call("bash", json!({"command": "true"}))),
        bash_bg("sleep 30"),
        Turn::from(Reply::tool_call("bash", json!({"command": "true"}))),
        Turn::from(Reply::text("started")),
    ]))
    .await;
    let mut events = h.engine.bus().subscribe();
    assert_eq!(h.prompt("start it").await.stop, StopReason::Completed);
    let jobs = |n: usize| offered(&h, n).iter().filter(|t| t.starts_with("bash_")).count();
    assert_eq!((jobs(0), jobs(1)), (0, 0), "no job yet: {:?}", offered(&h, 0));
    assert_eq!((jobs(2), jobs(3)), (2, 2), "bash_output and bash_kill after: {:?}", offered(&h, 2));
    let mut changes = 0;
    while let Ok(event) = events.try_recv() {
        changes += usize::from(matches!(event.payload, EventPayload::SessionCache { .. }));
    }
    assert_eq!(changes, 1, "one recorded prefix change");
    h.engine.end_jobs().await;
}
