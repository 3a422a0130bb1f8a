//! Bounded storage measured through the real pipeline: database bytes per 1 000 tool parts with about
//! 1 KB of output each, and a long streamed answer stored as one row rather than one per delta.
//! (The store's own suite checks that 10 000 in-place updates of one part do not grow the file.)

use codeloop_core::StopReason;
use codeloop_store::DiskUsage;
use codeloop_testkit::{Reply, Script, ScriptToolCall, Turn};
use serde_json::json;

use crate::harness::Harness;

const FILES: usize = 20;
const TURNS: usize = 50;

fn usage(h: &Harness) -> DiskUsage {
    // The engine only knows the Store trait; the SQLite file's own figures come from a second handle.
    let store = codeloop_store::SqliteStore::open(h.data.path()).unwrap();
    store.checkpoint().unwrap();
    store.disk_usage().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_read_parts_of_one_kilobyte_fit_in_five_megabytes() {
    // Measured: about 3.1 MB with 8 KiB pages (4.3 MB with the earlier 4 KiB pages, where each row of
    // 2–4 KB took a page of its own). Each part's JSON is about 2.6 KB: the output, plus
    // `metadata.preview` repeating its first 20 lines.
    // 50 steps of 20 parallel reads of different 1 KB files: 1 000 completed tool parts.
    let mut turns = Vec::new();
    for _ in 0..TURNS {
        let mut reply = Reply::default();
        for f in 0..FILES {
            reply =
                reply.with_call(ScriptToolCall::new("read", json!({ "filePath": format!("f{f:02}.txt") })));
        }
        turns.push(Turn::from(reply));
    }
    turns.push(Turn::from(Reply::text("Read them all.")));
    // The growing requests would pass the fake model's window: measure storage, not compaction.
    let h = Harness::with(Script::new(turns), |config| {
        config.compaction.prune = false;
        config.compaction.auto = false;
    })
    .await;
    for f in 0..FILES {
        let line = format!("{f:02} {}\n", "y".repeat(60));
        std::fs::write(h.project.path().join(format!("f{f:02}.txt")), line.repeat(16)).unwrap();
    }
    let before = usage(&h);
    let run = h.prompt("read every file fifty times").await;
    assert_eq!(run.outcome.stop, StopReason::Completed, "{:?}", run.outcome.message);
    let after = usage(&h);

    let parts: Vec<_> = h.history().into_iter().flat_map(|m| m.parts).collect();
    let tool_parts = parts.iter().filter(|p| p.as_tool().is_some()).count();
    assert_eq!(tool_parts, TURNS * FILES);
    let json: usize = parts.iter().map(|p| serde_json::to_string(p).unwrap().len()).sum();
    let output: usize = parts
        .iter()
        .filter_map(|p| match &p.as_tool()?.state {
            codeloop_types::ToolState::Completed(done) => Some(done.output.len()),
            _ => None,
        })
        .sum();
    let bytes = after.used_bytes() - before.used_bytes();
    let per_thousand_tool_parts = bytes * 1000 / tool_parts as u64;
    let per_thousand_parts = bytes * 1000 / parts.len() as u64;
    eprintln!(
        "storage: {} parts ({tool_parts} tool parts, {} B of tool output, {json} B of part JSON) took {bytes} B \
         of database: {per_thousand_tool_parts} B per 1 000 tool parts, {per_thousand_parts} B per 1 000 parts \
         of any kind; WAL after checkpoint {} B",
        parts.len(),
        output,
        after.wal_bytes
    );
    assert!(output / tool_parts >= 1_000, "each output is about 1 KB: {}", output / tool_parts);
    assert!(per_thousand_tool_parts < 5_000_000, "{per_thousand_tool_parts} B per 1 000 tool parts");
    assert!(bytes < 2 * json as u64, "{bytes} B of database for {json} B of JSON");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_streamed_deltas_are_stored_as_one_row_of_text() {
    let text = "abcd".repeat(20_000);
    let h = Harness::new(Script::new([Turn::from(Reply::text(text.clone()).with_text_chunks(20_000))])).await;
    let before = usage(&h);
    let outcome = h.prompt_unrecorded("write a lot").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    let after = usage(&h);
    let bytes = after.used_bytes() - before.used_bytes();
    eprintln!("storage: {} B of streamed text in 20 000 deltas took {bytes} B of database", text.len());
    assert!(bytes < 2 * text.len() as u64, "{bytes} B for {} B of text", text.len());
    let history = h.history();
    let texts: Vec<_> = history[1].parts.iter().filter_map(|p| p.as_text()).collect();
    assert_eq!(texts.len(), 1);
    assert_eq!(texts[0].text, text);
}

#[tokio::test]
async fn opening_the_engine_sweeps_spill_files_older_than_seven_days() {
    let data = tempfile::tempdir().unwrap();
    let spill = data.path().join("tool-output");
    std::fs::create_dir_all(&spill).unwrap();
    let old = spill.join("tool_old.txt");
    let fresh = spill.join("tool_fresh.txt");
    std::fs::write(&old, "old output").unwrap();
    std::fs::write(&fresh, "fresh output").unwrap();
    let eight_days = std::time::Duration::from_secs(8 * 24 * 3600);
    let file = std::fs::File::options().write(true).open(&old).unwrap();
    file.set_modified(std::time::SystemTime::now() - eight_days).unwrap();
    drop(file);

    let config = crate::harness::config_for("http://127.0.0.1:9/v1");
    let _engine =
        crate::harness::open_engine(data.path(), config, codeloop_core::permission::AskPolicy::Deny);
    // The sweep runs on a background thread: poll for it with a deadline.
    let started = std::time::Instant::now();
    while old.exists() && started.elapsed() < std::time::Duration::from_secs(10) {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(!old.exists(), "a spill file older than 7 days is removed");
    assert!(fresh.exists(), "a recent spill file is kept");
}
