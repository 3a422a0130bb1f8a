//! What a new user touches, through the real binary (issue 15, "Defects"): each test failed before its fix.

use std::path::Path;
use std::process::Output;

use codeloop_testkit::{FakeProvider, Reply, Script, Turn};

use super::{Env, text};

/// Runs the binary off the async threads (the fake provider lives on them); `config` becomes
/// `$CODELOOP_CONFIG`.
pub(super) async fn codeloop(env: &Env, config: Option<&Path>, args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let (data, home, project, config) = (
        env.data.path().to_owned(),
        env.home.path().to_owned(),
        env.project.path().to_owned(),
        config.map(Path::to_owned),
    );
    tokio::task::spawn_blocking(move || {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_codeloop"));
        command
            .args(&args)
            .current_dir(project)
            .env("CODELOOP_DATA_DIR", data)
            .env("HOME", home)
            .env_remove("CODELOOP_CONFIG")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_DATA_HOME");
        if let Some(config) = config {
            command.env("CODELOOP_CONFIG", config);
        }
        command.output().unwrap()
    })
    .await
    .unwrap()
}

/// The id of the only session in the data directory.
async fn only_session(env: &Env) -> String {
    let output = codeloop(env, None, &["session", "list", "--format", "json"]).await;
    let sessions: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(sessions.as_array().unwrap().len(), 1, "{sessions}");
    sessions[0]["id"].as_str().unwrap().to_owned()
}

/// The text of every message of request `n`, as the model saw it.
fn request_text(fake: &FakeProvider, n: usize) -> String {
    fake.requests()[n].body["messages"].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_compact_uses_the_project_config_and_continue_then_answers_the_new_message() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::text("first answer")),
        Turn::from(Reply::text("## Objective\nThe summary.")),
        Turn::from(Reply::text("the answer to X")),
    ]))
    .await
    .unwrap();
    // The provider is known only to the project's own (trusted) config.
    std::fs::write(
        env.project.path().join("codeloop.toml"),
        format!(
            "model = \"proj/test\"\n[provider.proj]\nbase_url = \"{}\"\n[provider.proj.models.test]\ncontext = 128000\noutput = 8000\n",
            fake.base_url()
        ),
    )
    .unwrap();
    let trust = codeloop(&env, None, &["trust"]).await;
    assert!(trust.status.success(), "{}", text(&trust).1);
    let first = codeloop(&env, None, &["run", "hello"]).await;
    assert!(first.status.success(), "{}", text(&first).1);
    let id = only_session(&env).await;

    let compact = codeloop(&env, None, &["session", "compact", &id]).await;
    let (_, stderr) = text(&compact);
    assert!(compact.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("compacted {id}")), "{stderr}");
    assert_eq!(fake.request_count(), 2);

    let next = codeloop(&env, None, &["run", "--continue", "what is X?"]).await;
    let (stdout, stderr) = text(&next);
    assert!(next.status.success(), "{stderr}");
    assert_eq!(stdout, "the answer to X\n");
    assert_eq!(fake.request_count(), 3);
    let last = request_text(&fake, 2);
    assert!(last.contains("what is X?") && last.contains("The summary."), "{last}");
}

/// Runs the binary with stdout on a pipe whose reader is already gone, as in `codeloop models | head -2`
/// once `head` has its lines.
fn with_closed_stdout(env: &Env, config: &Path, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    std::process::Command::new(env!("CARGO_BIN_EXE_codeloop"))
        .args(args)
        .current_dir(env.project.path())
        .env("CODELOOP_DATA_DIR", env.data.path())
        .env("HOME", env.home.path())
        .env("CODELOOP_CONFIG", config)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .stdout(writer)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_ends_models_and_session_show_quietly() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new([Turn::from(Reply::text("an answer"))])).await.unwrap();
    let config = env.config(&fake.base_url(), "");
    let run = codeloop(&env, Some(&config), &["run", "hello"]).await;
    assert!(run.status.success(), "{}", text(&run).1);
    let id = only_session(&env).await;
    for args in [
        vec!["models"],
        vec!["models", "--format", "json"],
        vec!["session", "show", &id],
        vec!["session", "list"],
        vec!["session", "export", &id],
    ] {
        let output = with_closed_stdout(&env, &config, &args);
        let (_, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
        assert_eq!(stderr, "", "{args:?}");
    }
}

/// A git project with `a.txt` = "one", and a run whose model changes it to "two" (allowed without asking).
/// Returns the session id and the id of the run's user message.
async fn project_changed_by_a_run(env: &Env, fake: &FakeProvider) -> (String, String) {
    let project = env.project.path();
    std::fs::write(project.join("a.txt"), "one\n").unwrap();
    for args in [
        &["init", "-q"][..],
        &["-c", "user.name=t", "-c", "user.email=t@t", "add", "."],
        &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start"],
    ] {
        let status = std::process::Command::new("git").args(args).current_dir(project).status().unwrap();
        assert!(status.success());
    }
    let config = env.config(&fake.base_url(), "");
    let run = codeloop(env, Some(&config), &["run", "--on-ask", "allow", "make it two"]).await;
    assert!(run.status.success(), "{}", text(&run).1);
    assert_eq!(std::fs::read_to_string(project.join("a.txt")).unwrap(), "two\n");
    let id = only_session(env).await;
    let export = export(env, &id).await;
    let user = export["messages"][0]["info"]["id"].as_str().unwrap().to_owned();
    (id, user)
}

async fn export(env: &Env, id: &str) -> serde_json::Value {
    let output = codeloop(env, None, &["session", "export", id]).await;
    assert!(output.status.success(), "{}", text(&output).1);
    serde_json::from_slice(&output.stdout).unwrap()
}

fn edit_script() -> Vec<Turn> {
    vec![
        Turn::from(Reply::tool_call("read", serde_json::json!({"filePath": "a.txt"}))),
        Turn::from(Reply::tool_call(
            "edit",
            serde_json::json!({"filePath": "a.txt", "oldString": "one", "newString": "two"}),
        )),
        Turn::from(Reply::text("It says two now.")),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revert_to_an_unknown_message_changes_nothing() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new(edit_script())).await.unwrap();
    let (id, user) = project_changed_by_a_run(&env, &fake).await;
    let a_txt = || std::fs::read_to_string(env.project.path().join("a.txt")).unwrap();

    let revert = codeloop(&env, None, &["session", "revert", &id, &user]).await;
    assert!(revert.status.success(), "{}", text(&revert).1);
    assert_eq!(a_txt(), "one\n");

    let bogus = codeloop(&env, None, &["session", "revert", &id, "msg_bogus"]).await;
    let (_, stderr) = text(&bogus);
    assert_eq!(bogus.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("msg_bogus"), "{stderr}");
    assert_eq!(a_txt(), "one\n", "the files stay as the first revert left them");
    assert_eq!(export(&env, &id).await["info"]["revert"]["message_id"], user.as_str(), "the revert is kept");

    let unrevert = codeloop(&env, None, &["session", "unrevert", &id]).await;
    assert!(unrevert.status.success(), "{}", text(&unrevert).1);
    assert_eq!(a_txt(), "two\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_show_gives_message_ids_marks_reverted_messages_and_unrevert_after_a_prompt_fails() {
    let env = Env::new();
    let mut turns = edit_script();
    turns.push(Turn::from(Reply::text("Starting over.")));
    let fake = FakeProvider::start(Script::new(turns)).await.unwrap();
    let (id, user) = project_changed_by_a_run(&env, &fake).await;
    let show = || async { text(&codeloop(&env, None, &["session", "show", &id]).await).0 };

    let before = show().await;
    assert!(before.contains(&format!("── user {user}\n")), "{before}");
    assert!(!before.contains("[reverted]"), "{before}");

    let revert = codeloop(&env, None, &["session", "revert", &id, &user]).await;
    assert!(revert.status.success(), "{}", text(&revert).1);
    let pending = show().await;
    assert!(pending.contains(&format!("── user {user}  [reverted]\n")), "{pending}");
    assert_eq!(pending.matches("[reverted]").count(), 4, "the user message and the three answers: {pending}");
    assert!(pending.contains(&format!("codeloop session unrevert {id}")), "{pending}");

    // A new prompt makes the revert final: there is nothing left to undo.
    let config = env.config(&fake.base_url(), "");
    let again = codeloop(&env, Some(&config), &["run", "--continue", "start over"]).await;
    assert!(again.status.success(), "{}", text(&again).1);
    let unrevert = codeloop(&env, None, &["session", "unrevert", &id]).await;
    let (_, stderr) = text(&unrevert);
    assert_eq!(unrevert.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no revert to undo"), "{stderr}");
    assert_eq!(std::fs::read_to_string(env.project.path().join("a.txt")).unwrap(), "one\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_automatic_compaction_is_a_note_on_stderr_not_the_summary_on_stdout() {
    use codeloop_testkit::ScriptUsage;
    let env = Env::new();
    // The first answer fills the 120 000 usable tokens of the window: the run compacts, then goes on.
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::text("Working on it.").with_usage(ScriptUsage::new(125_000, 10))),
        Turn::from(Reply::text("## Objective\nTHE SUMMARY").with_usage(ScriptUsage::new(5_000, 10))),
        Turn::from(Reply::text("Done.").with_usage(ScriptUsage::new(2_000, 10))),
    ]))
    .await
    .unwrap();
    let config = env.config(&fake.base_url(), "");
    let output = codeloop(&env, Some(&config), &["run", "do the big thing"]).await;
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(fake.request_count(), 3, "{stderr}");
    assert_eq!(stdout, "Working on it.\nDone.\n");
    assert_eq!(stderr.matches("context compacted").count(), 1, "{stderr}");
    assert!(!stderr.contains("THE SUMMARY"), "{stderr}");
}

/// An OpenAI-compatible server on 127.0.0.1 whose streams carry no usage (as some local servers do): every
/// request is answered "Hi there." Returns its base URL.
async fn server_without_usage() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                // Read the headers and the body the request announces.
                let mut seen = Vec::new();
                let mut buf = [0u8; 8192];
                let body_start = loop {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    if let Some(at) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at + 4;
                    }
                };
                let head = String::from_utf8_lossy(&seen[..body_start]).to_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                while seen.len() < body_start + length {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                }
                let chunk = |delta: &str, finish: &str| {
                    format!(
                        "data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"test\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
                    )
                };
                let body = format!(
                    "{}{}data: [DONE]\n\n",
                    chunk(r#"{"role":"assistant","content":"Hi there."}"#, "null"),
                    chunk("{}", r#""stop""#)
                );
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_counts_without_usage_from_the_provider_are_marked_as_estimates() {
    let env = Env::new();
    let config = env.config(&server_without_usage().await, "");
    let output = codeloop(&env, Some(&config), &["run", "hello"]).await;
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stdout, "Hi there.\n");
    let summary = stderr.lines().find(|l| l.starts_with("— fake/test")).unwrap_or_else(|| panic!("{stderr}"));
    let fields: Vec<&str> = summary.split(" · ").collect();
    assert!(fields[1].starts_with('~') && fields[1].ends_with(" in"), "{summary}");
    assert!(fields[2].starts_with('~') && fields[2].ends_with(" out"), "{summary}");

    let id = only_session(&env).await;
    let show = text(&codeloop(&env, None, &["session", "show", &id]).await).0;
    assert!(show.contains("tokens: ~"), "{show}");
    assert!(show.contains("(fake/test, stop, ~"), "{show}");
    let list = text(&codeloop(&env, None, &["session", "list"]).await).0;
    assert!(list.contains(" ~"), "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hidden_and_subagent_only_agents_are_refused_before_anything_is_recorded() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new([Turn::from(Reply::text("hi"))]).repeating()).await.unwrap();
    let config = env.config(&fake.base_url(), "");
    for agent in ["compaction", "general", "nosuch"] {
        let output = codeloop(&env, Some(&config), &["run", "--agent", agent, "hello"]).await;
        let (_, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(1), "{agent}: {stderr}");
        assert!(stderr.contains(&format!("agent \"{agent}\"")) && stderr.contains("build"), "{stderr}");
    }
    assert_eq!(fake.request_count(), 0);
    let list = codeloop(&env, None, &["session", "list", "--format", "json"]).await;
    assert_eq!(text(&list).0.trim(), "[]", "no session was created");
    let plan = codeloop(&env, Some(&config), &["run", "--agent", "plan", "hello"]).await;
    assert!(plan.status.success(), "{}", text(&plan).1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_of_an_unknown_provider_is_an_error_naming_the_known_ones() {
    let env = Env::new();
    let config = env.config("http://127.0.0.1:9", "");
    let output = codeloop(&env, Some(&config), &["models", "NO_SUCH"]).await;
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert_eq!(stdout, "");
    assert!(stderr.contains("NO_SUCH") && stderr.contains("fake"), "{stderr}");
    let known = codeloop(&env, Some(&config), &["models", "fake"]).await;
    assert!(known.status.success());
    assert!(text(&known).0.contains("fake/test"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tool_lists_only_the_tools_the_model_was_offered() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call("nosuch", serde_json::json!({}))),
        Turn::from(Reply::text("ok")),
    ]))
    .await
    .unwrap();
    let config = env.config(&fake.base_url(), "");
    let output = codeloop(&env, Some(&config), &["run", "hello"]).await;
    assert!(output.status.success(), "{}", text(&output).1);
    let offered: Vec<String> = fake.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(!offered.contains(&"question".to_owned()), "{offered:?}");
    let result = request_text(&fake, 1);
    assert!(result.contains("Unknown tool \\\"nosuch\\\""), "{result}");
    assert!(result.contains("read") && !result.contains("question"), "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activity_lines_describe_task_webfetch_apply_patch_and_other_calls_without_raw_json() {
    let env = Env::new();
    let patch = "*** Begin Patch\n*** Add File: new.txt\n+hello\n*** End Patch";
    let call = |name: &str, input: serde_json::Value| Turn::from(Reply::tool_call(name, input));
    let fake = FakeProvider::start(Script::new([
        call("webfetch", serde_json::json!({"url": "http://127.0.0.1:9/doc"})),
        call("apply_patch", serde_json::json!({"patchText": patch})),
        call("docs_search", serde_json::json!({"query": "tokio select", "limit": 3})),
        call(
            "task",
            serde_json::json!({"description": "find the bug", "prompt": "look", "subagent_type": "general"}),
        ),
        Turn::from(Reply::text("found it")),
        Turn::from(Reply::text("ok")),
    ]))
    .await
    .unwrap();
    let config = env.config(&fake.base_url(), "");
    let output = codeloop(&env, Some(&config), &["run", "--on-ask", "allow", "hello"]).await;
    let (_, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    for line in [
        "→ webfetch http://127.0.0.1:9/doc",
        "→ apply_patch new.txt",
        "→ docs_search limit=3 query=tokio select",
        "→ task general: find the bug",
    ] {
        assert!(stderr.contains(line), "{line} missing from: {stderr}");
    }
    assert!(!stderr.contains("{\""), "no raw JSON: {stderr}");
}

#[test]
fn session_help_names_revert_and_unrevert_and_serve_help_explains_port() {
    let env = Env::new();
    let help = text(&env.codeloop(None, &["session", "--help"])).0;
    let about = help.lines().next().unwrap();
    assert!(about.contains("revert") && about.contains("unrevert"), "{help}");
    let help = text(&env.codeloop(None, &["serve", "--help"])).0;
    let port = help.lines().find(|l| l.contains("--port")).unwrap();
    assert!(port.contains("Port"), "{help}");
}

#[test]
fn demo_without_dir_leaves_no_project_in_the_temp_dir() {
    let env = Env::new();
    let tmp = tempfile::tempdir().unwrap();
    let output = env.codeloop_with(None, &["demo"], &[("TMPDIR", tmp.path().to_str().unwrap())]);
    let (_, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("removed when the demo ends"), "{stderr}");
    let left: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("codeloop-demo"))
        .collect();
    assert_eq!(left, Vec::<String>::new(), "{stderr}");
}
