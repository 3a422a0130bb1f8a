//! Snapshots in a real git project: each step's changed files become a `patch` part, and a session can
//! be reverted to a message and back.

use codeloop_core::StopReason;
use codeloop_testkit::{Reply, Script, Turn};
use codeloop_types::PartKind;
use serde_json::json;

use crate::harness::Harness;

fn git_init(path: &std::path::Path) -> bool {
    std::process::Command::new("git").arg("init").arg("-q").arg(path).status().is_ok_and(|s| s.success())
}

#[tokio::test]
async fn steps_record_patches_and_a_revert_restores_the_files() {
    let h = Harness::new(Script::new([
        Turn::from(Reply::tool_call("write", json!({"filePath": "notes.txt", "content": "v2\n"}))),
        Turn::from(Reply::text("Rewrote notes.txt.")),
        Turn::from(Reply::text("Starting over.")),
    ]))
    .await;
    assert!(git_init(h.project.path()), "snapshots need git: install it (.ci/run does)");
    h.write("notes.txt", "v1\n");
    assert_eq!(h.prompt("rewrite notes.txt").await.stop, StopReason::Completed);
    assert_eq!(h.read("notes.txt"), "v2\n");

    let history = h.history();
    let patch = history
        .iter()
        .flat_map(|m| &m.parts)
        .find_map(|p| match &p.kind {
            PartKind::Patch(patch) => Some(patch.clone()),
            _ => None,
        })
        .expect("the step that wrote the file has a patch part");
    assert_eq!(patch.files.len(), 1);
    assert!(patch.files[0].ends_with("notes.txt"));
    let step_start = history[1].parts.iter().find_map(|p| match &p.kind {
        PartKind::StepStart(s) => s.snapshot.clone(),
        _ => None,
    });
    assert_eq!(step_start.as_deref(), Some(patch.hash.as_str()));

    // Revert to the first user message: the file goes back, the messages are hidden.
    let first = history[0].info.id().clone();
    // Not while another process (another `codeloop`, another worker) runs the session: nothing changes.
    // (A lock just released can look held for a moment while another test forks a child: polled.)
    let elsewhere = (0..100)
        .find_map(|_| {
            let lock = h.engine.store().lock_session(&h.session.id).ok();
            if lock.is_none() {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            lock
        })
        .expect("the session's lock is free once its run ended");
    let refused = h.engine.revert(&h.session.id, &first).await;
    assert!(matches!(refused, Err(codeloop_core::EngineError::Busy { .. })), "{refused:?}");
    assert_eq!(h.read("notes.txt"), "v2\n");
    drop(elsewhere);
    let session = h.engine.revert(&h.session.id, &first).await.unwrap();
    assert!(session.revert.is_some());
    assert_eq!(h.read("notes.txt"), "v1\n");

    // Unrevert brings the change back; revert again, then a new prompt drops the hidden messages.
    h.engine.unrevert(&h.session.id).await.unwrap();
    assert_eq!(h.read("notes.txt"), "v2\n");
    h.engine.revert(&h.session.id, &first).await.unwrap();
    assert_eq!(h.read("notes.txt"), "v1\n");
    assert_eq!(h.prompt("start over").await.stop, StopReason::Completed);
    let history = h.history();
    assert_eq!(history.len(), 2, "only the new turn remains: {history:#?}");
    assert!(h.engine.session(&h.session.id).await.unwrap().revert.is_none());
    let sent = h.request_messages(2);
    assert!(!serde_json::Value::Array(sent.clone()).to_string().contains("rewrite notes.txt"), "{sent:?}");
}

#[tokio::test]
async fn a_revert_names_the_calls_that_acted_outside_the_project_files() {
    let h = Harness::with(
        Script::new([
            Turn::from(Reply::tool_call("write", json!({"filePath": "notes.txt", "content": "v2\n"}))),
            Turn::from(Reply::tool_call("bash", json!({"command": "echo deployed > /dev/null"}))),
            Turn::from(Reply::tool_call("read", json!({"filePath": "notes.txt"}))),
            Turn::from(Reply::text("Done.")),
        ]),
        codeloop_core::permission::AskPolicy::Allow,
        |_| {},
    )
    .await;
    assert!(git_init(h.project.path()), "snapshots need git: install it (.ci/run does)");
    h.write("notes.txt", "v1\n");
    assert_eq!(h.prompt("write, deploy, check").await.stop, StopReason::Completed);
    let first = h.history()[0].info.id().clone();
    let session = h.engine.revert(&h.session.id, &first).await.unwrap();
    assert_eq!(h.read("notes.txt"), "v1\n", "the project file is put back");
    let not_undone = &session.revert.unwrap().not_undone;
    let tools: Vec<&str> = not_undone.iter().map(|c| c.tool.as_str()).collect();
    assert_eq!(tools, ["bash"], "only the command, not the write or the read: {not_undone:?}");
    assert!(not_undone[0].title.contains("echo deployed") && not_undone[0].time > 0, "{not_undone:?}");
}
