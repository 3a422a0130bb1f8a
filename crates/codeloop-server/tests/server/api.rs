//! REST routes: sessions, messages, blocking prompts, permissions over HTTP, errors, config, models, /doc.

use codeloop_core::config::PermissionConfig;
use codeloop_core::permission::AskPolicy;
use codeloop_testkit::{Reply, Script, Turn};
use codeloop_types::{PermissionAction, PermissionRule};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::{Harness, read};

fn error_code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or_else(|| panic!("not a JSON error: {body}"))
}

#[tokio::test]
async fn sessions_are_created_listed_renamed_and_deleted() {
    let h = Harness::start(Script::new(Vec::<Turn>::new())).await;
    let (status, created) = h.post("/session", json!({"title": "first", "model": "fake/test"})).await;
    assert_eq!(status, 200, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("ses_"));
    assert_eq!(created["title"], "first");
    assert_eq!(created["model"], json!({"provider_id": "fake", "model_id": "test"}));
    assert_eq!(created["directory"], json!(h.project.path().canonicalize().unwrap().display().to_string()));

    let (_, child) = h
        .post("/session", json!({"parent_id": id, "model": {"provider_id": "fake", "model_id": "test"}}))
        .await;
    let (_, children) = h.get(&format!("/session/{id}/children")).await;
    assert_eq!(children.as_array().unwrap().len(), 1);
    assert_eq!(children[0]["id"], child["id"]);
    let (_, all) = h.get("/session").await;
    assert_eq!(all.as_array().unwrap().len(), 2);
    let (_, roots) = h.get("/session?roots=true&limit=10").await;
    assert_eq!(roots.as_array().unwrap().len(), 1);

    let response = h
        .client
        .patch(h.url(&format!("/session/{id}")))
        .json(&json!({"title": "renamed"}))
        .send()
        .await
        .unwrap();
    assert_eq!(read(response).await.1["title"], "renamed");
    assert_eq!(h.get(&format!("/session/{id}")).await.1["title"], "renamed");

    let (_, todo) = h.get(&format!("/session/{id}/todo")).await;
    assert_eq!(todo, json!([]));
    let response = h.client.delete(h.url(&format!("/session/{id}"))).send().await.unwrap();
    assert_eq!(read(response).await, (200, json!(true)));
    let (status, body) = h.get(&format!("/session/{id}")).await;
    assert_eq!((status, error_code(&body)), (404, "not_found"));
    assert!(body["error"]["message"].as_str().unwrap().contains(&id));
    let (_, all) = h.get("/session").await;
    assert_eq!(all, json!([]), "children go with their parent");
}

#[tokio::test]
async fn a_blocking_prompt_returns_the_final_message_and_history_pages() {
    let h = Harness::start(Script::new([
        Turn::from(Reply::text("first answer")),
        Turn::from(Reply::text("second answer")),
    ]))
    .await;
    let session = h.create_session().await;
    let (status, result) = h
        .post(&format!("/session/{session}/prompt"), json!({"parts": [{"type": "text", "text": "hi"}]}))
        .await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["info"]["role"], "assistant");
    assert_eq!(result["stop"], json!({"type": "completed"}));
    let texts: Vec<&str> = result["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "text")
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["first answer"]);
    let (status, _) = h
        .post(&format!("/session/{session}/message"), json!({"parts": [{"type": "text", "text": "again"}]}))
        .await;
    assert_eq!(status, 200);

    let (_, page) = h.get(&format!("/session/{session}/message?limit=3")).await;
    let page = page.as_array().unwrap();
    let roles: Vec<&str> = page.iter().map(|m| m["info"]["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["assistant", "user", "assistant"], "newest first");
    let before = page[2]["info"]["id"].as_str().unwrap();
    let (_, older) = h.get(&format!("/session/{session}/message?limit=3&before={before}")).await;
    assert_eq!(older.as_array().unwrap().len(), 1);
    assert_eq!(older[0]["info"]["role"], "user");
    // Bounded by parts too: the newest answer holds more than one part, and comes alone (never none).
    let (status, light) = h.get(&format!("/session/{session}/message?limit=3&max_parts=1")).await;
    assert_eq!(status, 200, "{light}");
    assert_eq!(light.as_array().unwrap().len(), 1, "{light}");
    assert_eq!(light[0]["info"]["id"], page[0]["info"]["id"]);
    assert!(light[0]["parts"].as_array().unwrap().len() > 1, "the whole message: {light}");

    let message_id = result["info"]["id"].as_str().unwrap();
    let (status, one) = h.get(&format!("/session/{session}/message/{message_id}")).await;
    assert_eq!(status, 200);
    assert_eq!(one["info"]["id"], result["info"]["id"]);
    assert_eq!(one["parts"], result["parts"]);
    let other = h.create_session().await;
    let (status, _) = h.get(&format!("/session/{other}/message/{message_id}")).await;
    assert_eq!(status, 404, "a message is only found in its own session");

    let (status, aborted) = h.post(&format!("/session/{session}/abort"), json!({})).await;
    assert_eq!((status, aborted), (200, json!({"aborted": false})));
}

#[tokio::test]
async fn bad_requests_get_json_errors_that_say_what_is_wrong() {
    let h = Harness::start_with(Script::new(Vec::<Turn>::new()), |s| s.options.body_limit = 64 * 1024).await;
    let session = h.create_session().await;
    let prompt = format!("/session/{session}/prompt");

    let (status, body) = h.post(&prompt, json!({"parts": [{"type": "text", "text": "   "}]})).await;
    assert_eq!((status, error_code(&body)), (400, "invalid_request"));
    assert!(body["error"]["message"].as_str().unwrap().contains("empty"), "{body}");
    let (status, body) = h.post(&prompt, json!({"parts": "nope"})).await;
    assert_eq!((status, error_code(&body)), (400, "invalid_request"));
    assert!(body["error"]["message"].as_str().unwrap().contains("parts"), "{body}");
    let (status, body) =
        h.post(&prompt, json!({"parts": [{"type": "text", "text": "x"}], "agent": "nobody"})).await;
    assert_eq!((status, error_code(&body)), (400, "invalid_request"));
    let (status, body) =
        h.post(&prompt, json!({"parts": [{"type": "text", "text": "x"}], "model": "no-slash"})).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) =
        h.post("/session/ses_missing/prompt_async", json!({"parts": [{"type": "text", "text": "x"}]})).await;
    assert_eq!((status, error_code(&body)), (404, "not_found"));

    let response = h
        .client
        .post(h.url(&prompt))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    let (status, body) = read(response).await;
    assert_eq!((status, error_code(&body)), (400, "invalid_request"));
    let response = h.client.post(h.url(&prompt)).body(r#"{"parts": []}"#).send().await.unwrap();
    assert_eq!(read(response).await.0, 415);
    let huge = "x".repeat(100 * 1024);
    let (status, body) = h.post(&prompt, json!({"parts": [{"type": "text", "text": huge}]})).await;
    assert_eq!((status, error_code(&body)), (413, "payload_too_large"));

    let (status, body) = h.get(&format!("/session/{session}/message?limit=0")).await;
    assert_eq!((status, error_code(&body)), (400, "invalid_request"));
    let (status, body) = h.get(&format!("/session/{session}/message?limit=abc")).await;
    assert_eq!((status, error_code(&body)), (400, "invalid_request"));
    let (status, body) = h.get(&format!("/session/{session}/message?max_parts=0")).await;
    assert_eq!((status, error_code(&body)), (400, "invalid_request"));
    let (status, body) = h.post("/session", json!({"directory": "/definitely/not/here"})).await;
    assert_eq!((status, error_code(&body)), (400, "invalid_request"));
    let (status, body) = h.post(&format!("/session/{session}/compact"), json!({})).await;
    assert_eq!(status, 400, "nothing to compact: {body}");
    let (status, body) = h.get("/nowhere").await;
    assert_eq!((status, error_code(&body)), (404, "route_not_found"));
    let response = h.client.put(h.url("/session")).send().await.unwrap();
    assert_eq!(read(response).await.0, 405);
    let (status, body) = h.post("/permission/per_unknown/reply", json!({"reply": "sometimes"})).await;
    assert_eq!((status, error_code(&body)), (400, "invalid_request"));
}

#[tokio::test]
async fn an_mcp_servers_elicitation_is_listed_and_answered_over_http() {
    let mcp = codeloop_testkit::McpTestServer::start(codeloop_testkit::McpServerOptions::new(
        codeloop_testkit::Revision::Sessions,
    ))
    .await
    .unwrap();
    let h = Harness::start_with(
        Script::new([Turn::from(Reply::tool_call("web_ask", json!({}))), Turn::from(Reply::text("done"))]),
        |setup| {
            setup.ask_policy = AskPolicy::Wait;
            setup.config.mcp.insert("web".into(), codeloop_core::mcp::McpSettings::remote(mcp.url()));
            setup.config.permission =
                PermissionConfig(vec![PermissionRule::new("web_ask", "*", PermissionAction::Allow)]);
        },
    )
    .await;
    let session = h.create_session().await;
    let mut watcher = h.events(&format!("?session={session}")).await;
    h.post(&format!("/session/{session}/prompt_async"), json!({"parts": [{"type": "text", "text": "ask"}]}))
        .await;
    let asked = watcher.until(|e| e.kind() == "elicitation.asked").await.pop().unwrap();
    let id = asked.properties()["id"].as_str().unwrap().to_owned();
    let (status, pending) = h.get(&format!("/session/{session}/elicitation")).await;
    assert_eq!(status, 200);
    assert_eq!(pending.as_array().unwrap().len(), 1, "{pending}");
    assert_eq!(pending[0]["id"], json!(id));
    assert_eq!(pending[0]["server"], "web");
    assert_eq!(pending[0]["message"], "Which name, how many?");
    assert_eq!(pending[0]["mode"], "form");
    assert_eq!(pending[0]["schema"]["properties"]["name"]["default"], "Ada");

    let answer = format!("/session/{session}/elicitation/{id}");
    let (status, body) = h.post(&answer, json!({"action": "maybe"})).await;
    assert_eq!((status, error_code(&body)), (400, "invalid_request"));
    let (status, _) =
        h.post(&format!("/session/{session}/elicitation/eli_unknown"), json!({"action": "decline"})).await;
    assert_eq!(status, 404);
    assert_eq!(
        h.post(&answer, json!({"action": "accept", "content": {"count": 2}})).await,
        (200, json!(true))
    );
    assert_eq!(h.post(&answer, json!({"action": "accept"})).await.0, 404, "answered once");

    let rest = watcher.until(|e| e.kind() == "session.idle").await;
    assert!(rest.iter().any(|e| e.kind() == "elicitation.replied" && e.properties()["action"] == "accept"));
    let output = rest
        .iter()
        .filter(|e| e.properties()["part"]["state"]["status"] == "completed")
        .find_map(|e| e.properties()["part"]["state"]["output"].as_str())
        .unwrap();
    assert_eq!(output, r#"accept {"count":2,"name":"Ada"}"#);
    assert_eq!(h.get(&format!("/session/{session}/elicitation")).await.1, json!([]));
}

#[tokio::test]
async fn a_permission_asked_during_a_run_is_answered_over_http_and_the_run_continues() {
    let h = Harness::start_with(
        Script::new([
            Turn::from(Reply::tool_call("bash", json!({"command": "echo approved-output"}))),
            Turn::from(Reply::text("done")),
        ]),
        |setup| {
            setup.ask_policy = AskPolicy::Wait;
            setup.config.permission =
                PermissionConfig(vec![PermissionRule::new("bash", "*", PermissionAction::Ask)]);
        },
    )
    .await;
    let session = h.create_session().await;
    let mut watcher = h.events(&format!("?session={session}")).await;
    let mut other = h.events(&format!("?session={session}")).await;
    h.post(&format!("/session/{session}/prompt_async"), json!({"parts": [{"type": "text", "text": "run"}]}))
        .await;

    let asked = watcher.until(|e| e.kind() == "permission.asked").await.pop().unwrap();
    let request_id = asked.properties()["id"].as_str().unwrap().to_owned();
    assert_eq!(asked.properties()["permission"], "bash");
    let (_, pending) = h.get(&format!("/permission?session={session}")).await;
    assert_eq!(pending.as_array().unwrap().len(), 1);
    assert_eq!(pending[0]["id"], json!(request_id));

    let reply = format!("/permission/{request_id}/reply");
    assert_eq!(h.post(&reply, json!({"reply": "once"})).await, (200, json!(true)));
    let (status, body) = h.post(&reply, json!({"reply": "reject"})).await;
    assert_eq!((status, error_code(&body)), (409, "not_pending"));
    assert!(body["error"]["message"].as_str().unwrap().contains("already answered"), "{body}");

    let replied = other.until(|e| e.kind() == "permission.replied").await.pop().unwrap();
    assert_eq!(replied.properties()["request_id"], json!(request_id));
    assert_eq!(replied.properties()["reply"], "once");
    let rest = watcher.until(|e| e.kind() == "session.idle").await;
    let output = rest
        .iter()
        .filter(|e| e.properties()["part"]["state"]["status"] == "completed")
        .find_map(|e| e.properties()["part"]["state"]["output"].as_str())
        .unwrap();
    assert!(output.contains("approved-output"), "{output}");
    assert_eq!(h.fake.requests().len(), 2, "the run went on to the next step");
    assert_eq!(h.get("/permission").await.1, json!([]));
}

#[tokio::test]
async fn config_and_models_are_read_only_and_carry_no_secret() {
    let h = Harness::start_with(Script::new(Vec::<Turn>::new()), |setup| {
        let provider = setup.config.provider.get_mut("fake").unwrap();
        provider.api_key_env = Some("FAKE_API_KEY".into());
        provider.headers.insert("Authorization".into(), "Bearer sk-secret".into());
        provider.models.insert("test".into(), Default::default());
    })
    .await;
    let (status, config) = h.get("/config").await;
    assert_eq!(status, 200);
    assert_eq!(config["model"], "fake/test");
    assert_eq!(config["provider"]["fake"]["api_key_env"], "FAKE_API_KEY");
    assert!(!config.to_string().contains("sk-secret"), "{config}");
    let (status, models) = h.get("/models").await;
    assert_eq!(status, 200);
    assert!(models.as_array().unwrap().iter().any(|m| m["id"] == "fake/test"), "{models}");
    let (status, health) = h.get("/health").await;
    assert_eq!((status, health["healthy"].clone()), (200, json!(true)));
}

/// Every route the API promises, as `(method, path)`.
const EXPECTED_ROUTES: &[(&str, &str)] = &[
    ("get", "/health"),
    ("get", "/metrics"),
    ("get", "/event"),
    ("get", "/session"),
    ("post", "/session"),
    ("get", "/session/status"),
    ("get", "/session/{id}"),
    ("patch", "/session/{id}"),
    ("delete", "/session/{id}"),
    ("get", "/session/{id}/children"),
    ("get", "/session/{id}/todo"),
    ("get", "/session/{id}/message"),
    ("get", "/session/{id}/message/{messageID}"),
    ("post", "/session/{id}/message"),
    ("post", "/session/{id}/prompt"),
    ("post", "/session/{id}/prompt_async"),
    ("post", "/session/{id}/command"),
    ("post", "/session/{id}/abort"),
    ("post", "/session/{id}/compact"),
    ("post", "/session/{id}/summarize"),
    ("post", "/session/{id}/revert"),
    ("post", "/session/{id}/unrevert"),
    ("get", "/permission"),
    ("post", "/permission/{requestID}/reply"),
    ("get", "/session/{id}/elicitation"),
    ("post", "/session/{id}/elicitation/{eid}"),
    ("get", "/question"),
    ("post", "/question/{requestID}/reply"),
    ("post", "/question/{requestID}/reject"),
    ("get", "/config"),
    ("get", "/models"),
    ("get", "/agent"),
    ("get", "/command"),
    ("get", "/project"),
    ("get", "/agent/{name}"),
    ("get", "/session/{id}/job"),
    ("get", "/session/{id}/job/{job}/output"),
    ("post", "/session/{id}/job/{job}/kill"),
    ("get", "/doc"),
];

#[tokio::test]
async fn doc_lists_every_registered_route() {
    let h = Harness::start(Script::new(Vec::<Turn>::new())).await;
    let (status, doc) = h.get("/doc").await;
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    // 3.1 is JSON Schema 2020-12: optional values are `type: [T, "null"]`; `nullable` is 3.0's.
    let text = doc.to_string();
    assert!(!text.contains("\"nullable\""), "a 3.0 keyword in a 3.1 document");
    assert!(text.contains("\"null\""), "optional values say they may be null");
    assert!(!text.contains("#/$defs/"), "every reference points into components");
    let mut documented: Vec<(String, String)> = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            documented.push((method.clone(), path.clone()));
        }
    }
    documented.sort();
    let mut expected: Vec<(String, String)> =
        EXPECTED_ROUTES.iter().map(|(m, p)| (m.to_string(), p.to_string())).collect();
    expected.sort();
    assert_eq!(documented, expected);
    let mut registered: Vec<(String, String)> =
        codeloop_server::routes().into_iter().map(|(m, p)| (m.to_owned(), p.to_owned())).collect();
    registered.sort();
    assert_eq!(registered, expected);

    // Each documented route is really served (never the router's 404 or 405).
    for (method, path) in EXPECTED_ROUTES {
        if *path == "/event" {
            continue;
        }
        let url = h.url(
            &path.replace("{id}", "ses_x").replace("{messageID}", "msg_x").replace("{requestID}", "per_x"),
        );
        let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let (status, body) =
            read(h.client.request(method.clone(), url).json(&json!({})).send().await.unwrap()).await;
        assert_ne!(status, 405, "{method} {path}");
        assert_ne!(body["error"]["code"], "route_not_found", "{method} {path}");
    }
    let prompt = &doc["paths"]["/session/{id}/prompt"]["post"];
    assert!(prompt["requestBody"]["content"]["application/json"]["schema"].is_object());
    let parameters = doc["paths"]["/session/{id}/message"]["get"]["parameters"].to_string();
    assert!(parameters.contains("\"before\"") && parameters.contains("\"limit\""), "{parameters}");
}

#[tokio::test]
async fn abort_interrupts_a_running_prompt_and_delete_waits_for_it() {
    let h = Harness::start(Script::new([Turn::from(
        Reply::text("word ".repeat(100)).with_text_chunks(100).with_chunk_delay_ms(100),
    )]))
    .await;
    let session = h.create_session().await;
    let mut sse = h.events(&format!("?session={session}")).await;
    let client = h.client.clone();
    let url = h.url(&format!("/session/{session}/prompt"));
    let running = tokio::spawn(async move {
        read(
            client
                .post(url)
                .json(&json!({"parts": [{"type": "text", "text": "talk"}]}))
                .send()
                .await
                .unwrap(),
        )
        .await
    });
    sse.until(|e| e.kind() == "message.part.delta").await;

    let response = h.client.delete(h.url(&format!("/session/{session}"))).send().await.unwrap();
    let (status, body) = read(response).await;
    assert_eq!((status, error_code(&body)), (409, "busy"));
    let (_, status_map) = h.get("/session/status").await;
    assert_eq!(status_map, json!({ session.clone(): {"type": "busy"} }));

    let (status, aborted) = h.post(&format!("/session/{session}/abort"), json!({})).await;
    assert_eq!((status, aborted), (200, json!({"aborted": true})));
    let (status, result) = running.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(result["stop"], json!({"type": "interrupted"}));
    let response = h.client.delete(h.url(&format!("/session/{session}"))).send().await.unwrap();
    assert_eq!(read(response).await, (200, json!(true)));
}

#[tokio::test]
async fn a_malformed_session_id_is_a_json_400_or_404_on_every_route_and_never_shows_server_paths() {
    let h = Harness::start(Script::new(Vec::<Turn>::new())).await;
    let data = h.data_path().canonicalize().unwrap().display().to_string();
    let long = "s".repeat(300);
    // Percent-encoded slashes and dots arrive decoded: they must not reach a file name.
    let bad_ids = ["..%2F..%2Fetc", "a.b", "ses%20x", "%00", long.as_str()];
    let routes: Vec<_> =
        codeloop_server::routes().into_iter().filter(|(_, path)| path.contains("{id}")).collect();
    assert!(routes.len() >= 15, "every session route is checked: {routes:?}");
    for (method, path) in routes {
        let body = match path.rsplit('/').next().unwrap() {
            "message" | "prompt" | "prompt_async" => json!({"parts": [{"type": "text", "text": "hi"}]}),
            "revert" => json!({"messageID": "msg_x"}),
            "{id}" => json!({"title": "renamed"}),
            _ => json!({}),
        };
        for id in bad_ids {
            let url = h.url(&path.replace("{id}", id).replace("{messageID}", "msg_x"));
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let mut request = h.client.request(method.clone(), url);
            if method != reqwest::Method::GET && method != reqwest::Method::DELETE {
                request = request.json(&body);
            }
            let (status, answer) = read(request.send().await.unwrap()).await;
            assert!(status == 400 || status == 404, "{method} {path} with {id:?}: {status} {answer}");
            assert!(
                ["invalid_request", "not_found"].contains(&error_code(&answer)),
                "{method} {path} with {id:?}: {answer}"
            );
            assert!(!answer.to_string().contains(&data), "{method} {path} shows the data dir: {answer}");
        }
    }
}
