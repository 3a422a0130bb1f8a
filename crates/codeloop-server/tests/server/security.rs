//! Binding, tokens and host names.

use codeloop_server::ServerOptions;
use codeloop_testkit::{Script, Turn};
use serde_json::json;

use crate::support::{Harness, read};

#[tokio::test]
async fn a_non_loopback_bind_without_a_token_is_refused() {
    let h = Harness::start(Script::new(Vec::<Turn>::new())).await;
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let options = ServerOptions::new(h.project.path());
    let error = codeloop_server::serve(h.engine.clone(), listener, options, async {}).await.unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::PermissionDenied);
    assert!(error.to_string().contains("--token"), "{error}");

    // With a token the same bind is served.
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let options = ServerOptions::new(h.project.path()).with_token("secret");
    codeloop_server::serve(h.engine.clone(), listener, options, async {}).await.unwrap();
}

#[tokio::test]
async fn a_missing_or_wrong_token_gets_401_on_every_route_including_events() {
    let h = Harness::start_with(Script::new(Vec::<Turn>::new()), |setup| {
        setup.options = ServerOptions::new(setup.options.directory.clone()).with_token("s3cret");
    })
    .await;
    for path in ["/session", "/event", "/health", "/doc", "/nowhere"] {
        for auth in [None, Some("Bearer wrong"), Some("Basic s3cret"), Some("Bearer s3cret2")] {
            let mut request = h.client.get(h.url(path));
            if let Some(auth) = auth {
                request = request.header("authorization", auth);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.headers()["www-authenticate"], "Bearer");
            let (status, body) = read(response).await;
            assert_eq!(
                (status, body["error"]["code"].clone()),
                (401, json!("unauthorized")),
                "{path} {auth:?}"
            );
        }
    }
    let (status, _) = read(h.client.get(h.url("/session")).bearer_auth("s3cret").send().await.unwrap()).await;
    assert_eq!(status, 200);
    let response = h.client.get(h.url("/event")).bearer_auth("s3cret").send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
}

#[tokio::test]
async fn without_a_token_only_loopback_host_names_are_served() {
    let h = Harness::start(Script::new(Vec::<Turn>::new())).await;
    let response = h.client.get(h.url("/health")).header("host", "attacker.example").send().await.unwrap();
    let (status, body) = read(response).await;
    assert_eq!((status, body["error"]["code"].clone()), (403, json!("forbidden_host")));
    let port = h.base.rsplit(':').next().unwrap();
    let response =
        h.client.get(h.url("/health")).header("host", format!("localhost:{port}")).send().await.unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn cors_is_off_unless_configured() {
    let h = Harness::start(Script::new(Vec::<Turn>::new())).await;
    let response =
        h.client.get(h.url("/health")).header("origin", "https://app.example").send().await.unwrap();
    assert!(response.headers().get("access-control-allow-origin").is_none());

    let h = Harness::start_with(Script::new(Vec::<Turn>::new()), |setup| {
        setup.options.cors_origins = vec!["https://app.example".into()];
    })
    .await;
    let response = h
        .client
        .request(reqwest::Method::OPTIONS, h.url("/session"))
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["access-control-allow-origin"], "https://app.example");
}

#[tokio::test]
async fn shutdown_ends_event_streams_and_the_server() {
    let mut h = Harness::start(Script::new(Vec::<Turn>::new())).await;
    let mut sse = h.events("").await;
    h.stop().await.unwrap();
    let last = sse.until(|e| e.kind() == "server.instance.disposed").await;
    assert_eq!(last.last().unwrap().kind(), "server.instance.disposed");
}
