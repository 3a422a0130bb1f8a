//! An engine on a temp data dir and project, pointed at the test kit's fake provider, plus a recorder of
//! the bus events a run published. Adapted from the engine suite's harness (kept separate so the two
//! suites do not depend on each other).

use std::path::Path;
use std::sync::Arc;

use codeloop_core::config::{Config, ProviderSettings};
use codeloop_core::permission::AskPolicy;
use codeloop_core::{Delivery, Engine, EngineOptions, PromptInput, RunOutcome};
use codeloop_store::MessageWithParts;
use codeloop_testkit::{FakeProvider, Script};
use codeloop_types::{Event, EventPayload, Part, PartKind, Session, SessionStatus};
use tempfile::TempDir;
use tokio::sync::broadcast;

/// The variable the fake provider's key is read from when a test sets `api_key_env`.
pub const KEY_ENV: &str = "CODELOOP_FAULTS_API_KEY";

pub struct Harness {
    pub data: TempDir,
    pub project: TempDir,
    pub fake: FakeProvider,
    pub engine: Engine,
    pub session: Session,
}

pub use crate::common::config_for;

/// The `[provider.fake]` section of a config built by [`config_for`].
pub fn fake_provider(config: &mut Config) -> &mut ProviderSettings {
    config.provider.get_mut("fake").expect("config_for adds [provider.fake]")
}

pub fn open_engine(data: &Path, config: Config, policy: AskPolicy) -> Engine {
    let mut options = EngineOptions::new(data, config);
    options.ask_policy = policy;
    // Only the test key exists; every other variable is unset.
    options.env = Arc::new(|name| (name == KEY_ENV).then(|| "sk-test".to_owned()));
    options.skill_dirs = Some(Vec::new());
    Engine::open(options).unwrap()
}

impl Harness {
    pub async fn new(script: Script) -> Harness {
        Self::with(script, |_| {}).await
    }

    pub async fn with(script: Script, tweak: impl FnOnce(&mut Config)) -> Harness {
        let data = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let fake = FakeProvider::start(script).await.unwrap();
        let mut config = config_for(&fake.base_url());
        // Retries wait what their events announce (asserted there), not the 2 s default: the suite stays fast.
        config.retry.base_delay_ms = 40;
        tweak(&mut config);
        let engine = open_engine(data.path(), config, AskPolicy::Deny);
        let session = engine.create_session(project.path(), None, None, None).await.unwrap();
        std::fs::write(project.path().join("a.txt"), "hello from a.txt\n").unwrap();
        Harness { data, project, fake, engine, session }
    }

    /// Sends `text` and waits for the run, recording what it published.
    pub async fn prompt(&self, text: &str) -> Observed {
        let events = self.engine.bus().subscribe();
        let started = std::time::Instant::now();
        let outcome =
            self.engine.prompt(&self.session.id, PromptInput::text(text), Delivery::Queue).await.unwrap();
        let elapsed = started.elapsed();
        self.engine.flush().await.unwrap();
        Observed { outcome, events: drain(events), elapsed }
    }

    /// Sends `text` and waits for the run without recording events (for runs that publish more than
    /// the bus keeps per subscriber).
    pub async fn prompt_unrecorded(&self, text: &str) -> RunOutcome {
        let outcome =
            self.engine.prompt(&self.session.id, PromptInput::text(text), Delivery::Queue).await.unwrap();
        self.engine.flush().await.unwrap();
        outcome
    }

    pub fn history(&self) -> Vec<MessageWithParts> {
        self.engine.store().load_history(&self.session.id).unwrap()
    }

    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.project.path().join(name)).unwrap_or_default()
    }

    /// The request bodies the fake provider received, in order.
    pub fn bodies(&self) -> Vec<serde_json::Value> {
        self.fake.requests().into_iter().map(|r| r.body).collect()
    }
}

/// Everything published while the receiver was open (the bus keeps 4 096 events per subscriber).
pub fn drain(mut events: broadcast::Receiver<Arc<Event>>) -> Vec<Arc<Event>> {
    let mut out = Vec::new();
    loop {
        match events.try_recv() {
            Ok(event) => out.push(event),
            Err(broadcast::error::TryRecvError::Lagged(skipped)) => {
                panic!("the test lagged {skipped} events")
            }
            Err(_) => return out,
        }
    }
}

/// One run as the test saw it.
pub struct Observed {
    pub outcome: RunOutcome,
    pub events: Vec<Arc<Event>>,
    pub elapsed: std::time::Duration,
}

/// A `session.status` retry event.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryStatus {
    pub attempt: u32,
    pub max_attempts: u32,
    pub message: String,
    /// When the next attempt starts (epoch ms).
    pub next: i64,
    /// How long the run said it waits.
    pub delay_ms: u64,
}

impl Observed {
    pub fn retries(&self) -> Vec<RetryStatus> {
        self.events
            .iter()
            .filter_map(|event| match &event.payload {
                EventPayload::SessionStatus {
                    status: SessionStatus::Retry { attempt, max_attempts, message, next, delay_ms },
                    ..
                } => Some(RetryStatus {
                    attempt: *attempt,
                    max_attempts: *max_attempts,
                    message: message.clone(),
                    next: *next,
                    delay_ms: *delay_ms,
                }),
                _ => None,
            })
            .collect()
    }

    /// The wait announced by the only retry.
    pub fn only_delay_ms(&self) -> u64 {
        let retries = self.retries();
        assert_eq!(retries.len(), 1, "{retries:?}");
        retries[0].delay_ms
    }

    /// `(attempt, message)` of every retry event, in order.
    pub fn retry_attempts(&self) -> Vec<(u32, String)> {
        self.retries().into_iter().map(|r| (r.attempt, r.message)).collect()
    }

    pub fn compacted(&self) -> bool {
        self.events.iter().any(|e| matches!(e.payload, EventPayload::SessionCompacted { .. }))
    }
}

/// The text parts of a message that the model will see again (not `ignored`), joined.
pub fn visible_text(parts: &[Part]) -> String {
    parts
        .iter()
        .filter_map(|p| match &p.kind {
            PartKind::Text(text) if !text.ignored => Some(text.text.as_str()),
            _ => None,
        })
        .collect()
}

/// The text parts a failed attempt left behind (marked `ignored`).
pub fn ignored_text(parts: &[Part]) -> Vec<String> {
    parts
        .iter()
        .filter_map(|p| match &p.kind {
            PartKind::Text(text) if text.ignored => Some(text.text.clone()),
            _ => None,
        })
        .collect()
}
