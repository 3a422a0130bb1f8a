//! Compaction inside the run loop: creating compaction requests, the pre-call overflow check, and
//! processing a request into an anchored summary with an explicit tail (reference §6).

use codeloop_provider::{ChatMessage, ProviderRequest, ToolChoice, UserContent};
use codeloop_store::MessageWithParts;
use codeloop_types::{AssistantError, EventPayload, Message, MessageId, Part, PartKind, UserMessage};

use super::turn::estimate_request_tokens;
use super::{Flow, Latest, MAX_NO_PROGRESS_COMPACTIONS, Run};
use crate::agents::COMPACTION_AGENT;
use crate::compaction::{
    CONTINUE_TEXT, OVERFLOW_MEDIA_NOTE, SUMMARY_SYSTEM_PROMPT, SUMMARY_TOOL_OUTPUT_CHARS, WorkRecord,
    is_overflow, max_output, request_size, select_tail, summary_prompt, summary_text, tail_budget, usable,
};
use crate::compaction::{new_compaction_request, user_info};
use crate::error::RunError;
use crate::outcome::StopReason;
use crate::processor::Processor;
use crate::projection::{ProjectionOptions, to_provider_messages, visible_history};

impl Run<'_> {
    /// Before a call: if the last finished (non-summary) step already filled the window, compact first.
    pub(super) fn overflow_before_call(&mut self, latest: &Latest) -> Result<Option<Flow>, RunError> {
        let Some(index) = latest.last_finished else { return Ok(None) };
        let Message::Assistant(info) = &self.history[index].info else { return Ok(None) };
        if info.summary || info.error.is_some() {
            return Ok(None);
        }
        let (tokens, model_ref) = (info.tokens, info.model.clone());
        let model = self.resolve_model(&model_ref)?;
        if !is_overflow(&tokens, &model.limits, &self.services.config.compaction) {
            return Ok(None);
        }
        let Some(user_index) = latest.last_user else { return Ok(None) };
        let Message::User(user) = &self.history[user_index].info else { return Ok(None) };
        let user = user.clone();
        self.request_compaction(&user, true, false, request_size(&tokens)).map(Some)
    }

    /// Writes a compaction request (a user message with a `compaction` part) for the loop to process.
    pub(super) fn request_compaction(
        &mut self,
        user: &UserMessage,
        auto: bool,
        overflow: bool,
        trigger_size: u64,
    ) -> Result<Flow, RunError> {
        if auto {
            if self.breaker.no_progress >= MAX_NO_PROGRESS_COMPACTIONS {
                let model = self.resolve_model(&user.model)?;
                let usable = usable(&model.limits, &self.services.config.compaction);
                return Ok(Flow::Stop(StopReason::Error(self.breaker_error(&model, trigger_size, usable))));
            }
            self.breaker.pending_check = Some(trigger_size);
        }
        let message = new_compaction_request(&self.session.id, user, auto, overflow);
        self.services.journal.save_message(&message.info);
        for part in &message.parts {
            self.services.journal.save_part(part);
        }
        self.history.push(message);
        Ok(Flow::Continue)
    }

    /// Processes the compaction request at `index` into a summary.
    pub(super) async fn summarize(&mut self, index: usize) -> Result<Flow, RunError> {
        let request_message = &self.history[index];
        let Message::User(request_user) = &request_message.info else {
            return Err(RunError::Internal("the compaction request is not a user message".into()));
        };
        let request_user = request_user.clone();
        let part = request_message.parts.iter().find_map(|p| p.as_compaction()).cloned().unwrap_or_default();

        let agent = self.agent(COMPACTION_AGENT)?;
        let model_ref = agent.model.clone().unwrap_or_else(|| request_user.model.clone());
        let model = self.resolve_model(&model_ref)?;
        // What the summary may see: the visible history before the request, without an earlier
        // compaction pair (whose summary becomes the anchor).
        let visible = visible_history(&self.history[..index]);
        let (previous, mut source): (Option<String>, Vec<&MessageWithParts>) = match visible.as_slice() {
            [first, second, rest @ ..]
                if first.parts.iter().any(|p| p.as_compaction().is_some())
                    && second.info.as_assistant().is_some_and(|a| a.summary) =>
            {
                (Some(summary_text(second)), rest.to_vec())
            }
            _ => (None, visible.clone()),
        };
        // After an overflow the last real user message is replayed, and the summary covers what came before.
        let mut replay: Option<(UserMessage, Vec<Part>)> = None;
        if part.overflow {
            let real_user = source.iter().enumerate().rev().find_map(|(position, m)| match &m.info {
                Message::User(user) if !m.parts.iter().any(|p| p.as_compaction().is_some()) => {
                    Some((position, user.clone(), m.parts.clone()))
                }
                _ => None,
            });
            if let Some((position, user, parts)) = real_user.filter(|(p, ..)| *p > 0) {
                replay = Some((user, parts));
                source.truncate(position);
            }
        }

        let compaction = self.services.config.compaction.clone();
        let budget = tail_budget(usable(&model.limits, &compaction), compaction.preserve_recent_tokens);
        let tail = select_tail(&source, compaction.tail_turns, budget, &model.reference);
        let head: Vec<&MessageWithParts> =
            source.iter().copied().filter(|m| !tail.contains(m.info.id())).collect();
        let options =
            ProjectionOptions { strip_media: true, tool_output_max_chars: Some(SUMMARY_TOOL_OUTPUT_CHARS) };
        let mut messages = to_provider_messages(&head, &model.reference, options);
        let record = WorkRecord::of(&head);
        let mut prompt = summary_prompt(previous.as_deref(), &record);
        if let Some(focus) = &part.focus {
            // `/compact FOCUS`: what the person wants the summary to keep in view.
            prompt.push_str(&format!(
                "\n\nThe user asked this summary to focus on: {focus}. Keep everything about it in detail."
            ));
        }
        messages.push(ChatMessage::User(vec![UserContent::Text(prompt)]));
        let request = ProviderRequest {
            model: model.api_id.clone(),
            system: vec![SUMMARY_SYSTEM_PROMPT.to_owned()],
            messages,
            tools: Vec::new(),
            tool_choice: ToolChoice::None,
            max_output_tokens: Some(max_output(&model.limits)),
            temperature: None,
            top_p: None,
            // No tools: nothing to turn into a call.
            tool_call_text: codeloop_provider::ToolCallText::Off,
            session_id: Some(self.session.id.to_string()),
            // A summary is a plain writing task: no thinking asked for.
            reasoning: None,
            // A summary is sent once: nothing to reuse.
            cache: None,
        };
        let estimate = estimate_request_tokens(&request);
        let ctx = self.turn_context(&agent, &model, false, true, estimate, Vec::new());
        let mut summary = self.new_assistant(&request_user, &agent.name, &model);
        summary.summary = true;
        let mut processor = Processor::new(ctx, summary);
        let end = self.attempts(&mut processor, &model, request).await;
        let error = match (end.error, end.overflow) {
            (_, true) => Some(AssistantError::ContextOverflow {
                message: if replay.is_some() {
                    "Conversation history too large to compact - exceeds model context limit".into()
                } else {
                    "Session too large to compact - context exceeds model limit even after stripping media"
                        .into()
                },
                body: None,
            }),
            (Some(error), false) => Some(error),
            (None, false) if end.halted.is_some() => Some(AssistantError::Unknown {
                message: end.halted.as_ref().map(ToString::to_string).unwrap_or_default(),
            }),
            (None, false) => None,
        };
        let mut finished = processor.finish(error.clone(), None);
        if error.is_none() {
            // What the tools did, as codeloop knows it, stays next to what the summariser says they did.
            let note =
                Part::synthetic_text(self.session.id.clone(), finished.message.id.clone(), record.note());
            self.services.journal.save_part(&note);
            finished.parts.push(note);
        }
        self.record_assistant(MessageWithParts {
            info: Message::Assistant(finished.message),
            parts: finished.parts,
        });
        if let Some(error) = error {
            return Ok(Flow::Stop(if error.is_aborted() {
                StopReason::Interrupted
            } else {
                StopReason::Error(error)
            }));
        }

        self.record_tail(index, tail);
        if part.auto {
            let follow_up = match replay {
                Some((user, parts)) => replayed_message(&self.session.id, &user, &parts),
                None => continue_message(&self.session.id, &request_user, part.overflow),
            };
            self.services.journal.save_message(&follow_up.info);
            for part in &follow_up.parts {
                self.services.journal.save_part(part);
            }
            self.history.push(follow_up);
        }
        self.services.bus.publish(EventPayload::SessionCompacted { session_id: self.session.id.clone() });
        self.prefix_changed(codeloop_types::CacheReason::Compaction);
        Ok(Flow::Continue)
    }

    /// Stores the tail on the compaction part as explicit ids.
    fn record_tail(&mut self, index: usize, tail: Vec<MessageId>) {
        let Some(part) = self.history[index].parts.iter_mut().find(|p| p.as_compaction().is_some()) else {
            return;
        };
        if let PartKind::Compaction(compaction) = &mut part.kind {
            compaction.tail_start_id = tail.first().cloned();
            compaction.tail = tail;
        }
        self.services.journal.save_part(part);
    }
}

fn continue_message(
    session_id: &codeloop_types::SessionId,
    like: &UserMessage,
    overflow: bool,
) -> MessageWithParts {
    let info = user_info(session_id, like);
    let text =
        if overflow { format!("{OVERFLOW_MEDIA_NOTE}{CONTINUE_TEXT}") } else { CONTINUE_TEXT.to_owned() };
    let mut part = Part::synthetic_text(session_id.clone(), info.id.clone(), text);
    if let PartKind::Text(text) = &mut part.kind {
        text.metadata = Some(serde_json::json!({ "compaction_continue": true }));
    }
    MessageWithParts { info: Message::User(info), parts: vec![part] }
}

/// A copy of the user message whose request overflowed, with media replaced by a note.
fn replayed_message(
    session_id: &codeloop_types::SessionId,
    like: &UserMessage,
    parts: &[Part],
) -> MessageWithParts {
    let mut info = user_info(session_id, like);
    info.system = like.system.clone();
    info.format = like.format.clone();
    let parts = parts
        .iter()
        .map(|part| {
            let kind = match &part.kind {
                PartKind::File(file) if !file.mime.starts_with("text/") => {
                    PartKind::Text(codeloop_types::TextPart {
                        text: format!(
                            "[Attached {}: {}]",
                            file.mime,
                            file.filename.as_deref().unwrap_or("file")
                        ),
                        synthetic: true,
                        ..Default::default()
                    })
                }
                other => other.clone(),
            };
            Part::new(session_id.clone(), info.id.clone(), kind)
        })
        .collect();
    MessageWithParts { info: Message::User(info), parts }
}
