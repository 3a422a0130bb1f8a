//! The web page's door (DESIGN.md §5c, §5i): `/`, its files and `/health` are open; everything else,
//! unknown paths included, needs the token; the page comes with a strict Content-Security-Policy.

use codeloop_server::ServerOptions;
use codeloop_testkit::{Script, Turn};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::support::{Harness, read};

const TOKEN: &str = "s3cret-page";

async fn with_token() -> Harness {
    Harness::start_with(Script::new(Vec::<Turn>::new()), |setup| {
        setup.options = ServerOptions::new(setup.options.directory.clone()).with_token(TOKEN);
    })
    .await
}

#[tokio::test]
async fn the_page_its_files_and_health_are_open_and_everything_else_needs_the_token() {
    let h = with_token().await;
    for (path, kind) in [
        ("/", "text/html; charset=utf-8"),
        ("/assets/js/main.js", "text/javascript; charset=utf-8"),
        ("/assets/style.css", "text/css; charset=utf-8"),
        ("/health", "application/json"),
    ] {
        let response = h.client.get(h.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(response.headers()["content-type"], kind, "{path}");
    }
    for path in [
        "/session",
        "/event",
        "/doc",
        "/agent",
        "/assets/nope.js",
        "/assets/index.html",
        "/index.html",
        "/nowhere",
        "/assets/",
    ] {
        let (status, body) = read(h.client.get(h.url(path)).send().await.unwrap()).await;
        assert_eq!((status, body["error"]["code"].clone()), (401, json!("unauthorized")), "{path}");
    }
    // With the token, unknown paths are errors, not the page.
    for (path, code) in [
        ("/nowhere", "route_not_found"),
        ("/assets/nope.js", "not_found"),
        ("/session/x/y/z", "route_not_found"),
    ] {
        let (status, body) = read(h.client.get(h.url(path)).bearer_auth(TOKEN).send().await.unwrap()).await;
        assert_eq!((status, body["error"]["code"].clone()), (404, json!(code)), "{path}");
    }
    // Only GET (and HEAD) reach the page.
    let response = h.client.post(h.url("/")).send().await.unwrap();
    assert_eq!(response.status(), 401);
}

#[tokio::test]
async fn the_page_is_walled_by_its_headers_and_revalidated_by_etag() {
    let h = with_token().await;
    let response = h.client.get(h.url("/")).send().await.unwrap();
    let headers = response.headers().clone();
    let csp = headers["content-security-policy"].to_str().unwrap();
    for directive in [
        "default-src 'self'",
        "script-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    ] {
        assert!(csp.contains(directive), "{csp}");
    }
    assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"), "{csp}");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["referrer-policy"], "no-referrer");
    assert_eq!(headers["cache-control"], "no-cache");
    let html = response.text().await.unwrap();
    // The files are named by this build's version and kept by the browser for good.
    let at = html.find("<script type=\"module\" src=\"/assets/v").expect("the page loads its module");
    let src = html[at..].split('"').nth(3).unwrap().to_owned();
    assert!(src.ends_with("/js/main.js"), "{src}");
    let script = h.client.get(h.url(&src)).send().await.unwrap();
    assert_eq!(script.status(), 200);
    assert_eq!(script.headers()["cache-control"], "public, max-age=31536000, immutable");
    let etag = headers["etag"].to_str().unwrap().to_owned();
    let again = h.client.get(h.url("/")).header("if-none-match", &etag).send().await.unwrap();
    assert_eq!(again.status(), 304);
    assert!(again.text().await.unwrap().is_empty());
    println!("web page: {} bytes of embedded files", codeloop_server::page_size());
}

#[tokio::test]
async fn without_a_token_the_page_answers_loopback_host_names_only() {
    let h = Harness::start(Script::new(Vec::<Turn>::new())).await;
    let response = h.client.get(h.url("/")).header("host", "attacker.example").send().await.unwrap();
    assert_eq!(response.status(), 403);
    let response = h.client.get(h.url("/assets/js/main.js")).send().await.unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn the_agent_list_names_the_agents_a_person_may_pick() {
    let h = with_token().await;
    let (status, agents) = read(h.client.get(h.url("/agent")).bearer_auth(TOKEN).send().await.unwrap()).await;
    assert_eq!(status, 200);
    let names: Vec<&str> = agents.as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"build") && names.contains(&"plan"), "{agents}");
    assert!(
        !names.contains(&"compaction") && !names.contains(&"general"),
        "subagents and hidden agents are not offered: {agents}"
    );
    let default: Vec<&str> = agents
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["default"] == true)
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(default, vec!["build"]);
}
