//! Watchdogs (issue 6 §2): a provider that never answers hits the headers timeout and is retried within
//! the bounds; a `bash` call times out and its whole process group dies; a command that ignores SIGTERM
//! cannot wedge an abort (the 250 ms cleanup rule), and is killed anyway.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use codeloop_core::config::RetryConfig;
use codeloop_core::{Delivery, PromptInput, StopReason};
use codeloop_testkit::{Reply, Script, Turn};
use codeloop_types::{EventPayload, ToolState};
use serde_json::json;
use tokio::net::TcpListener;

use crate::checks::{assert_consistent, tool_results};
use crate::harness::{Harness, fake_provider};

/// Live processes whose command line contains `marker`.
fn processes_with(marker: &str) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let zombie = stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'));
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            !zombie && String::from_utf8_lossy(&cmdline).contains(marker)
        })
        .count()
}

/// Polls `condition` every 20 ms for up to `limit`.
async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    condition()
}

fn marker(name: &str) -> String {
    format!("watchdog-{name}-{}-{}", std::process::id(), codeloop_types::now_ms())
}

#[tokio::test]
async fn a_provider_that_never_sends_headers_times_out_and_is_retried_within_the_bound() {
    // Accepts connections and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(socket);
        }
    });
    let h = Harness::with(Script::new([Turn::from(Reply::text("never used"))]), |config| {
        let provider = fake_provider(config);
        provider.base_url = Some(url);
        provider.headers_timeout_ms = Some(300);
        config.retry = RetryConfig { max_attempts: 2, ..RetryConfig::default() };
    })
    .await;
    let run = h.prompt("hello").await;
    let StopReason::Error(error) = &run.outcome.stop else { panic!("{:?}", run.outcome.stop) };
    assert!(error.message().contains("no response from the provider within 300ms"), "{error:?}");
    assert!(error.message().contains("gave up after 2 attempts"), "{error:?}");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    assert_eq!(run.retry_attempts(), vec![(2, "no response".to_owned())]);
}

#[tokio::test]
async fn a_bash_timeout_kills_the_whole_process_group() {
    let marker = marker("timeout");
    // A background grandchild and a foreground sleep, both in the command's process group.
    let command = format!("(exec -a {marker} sleep 30) & (exec -a {marker} sleep 30)");
    let h = Harness::new(Script::new([
        Turn::from(Reply::tool_call("bash", json!({ "command": command, "timeout": 300 }))),
        Turn::from(Reply::text("It timed out.")),
    ]))
    .await;
    let run = h.prompt("run it").await;
    assert_eq!(run.outcome.stop, StopReason::Completed);
    assert!(run.elapsed < Duration::from_secs(5), "{:?}", run.elapsed);
    let results = tool_results(&h.bodies()[1]);
    assert!(results[0].1.contains("exceeding timeout 300 ms"), "{results:?}");
    assert!(
        eventually(Duration::from_secs(5), || processes_with(&marker) == 0).await,
        "the group outlived the timeout"
    );
    assert_consistent(&h.history(), &h.bodies());
}

#[tokio::test]
async fn a_command_ignoring_sigterm_cannot_wedge_an_abort() {
    let marker = marker("stubborn");
    let command = format!("trap '' TERM INT; (trap '' TERM INT; exec -a {marker} sleep 30) & wait; wait");
    let h = Harness::new(Script::new([
        Turn::from(Reply::tool_call("bash", json!({ "command": command }))),
        Turn::from(Reply::text("never sent")),
    ]))
    .await;
    let mut events = h.engine.bus().subscribe();
    let engine = h.engine.clone();
    let session = h.session.id.clone();
    let run = tokio::spawn(async move {
        engine.prompt(&session, PromptInput::text("run"), Delivery::Queue).await.unwrap()
    });
    loop {
        let event = events.recv().await.unwrap();
        if let EventPayload::PartUpdated { part, .. } = &event.payload
            && part.as_tool().is_some_and(|t| matches!(t.state, ToolState::Running(_)))
        {
            break;
        }
    }
    assert!(eventually(Duration::from_secs(5), || processes_with(&marker) >= 1).await);
    let started = Instant::now();
    h.engine.abort(&h.session.id).await;
    let took = started.elapsed();
    assert_eq!(run.await.unwrap().stop, StopReason::Interrupted);
    // The 250 ms cleanup wait, not the 2 s SIGTERM grace the command sits out.
    assert!(took < Duration::from_millis(1_500), "abort took {took:?}");
    h.engine.flush().await.unwrap();
    let history = h.history();
    let tool = history[1].parts.iter().find_map(|p| p.as_tool()).unwrap();
    assert!(tool.state.is_interrupted(), "{:?}", tool.state);
    // SIGKILL follows the grace period.
    assert!(
        eventually(Duration::from_secs(6), || processes_with(&marker) == 0).await,
        "the group outlived SIGKILL"
    );
    assert_consistent(&history, &h.bodies());
}
