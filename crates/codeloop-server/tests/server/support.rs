//! Test harness: a real engine (SQLite in a temp dir) behind a real server on 127.0.0.1:0, the test kit's
//! fake provider over HTTP, and an SSE client that reads `/event` the way any client would.

use std::pin::Pin;
use std::time::Duration;

use codeloop_core::config::{Config, ProviderSettings};
use codeloop_core::permission::AskPolicy;
use codeloop_core::{Engine, EngineOptions};
use codeloop_provider::WireApi;
use codeloop_server::ServerOptions;
use codeloop_testkit::{FakeProvider, Script};
use futures::{Stream, StreamExt};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A safety net against a hung test, never a way to wait for something.
pub const PATIENCE: Duration = Duration::from_secs(60);

pub fn config(base_url: String) -> Config {
    let mut config = Config { model: Some("fake/test".into()), snapshot: Some(false), ..Default::default() };
    config.provider.insert(
        "fake".into(),
        ProviderSettings { api: WireApi::OpenAiChat, base_url: Some(base_url), ..Default::default() },
    );
    config
}

pub struct Setup {
    pub config: Config,
    pub ask_policy: AskPolicy,
    pub options: ServerOptions,
}

pub struct Harness {
    pub fake: FakeProvider,
    pub engine: Engine,
    pub base: String,
    pub client: reqwest::Client,
    pub project: TempDir,
    _data: TempDir,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<std::io::Result<()>>>,
}

impl Harness {
    pub async fn start(script: Script) -> Harness {
        Self::start_with(script, |_| {}).await
    }

    pub async fn start_with(script: Script, configure: impl FnOnce(&mut Setup)) -> Harness {
        let fake = FakeProvider::start(script).await.unwrap();
        let project = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        let mut setup = Setup {
            config: config(fake.base_url()),
            ask_policy: AskPolicy::Deny,
            options: ServerOptions::new(project.path().canonicalize().unwrap()),
        };
        configure(&mut setup);
        let mut options = EngineOptions::new(data.path(), setup.config);
        options.ask_policy = setup.ask_policy;
        options.skill_dirs = Some(Vec::new());
        let engine = Engine::open(options).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = oneshot::channel::<()>();
        let server =
            tokio::spawn(codeloop_server::serve(engine.clone(), listener, setup.options, async move {
                let _ = rx.await;
            }));
        Harness {
            fake,
            engine,
            base,
            client: reqwest::Client::new(),
            project,
            _data: data,
            shutdown: Some(tx),
            server: Some(server),
        }
    }

    /// The engine's data dir (a server path no client should ever see).
    pub fn data_path(&self) -> &std::path::Path {
        self._data.path()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.client.get(self.url(path)).send().await.unwrap();
        read(response).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self.client.post(self.url(path)).json(&body).send().await.unwrap();
        read(response).await
    }

    pub async fn create_session(&self) -> String {
        let (status, session) = self.post("/session", json!({})).await;
        assert_eq!(status, 200, "{session}");
        session["id"].as_str().unwrap().to_owned()
    }

    /// Subscribes to `/event` with a query string (e.g. `?session=ses_…`) and reads `server.connected`.
    pub async fn events(&self, query: &str) -> Sse {
        self.events_with(query, None).await
    }

    pub async fn events_with(&self, query: &str, last_event_id: Option<u64>) -> Sse {
        let mut request = self.client.get(self.url(&format!("/event{query}")));
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id.to_string());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        assert_eq!(response.headers()["cache-control"], "no-cache");
        assert_eq!(response.headers()["x-accel-buffering"], "no");
        let mut sse = Sse { stream: Box::pin(eventsource_stream::EventStream::new(response.bytes_stream())) };
        let connected = sse.next().await;
        assert_eq!(connected.kind(), "server.connected", "{:?}", connected.data);
        sse
    }

    /// Stops the server the way SIGINT does and waits for it to finish.
    pub async fn stop(&mut self) -> std::io::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match self.server.take() {
            Some(server) => tokio::time::timeout(PATIENCE, server).await.unwrap().unwrap(),
            None => Ok(()),
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

pub async fn read(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, value)
}

/// One SSE message as received.
#[derive(Debug, Clone)]
pub struct Received {
    /// The client's last event id after this message (SSE keeps the previous one when a message has
    /// no `id:` line).
    pub id: Option<u64>,
    pub data: Value,
}

impl Received {
    pub fn kind(&self) -> &str {
        self.data["type"].as_str().unwrap_or("")
    }

    pub fn properties(&self) -> &Value {
        &self.data["properties"]
    }

    /// `session.status` idle for any session.
    pub fn is_idle(&self) -> bool {
        self.kind() == "session.status" && self.properties()["status"]["type"] == "idle"
    }
}

type EventSource = Pin<
    Box<
        dyn Stream<
                Item = Result<
                    eventsource_stream::Event,
                    eventsource_stream::EventStreamError<reqwest::Error>,
                >,
            > + Send,
    >,
>;

pub struct Sse {
    stream: EventSource,
}

impl Sse {
    pub async fn next(&mut self) -> Received {
        let event = tokio::time::timeout(PATIENCE, self.stream.next())
            .await
            .expect("no SSE event within the patience limit")
            .expect("the event stream ended")
            .expect("the event stream failed");
        assert_eq!(event.event, "message");
        let data: Value = serde_json::from_str(&event.data).unwrap();
        let id = (!event.id.is_empty()).then(|| event.id.parse::<u64>().unwrap());
        if let Some(id) = id
            && data.get("id").is_some()
        {
            assert_eq!(data["id"], json!(id), "the SSE id and the JSON id agree");
        }
        Received { id, data }
    }

    /// Events up to and including the first that matches, skipping heartbeats.
    pub async fn until(&mut self, mut done: impl FnMut(&Received) -> bool) -> Vec<Received> {
        let mut events = Vec::new();
        loop {
            let event = self.next().await;
            if event.kind() == "server.heartbeat" {
                continue;
            }
            let stop = done(&event);
            events.push(event);
            if stop {
                return events;
            }
        }
    }

    /// Events until `n` idle statuses were seen.
    pub async fn until_idle(&mut self, n: usize) -> Vec<Received> {
        let mut seen = 0;
        self.until(|e| {
            seen += usize::from(e.is_idle());
            seen == n
        })
        .await
    }
}

/// Ids of the bus events among `events` (control events carry none of their own in the JSON).
pub fn ids(events: &[Received]) -> Vec<u64> {
    events
        .iter()
        .filter(|e| !e.kind().starts_with("server.") && e.kind() != "resync")
        .filter_map(|e| e.id)
        .collect()
}
