//! `codeloop mcp …` and remote MCP servers in `codeloop run`, through the real binary, against the test
//! kit's MCP and OAuth servers on 127.0.0.1.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use codeloop_testkit::{
    FakeProvider, McpAuth, McpServerOptions, McpTestServer, OAuthOptions, OAuthTestServer, Reply, Revision,
    Script, Turn,
};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

use super::{Env, text};

/// The binary, off the async threads (the test's servers run on them).
async fn codeloop(env: &Env, config: Option<&Path>, args: &[&str]) -> Output {
    let mut command = env.command(config, args);
    command.stdin(Stdio::null());
    tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap()
}

fn list(output: &Output) -> Vec<Value> {
    let (stdout, stderr) = text(output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    serde_json::from_str::<Value>(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout}"))
        .as_array()
        .cloned()
        .unwrap()
}

fn fake_mcp() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../codeloop-core/tests/engine/fixtures/fake-mcp.sh")
        .canonicalize()
        .unwrap()
        .display()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_add_list_and_remove_edit_only_their_entry_of_the_config_file() {
    let env = Env::new();
    let server = McpTestServer::start(McpServerOptions::new(Revision::Sessions)).await.unwrap();
    let fake = FakeProvider::start(Script::new(Vec::<Turn>::new())).await.unwrap();
    let config = env.config(&fake.base_url(), "# my own notes\n[permission]\nbash = \"ask\" # careful\n");
    let original = std::fs::read_to_string(&config).unwrap();

    let added = codeloop(&env, Some(&config), &["mcp", "add", "web", "--url", &server.url()]).await;
    assert!(added.status.success(), "{:?}", text(&added));
    let fake_mcp = fake_mcp();
    let added = codeloop(&env, Some(&config), &["mcp", "add", "local", "--", "bash", &fake_mcp]).await;
    assert!(added.status.success(), "{:?}", text(&added));
    let edited = std::fs::read_to_string(&config).unwrap();
    assert!(edited.starts_with(&original), "the rest of the file is kept: {edited}");
    let again = codeloop(&env, Some(&config), &["mcp", "add", "web", "--url", &server.url()]).await;
    assert!(!again.status.success());
    assert!(text(&again).1.contains("already has [mcp.web]"), "{:?}", text(&again));

    let listed = list(&codeloop(&env, Some(&config), &["mcp", "list", "--json"]).await);
    assert_eq!(
        listed,
        json!([
            {"name": "local", "transport": "stdio", "state": "connected", "tools": 1, "auth": "none"},
            {"name": "web", "transport": "http", "state": "connected", "tools": 9, "auth": "none"}
        ])
        .as_array()
        .cloned()
        .unwrap()
    );
    let table = codeloop(&env, Some(&config), &["mcp", "list"]).await;
    let (stdout, _) = text(&table);
    assert!(stdout.contains("web") && stdout.contains("http") && stdout.contains("connected"), "{stdout}");

    for name in ["web", "local"] {
        let removed = codeloop(&env, Some(&config), &["mcp", "remove", name]).await;
        assert!(removed.status.success(), "{:?}", text(&removed));
    }
    assert_eq!(std::fs::read_to_string(&config).unwrap(), original);
    let missing = codeloop(&env, Some(&config), &["mcp", "remove", "web"]).await;
    assert!(!missing.status.success() && text(&missing).1.contains("has no [mcp.web]"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_add_without_codeloop_config_writes_the_global_user_config() {
    let env = Env::new();
    let added = codeloop(
        &env,
        None,
        &["mcp", "add", "web", "--url", "https://mcp.example.com/mcp", "--header", "X-Key=${KEY}"],
    )
    .await;
    assert!(added.status.success(), "{:?}", text(&added));
    let written = std::fs::read_to_string(env.home.path().join(".config/codeloop/config.toml")).unwrap();
    assert_eq!(
        written,
        "[mcp.web]\nurl = \"https://mcp.example.com/mcp\"\nheaders = { X-Key = \"${KEY}\" }\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_server_that_is_down_says_why_not_that_it_needs_a_command() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new(Vec::<Turn>::new())).await.unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let config = env
        .config(&fake.base_url(), &format!("[mcp.down]\nurl = \"http://{closed}/mcp\"\ntimeout_ms = 2000\n"));
    let output = codeloop(&env, Some(&config), &["mcp", "list", "--json"]).await;
    let (_, stderr) = text(&output);
    assert!(!stderr.contains("unknown config key"), "{stderr}");
    let listed = list(&output);
    assert_eq!(listed[0]["state"], "failed");
    let error = listed[0]["error"].as_str().unwrap();
    assert!(!error.contains("command"), "{error}");
    assert!(error.to_lowercase().contains("connect") || error.contains("refused"), "{error}");
}

/// An authorization server, an MCP server that takes its tokens, and a config naming the server.
async fn protected(
    env: &Env,
    options: OAuthOptions,
    script: Script,
) -> (OAuthTestServer, McpTestServer, FakeProvider, std::path::PathBuf) {
    let auth = OAuthTestServer::start(options).await.unwrap();
    let mcp = McpTestServer::start(McpServerOptions {
        revision: Revision::Sessions,
        auth: Some(McpAuth { tokens: auth.tokens(), issuer: auth.issuer(), metadata_in_challenge: true }),
        extra_tools: 0,
    })
    .await
    .unwrap();
    let fake = FakeProvider::start(script).await.unwrap();
    let config = env.config(&fake.base_url(), &format!("[mcp.web]\nurl = \"{}\"\n", mcp.url()));
    (auth, mcp, fake, config)
}

/// `codeloop mcp login web`, with the test as the browser: it opens the printed URL.
async fn login(env: &Env, config: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["mcp", "login", "web", "--no-browser"];
    args.extend_from_slice(extra);
    let mut command = tokio::process::Command::from(env.command(Some(config), &args));
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let mut child = command.spawn().unwrap();
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), stdout.next_line()).await.unwrap().unwrap();
    if let Some(url) = url.filter(|u| u.starts_with("http"))
        && !extra.contains(&"--timeout")
    {
        let browser = reqwest::get(&url).await.unwrap();
        assert!(browser.status().is_success(), "{}", browser.status());
        assert!(browser.text().await.unwrap().contains("signed in"));
    }
    tokio::time::timeout(Duration::from_secs(30), child.wait_with_output()).await.unwrap().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_then_list_run_and_log_out() {
    let env = Env::new();
    let script = Script::new([
        Turn::from(Reply::tool_call("web_echo", json!({"text": "signed in"}))),
        Turn::from(Reply::text("It answered.")),
    ]);
    let (auth, mcp, fake, config) = protected(&env, OAuthOptions::default(), script).await;

    let before = list(&codeloop(&env, Some(&config), &["mcp", "list", "--json"]).await);
    assert_eq!(
        (before[0]["state"].as_str(), before[0]["auth"].as_str()),
        (Some("needs-login"), Some("needs-login"))
    );
    assert!(before[0]["error"].as_str().unwrap().contains("codeloop mcp login web"), "{before:?}");

    let signed = login(&env, &config, &[]).await;
    let (stdout, stderr) = text(&signed);
    assert!(signed.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("signed in to MCP server web"), "{stderr}");
    for secret in ["access-", "refresh-", "code-"] {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "no token or code is printed: {stdout}{stderr}"
        );
    }
    let saved: Vec<_> = std::fs::read_dir(env.data.path().join("mcp-auth")).unwrap().flatten().collect();
    assert_eq!(saved.len(), 1, "one file per server and issuer");
    assert!(
        !std::fs::read_to_string(&config).unwrap().contains("access-"),
        "tokens never go in a config file"
    );
    assert_eq!(auth.calls_to("token")[0].param("resource"), Some(mcp.url().as_str()));

    let after = list(&codeloop(&env, Some(&config), &["mcp", "list", "--json"]).await);
    assert_eq!(
        after[0],
        json!({"name": "web", "transport": "http", "state": "connected", "tools": 9, "auth": "signed-in"})
    );

    let run = codeloop(&env, Some(&config), &["run", "use the protected server"]).await;
    let (stdout, stderr) = text(&run);
    assert!(run.status.success(), "{stdout}\n{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    assert!(fake.requests()[1].body.to_string().contains("echo: signed in"));

    let out = codeloop(&env, Some(&config), &["mcp", "logout", "web"]).await;
    assert!(out.status.success() && text(&out).1.contains("forgot the sign-in"), "{:?}", text(&out));
    let gone = list(&codeloop(&env, Some(&config), &["mcp", "list", "--json"]).await);
    assert_eq!(gone[0]["state"], "needs-login");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_headless_run_skips_a_server_that_needs_sign_in_with_one_warning() {
    let env = Env::new();
    let script =
        Script::new([Turn::from(Reply::text("Without it.")), Turn::from(Reply::text("Again without it."))]);
    let (auth, _mcp, fake, config) = protected(&env, OAuthOptions::default(), script).await;
    let run = codeloop(&env, Some(&config), &["run", "go"]).await;
    let (stdout, stderr) = text(&run);
    assert!(run.status.success(), "{stdout}\n{stderr}");
    let warnings: Vec<&str> =
        stderr.lines().filter(|l| l.starts_with("warning: MCP server web needs sign-in")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("codeloop mcp login web"), "{stderr}");
    assert!(auth.calls().is_empty(), "a run never signs in");
    assert!(!fake.requests()[0].body.to_string().contains("web_echo"));

    let json_run = codeloop(&env, Some(&config), &["run", "--format", "json", "go again"]).await;
    let (stdout, stderr) = text(&json_run);
    assert!(json_run.status.success(), "{stdout}\n{stderr}");
    let warning = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "session.warning")
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(warning["properties"]["message"].as_str().unwrap().starts_with("MCP server web needs sign-in"));
    assert_eq!(
        stderr.lines().filter(|l| l.starts_with("warning: MCP server web needs sign-in")).count(),
        1,
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_nobody_finishes_times_out_with_a_clear_message() {
    let env = Env::new();
    let (_auth, _mcp, _fake, config) =
        protected(&env, OAuthOptions::default(), Script::new(Vec::<Turn>::new())).await;
    let output = login(&env, &config, &["--timeout", "1"]).await;
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no sign-in came back within 1 s"), "{stderr}");
    assert!(stderr.contains("codeloop mcp login web"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_projects_mcp_servers_are_never_started_or_contacted() {
    let env = Env::new();
    let server = McpTestServer::start(McpServerOptions::new(Revision::Stateless)).await.unwrap();
    let fake = FakeProvider::start(Script::new([Turn::from(Reply::text("ok"))])).await.unwrap();
    let config = env.config(&fake.base_url(), "");
    let mark = env.project.path().join("started");
    std::fs::write(
        env.project.path().join("codeloop.toml"),
        format!(
            "[mcp.theirs]\nurl = \"{}\"\n[mcp.local]\ncommand = [\"sh\", \"-c\", \"touch {}\"]\n",
            server.url(),
            mark.display()
        ),
    )
    .unwrap();
    let run = codeloop(&env, Some(&config), &["run", "go"]).await;
    let (stdout, stderr) = text(&run);
    assert!(run.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("not trusted") && stderr.contains(&format!("contact `{}`", server.url())),
        "{stderr}"
    );
    let listed = list(&codeloop(&env, Some(&config), &["mcp", "list", "--json"]).await);
    assert!(listed.is_empty(), "{listed:?}");
    let login = codeloop(&env, Some(&config), &["mcp", "login", "theirs", "--no-browser"]).await;
    assert!(!login.status.success(), "{:?}", text(&login));
    assert!(server.requests().is_empty(), "never contacted");
    assert!(!mark.exists(), "never started");
}
