//! Language servers through the real pipeline (DESIGN.md §5n): an edit's result carries the errors it
//! caused, a fix clears them, the `lsp` tool navigates, and broken servers become notes, never a failed
//! or hung edit. Real servers (`pylsp`, `basedpyright` from PyPI, installed by `.ci/run`) are found on
//! `CODELOOP_TEST_LSP_PATH` or `PATH`; a test whose server is missing is skipped unless
//! `CODELOOP_REQUIRE_LSP=1`.

use std::path::PathBuf;

use codeloop_core::StopReason;
use codeloop_core::lsp::LspServerSettings;
use codeloop_core::permission::AskPolicy;
use codeloop_testkit::{Reply, Script, Turn};
use serde_json::json;

use crate::harness::{Harness, state, tool_results};

fn program(name: &str) -> Option<PathBuf> {
    let dirs = std::env::var_os("CODELOOP_TEST_LSP_PATH").into_iter().chain(std::env::var_os("PATH"));
    let found = dirs
        .flat_map(|d| std::env::split_paths(&d).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file());
    if found.is_none() && std::env::var("CODELOOP_REQUIRE_LSP").as_deref() == Ok("1") {
        panic!("{name} is required (CODELOOP_REQUIRE_LSP=1) but not found");
    }
    found
}

fn server(command: Vec<String>, extensions: &[&str]) -> LspServerSettings {
    LspServerSettings {
        command,
        extensions: extensions.iter().map(|e| e.to_string()).collect(),
        ..Default::default()
    }
}

fn fake_lsp(mode: &str) -> Vec<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/engine/fixtures/fake_lsp.py");
    let python = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join("python3"))
        .find(|p| p.is_file())
        .expect("python3 on PATH");
    vec![python.display().to_string(), script.into(), mode.into()]
}

fn offered(h: &Harness, request: usize) -> Vec<String> {
    h.fake.requests()[request].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn an_edit_gets_the_error_it_caused_and_the_fix_clears_it() {
    let Some(pylsp) = program("pylsp") else { return };
    let h = Harness::with(
        Script::new([
            Turn::from(Reply::tool_call(
                "edit",
                json!({"filePath": "app.py", "oldString": "return 1", "newString": "return undefined_name"}),
            )),
            Turn::from(Reply::text("broke it")),
            Turn::from(Reply::tool_call(
                "edit",
                json!({"filePath": "app.py", "oldString": "return undefined_name", "newString": "return 2"}),
            )),
            Turn::from(Reply::text("fixed it")),
            // A command breaks the file behind the server's back: the command's result says so.
            Turn::from(Reply::tool_call(
                "bash",
                json!({"command": "printf 'def main():\\n    return gone\\n' > app.py"}),
            )),
            Turn::from(Reply::text("broke it again")),
        ]),
        AskPolicy::Allow,
        |config| {
            // Bounded waits that end when the diagnostics come: generous, so a loaded machine cannot flake.
            (config.lsp.start_wait_ms, config.lsp.wait_ms) = (Some(60_000), Some(30_000));
            config.lsp.servers.insert("pylsp".into(), server(vec![pylsp.display().to_string()], &["py"]));
        },
    )
    .await;
    h.write("app.py", "def main():\n    return 1\n");
    // Nothing runs before a file is touched: the tools are not offered.
    assert_eq!(h.prompt("break it").await.stop, StopReason::Completed);
    assert!(!offered(&h, 0).contains(&"lsp".to_owned()));
    let (_, result) = tool_results(&h.request_messages(1)).remove(0);
    assert_eq!(
        result,
        "Edit applied successfully.\n\n<diagnostics>\napp.py:2:12 error undefined name 'undefined_name'\n</diagnostics>"
    );
    let parts = h.tool_parts();
    let codeloop_types::ToolState::Completed(done) = state(&parts[0]) else { panic!("not completed") };
    assert_eq!(done.metadata["diagnostics"][0]["line"], 2);
    assert_eq!(done.metadata["diagnostics"][0]["severity"], "error");

    assert_eq!(h.prompt("fix it").await.stop, StopReason::Completed);
    // The server runs now: its tools are offered.
    let tools = offered(&h, 2);
    assert!(tools.contains(&"lsp".to_owned()) && tools.contains(&"diagnostics".to_owned()), "{tools:?}");
    let (_, result) = tool_results(&h.request_messages(3)).pop().unwrap();
    assert_eq!(result, "Edit applied successfully.");
    assert_eq!(h.prompt("break it with a command").await.stop, StopReason::Completed);
    let (_, result) = tool_results(&h.request_messages(5)).pop().unwrap();
    assert!(
        result.ends_with("<diagnostics>\napp.py:2:12 error undefined name 'gone'\n</diagnostics>"),
        "{result}"
    );
    let status = h.engine.services().lsp.status();
    let pylsp = status.iter().find(|s| s.name == "pylsp").unwrap();
    assert_eq!(pylsp.state, "running");
    assert!(pylsp.pid.is_some());
}

#[tokio::test]
async fn the_lsp_tool_finds_definitions_references_and_renames_without_changing_files() {
    let Some(pyright) = program("basedpyright-langserver") else { return };
    let h = Harness::with(
        Script::new([
            Turn::from(Reply::tool_call("write", json!({"filePath": "lib.py", "content": "def greet(name: str) -> str:\n    return 'hi ' + name\n"}))),
            Turn::from(Reply::tool_call("lsp", json!({"operation": "definition", "path": "app.py", "line": 3, "character": 7}))),
            Turn::from(Reply::tool_call("lsp", json!({"operation": "references", "path": "lib.py", "line": 1, "character": 5}))),
            Turn::from(Reply::tool_call("lsp", json!({"operation": "rename", "path": "lib.py", "line": 1, "character": 5, "new_name": "welcome"}))),
            Turn::from(Reply::tool_call("lsp", json!({"operation": "symbols", "path": "lib.py"}))),
            Turn::from(Reply::text("done")),
        ]),
        AskPolicy::Allow,
        |config| {
            config.lsp.servers.insert(
                "basedpyright".into(),
                server(vec![pyright.display().to_string(), "--stdio".into()], &["py"]),
            );
        },
    )
    .await;
    h.write("app.py", "from lib import greet\n\nprint(greet('a'))\n");
    assert_eq!(h.prompt("look around").await.stop, StopReason::Completed);
    let results: Vec<String> = tool_results(&h.request_messages(5)).into_iter().map(|(_, r)| r).collect();
    assert_eq!(results[1], "lib.py:1:5: def greet(name: str) -> str:");
    assert_eq!(
        results[2],
        "app.py:1:17: from lib import greet\napp.py:3:7: print(greet('a'))\nlib.py:1:5: def greet(name: str) -> str:"
    );
    assert!(
        results[3].starts_with("Renaming to `welcome` takes 3 edits. Nothing was changed yet"),
        "{}",
        results[3]
    );
    assert!(results[3].contains("+def welcome(name: str) -> str:"), "{}", results[3]);
    assert!(results[3].contains("+print(welcome('a'))"), "{}", results[3]);
    assert_eq!(h.read("app.py"), "from lib import greet\n\nprint(greet('a'))\n", "rename changes nothing");
    assert!(results[4].starts_with("function greet (1:5)"), "{}", results[4]);
}

#[tokio::test]
async fn a_server_that_crashes_is_restarted_once_then_reported_broken_once() {
    let h = Harness::with(
        Script::new([
            Turn::from(Reply::tool_call("write", json!({"filePath": "a.py", "content": "x = 1\n"}))),
            Turn::from(Reply::tool_call("write", json!({"filePath": "a.py", "content": "x = 2\n"}))),
            Turn::from(Reply::tool_call("write", json!({"filePath": "a.py", "content": "x = 3\n"}))),
            Turn::from(Reply::text("done")),
        ]),
        AskPolicy::Allow,
        |config| {
            config.lsp.servers.insert("crashy".into(), server(fake_lsp("crash-on-open"), &["py"]));
        },
    )
    .await;
    assert_eq!(h.prompt("write").await.stop, StopReason::Completed);
    let results: Vec<String> = tool_results(&h.request_messages(3)).into_iter().map(|(_, r)| r).collect();
    // First write: it died on open; it gets one restart.
    assert!(
        results[0].contains("Language server crashy stopped (it exited; its last words: boom: cannot handle"),
        "{results:?}"
    );
    assert!(results[0].ends_with("it is restarted at the next change."), "{results:?}");
    // Second: restarted, died again: broken, said once with its last words.
    assert!(
        results[1].contains("Language server crashy cannot run: it stopped again after a restart"),
        "{results:?}"
    );
    assert!(results[1].contains("boom: cannot handle"), "{results:?}");
    // Third: not repeated.
    assert_eq!(results[2], "Wrote file successfully.");
    assert_eq!(h.read("a.py"), "x = 3\n");
    let status = h.engine.services().lsp.status();
    let crashy = status.iter().find(|s| s.name == "crashy").unwrap();
    assert_eq!((crashy.state, crashy.restarts), ("broken", 1));
}

#[tokio::test]
async fn a_server_that_never_answers_initialize_never_holds_an_edit_up() {
    let h = Harness::with(
        Script::new([
            Turn::from(Reply::tool_call("write", json!({"filePath": "a.py", "content": "x = 1\n"}))),
            Turn::from(Reply::text("done")),
        ]),
        AskPolicy::Allow,
        |config| {
            config.lsp.start_timeout_ms = Some(300);
            config.lsp.servers.insert("silent".into(), server(fake_lsp("hang"), &["py"]));
        },
    )
    .await;
    assert_eq!(h.prompt("write").await.stop, StopReason::Completed);
    let (_, result) = tool_results(&h.request_messages(1)).remove(0);
    assert_eq!(
        result,
        "Wrote file successfully.\n\nLanguage server silent cannot run: no answer to `initialize` within 0.3 s. \
         `codeloop lsp status` shows it."
    );
}

#[tokio::test]
async fn a_server_that_sends_garbage_and_floods_diagnostics_is_read_through() {
    let h = Harness::with(
        Script::new([
            Turn::from(Reply::tool_call("write", json!({"filePath": "b.ts", "content": "let x = 1\n"}))),
            Turn::from(Reply::text("done")),
        ]),
        AskPolicy::Allow,
        |config| {
            config.lsp.servers.insert("noisy".into(), server(fake_lsp("noisy"), &["ts"]));
        },
    )
    .await;
    assert_eq!(h.prompt("write").await.stop, StopReason::Completed);
    let (_, result) = tool_results(&h.request_messages(1)).remove(0);
    // A non-JSON message skipped, 2 000 other files' errors cut to five, its own error kept.
    let lines: Vec<&str> = result.lines().collect();
    assert_eq!(lines.len(), 4 + 1 + 5 + 1, "{lines:?}");
    assert_eq!(
        lines[..5],
        [
            "Wrote file successfully.",
            "",
            "<diagnostics>",
            "b.ts:1:1 error E1 broken",
            "Other files now report:"
        ]
    );
    assert_eq!(lines[10], "</diagnostics>");
}

#[tokio::test]
async fn no_server_no_cost_and_switched_off_means_off() {
    let h = Harness::with(
        Script::new([
            Turn::from(Reply::tool_call("write", json!({"filePath": "a.py", "content": "x = 1\n"}))),
            Turn::from(Reply::text("done")),
        ]),
        AskPolicy::Allow,
        |config| {
            config.lsp.enabled = Some(false);
            config.lsp.servers.insert("noisy".into(), server(fake_lsp("noisy"), &["py"]));
        },
    )
    .await;
    assert_eq!(h.prompt("write").await.stop, StopReason::Completed);
    assert_eq!(tool_results(&h.request_messages(1))[0].1, "Wrote file successfully.");
    assert!(h.engine.services().lsp.is_empty());
}

#[tokio::test]
async fn a_typescript_type_error_reaches_the_edit_result_on_the_servers_first_start() {
    let Some(tsls) = program("typescript-language-server") else { return };
    let h = Harness::with(
        Script::new([
            Turn::from(Reply::tool_call(
                "write",
                json!({"filePath": "src/main.ts", "content": "export const count: number = \"three\";\n"}),
            )),
            Turn::from(Reply::text("done")),
        ]),
        AskPolicy::Allow,
        |config| {
            // The first wait covers the server's start (its first diagnostics take seconds cold).
            config.lsp.start_wait_ms = Some(60_000);
            config.lsp.servers.insert(
                "typescript".into(),
                server(vec![tsls.display().to_string(), "--stdio".into()], &["ts"]),
            );
        },
    )
    .await;
    h.write("tsconfig.json", "{\"compilerOptions\": {\"strict\": true}}\n");
    assert_eq!(h.prompt("write it").await.stop, StopReason::Completed);
    let (_, result) = tool_results(&h.request_messages(1)).remove(0);
    assert_eq!(
        result,
        "Wrote file successfully.\n\n<diagnostics>\nsrc/main.ts:1:14 error Type 'string' is not assignable to type 'number'. [2322]\n</diagnostics>"
    );
}

/// Figures for the closing note: an edit's time to its result with a server's diagnostics (the first
/// edit, which starts the server, then the median of the rest), and the cost of the check when no
/// server serves the file. `cargo test --release -p codeloop-core --features internals --test engine
/// lsp_figures -- --ignored --nocapture` (with CODELOOP_TEST_LSP_PATH).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "prints figures; run by hand"]
async fn lsp_figures() {
    // (name, program, arguments, file, [the good line, the broken line])
    type Bench<'a> = (&'a str, &'a str, Vec<&'a str>, &'a str, [&'a str; 2]);
    let servers: [Bench; 3] = [
        ("pylsp", "pylsp", vec![], "app.py", ["return 1", "return nope"]),
        ("basedpyright", "basedpyright-langserver", vec!["--stdio"], "app.py", ["return 1", "return nope"]),
        ("typescript", "typescript-language-server", vec!["--stdio"], "app.ts", ["return 1", "return nope"]),
    ];
    for (name, binary, args, file, [good, bad]) in servers {
        let Some(program) = program(binary) else { continue };
        let edits = 11;
        let mut turns = Vec::new();
        for n in 0..edits {
            // A different name each time: the same two calls repeated would be a doom loop.
            let bad = format!("{bad}{}", n - n % 2);
            let (old, new) = if n % 2 == 0 { (good.to_owned(), bad) } else { (bad, good.to_owned()) };
            turns.push(Turn::from(Reply::tool_call(
                "edit",
                json!({"filePath": file, "oldString": old, "newString": new}),
            )));
        }
        turns.push(Turn::from(Reply::text("done")));
        let h = Harness::with(Script::new(turns), AskPolicy::Allow, |config| {
            config.lsp.start_wait_ms = Some(60_000);
            let mut command = vec![program.display().to_string()];
            command.extend(args.iter().map(|a| a.to_string()));
            config.lsp.servers.insert(name.into(), server(command, &[file.rsplit('.').next().unwrap()]));
        })
        .await;
        let source = if file.ends_with(".ts") {
            "export function main(): number {\n    return 1\n}\n"
        } else {
            "def main():\n    return 1\n"
        };
        h.write(file, source);
        assert_eq!(h.prompt("edit").await.stop, StopReason::Completed);
        let mut times: Vec<i64> = h
            .tool_parts()
            .iter()
            .filter_map(|p| match state(p) {
                codeloop_types::ToolState::Completed(done) => Some(done.time.end - done.time.start),
                _ => None,
            })
            .collect();
        let first = times.remove(0);
        times.sort();
        println!(
            "{name}: first edit (starts the server) {first} ms; later edits median {} ms (n={})",
            times[times.len() / 2],
            times.len()
        );
    }
    // No server for the file: what the check costs an edit.
    let h = Harness::with(Script::new([Turn::from(Reply::text("hi"))]), AskPolicy::Allow, |config| {
        config.lsp.servers.insert("mine".into(), server(vec!["/bin/true".into()], &["py"]));
    })
    .await;
    let lsp = h.engine.services().lsp.clone();
    let project = codeloop_tools::ProjectPaths::new(h.project.path(), h.project.path());
    let files = [h.project.path().join("notes.txt")];
    let rounds = 100_000;
    let started = std::time::Instant::now();
    for _ in 0..rounds {
        assert!(lsp.check(&project, &files).await.is_none());
    }
    println!(
        "no server serves the file: {:.0} ns per edit",
        started.elapsed().as_nanos() as f64 / rounds as f64
    );
}
