//! What a project and a user bring from Claude Code and OpenCode (DESIGN.md §5k, issue 36), through the
//! binary: `.mcp.json` servers, `permissions` of Claude settings files, agent files — each with a hostile
//! value (an untrusted project) and a positive control (trusted, or the user's own).

use codeloop_testkit::{FakeProvider, McpServerOptions, McpTestServer, Reply, Revision, Script, Turn};
use serde_json::{Value, json};

use super::walls::codeloop_as;
use super::{Env, text};

fn write(root: &std::path::Path, path: &str, text: &str) {
    let path = root.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The tool names a request offered.
fn offered(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projects_mcp_json_server_starts_only_once_the_project_is_trusted() {
    let env = Env::new();
    let mcp = McpTestServer::start(McpServerOptions::new(Revision::Sessions)).await.unwrap();
    let fake = FakeProvider::start(Script::new((0..2).map(|_| Turn::from(Reply::text("ok"))))).await.unwrap();
    let config = env.config(&fake.base_url(), "");
    let server = json!({"type": "http", "url": mcp.url(), "headers": {"X-Key": "${MCP_TEST_KEY}"}});
    write(env.project.path(), ".mcp.json", &json!({"mcpServers": {"web": server}}).to_string());
    let run = |args: &[&str]| {
        tokio::task::block_in_place(|| {
            env.codeloop_with(Some(&config), args, &[("MCP_TEST_KEY", "s3cr3t-value")])
        })
    };
    let output = run(&["run", "hi"]);
    let (_, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(
        !offered(&fake.requests()[0].body).iter().any(|t| t.starts_with("web_")),
        "untrusted: not started"
    );
    assert!(stderr.contains(".mcp.json") && stderr.contains("[mcp.web]"), "the warning names it: {stderr}");
    assert!(!stderr.contains("s3cr3t-value"), "an untrusted file is described, not filled in: {stderr}");
    assert_eq!(mcp.requests().len(), 0, "nothing was sent to the server");
    let trusted = codeloop_as(&env, Some(&config), &["trust"]).await;
    assert!(trusted.status.success(), "{:?}", text(&trusted));
    let output = run(&["run", "hi"]);
    assert!(output.status.success(), "{}", text(&output).1);
    let tools = offered(&fake.requests()[1].body);
    assert!(tools.contains(&"web_echo".to_owned()), "{tools:?}");
    assert_eq!(mcp.requests()[0].header("x-key"), Some("s3cr3t-value"), "trusted: the variable is filled in");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_permission_rules_allow_once_trusted_and_deny_always() {
    let env = Env::new();
    let echo =
        || Turn::from(Reply::tool_call("bash", json!({"command": "echo hi-there", "description": "say"})));
    let read = Turn::from(Reply::tool_call("read", json!({"filePath": "secret.txt"})));
    let text_reply = || Turn::from(Reply::text("done"));
    let script = [echo(), read, text_reply(), echo(), text_reply()];
    let fake = FakeProvider::start(Script::new(script)).await.unwrap();
    let config = env.config(&fake.base_url(), "[permission]\nbash = \"ask\"\n");
    write(env.project.path(), "secret.txt", "the secret\n");
    write(
        env.project.path(),
        ".claude/settings.json",
        &json!({"permissions": {"allow": ["Bash(echo:*)", "Read"], "deny": ["Read(./secret.txt)"]}})
            .to_string(),
    );
    // Untrusted: the project's allow does not widen (bash still asks; no one can answer) …
    let output = codeloop_as(&env, Some(&config), &["run", "say hi"]).await;
    let (_, stderr) = text(&output);
    assert!(stderr.contains("needs approval"), "{stderr}");
    // … but its deny narrows at once.
    let output = codeloop_as(&env, Some(&config), &["run", "read it"]).await;
    assert!(output.status.success(), "{}", text(&output).1);
    let result = super::last_tool_output(&fake, 2);
    assert!(!result.contains("the secret") && result.contains("denied"), "{result}");
    let trusted = codeloop_as(&env, Some(&config), &["trust"]).await;
    assert!(trusted.status.success(), "{:?}", text(&trusted));
    let output = codeloop_as(&env, Some(&config), &["run", "say hi"]).await;
    assert!(output.status.success(), "{}", text(&output).1);
    assert!(
        super::last_tool_output(&fake, 4).contains("hi-there"),
        "trusted, its allow counts: {}",
        super::last_tool_output(&fake, 4)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_files_are_subagents_the_task_tool_offers_and_runs_with_their_prompt() {
    let env = Env::new();
    let task = json!({"description": "review", "prompt": "review the diff", "subagent_type": "reviewer"});
    let script = [
        Turn::from(Reply::tool_call("task", task)),
        Turn::from(Reply::text("looks good")),
        Turn::from(Reply::text("the reviewer says it looks good")),
    ];
    let fake = FakeProvider::start(Script::new(script)).await.unwrap();
    let config = env.config(&fake.base_url(), "");
    // The user's own agent (always read) and a project's (read once trusted).
    write(
        env.home.path(),
        ".claude/agents/reviewer.md",
        "---\nname: reviewer\ndescription: Reviews a diff for bugs\ntools: Read, Grep\n---\nYou are a careful reviewer.\n",
    );
    write(env.project.path(), ".claude/agents/pusher.md", "---\ndescription: Pushes to prod\n---\nPush.\n");
    let output = codeloop_as(&env, Some(&config), &["run", "review my change"]).await;
    let (_, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    let first = &fake.requests()[0].body;
    let task_tool =
        first["tools"].as_array().unwrap().iter().find(|t| t["function"]["name"] == "task").unwrap();
    let description = task_tool["function"]["description"].as_str().unwrap();
    assert!(description.contains("reviewer: Reviews a diff for bugs"), "{description}");
    assert!(!description.contains("pusher"), "an untrusted project's agent is not offered: {description}");
    assert!(stderr.contains("agent `pusher`"), "{stderr}");
    // The subagent's request: its prompt, and only the tools it lists.
    let child = &fake.requests()[1].body;
    assert!(child.to_string().contains("You are a careful reviewer."), "{child}");
    let tools = offered(child);
    assert!(tools.contains(&"read".to_owned()) && !tools.contains(&"bash".to_owned()), "{tools:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_json_and_the_users_codex_servers_are_read() {
    let env = Env::new();
    let project_mcp = McpTestServer::start(McpServerOptions::new(Revision::Sessions)).await.unwrap();
    let codex_mcp = McpTestServer::start(McpServerOptions::new(Revision::Sessions)).await.unwrap();
    let fake = FakeProvider::start(Script::new((0..2).map(|_| Turn::from(Reply::text("ok"))))).await.unwrap();
    let config = env.config(&fake.base_url(), "");
    // The user's Codex servers count at once (the user's own file).
    write(
        env.home.path(),
        ".codex/config.toml",
        &format!("[mcp_servers.cx]\nurl = \"{}\"\n", codex_mcp.url()),
    );
    write(
        env.project.path(),
        "opencode.json",
        &format!(
            "{{\n  // the project's OpenCode setup\n  \"mcp\": {{\"oc\": {{\"type\": \"remote\", \"url\": \"{}\"}}}},\n  \"agent\": {{\"docs\": {{\"description\": \"Writes the docs\", \"mode\": \"subagent\"}}}},\n}}\n",
            project_mcp.url()
        ),
    );
    let output = codeloop_as(&env, Some(&config), &["run", "hi"]).await;
    assert!(output.status.success(), "{}", text(&output).1);
    let tools = offered(&fake.requests()[0].body);
    assert!(tools.contains(&"cx_echo".to_owned()), "{tools:?}");
    assert!(!tools.iter().any(|t| t.starts_with("oc_")), "the project is not trusted yet: {tools:?}");
    codeloop_as(&env, Some(&config), &["trust"]).await;
    let output = codeloop_as(&env, Some(&config), &["run", "hi"]).await;
    assert!(output.status.success(), "{}", text(&output).1);
    let body = &fake.requests()[1].body;
    assert!(offered(body).contains(&"oc_echo".to_owned()), "{:?}", offered(body));
    assert!(body.to_string().contains("docs: Writes the docs"), "the task tool lists the agent");
}
