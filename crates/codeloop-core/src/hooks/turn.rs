//! A session's hooks bound to what they run with (its directory, bus, store), and where a hook's
//! `continue: false` is left for the run loop to read.

use std::sync::Arc;

use codeloop_types::{LockExt, SessionId};
use serde_json::Value;

use super::{HookEnv, HookEvent, HookOutcome, Hooks};

/// The hooks a turn runs, and where a hook's `continue: false` is left for the run loop.
#[derive(Clone)]
pub struct TurnHooks {
    pub hooks: Arc<Hooks>,
    pub env: HookEnv,
    pub stop: Arc<std::sync::Mutex<Option<String>>>,
}

impl TurnHooks {
    /// No hooks (benches, tests of the processor alone).
    pub fn none(session_id: SessionId) -> Self {
        TurnHooks {
            hooks: Arc::new(Hooks::default()),
            env: HookEnv {
                session_id,
                project_dir: std::path::PathBuf::from("."),
                bus: None,
                store: None,
                permission_mode: "default",
                transcripts: None,
                env_file: None,
                writer: None,
                prompt_id: None,
                effort: None,
            },
            stop: Default::default(),
        }
    }

    /// Fires `event` and records a `continue: false` for the run loop.
    pub async fn fire(&self, event: HookEvent, subjects: &[&str], input: Value) -> HookOutcome {
        let outcome = crate::hooks::fire(&self.hooks, event, subjects, input, &self.env).await;
        if let Some(reason) = &outcome.stop {
            self.stop.locked().get_or_insert_with(|| reason.clone());
        }
        outcome
    }
}
