//! Language servers through the real binary (DESIGN.md §5n): a server runs inside the walls `bash` gets
//! (it cannot write outside the project), ends with the run that started it, and `lsp status` says how
//! each one is. Needs `pylsp` (from PyPI, installed by `.ci/run`) on `CODELOOP_TEST_LSP_PATH` or `PATH`.

use std::path::PathBuf;

use codeloop_testkit::{FakeProvider, Reply, Script, Turn};
use serde_json::{Value, json};

use super::walls::{codeloop, landlock, tool_result};
use super::walls_round4::wait_for;
use super::{Env, text};

fn pylsp() -> Option<PathBuf> {
    let dirs = std::env::var_os("CODELOOP_TEST_LSP_PATH").into_iter().chain(std::env::var_os("PATH"));
    let found = dirs
        .flat_map(|d| std::env::split_paths(&d).collect::<Vec<_>>())
        .map(|d| d.join("pylsp"))
        .find(|p| p.is_file());
    if found.is_none() && std::env::var("CODELOOP_REQUIRE_LSP").as_deref() == Ok("1") {
        panic!("pylsp is required (CODELOOP_REQUIRE_LSP=1) but not found");
    }
    found
}

/// Processes whose environment holds `mark`.
fn marked_processes(mark: &str) -> Vec<u32> {
    let needle = format!("CODELOOP_LSP_TEST_MARK={mark}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_language_server_runs_walled_and_ends_with_the_run() {
    let Some(pylsp) = pylsp() else { return };
    if !landlock() {
        return;
    }
    let env = Env::new();
    let outside = env.home.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    // The server's command tries to write outside the project first, then starts pylsp.
    let wrapper = env.home.path().join("pylsp-wrapper.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ntouch started-by-server\necho escaped > '{}/escaped' 2>/dev/null\nexec '{}' \"$@\"\n",
            outside.display(),
            pylsp.display()
        ),
    )
    .unwrap();
    std::process::Command::new("chmod").arg("+x").arg(&wrapper).status().unwrap();
    let mark = format!("{}", std::process::id());
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call("write", json!({"filePath": "app.py", "content": "print(missing)\n"}))),
        Turn::from(Reply::text("written")),
    ]))
    .await
    .unwrap();
    let config = env.config(
        &fake.base_url(),
        &format!(
            "[lsp]\nstart_wait_ms = 60000\n[lsp.pylsp]\ncommand = [\"{}\"]\nenv = {{ CODELOOP_LSP_TEST_MARK = \"{mark}\" }}\n",
            wrapper.display()
        ),
    );
    let out = codeloop(&env, &config, &["run", "--on-ask", "allow", "write app.py"]).await;
    assert!(out.status.success(), "{:?}", text(&out));
    let result = tool_result(&fake, 1);
    assert!(
        result.contains("<diagnostics>\napp.py:1:7 error undefined name 'missing'\n</diagnostics>"),
        "{result}"
    );
    assert!(env.project.path().join("started-by-server").exists(), "the server ran in the project");
    assert!(!outside.join("escaped").exists(), "the server wrote outside the project");
    // Its input ended with the run: nothing of it is left.
    assert!(wait_for(|| marked_processes(&mark).is_empty(), 10_000).await, "{:?}", marked_processes(&mark));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lsp_status_says_which_servers_run_and_why_one_cannot() {
    let Some(pylsp) = pylsp() else { return };
    let env = Env::new();
    std::fs::write(env.project.path().join("a.py"), "x = 1\n").unwrap();
    std::fs::write(env.project.path().join("a.foo"), "x\n").unwrap();
    let config = env.config(
        "http://127.0.0.1:9",
        &format!(
            "[lsp.pylsp]\ncommand = [\"{}\"]\n[lsp.broken]\ncommand = [\"/nonexistent/ls\"]\nextensions = [\"foo\"]\n",
            pylsp.display()
        ),
    );
    let out = codeloop(&env, &config, &["lsp", "status", "--json"]).await;
    assert!(out.status.success(), "{:?}", text(&out));
    let status: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let named = |name: &str| status.iter().find(|s| s["name"] == name).cloned().unwrap();
    let pylsp = named("pylsp");
    assert_eq!(pylsp["state"], "running", "{status:?}");
    assert!(pylsp["pid"].as_u64().is_some());
    assert_eq!(pylsp["root"], env.project.path().canonicalize().unwrap().display().to_string());
    let broken = named("broken");
    assert_eq!(broken["state"], "broken");
    assert!(broken["error"].as_str().unwrap().contains("not found on PATH"), "{broken}");

    let out = codeloop(&env, &config, &["lsp", "status", "--no-start"]).await;
    let (stdout, _) = text(&out);
    assert!(stdout.contains("pylsp — idle"), "{stdout}");
}

/// A cloned repository's `[lsp]` names programs: until the project is trusted it runs nothing, and the
/// person is told it was ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_projects_language_server_never_starts() {
    let env = Env::new();
    let mark = env.home.path().join("pwned-by-lsp");
    std::fs::write(
        env.project.path().join("codeloop.toml"),
        format!(
            "[lsp.evil]\ncommand = [\"sh\", \"-c\", \"touch {}\"]\nextensions = [\"py\"]\n",
            mark.display()
        ),
    )
    .unwrap();
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call("write", json!({"filePath": "a.py", "content": "x = 1\n"}))),
        Turn::from(Reply::text("written")),
    ]))
    .await
    .unwrap();
    let config = env.config(&fake.base_url(), "");
    let out = codeloop(&env, &config, &["run", "--on-ask", "allow", "write a.py"]).await;
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(!mark.exists(), "the repository's language server ran");
    assert!(stderr.contains("ignored: set `lsp`") && stderr.contains("codeloop trust"), "{stderr}");
    assert_eq!(tool_result(&fake, 1), "Wrote file successfully.");
    let status = codeloop(&env, &config, &["lsp", "status", "--json", "--no-start"]).await;
    let listed: Vec<Value> = serde_json::from_slice(&status.stdout).unwrap();
    assert!(listed.iter().all(|s| s["name"] != "evil"), "{listed:?}");
}

/// The `lsp` tool's path is the model's: outside the project it is refused before any server sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lsp_tool_refuses_paths_outside_the_project() {
    let Some(pylsp) = pylsp() else { return };
    let env = Env::new();
    let outside = env.home.path().join("secret.py");
    std::fs::write(&outside, "token = 'x'\n").unwrap();
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call("write", json!({"filePath": "a.py", "content": "x = 1\n"}))),
        Turn::from(Reply::tool_call(
            "lsp",
            json!({"operation": "symbols", "path": outside.display().to_string()}),
        )),
        Turn::from(Reply::tool_call("lsp", json!({"operation": "symbols", "path": "../../etc/passwd.py"}))),
        Turn::from(Reply::text("done")),
    ]))
    .await
    .unwrap();
    let config = env.config(&fake.base_url(), &format!("[lsp.pylsp]\ncommand = [\"{}\"]\n", pylsp.display()));
    let out = codeloop(&env, &config, &["run", "--on-ask", "allow", "look"]).await;
    assert!(out.status.success(), "{}", text(&out).1);
    let messages = fake.requests()[3].body["messages"].as_array().cloned().unwrap();
    let results: Vec<String> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(results[1].contains("is outside the project"), "{results:?}");
    assert!(
        results[2].contains("is outside the project") || results[2].contains("File not found"),
        "{results:?}"
    );
    assert!(!results.iter().any(|r| r.contains("token")), "{results:?}");
}
