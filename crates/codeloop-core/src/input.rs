//! User input: what a client sends (`{parts: [{type: "text", text}], model?, agent?}`) and how it becomes
//! a stored user message.

use codeloop_store::MessageWithParts;
use codeloop_types::{
    FilePart, Message, MessageId, MessageTime, ModelRef, Part, PartKind, Session, UserMessage, now_ms,
};
use serde::{Deserialize, Serialize};

use crate::RunError;
use crate::services::{Batch, Services};

/// One prompt from a client.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PromptInput {
    pub parts: Vec<InputPart>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Extra system text for this turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The command (DESIGN.md §5g) this input's text was expanded from; recorded on the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// How hard the model is asked to think this turn (DESIGN.md §5l); else the agent's or model's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<codeloop_types::Effort>,
    /// A command's `allowed-tools` (Claude's rule syntax), pre-approved for the turns answering it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_tools: Vec<String>,
    /// The id the user message will have, when it was named before (a UserPromptSubmit hook's
    /// `prompt_id`).
    #[serde(skip)]
    pub message_id: Option<MessageId>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum InputPart {
    Text {
        text: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        synthetic: bool,
    },
    File {
        mime: String,
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filename: Option<String>,
    },
}

impl PromptInput {
    pub fn text(text: impl Into<String>) -> Self {
        Self { parts: vec![InputPart::Text { text: text.into(), synthetic: false }], ..Default::default() }
    }

    /// True when there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, InputPart::Text { text, .. } if text.trim().is_empty()))
    }
}

/// How input sent while a run is active is delivered (DESIGN.md §4 "Coordinator").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    /// Joins the active run at its next step boundary.
    #[default]
    Steer,
    /// Becomes its own turn after the active run ends (FIFO).
    Queue,
}

const DEFAULT_TITLE_PREFIX: &str = "New session - ";
const TITLE_CHARS: usize = 80;

/// A title from the first line of a person's first message (no model call: cheap and predictable).
fn title_from(input: &PromptInput) -> Option<String> {
    let text = input.parts.iter().find_map(|p| match p {
        InputPart::Text { text, synthetic: false } if !text.trim().is_empty() => Some(text),
        _ => None,
    })?;
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    Some(codeloop_tools::ellipsize(line, TITLE_CHARS))
}

/// A reverted session's hidden messages are removed for good when new input arrives (reference §10).
fn discard_reverted(services: &Services, session: &mut Session, batch: &mut Batch) -> Result<(), RunError> {
    let Some(from) = reverted_from(session) else { return Ok(()) };
    let history = codeloop_store::Store::load_history(services.store.as_ref(), &session.id)?;
    for message in history.iter().filter(|m| m.info.id() >= &from) {
        batch.write(codeloop_store::Write::RemoveMessage(message.info.id().clone()));
    }
    session.revert = None;
    Ok(())
}

/// The first message hidden by a revert.
pub(crate) fn reverted_from(session: &Session) -> Option<MessageId> {
    session.revert.as_ref().map(|revert| revert.message_id.clone())
}

/// Resolves agent and model for new input and persists it as a user message. Updates the session's
/// agent and model when they change.
pub fn create_user_message(
    services: &Services,
    session: &mut Session,
    input: &PromptInput,
) -> Result<MessageWithParts, RunError> {
    let (message, batch) = user_message(services, session, input)?;
    services.journal.commit(batch);
    Ok(message)
}

/// The writes that record `input` as a user message (with the session's new title, agent and model),
/// to be committed together with whatever else must land with them.
pub(crate) fn user_message(
    services: &Services,
    session: &mut Session,
    input: &PromptInput,
) -> Result<(MessageWithParts, Batch), RunError> {
    let agent_name = input.agent.clone().unwrap_or_else(|| session.agent.clone());
    let agent = crate::agents::find(&services.agents, &agent_name)?;
    let model = match input.model.clone().or_else(|| agent.model.clone()).or_else(|| session.model.clone()) {
        Some(model) => model,
        None => services.models.default_model()?,
    };
    let id = input.message_id.clone().unwrap_or_else(MessageId::new);
    let info = UserMessage {
        id: id.clone(),
        session_id: session.id.clone(),
        time: MessageTime { created: now_ms(), completed: None },
        agent: agent_name.clone(),
        model: model.clone(),
        system: input.system.clone(),
        format: None,
        command: input.command.clone(),
        effort: input.effort,
        allowed_tools: input.allowed_tools.clone(),
    };
    let parts: Vec<Part> = input
        .parts
        .iter()
        .map(|part| match part {
            InputPart::Text { text, synthetic: false } => {
                Part::user_text(session.id.clone(), id.clone(), text.clone())
            }
            InputPart::Text { text, synthetic: true } => {
                Part::synthetic_text(session.id.clone(), id.clone(), text.clone())
            }
            InputPart::File { mime, url, filename } => Part::new(
                session.id.clone(),
                id.clone(),
                PartKind::File(FilePart {
                    mime: mime.clone(),
                    filename: filename.clone(),
                    url: url.clone(),
                    source: None,
                }),
            ),
        })
        .collect();
    let mut batch = Batch::default();
    discard_reverted(services, session, &mut batch)?;
    let message = Message::User(info);
    batch.message(&message);
    for part in &parts {
        batch.part(part);
    }
    if session.title.starts_with(DEFAULT_TITLE_PREFIX)
        && let Some(title) = title_from(input)
    {
        session.title = title;
    }
    if session.agent != agent_name || session.model.as_ref() != Some(&model) {
        session.agent = agent_name;
        session.model = Some(model);
    }
    session.time.updated = now_ms();
    batch.session(&services.journal, session);
    Ok((MessageWithParts { info: message, parts }, batch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_come_from_the_first_line_of_the_first_message() {
        assert_eq!(
            title_from(&PromptInput::text("\n  fix the build\nmore")).as_deref(),
            Some("fix the build")
        );
        let long = "x".repeat(200);
        assert_eq!(title_from(&PromptInput::text(long)).unwrap().chars().count(), TITLE_CHARS);
        assert_eq!(title_from(&PromptInput::text("   ")), None);
    }
}
