//! The in-process client: the engine lives in this process and its bus is the event feed.

use std::path::Path;

use async_trait::async_trait;
use codeloop_core::permission::Reply;
use codeloop_core::{Delivery, Engine, PromptInput};
use codeloop_types::{
    MessageId, ModelRef, PermissionId, PermissionRequest, QuestionId, QuestionRequest, Session, SessionId,
};
use codeloop_types::{MessageWithParts, SessionFilter};
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
        Ok(self.engine.session(id)?)
    }

    async fn sessions(&self, directory: &Path) -> anyhow::Result<Vec<Session>> {
        let filter = SessionFilter { directory: Some(directory.display().to_string()), ..Default::default() };
        Ok(self.engine.sessions(&filter)?)
    }

    async fn create_session(
        &self,
        directory: &Path,
        agent: Option<&str>,
        model: Option<&ModelRef>,
    ) -> anyhow::Result<Session> {
        Ok(self.engine.create_session(directory, agent, model.cloned(), None)?)
    }

    async fn delete_session(&self, id: &SessionId) -> anyhow::Result<()> {
        self.engine.delete_session(id)?;
        Ok(())
    }

    async fn history(&self, id: &SessionId) -> anyhow::Result<Vec<MessageWithParts>> {
        self.engine.flush().await?;
        Ok(self.engine.history(id)?)
    }

    async fn prompt(&self, id: &SessionId, prompt: Prompt) -> anyhow::Result<()> {
        let input =
            PromptInput { model: prompt.model, agent: prompt.agent, ..PromptInput::text(prompt.text) };
        // Stops with an error are published by the run itself (session.error); only a refusal before
        // any run comes back here.
        self.engine.prompt(id, input, Delivery::Queue).await?;
        Ok(())
    }

    async fn abort(&self, id: &SessionId) -> anyhow::Result<()> {
        self.engine.abort(id).await;
        Ok(())
    }

    async fn compact(&self, id: &SessionId) -> anyhow::Result<()> {
        self.engine.compact(id).await?;
        Ok(())
    }

    async fn revert(&self, id: &SessionId, message: &MessageId) -> anyhow::Result<Session> {
        Ok(self.engine.revert(id, message).await?)
    }

    async fn unrevert(&self, id: &SessionId) -> anyhow::Result<Session> {
        Ok(self.engine.unrevert(id).await?)
    }

    async fn reply_permission(&self, id: &PermissionId, answer: PermissionAnswer) -> anyhow::Result<()> {
        self.engine.reply_permission(id, Reply { reply: answer.reply, message: answer.message })?;
        Ok(())
    }

    async fn reply_question(&self, id: &QuestionId, answers: Vec<Vec<String>>) -> anyhow::Result<()> {
        self.engine.reply_question(id, answers)?;
        Ok(())
    }

    async fn reject_question(&self, id: &QuestionId) -> anyhow::Result<()> {
        self.engine.reject_question(id)?;
        Ok(())
    }

    async fn pending(
        &self,
        id: &SessionId,
    ) -> anyhow::Result<(Vec<PermissionRequest>, Vec<QuestionRequest>)> {
        Ok((self.engine.pending_permissions(Some(id)), self.engine.pending_questions(Some(id))))
    }

    async fn status(&self, id: &SessionId) -> codeloop_types::SessionStatus {
        match self.engine.statuses().remove(id) {
            Some(status) => status,
            None if self.engine.coordinator().is_busy(id) => codeloop_types::SessionStatus::Busy,
            None => codeloop_types::SessionStatus::Idle,
        }
    }

    async fn context_window(&self, model: &ModelRef) -> Option<u64> {
        let resolved = self.engine.services().models.resolve(model).ok()?;
        Some(resolved.limits.context)
    }

    async fn check_model(&self, model: Option<&ModelRef>) -> anyhow::Result<()> {
        self.engine.check_model(model)?;
        Ok(())
    }

    async fn agents(&self) -> Option<Vec<String>> {
        Some(self.engine.services().agents.keys().cloned().collect())
    }
}
