//! What clients read and change of sessions outside a run: create, list, read, rename, delete, their
//! history, todos and saved approvals, the choices a person may make (agents, models). Every store call
//! runs on the blocking pool, so a client's read never stalls the runtime a run streams on.

use std::collections::HashMap;
use std::path::Path;

use codeloop_store::Store;
use codeloop_types::{
    Approval, EventPayload, MessageId, MessageWithParts, ModelRef, Page, Session, SessionFilter, SessionId,
    SessionStatus, Todo,
};

use super::Engine;
use crate::agents::{AgentMode, DEFAULT_AGENT};
use crate::error::EngineError;
use crate::models::ModelChoice;
use codeloop_types::LockExt;

/// An agent as a person picks it (a mode in an editor, `/agent` in the UI, a picker on the page).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentChoice {
    pub name: String,
    pub description: String,
    /// The agent a new session gets when none is named.
    pub default: bool,
}

impl Engine {
    /// Runs a store call on the blocking pool.
    pub(super) async fn read<T: Send + 'static>(
        &self,
        call: impl FnOnce(&dyn Store) -> codeloop_store::Result<T> + Send + 'static,
    ) -> Result<T, EngineError> {
        Ok(self.services.blocking(call).await?)
    }

    /// A new session in `directory` (a child of `parent` when given); the agent (a primary one, the one
    /// agent rule) and model default to the config's.
    pub async fn create_session(
        &self,
        directory: &Path,
        agent: Option<&str>,
        model: Option<ModelRef>,
        parent: Option<&SessionId>,
    ) -> Result<Session, EngineError> {
        let agent = agent.unwrap_or(self.default_agent());
        self.check_agent(agent)?;
        if let Some(model) = &model {
            self.check_model(Some(model))?;
        }
        if let Some(parent) = parent {
            self.session(parent).await.map_err(|e| match e {
                EngineError::SessionNotFound(_) => {
                    EngineError::Invalid(format!("parent_id: session {parent} not found"))
                }
                other => other,
            })?;
        }
        let directory = directory.canonicalize().unwrap_or_else(|_| directory.to_owned());
        let model = model.or_else(|| self.services.models.default_model().ok());
        let mut session = Session::new(directory.display().to_string(), agent, model);
        session.parent_id = parent.cloned();
        let stored = session.clone();
        self.read(move |store| store.apply(&[codeloop_store::Write::Session(stored)])).await?;
        self.services
            .bus
            .publish(EventPayload::SessionCreated { session_id: session.id.clone(), info: session.clone() });
        Ok(session)
    }

    fn default_agent(&self) -> &str {
        self.services.config.default_agent.as_deref().unwrap_or(DEFAULT_AGENT)
    }

    /// Checks that a person may pick `name` for a session: a primary agent, not one that runs only as a
    /// subagent (through the task tool) or only inside the runtime (compaction). The one agent rule.
    pub fn check_agent(&self, name: &str) -> Result<(), EngineError> {
        crate::agents::primary(&self.services.agents, name)?;
        Ok(())
    }

    /// The agents a person may pick, the default first marked.
    pub fn agents(&self) -> Vec<AgentChoice> {
        let default = self.default_agent();
        self.services
            .agents
            .values()
            .filter(|a| a.mode == AgentMode::Primary)
            .map(|a| AgentChoice {
                name: a.name.clone(),
                description: a.description.clone(),
                default: a.name == default,
            })
            .collect()
    }

    /// Checks that a model can be used (known provider, API key present) before anything is recorded.
    /// `None` means the config's default model.
    pub fn check_model(&self, model: Option<&ModelRef>) -> Result<ModelRef, EngineError> {
        let model = match model {
            Some(model) => model.clone(),
            None => self.services.models.default_model()?,
        };
        self.services.models.resolve(&model)?;
        Ok(model)
    }

    /// What the project of `directory` brings (DESIGN.md §5k): its config files, its trust state, each
    /// thing it would start, contact or widen, and what codeloop could not honour. `None` without a
    /// project config loader (an engine for one config) or when the project has no files of its own.
    pub async fn project_report(&self, directory: &Path) -> Result<Option<ProjectReport>, EngineError> {
        let Some(load) = self.services.project_config.clone() else { return Ok(None) };
        let directory = directory.to_owned();
        let loaded = tokio::task::spawn_blocking(move || load(&directory))
            .await
            .map_err(|_| EngineError::internal("the project config could not be read"))?
            .map_err(|e| EngineError::Config {
                origin: "the project's config".into(),
                reason: e.to_string(),
            })?;
        let Some(project) = loaded.project else { return Ok(None) };
        let state = match project.trust {
            crate::trust::TrustState::Trusted => "trusted",
            crate::trust::TrustState::Untrusted => "untrusted",
            crate::trust::TrustState::Changed => "changed",
        };
        Ok(Some(ProjectReport {
            root: project.root.display().to_string(),
            trust: state.to_owned(),
            files: project.files.iter().map(|f| f.display().to_string()).collect(),
            brings: project
                .wants
                .iter()
                .map(|w| ProjectItem { what: w.clone(), state: state.to_owned() })
                .collect(),
            notes: loaded.warnings,
        }))
    }

    /// A model as a person types it: `provider/model` or a bare id one set-up provider serves.
    pub fn parse_model(&self, text: &str) -> Result<ModelRef, EngineError> {
        Ok(self.services.models.parse_model(text)?)
    }

    /// The model a session gets without one named, and how it was chosen (config, or an API key found in
    /// the environment, which a client says once).
    pub fn default_model_choice(&self) -> Result<(ModelRef, ModelChoice), EngineError> {
        Ok(self.services.models.default_model_choice()?)
    }

    /// Whether `name` is a tool this engine offers: a built-in, or a tool of a connected MCP server (as of
    /// the last step that listed them). What a model names beyond that is not a tool, whatever it says.
    pub fn is_known_tool(&self, name: &str) -> bool {
        if self.services.tools.get(name).is_some() {
            return true;
        }
        let listed = self.services.all_tools.locked();
        listed.as_ref().is_some_and(|set| set.registry.get(name).is_some())
    }

    /// The context window of a model, when the catalogue or config knows it.
    pub fn context_window(&self, model: &ModelRef) -> Option<u64> {
        self.services.models.resolve(model).ok().map(|m| m.limits.context)
    }

    /// Where this engine keeps its data (sessions, spilled outputs, snapshots).
    pub fn data_dir(&self) -> &Path {
        &self.services.data_dir
    }

    pub async fn session(&self, id: &SessionId) -> Result<Session, EngineError> {
        let wanted = id.clone();
        self.read(move |store| store.get_session(&wanted))
            .await?
            .ok_or_else(|| EngineError::SessionNotFound(id.clone()))
    }

    pub async fn sessions(&self, filter: SessionFilter) -> Result<Vec<Session>, EngineError> {
        self.read(move |store| store.list_sessions(&filter)).await
    }

    /// What the stored steps of the last `days` days spent, grouped by `by` (`codeloop stats`).
    pub async fn usage_stats(
        &self,
        days: u32,
        by: crate::stats::StatsBy,
    ) -> Result<Vec<crate::stats::UsageRow>, EngineError> {
        let since = codeloop_types::now_ms() - i64::from(days) * 86_400_000;
        let steps = self.read(move |store| store.step_usage(since)).await?;
        Ok(crate::stats::aggregate(&steps, by))
    }

    /// The whole history of a session, oldest first.
    pub async fn history(&self, id: &SessionId) -> Result<Vec<MessageWithParts>, EngineError> {
        let id = id.clone();
        self.read(move |store| store.load_history(&id)).await
    }

    /// A page of a session's history, newest first.
    pub async fn messages(&self, id: &SessionId, page: Page) -> Result<Vec<MessageWithParts>, EngineError> {
        let id = id.clone();
        self.read(move |store| store.list_messages(&id, &page)).await
    }

    /// One message of a session, with its parts; `None` when the session has no such message.
    pub async fn message(
        &self,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<Option<MessageWithParts>, EngineError> {
        let id = id.clone();
        let found = self.read(move |store| store.get_message(&id)).await?;
        Ok(found.filter(|m| m.info.session_id() == session))
    }

    pub async fn todos(&self, id: &SessionId) -> Result<Vec<Todo>, EngineError> {
        let id = id.clone();
        self.read(move |store| store.get_todos(&id)).await
    }

    /// Saved "always" approvals, of one project (its worktree root) or all.
    pub async fn approvals(&self, project: Option<String>) -> Result<Vec<Approval>, EngineError> {
        self.read(move |store| store.list_approvals(project.as_deref())).await
    }

    /// Forgets a saved approval; false when there was none with that id.
    pub async fn revoke_approval(&self, id: i64) -> Result<bool, EngineError> {
        self.read(move |store| store.revoke_approval(id)).await
    }

    /// Renames a session. A run in progress keeps the new title (its own copy takes it at its next save).
    pub async fn rename_session(&self, id: &SessionId, title: &str) -> Result<Session, EngineError> {
        let title = title.trim();
        if title.is_empty() {
            return Err(EngineError::Invalid(
                "the title is empty: give the session a title with at least one character".into(),
            ));
        }
        let mut session = self.session(id).await?;
        if self.coordinator.is_busy(id) {
            self.services.journal.rename(id, title.to_owned());
        }
        session.title = title.to_owned();
        session.time.updated = codeloop_types::now_ms();
        let mut batch = crate::services::Batch::default();
        batch.session_as_is(&session);
        self.services.journal.commit(batch);
        Ok(session)
    }

    /// What each session is doing: busy or retrying (idle sessions are absent). A session between the
    /// turns of its run counts as busy.
    pub fn statuses(&self) -> HashMap<SessionId, SessionStatus> {
        let mut statuses = self.services.live.statuses();
        for id in self.coordinator.active() {
            statuses.entry(id).or_insert(SessionStatus::Busy);
        }
        statuses
    }

    /// Whether a run of this session is active in this process.
    pub fn is_busy(&self, id: &SessionId) -> bool {
        self.coordinator.is_busy(id)
    }

    /// Deletes a session and its children. Refused while it runs.
    pub async fn delete_session(&self, id: &SessionId) -> Result<bool, EngineError> {
        if self.coordinator.is_busy(id) {
            return Err(EngineError::Busy { session: id.clone(), action: "deleting it" });
        }
        // Its jobs end with it (DESIGN.md §5f), before its rows go.
        self.services.jobs.end_session(id, crate::engine::jobs::KILL_WAIT).await;
        let target = id.clone();
        let deleted = self
            .read(move |store| {
                let _lock = store.lock_session(&target)?;
                store.delete_session(&target)
            })
            .await?;
        if deleted {
            let transcript = crate::hooks::transcript::path(&self.services.data_dir.join("transcripts"), id);
            let _ = std::fs::remove_file(transcript);
            self.services.bus.publish(EventPayload::SessionDeleted { session_id: id.clone() });
        }
        Ok(deleted)
    }
}

/// `GET /project`: what a project brings and how far it is trusted.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ProjectReport {
    /// The root the trust record is keyed by.
    pub root: String,
    /// `trusted`, `untrusted` or `changed` (trusted once, changed since).
    pub trust: String,
    /// The files it brings config from (codeloop's, Claude Code's, OpenCode's).
    pub files: Vec<String>,
    /// Each thing it would start, contact or widen, with its state.
    pub brings: Vec<ProjectItem>,
    /// What codeloop left out or could not honour, in words.
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ProjectItem {
    pub what: String,
    /// The project's trust state: the item counts only when `trusted`.
    pub state: String,
}
