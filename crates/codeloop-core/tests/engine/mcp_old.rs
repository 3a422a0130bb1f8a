//! MCP servers of the older revisions as they are deployed (DESIGN.md §5o): a plain JSON server that
//! answers every method it does not know with an empty result — `server/discover` included, as the
//! official conformance suite's `initialize` server does; and what servers ask of the person mid-call
//! (elicitation).

use std::sync::{Arc, Mutex};

use axum::{Json, Router, routing::post};
use codeloop_core::StopReason;
use codeloop_testkit::{McpServerOptions, McpTestServer, Reply, Revision};
use codeloop_types::{ElicitationAction, ElicitationMode, ElicitationReply, EventPayload};
use serde_json::{Value, json};

use crate::harness::tool_results;

use super::mcp::*;

/// The methods it was sent, in order, and its URL.
struct OldServer {
    url: String,
    methods: Arc<Mutex<Vec<String>>>,
}

async fn old_server() -> OldServer {
    let methods = Arc::new(Mutex::new(Vec::new()));
    let seen = methods.clone();
    let app = Router::new().route(
        "/mcp",
        post(move |Json(request): Json<Value>| {
            let seen = seen.clone();
            async move {
                let method = request["method"].as_str().unwrap_or_default().to_owned();
                seen.lock().unwrap().push(method.clone());
                let result = match method.as_str() {
                    "initialize" => json!({
                        "protocolVersion": "2025-06-18",
                        "serverInfo": {"name": "old", "version": "1"},
                        "capabilities": {"tools": {}},
                    }),
                    "tools/list" => json!({"tools": [{
                        "name": "add",
                        "description": "Adds two numbers",
                        "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
                    }]}),
                    "tools/call" => {
                        let args = &request["params"]["arguments"];
                        let sum = args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0);
                        json!({"content": [{"type": "text", "text": format!("sum {sum}")}]})
                    }
                    _ => json!({}),
                };
                match request.get("id") {
                    Some(id) => (axum::http::StatusCode::OK, Json(json!({"jsonrpc": "2.0", "id": id, "result": result}))),
                    None => (axum::http::StatusCode::ACCEPTED, Json(Value::Null)),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    OldServer { url, methods }
}

#[tokio::test]
async fn a_server_that_answers_discover_with_an_empty_result_is_reached_with_initialize() {
    let server = old_server().await;
    let h = McpHarness::new(
        script(vec![Reply::tool_call("old_add", json!({"a": 5, "b": 3})), Reply::text("done")]),
        vec![("old", remote(&server.url))],
        vec![],
    )
    .await;
    let (outcome, warnings) = h.prompt("add").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(tool_results(&h.messages(1))[0].1, "sum 8");
    let methods = server.methods.lock().unwrap().clone();
    assert_eq!(methods.first().map(String::as_str), Some("server/discover"), "{methods:?}");
    let initialize = methods.iter().position(|m| m == "initialize").expect("initialize was sent");
    assert!(methods[initialize..].contains(&"tools/call".to_owned()), "{methods:?}");
}

// ---- elicitation (DESIGN.md §5o) ----

#[tokio::test]
async fn a_headless_run_declines_an_elicitation_and_says_so_once() {
    let server = McpTestServer::start(McpServerOptions::new(Revision::Sessions)).await.unwrap();
    let h = McpHarness::new(
        script(vec![
            Reply::tool_call("web_ask", json!({})),
            Reply::tool_call("web_ask", json!({})),
            Reply::text("done"),
        ]),
        vec![("web", remote(&server.url()))],
        vec![],
    )
    .await;
    let (outcome, warnings) = h.prompt("ask twice").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    assert_eq!(tool_results(&h.messages(1))[0].1, "decline null");
    assert_eq!(tool_results(&h.messages(2)).last().unwrap().1, "decline null");
    let said: Vec<_> = warnings.iter().filter(|w| w.contains("MCP server web asked for input")).collect();
    assert_eq!(said.len(), 1, "{warnings:?}");
    assert!(said[0].contains("Which name, how many?") && said[0].contains("declined"), "{said:?}");
}

#[tokio::test]
async fn an_answered_elicitation_reaches_the_server_with_the_schemas_defaults() {
    let server = McpTestServer::start(McpServerOptions::new(Revision::Sessions)).await.unwrap();
    let h = McpHarness::answered(
        script(vec![Reply::tool_call("web_ask", json!({})), Reply::text("done")]),
        vec![("web", remote(&server.url()))],
    )
    .await;
    let mut events = h.engine.bus().subscribe();
    let engine = h.engine.clone();
    let session = h.session.id.clone();
    let answerer = tokio::spawn(async move {
        let mut asked = None;
        while let Ok(event) = events.recv().await {
            match event.payload.clone() {
                EventPayload::PermissionAsked(request) => {
                    let answer = codeloop_core::PermissionAnswer::Once;
                    let command =
                        codeloop_core::SessionCommand::AnswerPermission { request: request.id, answer };
                    engine.submit(command).await.unwrap();
                }
                EventPayload::ElicitationAsked(request) => {
                    assert_eq!(engine.pending_elicitations(&session).len(), 1);
                    let reply = ElicitationReply {
                        action: ElicitationAction::Accept,
                        content: Some(json!({"count": 3})),
                    };
                    engine.answer_elicitation(&session, &request.id, reply).unwrap();
                    asked = Some(request);
                }
                EventPayload::ElicitationReplied { action, .. } => {
                    assert_eq!(action, ElicitationAction::Accept);
                    return asked;
                }
                _ => {}
            }
        }
        asked
    });
    let (outcome, _) = h.prompt("ask").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    let asked = answerer.await.unwrap().expect("the elicitation was announced");
    assert_eq!(asked.ask.server, "web");
    assert_eq!(asked.ask.message, "Which name, how many?");
    assert_eq!(asked.ask.mode, ElicitationMode::Form);
    assert!(asked.tool.is_some(), "it names the call it belongs to");
    // The name was left out: it took the schema's default.
    assert_eq!(tool_results(&h.messages(1))[0].1, r#"accept {"count":3,"name":"Ada"}"#);
    assert!(h.engine.pending_elicitations(&h.session.id).is_empty());
}

// ---- the legacy HTTP+SSE transport (2024-11-05) ----

/// A server of the 2024-11-05 revision: `GET /sse` is the event stream (its first event names the
/// endpoint), `POST /messages` takes requests (202) and answers on the stream; a POST to `/sse` is 405.
async fn legacy_server() -> OldServer {
    use axum::response::sse::{Event, Sse};
    use axum::routing::get;
    use futures::StreamExt as _;
    use tokio::sync::mpsc;

    let methods = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::unbounded_channel::<Value>();
    let rx = Arc::new(Mutex::new(Some(rx)));
    let seen = methods.clone();
    let app = Router::new()
        .route(
            "/sse",
            get(move || {
                let rx = rx.lock().unwrap().take();
                async move {
                    let endpoint = futures::stream::once(async {
                        Ok::<_, std::convert::Infallible>(Event::default().event("endpoint").data("/messages?session=1"))
                    });
                    let messages = futures::stream::unfold(rx, |rx| async move {
                        let mut rx = rx?;
                        let message = rx.recv().await?;
                        let event = Event::default().event("message").data(message.to_string());
                        Some((Ok(event), Some(rx)))
                    });
                    Sse::new(endpoint.chain(messages))
                }
            }),
        )
        .route(
            "/messages",
            post(move |Json(request): Json<Value>| {
                let (seen, tx) = (seen.clone(), tx.clone());
                async move {
                    let method = request["method"].as_str().unwrap_or_default().to_owned();
                    seen.lock().unwrap().push(method.clone());
                    let result = match method.as_str() {
                        "initialize" => Some(json!({
                            "protocolVersion": "2024-11-05",
                            "serverInfo": {"name": "legacy", "version": "1"},
                            "capabilities": {"tools": {}},
                        })),
                        "tools/list" => Some(json!({"tools": [{
                            "name": "add",
                            "description": "Adds two numbers",
                            "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
                        }]})),
                        "tools/call" => {
                            let args = &request["params"]["arguments"];
                            let sum = args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0);
                            Some(json!({"content": [{"type": "text", "text": format!("legacy sum {sum}")}]}))
                        }
                        _ => None,
                    };
                    if let (Some(id), Some(result)) = (request.get("id"), result) {
                        let _ = tx.send(json!({"jsonrpc": "2.0", "id": id, "result": result}));
                    }
                    axum::http::StatusCode::ACCEPTED
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/sse", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    OldServer { url, methods }
}

#[tokio::test]
async fn a_legacy_http_sse_server_is_reached_by_fallback_and_by_transport_sse() {
    for explicit in [false, true] {
        let server = legacy_server().await;
        let mut settings = remote(&server.url);
        if explicit {
            settings.transport = Some(codeloop_core::mcp::RemoteTransport::Sse);
        }
        let h = McpHarness::new(
            script(vec![Reply::tool_call("old_add", json!({"a": 40, "b": 2})), Reply::text("done")]),
            vec![("old", settings)],
            vec![],
        )
        .await;
        let (outcome, warnings) = h.prompt("add").await;
        assert_eq!(outcome.stop, StopReason::Completed, "explicit: {explicit}");
        assert!(warnings.is_empty(), "explicit: {explicit}: {warnings:?}");
        assert_eq!(tool_results(&h.messages(1))[0].1, "legacy sum 42", "explicit: {explicit}");
        let methods = server.methods.lock().unwrap().clone();
        assert_eq!(
            methods.first().map(String::as_str),
            Some("initialize"),
            "explicit: {explicit}: {methods:?}"
        );
        assert!(methods.contains(&"tools/call".to_owned()), "{methods:?}");
        // A listing says how it is really reached, found by itself or configured.
        let status = h.engine.mcp_status().await;
        assert_eq!(status[0].transport, codeloop_core::mcp::TransportKind::Sse, "explicit: {explicit}");
    }
}

#[tokio::test]
async fn an_endpoint_on_another_origin_is_refused() {
    use axum::response::sse::{Event, Sse};
    use axum::routing::get;
    let app = Router::new().route(
        "/sse",
        get(|| async {
            let event = Event::default().event("endpoint").data("http://203.0.113.9/messages");
            Sse::new(
                futures::stream::iter([Ok::<_, std::convert::Infallible>(event)])
                    .chain(futures::stream::pending()),
            )
        }),
    );
    use futures::StreamExt as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/sse", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let mut settings = remote(&url);
    settings.transport = Some(codeloop_core::mcp::RemoteTransport::Sse);
    let h = McpHarness::new(script(vec![Reply::text("done")]), vec![("evil", settings)], vec![]).await;
    let (_, warnings) = h.prompt("hi").await;
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("MCP server evil is not available") && w.contains("another origin")),
        "{warnings:?}"
    );
}

// ---- progress and log notifications (DESIGN.md §5o) ----

#[tokio::test]
async fn progress_shows_on_the_running_part_and_a_warning_log_is_told_and_kept() {
    let server = McpTestServer::start(McpServerOptions::new(Revision::Sessions)).await.unwrap();
    let h = McpHarness::new(
        script(vec![Reply::tool_call("web_report", json!({})), Reply::text("done")]),
        vec![("web", remote(&server.url()))],
        vec![],
    )
    .await;
    let mut events = h.engine.bus().subscribe();
    let (outcome, warnings) = h.prompt("report").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    // Live: the running part's title and metadata carried the progress.
    let mut titles = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let EventPayload::PartUpdated { part, .. } = &event.payload
            && let codeloop_types::PartKind::Tool(tool) = &part.kind
            && let codeloop_types::ToolState::Running(running) = &tool.state
            && let Some(title) = &running.title
        {
            titles.push(title.clone());
        }
    }
    assert!(titles.contains(&"100% · step 2".to_owned()), "{titles:?}");
    assert!(
        warnings.iter().any(|w| w == "MCP server web report (warning): disk almost full"),
        "{warnings:?}"
    );
    // Kept: the finished part's metadata holds the last progress and the log.
    let states = h.tool_states().await;
    let codeloop_types::ToolState::Completed(done) = &states[0] else { panic!("{states:?}") };
    assert_eq!(done.metadata["progress"], json!({"progress": 2.0, "total": 2.0, "message": "step 2"}));
    assert_eq!(
        done.metadata["logs"],
        json!([{"level": "warning", "logger": "report", "data": "disk almost full"}])
    );
    assert_eq!(done.metadata["server"], "web");
}

// ---- typed prompt content (DESIGN.md §5o) ----

#[tokio::test]
async fn an_mcp_prompts_image_reaches_the_model_as_an_image_not_as_json_text() {
    let server = McpTestServer::start(McpServerOptions::new(Revision::Sessions)).await.unwrap();
    let h =
        McpHarness::new(script(vec![Reply::text("a pixel")]), vec![("web", remote(&server.url()))], vec![])
            .await;
    let command = codeloop_core::SessionCommand::RunCommand {
        session: h.session.id.clone(),
        name: "mcp__web__picture".into(),
        arguments: String::new(),
        delivery: codeloop_core::Delivery::Queue,
        effort: None,
    };
    h.engine.submit(command).await.unwrap();
    let request = h.fake.requests()[0].body.clone();
    let user = request["messages"].as_array().unwrap().iter().rfind(|m| m["role"] == "user").unwrap().clone();
    let text = user.to_string();
    assert!(text.contains("Describe this picture."), "{user}");
    assert!(text.contains("the notes say hi"), "the embedded resource's text is text: {user}");
    assert!(!text.contains("\"mimeType\""), "no block pasted as JSON: {user}");
    let image =
        user["content"].as_array().unwrap().iter().find(|c| c["type"] == "image_url").expect("an image part");
    assert!(image["image_url"]["url"].as_str().unwrap().starts_with("data:image/png;base64,"), "{image}");
}

// ---- tool search (DESIGN.md §5o) ----

#[tokio::test]
async fn over_the_budget_the_rest_wait_behind_tool_search_and_a_search_loads_them() {
    let mut options = McpServerOptions::new(Revision::Sessions);
    options.extra_tools = 100;
    let server = McpTestServer::start(options).await.unwrap();
    let h = McpHarness::new(
        script(vec![
            Reply::tool_call("tool_search", json!({"query": "select:web_extra_77"})),
            Reply::tool_call("web_extra_77", json!({"id": "a"})),
            Reply::text("done"),
        ]),
        vec![("web", remote(&server.url()))],
        vec![],
    )
    .await;
    let (outcome, warnings) = h.prompt("use extra 77").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    assert!(warnings.is_empty(), "{warnings:?}");
    let first = h.offered(0);
    let mcp_offered = first.iter().filter(|n| n.starts_with("web_")).count();
    assert!(mcp_offered <= 40 && mcp_offered > 0, "{mcp_offered} of the server's 109 tools offered");
    assert!(!first.contains(&"web_extra_77".to_owned()), "deferred at first: {first:?}");
    let requests = h.fake.requests();
    let search = &requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "tool_search")
        .expect("tool_search is offered")["function"]["description"];
    assert!(search.as_str().unwrap().contains("- web_extra_77: Extra tool number 77"), "{search}");
    // After the search, the tool is offered at the end of the list; the prefix before it is unchanged.
    let second = h.offered(1);
    assert_eq!(second.last().map(String::as_str), Some("web_extra_77"), "{second:?}");
    assert_eq!(&second[..second.len() - 1], &first[..], "the earlier tools are sent as before");
    assert_eq!(tool_results(&h.messages(2)).last().unwrap().1, "extra_77 answered");
    let size = |n: usize| h.fake.requests()[n].body["tools"].to_string().len();
    // Without the budget, every schema goes with every request.
    let mut options = McpServerOptions::new(Revision::Sessions);
    options.extra_tools = 100;
    let all = McpTestServer::start(options).await.unwrap();
    let unbounded = McpHarness::tweaked(
        tempfile::tempdir().unwrap(),
        script(vec![Reply::text("done")]),
        vec![("web", remote(&all.url()))],
        vec![],
        |config| {
            config.mcp.tool_budget_bytes = Some(10_000_000);
            config.mcp.tool_budget_tools = Some(10_000);
        },
    )
    .await;
    unbounded.prompt("hi").await;
    let everything = unbounded.fake.requests()[0].body["tools"].to_string().len();
    assert!(size(0) * 10 < everything * 6, "{} bytes with the budget, {everything} without", size(0));
    println!(
        "tools of the first request with 109 MCP tools: {} bytes with the budget, {everything} without",
        size(0)
    );
}

#[tokio::test]
async fn under_the_budget_every_tool_is_sent_and_tool_search_is_not_offered() {
    let server = McpTestServer::start(McpServerOptions::new(Revision::Sessions)).await.unwrap();
    let h = McpHarness::new(script(vec![Reply::text("done")]), vec![("web", remote(&server.url()))], vec![])
        .await;
    h.prompt("hi").await;
    let offered = h.offered(0);
    assert!(
        offered.contains(&"web_echo".to_owned()) && offered.contains(&"web_report".to_owned()),
        "{offered:?}"
    );
    assert!(!offered.contains(&"tool_search".to_owned()), "{offered:?}");
}

// ---- sampling (DESIGN.md §5o) ----

fn allow_sampling(config: &mut codeloop_core::config::Config) {
    config.permission = codeloop_core::config::PermissionConfig(vec![codeloop_types::PermissionRule::new(
        "mcp_sampling",
        "web",
        codeloop_types::PermissionAction::Allow,
    )]);
}

#[tokio::test]
async fn a_sampling_request_a_rule_allows_is_answered_by_the_sessions_model_and_counted() {
    let server = McpTestServer::start(McpServerOptions::new(Revision::Sessions)).await.unwrap();
    let usage = codeloop_testkit::ScriptUsage { input: 30, output: 2, ..Default::default() };
    let h = McpHarness::tweaked(
        tempfile::tempdir().unwrap(),
        script(vec![
            Reply::tool_call("web_sample", json!({})),
            Reply::text("Teal").with_usage(usage),
            Reply::text("done"),
        ]),
        vec![("web", remote(&server.url()))],
        vec![],
        allow_sampling,
    )
    .await;
    let (outcome, _) = h.prompt("sample").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    // The server's request went to the model as it was: its system prompt, its message, no tools.
    let asked = &h.fake.requests()[1].body;
    assert!(
        asked.to_string().contains("Answer in one word.") && asked.to_string().contains("Name a colour."),
        "{asked}"
    );
    assert!(asked["tools"].as_array().is_none_or(|t| t.is_empty()), "{asked}");
    assert_eq!(asked["max_tokens"].as_u64().or(asked["max_completion_tokens"].as_u64()), Some(20), "{asked}");
    assert_eq!(tool_results(&h.messages(2)).last().unwrap().1, "sampled: Teal");
    let states = h.tool_states().await;
    let codeloop_types::ToolState::Completed(done) = &states[0] else { panic!("{states:?}") };
    assert_eq!(done.metadata["sampling"][0]["answer"], "Teal");
    assert_eq!(done.metadata["sampling"][0]["model"], "fake/test");
    // Its tokens count in the session's totals.
    let session = h.engine.session(&h.session.id).await.unwrap();
    assert!(session.tokens.input >= 30, "{:?}", session.tokens);
}

#[tokio::test]
async fn a_sampling_request_no_one_allows_is_refused_and_the_model_is_not_asked() {
    let server = McpTestServer::start(McpServerOptions::new(Revision::Sessions)).await.unwrap();
    let h = McpHarness::new(
        script(vec![Reply::tool_call("web_sample", json!({})), Reply::text("done")]),
        vec![("web", remote(&server.url()))],
        vec![],
    )
    .await;
    let (outcome, _) = h.prompt("sample").await;
    assert_eq!(outcome.stop, StopReason::Completed);
    let result = tool_results(&h.messages(1)).last().unwrap().1.clone();
    assert!(result.contains("sampling failed") && result.contains("not allowed"), "{result}");
    assert_eq!(h.fake.requests().len(), 2, "no request for the server");
}

#[tokio::test]
async fn what_sampling_costs_counts_against_the_sessions_cost_limit() {
    let server = McpTestServer::start(McpServerOptions::new(Revision::Sessions)).await.unwrap();
    // $1 of sampling ($1 per million input tokens) against a $0.50 limit.
    let costly = codeloop_testkit::ScriptUsage { input: 1_000_000, output: 1, ..Default::default() };
    let h = McpHarness::tweaked(
        tempfile::tempdir().unwrap(),
        script(vec![
            Reply::tool_call("web_sample", json!({})),
            Reply::text("Teal").with_usage(costly),
            Reply::text("never sent"),
        ]),
        vec![("web", remote(&server.url()))],
        vec![],
        |config| {
            allow_sampling(config);
            config.limits.session_max_cost_usd = Some(0.5);
        },
    )
    .await;
    let (outcome, _) = h.prompt("sample").await;
    assert!(matches!(outcome.stop, StopReason::Limit(_)), "{:?}", outcome.stop);
    assert_eq!(h.fake.requests().len(), 2, "the step and the sampling; no request past the limit");
    let session = h.engine.session(&h.session.id).await.unwrap();
    assert!(session.cost >= 1.0, "the sampling's cost is the session's: {}", session.cost);
}

// ---- an interrupted call says its request went out (DESIGN.md §5m) ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_call_interrupted_after_its_request_went_out_says_so_with_its_operation_id() {
    let server = McpTestServer::start(McpServerOptions::new(Revision::Sessions)).await.unwrap();
    let h = McpHarness::new(
        script(vec![Reply::tool_call("web_slow", json!({"ms": 20_000})), Reply::text("I will check first.")]),
        vec![("web", remote(&server.url()))],
        vec![],
    )
    .await;
    let engine = h.engine.clone();
    let session = h.session.id.clone();
    let run = tokio::spawn(async move {
        engine
            .prompt(&session, codeloop_core::PromptInput::text("be slow"), codeloop_core::Delivery::Queue)
            .await
    });
    let arrived = eventually(std::time::Duration::from_secs(10), async || {
        server.requests().iter().any(|r| r.tool.as_deref() == Some("slow"))
    })
    .await;
    assert!(arrived, "the server got the call");
    assert!(h.engine.abort(&h.session.id).await);
    let _ = run.await.unwrap();
    let states = h.tool_states().await;
    let codeloop_types::ToolState::Error(cut) = &states[0] else { panic!("{states:?}") };
    let metadata = cut.metadata.clone().unwrap_or_default();
    assert_eq!(metadata["outcome"], "unknown", "{metadata}");
    assert_eq!(metadata["request_sent"], true, "{metadata}");
    let call = server.requests().into_iter().find(|r| r.tool.as_deref() == Some("slow")).unwrap();
    let operation = call.meta.as_ref().and_then(|m| m["codeloop/operation"].as_str()).unwrap().to_owned();
    assert_eq!(metadata["operation"], operation.as_str(), "the id the server got is the one recorded");
    // The next request tells the model the request went out, and under which id.
    h.prompt("what happened?").await;
    let told = tool_results(&h.messages(1));
    let text = &told.last().unwrap().1;
    assert!(
        text.contains("after its request reached the MCP server `web`") && text.contains(&operation),
        "{text}"
    );
}
