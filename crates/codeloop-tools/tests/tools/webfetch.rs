//! webfetch: against a real HTTP server on 127.0.0.1 — HTML rendered as text, images as attachments,
//! errors and the size limit reported, and nothing fetched when denied.

use std::io::{Read, Write};
use std::net::TcpListener;

use codeloop_tools::ToolFailure;
use serde_json::json;

use crate::common::Env;

/// Serves `responses` (status line + headers + body) to one request each, then stops.
fn serve(responses: Vec<Vec<u8>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for response in responses {
            let Ok((mut stream, _)) = listener.accept() else { return };
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(&response);
        }
    });
    url
}

fn http(status: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    response.extend_from_slice(body);
    response
}

#[tokio::test]
async fn html_is_fetched_as_markdown_and_the_url_is_asked() {
    let env = Env::new();
    let html = b"<html><body><h1>Install</h1><p>Run <code>cargo add tokio</code>, see <a href=\"https://docs.rs\">docs</a>.</p><script>x()</script></body></html>";
    let url = serve(vec![http("200 OK", "text/html; charset=utf-8", html)]);
    let out = env.ok("webfetch", json!({"url": format!("{url}/guide")})).await;
    assert!(out.output.contains("# Install") && out.output.contains("https://docs.rs"), "{}", out.output);
    assert!(!out.output.contains("x()"), "{}", out.output);
    let asks = env.asks_for("webfetch");
    assert_eq!(asks[0].patterns, vec![format!("{url}/guide")]);
    assert_eq!(asks[0].always, vec![format!("{url}/*")]);
}

#[tokio::test]
async fn an_image_becomes_an_attachment() {
    let env = Env::new();
    let png = [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d, b'I', b'H', b'D', b'R'];
    let url = serve(vec![http("200 OK", "image/png", &png)]);
    let out = env.ok("webfetch", json!({"url": format!("{url}/logo.png")})).await;
    assert_eq!(out.attachments.len(), 1);
    assert_eq!(out.attachments[0].mime, "image/png");
    assert!(out.attachments[0].url.starts_with("data:image/png;base64,"));
}

#[tokio::test]
async fn errors_say_what_happened() {
    let env = Env::new();
    let url = serve(vec![http("404 Not Found", "text/plain", b"nope")]);
    let error = env.fail("webfetch", json!({"url": format!("{url}/missing")})).await;
    assert!(error.contains("404"), "{error}");
    let error = env.fail("webfetch", json!({"url": "ftp://example.com/file"})).await;
    assert!(error.contains("http and https"), "{error}");
}

#[tokio::test]
async fn a_denied_fetch_sends_nothing() {
    let env = Env::new();
    env.deny("webfetch");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}/page", listener.local_addr().unwrap());
    let result = env.run("webfetch", json!({"url": url})).await;
    assert!(matches!(result, Err(codeloop_tools::ToolFailure::Permission(_))), "{result:?}");
    assert!(listener.accept().is_err(), "no connection was made");
}

#[tokio::test]
async fn a_closed_network_refuses_before_asking() {
    let env = Env::new();
    let mut ctx = env.ctx();
    let mut policy = codeloop_sandbox::SandboxPolicy::new(env.root(), env.root());
    policy.network = false;
    ctx.walls = Some(std::sync::Arc::new(codeloop_tools::Walls {
        helper: "/bin/false".into(),
        policy,
        git_write: false,
    }));
    let result = env.registry.execute("webfetch", json!({"url": "http://127.0.0.1:9/"}), &ctx).await;
    match result {
        Err(ToolFailure::Failed(message)) => assert!(message.contains("network = false"), "{message}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(env.asks_for("webfetch").is_empty());
}
