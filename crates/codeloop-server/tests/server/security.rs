//! Binding, tokens and host names.

use std::time::Duration;

use codeloop_server::ServerOptions;
use codeloop_testkit::{Script, Turn};
use serde_json::json;

use crate::support::{Harness, PATIENCE, read};

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
async fn a_missing_or_wrong_token_gets_401_on_every_route_including_events_but_health() {
    let h = Harness::start_with(Script::new(Vec::<Turn>::new()), |setup| {
        setup.options = ServerOptions::new(setup.options.directory.clone()).with_token("s3cret");
    })
    .await;
    for path in ["/session", "/event", "/doc", "/nowhere", "/permission", "/question"] {
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
    // Liveness stays open (DESIGN.md §5c), whatever the Authorization header says.
    for auth in [None, Some("Bearer wrong")] {
        let mut request = h.client.get(h.url("/health"));
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        assert_eq!(request.send().await.unwrap().status(), 200, "{auth:?}");
    }
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
        setup.options = ServerOptions::new(setup.options.directory.clone()).with_token("s3cret");
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
async fn cors_without_a_token_is_refused_at_start() {
    let h = Harness::start(Script::new(Vec::<Turn>::new())).await;
    for origin in ["*", "https://app.example"] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut options = ServerOptions::new(h.project.path());
        options.cors_origins = vec![origin.to_owned()];
        let served = codeloop_server::serve(h.engine.clone(), listener, options, async {});
        let error = tokio::time::timeout(PATIENCE, served).await.unwrap().unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::PermissionDenied, "{origin}");
        let message = error.to_string();
        assert!(message.contains("--cors") && message.contains("--token"), "{message}");
    }
}

#[tokio::test]
async fn shutdown_ends_event_streams_and_the_server() {
    let mut h = Harness::start(Script::new(Vec::<Turn>::new())).await;
    let mut sse = h.events("").await;
    h.stop().await.unwrap();
    let last = sse.until(|e| e.kind() == "server.instance.disposed").await;
    assert_eq!(last.last().unwrap().kind(), "server.instance.disposed");
}

/// Idle sockets that never send a request, opened before a real client comes.
const IDLE_CONNECTIONS: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_after_the_header_timeout_and_real_clients_are_served() {
    use tokio::io::AsyncReadExt;

    let h = Harness::start_with(Script::new(Vec::<Turn>::new()), |setup| {
        setup.options = ServerOptions::new(setup.options.directory.clone()).with_token("s3cret");
        setup.options.header_timeout = Duration::from_millis(500);
    })
    .await;
    let addr = h.base.trim_start_matches("http://").to_owned();
    let mut idle = Vec::with_capacity(IDLE_CONNECTIONS);
    for _ in 0..IDLE_CONNECTIONS {
        idle.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    let response =
        tokio::time::timeout(PATIENCE, h.client.get(h.url("/session")).bearer_auth("s3cret").send())
            .await
            .expect("an authorised request is answered while idle connections are open")
            .unwrap();
    assert_eq!(response.status(), 200);

    // Each idle socket is closed by the server (EOF, or a reset) once its header deadline passed.
    let closed_all = async {
        for mut socket in idle {
            let mut buf = [0u8; 64];
            loop {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {} // e.g. a 408 answer before the close
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), closed_all)
        .await
        .expect("connections that never send a request are closed by the server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_outlives_the_header_timeout() {
    let h = Harness::start_with(Script::new(Vec::<Turn>::new()), |setup| {
        setup.options.header_timeout = Duration::from_millis(200);
        setup.options.heartbeat = Duration::from_millis(50);
    })
    .await;
    let mut sse = h.events("").await;
    // Twenty heartbeats span five header timeouts: the stream is a response, not a wait for headers.
    for _ in 0..20 {
        let event = sse.next().await;
        assert_eq!(event.kind(), "server.heartbeat");
    }
    let (status, _) = h.get("/health").await;
    assert_eq!(status, 200);
}
