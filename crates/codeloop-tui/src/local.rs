//! The in-process client: the engine lives in this process and its bus is the event feed.

use std::path::Path;

use async_trait::async_trait;
use codeloop_core::{CommandOutcome, Delivery, Engine, PromptInput, SessionCommand};
use codeloop_types::{
    MessageId, ModelRef, PermissionId, PermissionReply, PermissionRequest, QuestionId, QuestionRequest,
    Session, SessionId,
};
use codeloop_types::{MessageWithParts, Page, SessionFilter};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

use crate::client::{Client, Incoming, PermissionAnswer, Prompt};

/// Events the UI may fall behind before the feed says `Resync`.
const FEED_CAPACITY: usize = 4096;

pub struct LocalClient {
    engine: Engine,
}

impl LocalClient {
    pub fn new(engine: Engine) -> LocalClient {
        LocalClient { engine }
    }
}

#[async_trait]
impl Client for LocalClient {
    async fn subscribe(&self) -> anyhow::Result<mpsc::Receiver<Incoming>> {
        let mut events = self.engine.bus().subscribe();
        let (tx, rx) = mpsc::channel(FEED_CAPACITY);
        tokio::spawn(async move {
            loop {
                let incoming = match events.recv().await {
                    Ok(event) => Incoming::Event(event),
                    Err(RecvError::Lagged(_)) => Incoming::Resync,
                    Err(RecvError::Closed) => return,
                };
                if tx.send(incoming).await.is_err() {
                    return;
                }
            }
        });
        Ok(rx)
    }

    async fn session(&self, id: &SessionId) -> anyhow::Result<Session> {
        Ok(self.engine.session(id).await?)
    }

    async fn sessions(&self, directory: &Path) -> anyhow::Result<Vec<Session>> {
        let filter = SessionFilter { directory: Some(directory.display().to_string()), ..Default::default() };
        Ok(self.engine.sessions(filter).await?)
    }

    async fn create_session(
        &self,
        directory: &Path,
        agent: Option<&str>,
        model: Option<&ModelRef>,
    ) -> anyhow::Result<Session> {
        Ok(self.engine.create_session(directory, agent, model.cloned(), None).await?)
    }

    async fn delete_session(&self, id: &SessionId) -> anyhow::Result<()> {
        self.engine.delete_session(id).await?;
        Ok(())
    }

    async fn history(&self, id: &SessionId) -> anyhow::Result<Vec<MessageWithParts>> {
        self.engine.flush().await?;
        Ok(self.engine.history(id).await?)
    }

    async fn history_page(&self, id: &SessionId, page: Page) -> anyhow::Result<Vec<MessageWithParts>> {
        if page.before.is_none() {
            self.engine.flush().await?;
        }
        Ok(self.engine.messages(id, page).await?)
    }

    async fn prompt(&self, id: &SessionId, prompt: Prompt) -> anyhow::Result<()> {
        let input = PromptInput {
            model: prompt.model,
            agent: prompt.agent,
            effort: prompt.effort,
            ..PromptInput::text(prompt.text)
        };
        // Stops with an error are published by the run itself (session.error); only a refusal before
        // any run comes back here.
        self.submit(SessionCommand::Prompt { session: id.clone(), input, delivery: Delivery::Queue }).await?;
        Ok(())
    }

    async fn commands(&self, directory: &Path) -> Vec<crate::client::CommandEntry> {
        let commands = self.engine.commands(directory).await;
        commands
            .into_iter()
            .map(|c| crate::client::CommandEntry {
                name: c.name,
                description: c.description,
                hint: c.argument_hint,
            })
            .collect()
    }

    async fn run_command(
        &self,
        id: &SessionId,
        name: &str,
        arguments: &str,
        effort: Option<codeloop_types::Effort>,
    ) -> anyhow::Result<()> {
        let command = SessionCommand::RunCommand {
            session: id.clone(),
            name: name.to_owned(),
            arguments: arguments.to_owned(),
            delivery: Delivery::Queue,
            effort,
        };
        self.submit(command).await?;
        Ok(())
    }

    async fn abort(&self, id: &SessionId) -> anyhow::Result<()> {
        self.submit(SessionCommand::Abort { session: id.clone() }).await?;
        Ok(())
    }

    async fn compact(&self, id: &SessionId, focus: Option<String>) -> anyhow::Result<()> {
        self.submit(SessionCommand::Compact { session: id.clone(), focus }).await?;
        Ok(())
    }

    async fn revert(&self, id: &SessionId, message: &MessageId) -> anyhow::Result<Session> {
        let command = SessionCommand::Revert { session: id.clone(), message: message.clone() };
        changed_session(self.submit(command).await?)
    }

    async fn unrevert(&self, id: &SessionId) -> anyhow::Result<Session> {
        changed_session(self.submit(SessionCommand::Unrevert { session: id.clone() }).await?)
    }

    async fn reply_permission(&self, id: &PermissionId, answer: PermissionAnswer) -> anyhow::Result<()> {
        let answer = match answer.reply {
            PermissionReply::Once => codeloop_core::PermissionAnswer::Once,
            PermissionReply::Always => codeloop_core::PermissionAnswer::Always,
            PermissionReply::Reject => codeloop_core::PermissionAnswer::Reject { message: answer.message },
        };
        self.submit(SessionCommand::AnswerPermission { request: id.clone(), answer }).await?;
        Ok(())
    }

    async fn reply_question(&self, id: &QuestionId, answers: Vec<Vec<String>>) -> anyhow::Result<()> {
        self.submit(SessionCommand::AnswerQuestion { request: id.clone(), answers: Some(answers) }).await?;
        Ok(())
    }

    async fn pending_elicitations(
        &self,
        id: &SessionId,
    ) -> anyhow::Result<Vec<codeloop_types::ElicitationRequest>> {
        Ok(self.engine.pending_elicitations(id))
    }

    async fn answer_elicitation(
        &self,
        session: &SessionId,
        id: &codeloop_types::ElicitationId,
        reply: codeloop_types::ElicitationReply,
    ) -> anyhow::Result<()> {
        Ok(self.engine.answer_elicitation(session, id, reply)?)
    }

    async fn reject_question(&self, id: &QuestionId) -> anyhow::Result<()> {
        self.submit(SessionCommand::AnswerQuestion { request: id.clone(), answers: None }).await?;
        Ok(())
    }

    async fn pending(
        &self,
        id: &SessionId,
    ) -> anyhow::Result<(Vec<PermissionRequest>, Vec<QuestionRequest>)> {
        Ok((self.engine.pending_permissions(Some(id)), self.engine.pending_questions(Some(id))))
    }

    async fn status(&self, id: &SessionId) -> codeloop_types::SessionStatus {
        self.engine.statuses().remove(id).unwrap_or(codeloop_types::SessionStatus::Idle)
    }

    async fn context_window(&self, model: &ModelRef) -> Option<u64> {
        self.engine.context_window(model)
    }

    async fn check_model(&self, model: Option<&ModelRef>) -> anyhow::Result<()> {
        self.engine.check_model(model)?;
        Ok(())
    }

    async fn check_agent(&self, name: &str) -> anyhow::Result<()> {
        self.engine.check_agent(name)?;
        Ok(())
    }

    async fn agents(&self) -> Option<Vec<String>> {
        Some(self.engine.agents().into_iter().map(|a| a.name).collect())
    }

    async fn jobs(&self, id: &SessionId) -> anyhow::Result<Vec<codeloop_types::Job>> {
        Ok(self.engine.jobs(id).await?)
    }

    async fn job_output(&self, id: &SessionId, job: &codeloop_types::JobId) -> anyhow::Result<String> {
        Ok(self.engine.job_output(id, job, crate::app::JOB_OUTPUT_BYTES).await?)
    }

    async fn kill_job(
        &self,
        id: &SessionId,
        job: &codeloop_types::JobId,
    ) -> anyhow::Result<codeloop_types::Job> {
        match self.submit(SessionCommand::KillJob { session: id.clone(), job: job.clone() }).await? {
            CommandOutcome::Job(job) => Ok(job),
            other => anyhow::bail!("a kill came back as {other:?}"),
        }
    }
}

impl LocalClient {
    async fn submit(&self, command: SessionCommand) -> anyhow::Result<CommandOutcome> {
        Ok(self.engine.submit(command).await?)
    }
}

/// The session a revert or an unrevert left.
fn changed_session(outcome: CommandOutcome) -> anyhow::Result<Session> {
    match outcome {
        CommandOutcome::Session(session) => Ok(session),
        other => anyhow::bail!("the engine answered a revert with {other:?}"),
    }
}
