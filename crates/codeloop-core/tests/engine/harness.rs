//! Builds an engine on a temp data dir and project, pointed at a fake provider.

use std::path::Path;
use std::sync::Arc;

use codeloop_core::config::Config;
use codeloop_core::permission::AskPolicy;
use codeloop_core::{Delivery, Engine, EngineOptions, PromptInput, RunOutcome};
use codeloop_store::MessageWithParts;
use codeloop_testkit::{FakeProvider, Script};
use codeloop_types::{Event, EventPayload, Part, PartKind, PermissionRequest, Session, ToolState};
use serde_json::Value;
use tempfile::TempDir;

pub struct Harness {
    pub data: TempDir,
    pub project: TempDir,
    pub fake: FakeProvider,
    pub engine: Engine,
    pub session: Session,
}

pub use crate::common::config_for;

/// `CODELOOP_TEST_STORE=postgres` runs every engine test on a fresh PostgreSQL database instead of
/// SQLite in the data dir.
pub const TEST_STORE_ENV: &str = "CODELOOP_TEST_STORE";

pub fn open_engine(data: &Path, config: Config, policy: AskPolicy) -> Engine {
    let mut options = EngineOptions::new(data, config);
    if std::env::var(TEST_STORE_ENV).is_ok_and(|s| s == "postgres") {
        // One database per data dir, so a test that reopens "the same data dir" reopens the same store.
        static DATABASES: std::sync::Mutex<Vec<(std::path::PathBuf, String)>> =
            std::sync::Mutex::new(Vec::new());
        let mut databases = DATABASES.lock().unwrap();
        let url = match databases.iter().find(|(dir, _)| dir == data) {
            Some((_, url)) => url.clone(),
            None => {
                let url = codeloop_testkit::postgres::database()
                    .expect("CODELOOP_TEST_STORE=postgres needs PostgreSQL");
                databases.push((data.to_owned(), url.clone()));
                url
            }
        };
        options.store = codeloop_core::StoreChoice::Url(url);
    }
    options.ask_policy = policy;
    options.env = Arc::new(|_| None);
    options.skill_dirs = Some(Vec::new());
    Engine::open(options).unwrap()
}

impl Harness {
    pub async fn new(script: Script) -> Harness {
        Self::with(script, AskPolicy::Deny, |_| {}).await
    }

    pub async fn with(script: Script, policy: AskPolicy, tweak: impl FnOnce(&mut Config)) -> Harness {
        let data = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let fake = FakeProvider::start(script).await.unwrap();
        let mut config = config_for(&fake.base_url());
        tweak(&mut config);
        let engine = open_engine(data.path(), config, policy);
        let session = engine.create_session(project.path(), None, None, None).await.unwrap();
        Harness { data, project, fake, engine, session }
    }

    pub async fn prompt(&self, text: &str) -> RunOutcome {
        self.engine.prompt(&self.session.id, PromptInput::text(text), Delivery::Queue).await.unwrap()
    }

    /// Starts a prompt in the background and returns once the run published an event matching `until`
    /// (driven by the bus, no sleeping), with the run's handle and that event.
    pub async fn start(
        &self,
        text: &str,
        until: impl Fn(&EventPayload) -> bool,
    ) -> (tokio::task::JoinHandle<RunOutcome>, Arc<Event>) {
        let mut events = self.engine.bus().subscribe();
        let engine = self.engine.clone();
        let session = self.session.id.clone();
        let input = PromptInput::text(text);
        let run = tokio::spawn(async move { engine.prompt(&session, input, Delivery::Queue).await.unwrap() });
        let event = wait_for_event(&mut events, until).await;
        (run, event)
    }

    /// Starts a prompt and returns once it asks a permission.
    pub async fn start_until_asked(
        &self,
        text: &str,
    ) -> (tokio::task::JoinHandle<RunOutcome>, PermissionRequest) {
        let (run, event) = self.start(text, |p| matches!(p, EventPayload::PermissionAsked(_))).await;
        let EventPayload::PermissionAsked(request) = &event.payload else { unreachable!("matched above") };
        (run, request.clone())
    }

    pub fn history(&self) -> Vec<MessageWithParts> {
        self.engine.store().load_history(&self.session.id).unwrap()
    }

    pub fn write(&self, name: &str, text: &str) {
        std::fs::write(self.project.path().join(name), text).unwrap();
    }

    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.project.path().join(name)).unwrap()
    }

    /// The `messages` array of the n-th request the fake provider received.
    pub fn request_messages(&self, n: usize) -> Vec<Value> {
        self.fake.requests()[n].body["messages"].as_array().cloned().unwrap_or_default()
    }

    /// Every tool part of the session, in order.
    pub fn tool_parts(&self) -> Vec<Part> {
        self.history()
            .into_iter()
            .flat_map(|m| m.parts)
            .filter(|p| matches!(p.kind, PartKind::Tool(_)))
            .collect()
    }
}

/// The `role: tool` messages of a request body.
pub fn tool_results(messages: &[Value]) -> Vec<(String, String)> {
    messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            let content = match &m["content"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (m["tool_call_id"].as_str().unwrap_or_default().to_owned(), content)
        })
        .collect()
}

pub fn state(part: &Part) -> &ToolState {
    &part.as_tool().unwrap().state
}

/// Waits for the first event matching `pred` (no sleeping: driven by the bus).
pub async fn wait_for_event(
    rx: &mut tokio::sync::broadcast::Receiver<Arc<Event>>,
    pred: impl Fn(&EventPayload) -> bool,
) -> Arc<Event> {
    loop {
        match rx.recv().await {
            Ok(event) if pred(&event.payload) => return event,
            Ok(_) => {}
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            Err(e) => panic!("bus closed: {e}"),
        }
    }
}
