//! MCP servers through the real pipeline (DESIGN.md §5e): remote servers of the test kit over real
//! HTTP on 127.0.0.1 in both protocol revisions, local ones over stdio, and the OAuth sign-in against
//! the test kit's authorization server.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use codeloop_core::config::Config;
use codeloop_core::mcp::{McpSettings, ServerState};
use codeloop_core::permission::AskPolicy;
use codeloop_core::{Delivery, Engine, EngineOptions, PromptInput, StopReason};
use codeloop_testkit::{FakeProvider, McpServerOptions, McpTestServer, Reply, Revision, Script, Turn};
use codeloop_types::{EventPayload, PartKind, ToolState};
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::harness::{config_for, tool_results};

/// An engine on a temp data dir, a fake provider and MCP servers; `env` answers `${ENV}` lookups.
pub(super) struct McpHarness {
    pub(super) _data: TempDir,
    pub(super) _project: TempDir,
    pub(super) fake: FakeProvider,
    pub(super) engine: Engine,
    pub(super) session: codeloop_types::Session,
}

pub(super) type Env = Vec<(&'static str, &'static str)>;

impl McpHarness {
    pub(super) async fn new(script: Script, servers: Vec<(&str, McpSettings)>, env: Env) -> Self {
        let data = tempfile::tempdir().unwrap();
        Self::in_data_dir(data, script, servers, env).await
    }

    pub(super) async fn in_data_dir(
        data: TempDir,
        script: Script,
        servers: Vec<(&str, McpSettings)>,
        env: Env,
    ) -> Self {
        Self::tweaked(data, script, servers, env, |_| {}).await
    }

    pub(super) async fn tweaked(
        data: TempDir,
        script: Script,
        servers: Vec<(&str, McpSettings)>,
        env: Env,
        tweak: impl FnOnce(&mut Config),
    ) -> Self {
        Self::built(data, script, servers, env, tweak, AskPolicy::Deny).await
    }

    /// With someone to answer (as `serve` or a terminal): asks wait for a reply.
    pub(super) async fn answered(script: Script, servers: Vec<(&str, McpSettings)>) -> Self {
        let data = tempfile::tempdir().unwrap();
        Self::built(data, script, servers, vec![], |_| {}, AskPolicy::Wait).await
    }

    async fn built(
        data: TempDir,
        script: Script,
        servers: Vec<(&str, McpSettings)>,
        env: Env,
        tweak: impl FnOnce(&mut Config),
        policy: AskPolicy,
    ) -> Self {
        let project = tempfile::tempdir().unwrap();
        let fake = FakeProvider::start(script).await.unwrap();
        let mut config: Config = config_for(&fake.base_url());
        for (name, settings) in servers {
            config.mcp.insert(name.to_owned(), settings);
        }
        tweak(&mut config);
        let mut options = EngineOptions::new(data.path(), config);
        options.ask_policy = policy;
        let env: BTreeMap<String, String> =
            env.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
        options.env = Arc::new(move |name| env.get(name).cloned());
        options.skill_dirs = Some(Vec::new());
        let engine = Engine::open(options).unwrap();
        let session = engine.create_session(project.path(), None, None, None).await.unwrap();
        McpHarness { _data: data, _project: project, fake, engine, session }
    }

    pub(super) async fn prompt(&self, text: &str) -> (codeloop_core::RunOutcome, Vec<String>) {
        let mut events = self.engine.bus().subscribe();
        let outcome =
            self.engine.prompt(&self.session.id, PromptInput::text(text), Delivery::Queue).await.unwrap();
        let mut warnings = Vec::new();
        while let Ok(event) = events.try_recv() {
            if let EventPayload::SessionWarning { message, .. } = &event.payload {
                warnings.push(message.clone());
            }
        }
        (outcome, warnings)
    }

    /// Names of the tools offered in request `n`.
    pub(super) fn offered(&self, n: usize) -> Vec<String> {
        self.fake.requests()[n].body["tools"]
            .as_array()
            .map(|tools| {
                tools.iter().map(|t| t["function"]["name"].as_str().unwrap_or("").to_owned()).collect()
            })
            .unwrap_or_default()
    }

    pub(super) fn messages(&self, n: usize) -> Vec<Value> {
        self.fake.requests()[n].body["messages"].as_array().cloned().unwrap_or_default()
    }

    pub(super) async fn tool_states(&self) -> Vec<ToolState> {
        self.engine
            .history(&self.session.id)
            .await
            .unwrap()
            .into_iter()
            .flat_map(|m| m.parts)
            .filter_map(|p| match p.kind {
                PartKind::Tool(tool) => Some(tool.state),
                _ => None,
            })
            .collect()
    }
}

pub(super) fn remote(url: &str) -> McpSettings {
    McpSettings::remote(url)
}

pub(super) fn script(turns: Vec<Reply>) -> Script {
    Script::new(turns.into_iter().map(Turn::from))
}

pub(super) fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/engine/fixtures").join(name).display().to_string()
}

/// Polls `check` until it holds, for at most `limit`.
pub(super) async fn eventually(limit: Duration, mut check: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn remote_tools_are_called_over_both_protocol_revisions() {
    for revision in [Revision::Sessions, Revision::Stateless] {
        let server = McpTestServer::start(McpServerOptions::new(revision)).await.unwrap();
        let h = McpHarness::new(
            script(vec![Reply::tool_call("web_echo", json!({"text": "over http"})), Reply::text("done")]),
            vec![("web", remote(&server.url()))],
            vec![],
        )
        .await;
        let (outcome, warnings) = h.prompt("echo through the remote server").await;
        assert_eq!(outcome.stop, StopReason::Completed, "{revision:?}");
        assert!(warnings.is_empty(), "{revision:?}: {warnings:?}");
        assert!(h.offered(0).contains(&"web_echo".to_owned()), "{:?}", h.offered(0));
        assert_eq!(tool_results(&h.messages(1))[0].1, "echo: over http", "{revision:?}");
        let methods = server.rpc_methods();
        let calls: Vec<_> =
            server.requests().into_iter().filter(|r| r.tool.as_deref() == Some("echo")).collect();
        // The call's id goes with it as its operation id (DESIGN.md §5m).
        let operation = calls[0].meta.as_ref().and_then(|m| m["codeloop/operation"].as_str());
        assert_eq!(operation, Some(tool_results(&h.messages(1))[0].0.as_str()), "{revision:?}: {calls:?}");
        match revision {
            Revision::Sessions => {
                // Probed with server/discover (refused: the method came with 2026-07-28), then initialize.
                let probes = methods.iter().take_while(|m| *m == "server/discover").count();
                assert!(
                    probes >= 1 && methods[probes] == "initialize",
                    "probed, then fell back: {methods:?}"
                );
                assert!(calls[0].header("mcp-session-id").is_some(), "a 2025-11-25 session: {calls:?}");
                assert_eq!(calls[0].header("mcp-protocol-version"), Some("2025-11-25"));
            }
            Revision::Stateless => {
                assert_eq!(methods.first().map(String::as_str), Some("server/discover"), "{methods:?}");
                assert!(!methods.contains(&"initialize".to_owned()), "stateless: no initialize: {methods:?}");
                assert!(calls[0].header("mcp-session-id").is_none(), "stateless: no session: {calls:?}");
                assert_eq!(calls[0].header("mcp-protocol-version"), Some("2026-07-28"));
            }
        }
    }
}

#[tokio::test]
async fn local_servers_of_either_revision_start_over_stdio() {
    let h = McpHarness::new(
        script(vec![
            Reply::tool_call("old_echo", json!({"text": "a"})),
            Reply::tool_call("new_echo", json!({"text": "b"})),
            Reply::text("done"),
        ]),
        vec![
            ("old", McpSettings::local(vec!["bash".into(), fixture("fake-mcp.sh")])),
            ("new", McpSettings::local(vec!["bash".into(), fixture("stateless-mcp.sh")])),
        ],
        vec![],
    )
    .await;
    let (outcome, warnings) = h.prompt("echo on both").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(tool_results(&h.messages(1))[0].1, "echo: a");
    assert_eq!(
        tool_results(&h.messages(2)).last().unwrap().1,
        "stateless echo: b",
        "initialize refused, then discover"
    );
}

#[tokio::test]
async fn headers_expand_env_and_tool_filters_apply() {
    let server = McpTestServer::start(McpServerOptions::new(Revision::Stateless)).await.unwrap();
    let mut settings = remote(&server.url());
    settings.headers.insert("X-Api-Key".into(), "key-${MCP_KEY}".into());
    settings.headers.insert("X-Literal".into(), "${MCP_KEY}".into());
    settings.literal_headers.insert("X-Literal".into());
    settings.enabled_tools = Some(vec!["echo".into(), "image".into(), "fail".into()]);
    settings.disabled_tools = vec!["fail".into()];
    let h = McpHarness::new(
        script(vec![Reply::text("hi")]),
        vec![("web", settings)],
        vec![("MCP_KEY", "s3cret")],
    )
    .await;
    h.prompt("hi").await;
    let offered: Vec<String> = h.offered(0).into_iter().filter(|t| t.starts_with("web_")).collect();
    assert_eq!(offered, ["web_echo", "web_image"], "enabled first, then disabled removes");
    let first = &server.requests()[0];
    assert_eq!(first.header("x-api-key"), Some("key-s3cret"));
    assert_eq!(
        first.header("x-literal"),
        Some("${MCP_KEY}"),
        "a trusted project's header is sent as written"
    );
}

#[tokio::test]
async fn a_header_naming_an_unset_variable_fails_that_server_and_says_which() {
    let server = McpTestServer::start(McpServerOptions::new(Revision::Stateless)).await.unwrap();
    let mut settings = remote(&server.url());
    settings.headers.insert("Authorization".into(), "Bearer ${MISSING_TOKEN}".into());
    let h = McpHarness::new(script(vec![Reply::text("hi")]), vec![("web", settings)], vec![]).await;
    let (outcome, warnings) = h.prompt("hi").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    assert!(
        warnings.iter().any(|w| w.contains("${MISSING_TOKEN}") && w.contains("MCP server web")),
        "{warnings:?}"
    );
    assert!(server.requests().is_empty(), "nothing is sent without the header's value");
}

#[tokio::test]
async fn servers_start_in_parallel_and_a_dead_one_costs_only_its_own_timeout() {
    // Two that never answer (a TCP port that never accepts, a process that never speaks) with a short
    // time-out, three that work.
    let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hung_url = format!("http://{}/mcp", hung.local_addr().unwrap());
    let a = McpTestServer::start(McpServerOptions::new(Revision::Sessions)).await.unwrap();
    let b = McpTestServer::start(McpServerOptions::new(Revision::Stateless)).await.unwrap();
    let mut dead_http = remote(&hung_url);
    dead_http.timeout_ms = Some(1500);
    let mut dead_stdio = McpSettings::local(vec!["sleep".into(), "30".into()]);
    dead_stdio.timeout_ms = Some(1500);
    let servers = vec![
        ("a", remote(&a.url())),
        ("b", remote(&b.url())),
        ("local", McpSettings::local(vec!["bash".into(), fixture("fake-mcp.sh")])),
        ("dead", dead_http),
        ("mute", dead_stdio),
    ];
    let h = McpHarness::new(script(vec![Reply::text("hi")]), servers, vec![]).await;
    let started = Instant::now();
    let (outcome, warnings) = h.prompt("hi").await;
    let elapsed = started.elapsed();
    assert_eq!(outcome.stop, StopReason::Completed);
    eprintln!("first request after {} ms with 5 servers, two dead (timeout_ms 1500)", elapsed.as_millis());
    assert!(elapsed < Duration::from_millis(2500), "the dead ones time out together: {elapsed:?}");
    for name in ["dead", "mute"] {
        let said: Vec<_> =
            warnings.iter().filter(|w| w.starts_with(&format!("MCP server {name} "))).collect();
        assert_eq!(said.len(), 1, "{name} says why once: {warnings:?}");
        assert!(said[0].contains("1500 ms"), "{said:?}");
    }
    let offered = h.offered(0);
    for tool in ["a_echo", "b_echo", "local_echo"] {
        assert!(offered.contains(&tool.to_owned()), "{tool}: {offered:?}");
    }
    let (_, again) = h.prompt("again").await;
    assert!(again.is_empty(), "said once, not every run: {again:?}");
}

#[tokio::test]
async fn a_crashed_server_is_withdrawn_restarted_once_and_both_sides_are_told() {
    let starts = tempfile::NamedTempFile::new().unwrap();
    let mut settings = McpSettings::local(vec!["bash".into(), fixture("crash-mcp.sh")]);
    settings.env.insert("MCP_STARTS".into(), starts.path().display().to_string());
    let h = McpHarness::new(
        script(vec![
            Reply::tool_call("c_crash", json!({})),
            Reply::text("it crashed"),
            Reply::tool_call("c_echo", json!({"text": "back"})),
            Reply::text("it is back"),
        ]),
        vec![("c", settings)],
        vec![],
    )
    .await;
    let (outcome, warnings) = h.prompt("crash it").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    let ToolState::Error(error) = &h.tool_states().await[0] else { panic!("{:?}", h.tool_states().await) };
    assert!(error.error.contains("MCP server `c` is gone"), "{}", error.error);
    assert!(
        !h.offered(1).iter().any(|t| t.starts_with("c_")),
        "withdrawn from the next request: {:?}",
        h.offered(1)
    );
    let note = h.messages(1).last().cloned().unwrap();
    assert!(note.to_string().contains("The MCP server `c` stopped"), "the model is told: {note}");
    assert!(
        warnings.iter().any(|w| w.starts_with("MCP server c stopped") && w.contains("restarted")),
        "{warnings:?}"
    );

    let reconnected = eventually(Duration::from_secs(10), async || {
        h.engine.mcp_status().await.iter().any(|s| s.name == "c" && s.state == ServerState::Connected)
    })
    .await;
    assert!(reconnected, "restarted after its back-off: {:?}", h.engine.mcp_status().await);
    assert_eq!(std::fs::read_to_string(starts.path()).unwrap().lines().count(), 2, "started twice");
    let (outcome, warnings) = h.prompt("use it again").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    assert!(h.offered(2).contains(&"c_echo".to_owned()), "{:?}", h.offered(2));
    assert!(warnings.iter().any(|w| w.contains("MCP server c restarted")), "{warnings:?}");
    assert!(h.messages(2).last().unwrap().to_string().contains("restarted"), "the model hears it is back");
    assert_eq!(tool_results(&h.messages(3)).last().unwrap().1, "echo: back");
}

#[tokio::test]
async fn a_stopped_remote_server_is_withdrawn_and_says_so() {
    let server = McpTestServer::start(McpServerOptions::new(Revision::Stateless)).await.unwrap();
    let url = server.url();
    let h = McpHarness::new(
        script(vec![
            Reply::tool_call("web_echo", json!({"text": "one"})),
            Reply::tool_call("web_echo", json!({"text": "two"})),
            Reply::text("gone"),
        ]),
        vec![("web", remote(&url))],
        vec![],
    )
    .await;
    h.engine.mcp_status().await;
    server.stop().await;
    let (outcome, warnings) = h.prompt("echo twice").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    let states = h.tool_states().await;
    let ToolState::Error(error) = &states[0] else { panic!("{states:?}") };
    assert!(error.error.contains("is gone"), "{}", error.error);
    assert!(!h.offered(1).iter().any(|t| t.starts_with("web_")), "{:?}", h.offered(1));
    assert!(warnings.iter().any(|w| w.starts_with("MCP server web stopped")), "{warnings:?}");
}

#[tokio::test]
async fn tools_list_changed_refreshes_the_tools_for_the_next_step() {
    for revision in [Revision::Sessions, Revision::Stateless] {
        let server = McpTestServer::start(McpServerOptions::new(revision)).await.unwrap();
        let h = McpHarness::new(
            script(vec![
                Reply::tool_call("web_add_tool", json!({})),
                Reply::tool_call("web_added", json!({})),
                Reply::text("done"),
            ]),
            vec![("web", remote(&server.url()))],
            vec![],
        )
        .await;
        let (outcome, _) = h.prompt("add a tool and use it").await;
        assert_eq!(outcome.stop, StopReason::Completed);
        assert!(!h.offered(0).contains(&"web_added".to_owned()));
        assert!(h.offered(1).contains(&"web_added".to_owned()), "{revision:?}: {:?}", h.offered(1));
        assert_eq!(tool_results(&h.messages(2)).last().unwrap().1, "the added tool works", "{revision:?}");
    }
}

#[tokio::test]
async fn a_session_the_server_dropped_is_opened_again() {
    let server = McpTestServer::start(McpServerOptions::new(Revision::Sessions)).await.unwrap();
    let h = McpHarness::new(
        script(vec![
            Reply::tool_call("web_echo", json!({"text": "one"})),
            Reply::text("one"),
            Reply::tool_call("web_echo", json!({"text": "two"})),
            Reply::text("two"),
        ]),
        vec![("web", remote(&server.url()))],
        vec![],
    )
    .await;
    h.prompt("first").await;
    let first_session =
        server.requests().iter().rev().find_map(|r| r.header("mcp-session-id").map(str::to_owned)).unwrap();
    server.drop_sessions().await;
    let (outcome, warnings) = h.prompt("second").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(tool_results(&h.messages(3)).last().unwrap().1, "echo: two");
    let requests = server.requests();
    assert!(requests.iter().any(|r| r.status == 404), "the server said the session is gone");
    assert_eq!(server.rpc_methods().iter().filter(|m| *m == "initialize").count(), 2, "a new session");
    let last = requests.iter().rev().find_map(|r| r.header("mcp-session-id")).unwrap();
    assert_ne!(last, first_session);
}

#[tokio::test]
async fn images_and_audio_reach_the_model_as_attachments() {
    let server = McpTestServer::start(McpServerOptions::new(Revision::Stateless)).await.unwrap();
    let h = McpHarness::new(
        script(vec![
            Reply::tool_call("web_image", json!({})),
            Reply::tool_call("web_audio", json!({})),
            Reply::text("seen and heard"),
        ]),
        vec![("web", remote(&server.url()))],
        vec![],
    )
    .await;
    h.prompt("look and listen").await;
    let states = h.tool_states().await;
    let ToolState::Completed(image) = &states[0] else { panic!("{states:?}") };
    assert_eq!(image.attachments[0].mime, "image/png");
    let ToolState::Completed(audio) = &states[1] else { panic!("{states:?}") };
    assert_eq!(audio.attachments[0].mime, "audio/wav");
    let request = h.fake.requests()[2].body.to_string();
    assert!(request.contains("data:image/png;base64,"), "the image goes to the model: {request}");
    assert!(request.contains("[Attached audio/wav"), "audio this API cannot take becomes a note: {request}");
}

#[tokio::test]
async fn resources_are_listed_and_read_through_two_tools() {
    let server = McpTestServer::start(McpServerOptions::new(Revision::Sessions)).await.unwrap();
    let h = McpHarness::new(
        script(vec![
            Reply::tool_call("list_mcp_resources", json!({})),
            Reply::tool_call("read_mcp_resource", json!({"server": "web", "uri": "file:///notes.txt"})),
            Reply::tool_call("read_mcp_resource", json!({"server": "web", "uri": "file:///logo.png"})),
            Reply::text("read"),
        ]),
        vec![("web", remote(&server.url()))],
        vec![],
    )
    .await;
    h.prompt("what resources are there").await;
    assert!(h.offered(0).contains(&"list_mcp_resources".to_owned()));
    let results = tool_results(&h.messages(3));
    let listed: Value = serde_json::from_str(&results[0].1).unwrap();
    assert_eq!(
        listed,
        json!([
            {"server": "web", "uri": "file:///notes.txt", "name": "notes", "mimeType": "text/plain"},
            {"server": "web", "uri": "file:///logo.png", "name": "logo", "mimeType": "image/png"}
        ])
    );
    assert_eq!(results[1].1, "the notes say hi");
    let ToolState::Completed(logo) = &h.tool_states().await[2] else { panic!() };
    assert_eq!(logo.attachments[0].mime, "image/png");
}

#[tokio::test]
async fn prompts_are_there_for_commands() {
    let server = McpTestServer::start(McpServerOptions::new(Revision::Stateless)).await.unwrap();
    let h = McpHarness::new(script(vec![]), vec![("web", remote(&server.url()))], vec![]).await;
    let prompts = h.engine.mcp_prompts().await;
    assert_eq!(prompts.len(), 2);
    assert_eq!(prompts[0].command, "mcp__web__greet");
    assert_eq!(prompts[0].arguments[0].name, "name");
    assert!(prompts[0].arguments[0].required);
    let text = h
        .engine
        .mcp_prompt("mcp__web__greet", BTreeMap::from([("name".to_owned(), "Ada".to_owned())]))
        .await
        .unwrap();
    assert_eq!(text.text, "Say hello to Ada.");
    let unknown = h.engine.mcp_prompt("mcp__web__nope", BTreeMap::new()).await.unwrap_err();
    assert!(unknown.to_string().contains("mcp__web__greet"), "{unknown}");
}

#[tokio::test]
async fn timeout_ms_bounds_each_call_and_the_server_stays_usable() {
    let server = McpTestServer::start(McpServerOptions::new(Revision::Stateless)).await.unwrap();
    let mut settings = remote(&server.url());
    settings.timeout_ms = Some(400);
    let h = McpHarness::new(
        script(vec![
            Reply::tool_call("web_slow", json!({"ms": 5000})),
            Reply::tool_call("web_echo", json!({"text": "still here"})),
            Reply::text("done"),
        ]),
        vec![("web", settings)],
        vec![],
    )
    .await;
    let started = Instant::now();
    let (outcome, _) = h.prompt("be slow").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the slow call was cut at 400 ms: {:?}",
        started.elapsed()
    );
    let states = h.tool_states().await;
    let ToolState::Error(slow) = &states[0] else { panic!("{states:?}") };
    assert!(slow.error.contains("within 400 ms"), "{}", slow.error);
    // It went out: the model is not told it did nothing (DESIGN.md §5m).
    assert!(slow.error.contains("The request reached the server (operation id"), "{}", slow.error);
    assert_eq!(tool_results(&h.messages(2)).last().unwrap().1, "echo: still here");
}

#[tokio::test]
async fn a_remote_tool_asks_under_its_own_name_like_any_tool() {
    let server = McpTestServer::start(McpServerOptions::new(Revision::Stateless)).await.unwrap();
    let data = tempfile::tempdir().unwrap();
    let h = McpHarness::tweaked(
        data,
        script(vec![Reply::tool_call("web_echo", json!({"text": "may I"})), Reply::text("refused")]),
        vec![("web", remote(&server.url()))],
        vec![],
        |config| {
            let rules: toml::Value = toml::from_str("web_echo = \"ask\"").unwrap();
            config.permission = codeloop_core::config::PermissionConfig::try_from(rules).unwrap();
        },
    )
    .await;
    let (outcome, _) = h.prompt("call it").await;
    assert!(
        matches!(outcome.stop, StopReason::Blocked(_)),
        "headless, an ask is refused: {:?}",
        outcome.stop
    );
    assert!(
        !server.requests().iter().any(|r| r.rpc_method.as_deref() == Some("tools/call")),
        "a refused call never reaches the server"
    );
}

#[tokio::test]
async fn a_disabled_server_is_listed_and_never_contacted() {
    let server = McpTestServer::start(McpServerOptions::new(Revision::Stateless)).await.unwrap();
    let settings = McpSettings { enabled: false, ..remote(&server.url()) };
    let h = McpHarness::new(script(vec![Reply::text("hi")]), vec![("off", settings)], vec![]).await;
    h.prompt("hi").await;
    let status = h.engine.mcp_status().await;
    assert_eq!((status[0].state, status[0].tools), (ServerState::Disabled, 0));
    assert!(server.requests().is_empty());
}
