//! The commands of [`SessionCommand`] and their one validation: a prompt's agent (one rule), model and
//! text, and whether the session is idle for what needs it idle (compact, revert, unrevert). Commands
//! (`RunCommand`) are in [`super::file_commands`].

use std::path::Path;

use codeloop_store::StoreError;
use codeloop_types::{EventPayload, Message, MessageId, PartKind, Session, SessionId, WorkerRequest};

use super::Engine;
use crate::command::{CommandOutcome, SessionCommand};
use crate::coordinator::Accepted;
use crate::error::EngineError;
use crate::input::{Delivery, PromptInput};
use crate::instructions::ProjectInfo;
use crate::outcome::RunOutcome;

impl Engine {
    /// Checks a command as [`Engine::submit`] would, without carrying it out: for a client that answers
    /// before the command is done (`prompt_async`).
    pub async fn validate(&self, command: &SessionCommand) -> Result<(), EngineError> {
        match command {
            SessionCommand::Prompt { session, input, .. } => self.check_prompt(session, input).await,
            SessionCommand::Abort { session }
            | SessionCommand::Compact { session, .. }
            | SessionCommand::Revert { session, .. }
            | SessionCommand::Unrevert { session }
            | SessionCommand::KillJob { session, .. } => self.session(session).await.map(drop),
            SessionCommand::RunCommand { session, name, .. } => self.check_command(session, name).await,
            SessionCommand::AnswerPermission { .. } | SessionCommand::AnswerQuestion { .. } => Ok(()),
        }
    }

    /// Carries out one command: the way every client acts on a session.
    pub async fn submit(&self, command: SessionCommand) -> Result<CommandOutcome, EngineError> {
        self.submit_accepted(command, &Accepted::default()).await
    }

    /// Starts `command` in the background and returns once it is accepted: checked, and a prompt's input
    /// durable (stored in the session's queue or recorded as its message), so a process or worker that
    /// dies afterwards cannot lose it — the settling one runs it (DESIGN.md §5b). The handle gives the
    /// outcome. What `prompt_async` answers with.
    pub async fn accept(
        &self,
        command: SessionCommand,
    ) -> Result<tokio::task::JoinHandle<Result<CommandOutcome, EngineError>>, EngineError> {
        self.validate(&command).await?;
        let (accepted, durable) = Accepted::new();
        let engine = self.clone();
        let mut handle = tokio::spawn(async move { engine.submit_accepted(command, &accepted).await });
        tokio::select! {
            stored = durable => match stored {
                Ok(()) => Ok(handle),
                // Refused on the way (busy, storage): the command's own error says why.
                Err(_) => Err(finished(handle.await)?.err().unwrap_or_else(|| {
                    EngineError::internal("the command ended before it was accepted")
                })),
            },
            outcome = &mut handle => {
                let outcome = finished(outcome)?;
                match outcome {
                    Err(e) => Err(e),
                    Ok(done) => Ok(tokio::spawn(async move { Ok(done) })),
                }
            }
        }
    }

    async fn submit_accepted(
        &self,
        command: SessionCommand,
        accepted: &Accepted,
    ) -> Result<CommandOutcome, EngineError> {
        if !matches!(command, SessionCommand::Prompt { .. } | SessionCommand::RunCommand { .. }) {
            accepted.fire();
        }
        match command {
            SessionCommand::Prompt { session, input, delivery } => self
                .submit_prompt_accepted(&session, input, delivery, accepted)
                .await
                .map(CommandOutcome::Ran),
            SessionCommand::Abort { session } => {
                self.session(&session).await?;
                Ok(CommandOutcome::Aborted(self.submit_abort(&session).await))
            }
            SessionCommand::Compact { session, focus } => {
                self.submit_compact(&session, focus).await.map(CommandOutcome::Ran)
            }
            SessionCommand::Revert { session, message } => {
                self.submit_revert(&session, &message).await.map(CommandOutcome::Session)
            }
            SessionCommand::Unrevert { session } => {
                self.submit_unrevert(&session).await.map(CommandOutcome::Session)
            }
            SessionCommand::RunCommand { session, name, arguments, delivery, effort } => self
                .submit_command(&session, &name, &arguments, delivery, effort, accepted)
                .await
                .map(CommandOutcome::Ran),
            SessionCommand::AnswerPermission { request, answer } => {
                self.answer_permission(&request, answer).await?;
                Ok(CommandOutcome::Answered)
            }
            SessionCommand::AnswerQuestion { request, answers } => {
                self.answer_question(&request, answers).await?;
                Ok(CommandOutcome::Answered)
            }
            SessionCommand::KillJob { session, job } => {
                self.submit_kill_job(&session, &job).await.map(CommandOutcome::Job)
            }
        }
    }

    /// Stops every run of this process and waits for their cleanup (a server shutting down).
    pub async fn abort_all(&self) {
        let active = self.coordinator.active();
        futures::future::join_all(active.iter().map(|session| self.coordinator.interrupt(session))).await;
    }

    /// Sends input to a session (after its UserPromptSubmit hooks) and waits for the outcome of the run
    /// it starts or joins, telling `accepted` once the input is durable (or settled by a hook).
    pub(super) async fn submit_prompt_accepted(
        &self,
        session: &SessionId,
        input: PromptInput,
        delivery: Delivery,
        accepted: &Accepted,
    ) -> Result<RunOutcome, EngineError> {
        self.check_prompt(session, &input).await?;
        let input = match self.prompt_hooks(session, input).await? {
            super::hooks::Admitted::Run(input) => input,
            super::hooks::Admitted::Stopped(outcome) => {
                accepted.fire();
                return Ok(*outcome);
            }
        };
        Ok(self.coordinator.prompt_accepted(session, input, delivery, accepted).await?)
    }

    /// The one check of a prompt: some text, a primary agent, a usable model, a session that exists.
    pub(super) async fn check_prompt(
        &self,
        session: &SessionId,
        input: &PromptInput,
    ) -> Result<(), EngineError> {
        if input.is_empty() {
            return Err(EngineError::Invalid(
                "the prompt is empty: send at least one non-empty text part".into(),
            ));
        }
        if let Some(agent) = &input.agent {
            self.check_agent(agent)?;
        }
        if let Some(model) = &input.model {
            self.check_model(Some(model))?;
        }
        let session = self.session(session).await?;
        check_directory(&session)
    }

    /// Stops the session's run and returns after its cleanup; with many workers, also a run another
    /// worker owns. False when nothing was running (or the owner did not confirm in time).
    async fn submit_abort(&self, session: &SessionId) -> bool {
        if self.coordinator.is_busy(session) {
            self.coordinator.interrupt(session).await;
            return true;
        }
        if self.peers.is_none() {
            return false;
        }
        let seen_busy = self.services.live.is_marked_busy(session);
        // A run that started before this worker did was never seen starting: its lease says it runs.
        let running_elsewhere = seen_busy || {
            let id = session.clone();
            let probe = self.services.blocking(move |store| match store.lock_session(&id) {
                Ok(_free) => Ok(false),
                Err(StoreError::SessionBusy(_)) => Ok(true),
                Err(e) => Err(e),
            });
            probe.await.unwrap_or(false)
        };
        if !running_elsewhere {
            return false;
        }
        let ended =
            |p: &EventPayload| matches!(p, EventPayload::SessionIdle { session_id } if session_id == session);
        let timeout = self.services.config.store.lease() + crate::peers::ANSWER_TIMEOUT;
        crate::peers::forward(&self.services, session, WorkerRequest::Abort, timeout, ended).await
    }

    /// Holds the session's run ownership for a change that needs it idle (a revert, an undo), so no
    /// run starts meanwhile, in this process or any other (another `codeloop`, another worker).
    async fn hold_idle(
        &self,
        id: &SessionId,
        what: &'static str,
    ) -> Result<codeloop_store::RunGuard, EngineError> {
        let busy = || EngineError::Busy { session: id.clone(), action: what };
        if self.coordinator.is_busy(id) {
            return Err(busy());
        }
        // A lock file's descriptor is copied into every child forked while it is open, until that child's
        // exec closes it: a lock just released can look held for that moment. Asked again a few times
        // (never while this process runs the session) before saying busy.
        for attempt in 0..LOCK_ATTEMPTS {
            let session = id.clone();
            match self.services.blocking(move |store| store.lock_session(&session)).await {
                Ok(guard) => return Ok(guard),
                Err(StoreError::SessionBusy(_))
                    if attempt + 1 < LOCK_ATTEMPTS && !self.coordinator.is_busy(id) =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                Err(StoreError::SessionBusy(_)) => return Err(busy()),
                Err(e) => return Err(e.into()),
            }
        }
        Err(busy())
    }

    /// Summarises the session now (manual compaction: no automatic continuation); `focus` goes to the
    /// summariser.
    pub(super) async fn submit_compact(
        &self,
        session: &SessionId,
        focus: Option<String>,
    ) -> Result<RunOutcome, EngineError> {
        // Checked before the request is recorded: a failed command changes nothing. (The run takes the
        // ownership again; a run that starts in between makes it fail as busy.)
        drop(self.hold_idle(session, "compacting").await?);
        let history = self.history(session).await?;
        let Some(last_user) = history.iter().rev().find_map(|m| match &m.info {
            Message::User(u) => Some(u.clone()),
            Message::Assistant(_) => None,
        }) else {
            return Err(EngineError::Invalid(format!("session {session} has no messages to compact")));
        };
        // Fail on an unusable model before recording the request: a failed command changes nothing.
        let model = self
            .services
            .agents
            .get(crate::agents::COMPACTION_AGENT)
            .and_then(|agent| agent.model.clone())
            .unwrap_or_else(|| last_user.model.clone());
        self.services.models.resolve(&model)?;
        let mut request = crate::compaction::new_compaction_request(session, &last_user, false, false);
        if let Some(PartKind::Compaction(part)) = request.parts.first_mut().map(|p| &mut p.kind) {
            part.focus = focus.filter(|f| !f.trim().is_empty());
        }
        self.services.journal.save_message(&request.info);
        for part in &request.parts {
            self.services.journal.save_part(part);
        }
        Ok(self.coordinator.run(session).await?)
    }

    /// Reverts a session to just before `message`: every file the steps from that message on changed is
    /// put back as it was, and those messages are hidden until the next prompt removes them (or
    /// `SessionCommand::Unrevert` undoes the revert). Needs snapshots (a git project).
    async fn submit_revert(&self, id: &SessionId, message: &MessageId) -> Result<Session, EngineError> {
        let _idle = self.hold_idle(id, "reverting").await?;
        self.flush().await?;
        let session = self.session(id).await?;
        let history = self.history(id).await?;
        let start = history
            .iter()
            .position(|m| m.info.id() == message)
            .ok_or_else(|| {
                EngineError::Invalid(format!(
                    "message {message} is not part of session {id}: `codeloop session export {id}` lists its message ids"
                ))
            })?;
        let project = ProjectInfo::discover(Path::new(&session.directory));
        let snapshots = self.services.snapshots_for(&project).ok_or(EngineError::SnapshotsOff)?;
        // Only now that the request is known to be valid does a pending revert make way for it: a failed
        // command changes nothing.
        let mut session = if session.revert.is_some() { self.submit_unrevert(id).await? } else { session };
        // Each file goes back to how it was before the first step (from `message` on) that changed it.
        let mut seen = std::collections::HashSet::new();
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for part in history[start..].iter().flat_map(|m| &m.parts) {
            let PartKind::Patch(patch) = &part.kind else { continue };
            let fresh: Vec<String> =
                patch.files.iter().filter(|f| seen.insert((*f).clone())).cloned().collect();
            if !fresh.is_empty() {
                groups.push((patch.hash.clone(), fresh));
            }
        }
        let current = snapshots.track().await?;
        for (hash, files) in &groups {
            snapshots.restore(hash, files).await?;
        }
        let files: Vec<String> = groups.iter().flat_map(|(_, f)| f.iter().cloned()).collect();
        let not_undone = self.not_undone(&history[start..]);
        session.revert = Some(codeloop_types::Revert {
            message_id: message.clone(),
            snapshot: current,
            files,
            not_undone,
        });
        self.services.journal.save_session(&mut session);
        self.flush().await?;
        Ok(session)
    }

    /// The calls of `range` that may have acted outside the project: a revert cannot undo them.
    fn not_undone(&self, range: &[codeloop_store::MessageWithParts]) -> Vec<codeloop_types::NotUndone> {
        range
            .iter()
            .flat_map(|m| &m.parts)
            .filter_map(|p| p.as_tool())
            .filter(|tool| {
                let effect = self.services.tools.get(&tool.tool).map(|t| t.effect());
                effect.unwrap_or(codeloop_tools::Effect::External) == codeloop_tools::Effect::External
            })
            .filter(|tool| !matches!(tool.state, codeloop_types::ToolState::Pending(_)))
            .map(|tool| codeloop_types::NotUndone {
                call_id: tool.call_id.clone(),
                tool: tool.tool.clone(),
                title: codeloop_tools::call_summary(&tool.tool, tool.state.input()),
                time: tool.state.started_at().unwrap_or_default(),
            })
            .collect()
    }

    /// Undoes a revert: the files come back as they were before it.
    async fn submit_unrevert(&self, id: &SessionId) -> Result<Session, EngineError> {
        let _idle = self.hold_idle(id, "undoing the revert").await?;
        let mut session = self.session(id).await?;
        let Some(revert) = session.revert.clone() else { return Ok(session) };
        let project = ProjectInfo::discover(Path::new(&session.directory));
        let Some(snapshots) = self.services.snapshots_for(&project) else {
            return Err(EngineError::Invalid("this revert cannot be undone: its snapshot is missing".into()));
        };
        snapshots.restore(&revert.snapshot, &revert.files).await?;
        session.revert = None;
        self.services.journal.save_session(&mut session);
        self.flush().await?;
        Ok(session)
    }
}

/// Tries of a session's lock for a change that needs it idle, 10 ms apart (see `hold_idle`).
const LOCK_ATTEMPTS: usize = 10;

/// Shortcuts over [`Engine::submit`] for core's own tests and benches.
#[cfg(any(test, feature = "internals"))]
impl Engine {
    pub async fn prompt(
        &self,
        session: &SessionId,
        input: PromptInput,
        delivery: crate::input::Delivery,
    ) -> Result<RunOutcome, EngineError> {
        self.submit_prompt_accepted(session, input, delivery, &Accepted::default()).await
    }

    pub async fn abort(&self, session: &SessionId) -> bool {
        self.submit_abort(session).await
    }

    pub async fn compact(&self, session: &SessionId) -> Result<RunOutcome, EngineError> {
        self.submit_compact(session, None).await
    }

    pub async fn revert(&self, session: &SessionId, message: &MessageId) -> Result<Session, EngineError> {
        self.submit_revert(session, message).await
    }

    pub async fn unrevert(&self, session: &SessionId) -> Result<Session, EngineError> {
        self.submit_unrevert(session).await
    }
}

/// A background command's result, a panic in it being an error like any other.
fn finished(
    joined: Result<Result<CommandOutcome, EngineError>, tokio::task::JoinError>,
) -> Result<Result<CommandOutcome, EngineError>, EngineError> {
    joined.map_err(|e| EngineError::internal(format!("the command failed: {e}")))
}

/// A session runs in its directory: a worker that cannot see it says so instead of running the tools
/// somewhere else (another worker that can see it may take the prompt).
pub(super) fn check_directory(session: &Session) -> Result<(), EngineError> {
    if std::path::Path::new(&session.directory).is_dir() {
        return Ok(());
    }
    Err(EngineError::Config {
        origin: format!("session {}", session.id),
        reason: format!(
            "it runs in {}, which this process cannot see: run it on a machine (or worker) where that \
             directory exists",
            session.directory
        ),
    })
}
