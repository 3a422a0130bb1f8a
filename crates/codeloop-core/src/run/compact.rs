//! Compaction inside the run loop: creating compaction requests, the pre-call overflow check, and
//! processing a request into an anchored summary with an explicit tail (reference §6).

use codeloop_provider::{ChatMessage, ProviderRequest, ToolChoice, UserContent};
use codeloop_store::MessageWithParts;
use codeloop_types::{AssistantError, EventPayload, Message, MessageId, Part, PartKind, UserMessage};

use super::turn::estimate_request_tokens;
use super::{Flow, Latest, MAX_NO_PROGRESS_COMPACTIONS, Run};
use crate::agents::COMPACTION_AGENT;
use crate::compaction::{
    CONTINUE_TEXT, OVERFLOW_MEDIA_NOTE, SUMMARY_SYSTEM_PROMPT, WorkRecord, carried_budget,
    carried_user_words, drop_model_work_state, fit_carried, fit_outputs, is_overflow, max_output,
    request_size, select_tail, summary_failure, summary_prompt, summary_text, tail_budget, usable,
    user_words_block, work_state,
};
use crate::compaction::{RestoreCheck, files_in_view, new_compaction_request, restored_files, user_info};
use crate::error::RunError;
use crate::outcome::StopReason;
use crate::processor::Processor;
use crate::projection::CARRIED_KEY;
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
        // Tool outputs go whole to the summariser when they fit its window; else the longest are cut first,
        // head and tail kept (DESIGN.md §4 "What survives a compaction", rule 4).
        let options = ProjectionOptions { strip_media: true, tool_output_max_chars: None };
        let mut messages = to_provider_messages(&head, &model.reference, options);
        let record = WorkRecord::of(&head);
        let in_view = files_in_view(&head);
        let mut prompt = summary_prompt(previous.as_deref(), &record);
        if let Some(focus) = &part.focus {
            // `/compact FOCUS`: what the person wants the summary to keep in view.
            prompt.push_str(&format!(
                "\n\nThe user asked this summary to focus on: {focus}. Keep everything about it in detail."
            ));
        }
        let room = usable(&model.limits, &compaction).saturating_mul(4) as usize;
        fit_outputs(&mut messages, room.saturating_sub(prompt.len() + SUMMARY_SYSTEM_PROMPT.len()));
        let mut carried = None;
        for attempt in 0..2 {
            let asked = match attempt {
                0 => prompt.clone(),
                _ => format!("{prompt}\n\n{BRIEF_RETRY}"),
            };
            let mut attempt_messages = messages.clone();
            attempt_messages.push(ChatMessage::User(vec![UserContent::Text(asked)]));
            match self
                .summary_attempt(&agent, &model, &request_user, attempt_messages, replay.is_some())
                .await?
            {
                Attempt::Failed(flow) => return Ok(flow),
                Attempt::Done(finished) => {
                    carried = Some(*finished);
                    break;
                }
                Attempt::Unusable(why) => {
                    tracing::warn!(
                        "the summary was not used: {why}{}",
                        if attempt == 0 { "; asking again" } else { "" }
                    );
                }
            }
        }
        // The message an overflow replays comes right after the summary: it is not carried twice.
        let mut tail_ids: std::collections::HashSet<&MessageId> = tail.iter().collect();
        let replayed = replay.as_ref().map(|(user, _)| user.id.clone());
        tail_ids.extend(replayed.as_ref());
        let session_agent = self.agent(&request_user.agent)?;
        let session_model = self.resolve_model(&request_user.model)?;
        let offer = self.offer(&session_agent, &session_model);
        let prefix_chars: usize = offer.system.stable.iter().map(String::len).sum::<usize>()
            + offer.tools.iter().map(|t| t.description.len() + t.parameters.to_string().len()).sum::<usize>();
        let budget =
            carried_budget(usable(&session_model.limits, &compaction), (prefix_chars as u64).div_ceil(4));
        let words = carried_user_words(&self.history[..index], &tail_ids, budget);
        let state = work_state(&self.history[..index], &codeloop_tools::real_path(&self.paths.root));
        let nonce = MessageId::new().to_string();
        let nonce: String = nonce.chars().rev().take(8).collect();
        let files = {
            // Restoring is a read the session's agent could make without asking anyone.
            let layers = self.layers(&session_agent);
            let defaults = self.services.permissions.defaults();
            let narrowing = self.policy.narrowing.clone();
            let allowed = |rel: &str| {
                use codeloop_types::PermissionAction::{Allow, Deny};
                crate::permission::evaluate("read", rel, [defaults, layers.as_slice()]).0 == Allow
                    && crate::permission::evaluate("read", rel, [narrowing.as_slice()]).0 != Deny
            };
            let check = RestoreCheck { project: &self.paths, allowed: &allowed };
            restored_files(&in_view, &check, budget, &nonce)
        };
        let finished = match carried {
            Some(finished) => finished,
            None => {
                let message = "the model's summary was cut off or repeated itself twice: codeloop carries its own \
                               (the first request, the user's words and the work state)";
                self.services.bus.publish(EventPayload::SessionWarning {
                    session_id: self.session.id.clone(),
                    message: message.into(),
                });
                self.own_summary(&request_user, &agent.name, &model, words.first().map(String::as_str))
            }
        };
        let (mut state, mut words, mut files) = (state, words, files);
        fit_carried(budget, summary_text(&finished).len(), &mut state, &mut words, &mut files);
        self.carry(finished, &state, &words, files, &nonce);
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

    /// One summary request; `Unusable` when the summary was cut off or repeats itself (its message is kept
    /// as an error, so it is never carried).
    async fn summary_attempt(
        &mut self,
        agent: &crate::agents::Agent,
        model: &crate::models::ResolvedModel,
        request_user: &UserMessage,
        messages: Vec<ChatMessage>,
        replaying: bool,
    ) -> Result<Attempt, RunError> {
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
        let ctx = self.turn_context(agent, model, false, true, estimate, Vec::new());
        let mut summary = self.new_assistant(request_user, &agent.name, model);
        summary.summary = true;
        let mut processor = Processor::new(ctx, summary);
        let end = self.attempts(&mut processor, model, request).await;
        let error = match (end.error, end.overflow) {
            (_, true) => Some(AssistantError::ContextOverflow {
                message: if replaying {
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
        if let Some(error) = error {
            self.record_assistant(MessageWithParts {
                info: Message::Assistant(finished.message),
                parts: finished.parts,
            });
            return Ok(Attempt::Failed(Flow::Stop(if error.is_aborted() {
                StopReason::Interrupted
            } else {
                StopReason::Error(error)
            })));
        }
        let text = summary_text(&MessageWithParts {
            info: Message::Assistant(finished.message.clone()),
            parts: finished.parts.clone(),
        });
        let cut_off = finished.message.finish == Some(codeloop_types::Finish::Length);
        if let Some(why) = summary_failure(&text, cut_off) {
            // Kept, as an error, so the projection never takes it for a summary.
            finished.message.error =
                Some(AssistantError::Unknown { message: format!("summary not used: {why}") });
            self.services.journal.save_message(&Message::Assistant(finished.message.clone()));
            self.record_assistant(MessageWithParts {
                info: Message::Assistant(finished.message),
                parts: finished.parts,
            });
            return Ok(Attempt::Unusable(why));
        }
        Ok(Attempt::Done(Box::new(MessageWithParts {
            info: Message::Assistant(finished.message),
            parts: finished.parts,
        })))
    }

    /// codeloop's own summary when the model's failed twice: the first request as the objective.
    fn own_summary(
        &mut self,
        request_user: &UserMessage,
        agent: &str,
        model: &crate::models::ResolvedModel,
        first_words: Option<&str>,
    ) -> MessageWithParts {
        let mut info = self.new_assistant(request_user, agent, model);
        info.summary = true;
        info.finish = Some(codeloop_types::Finish::Stop);
        info.time.completed = Some(codeloop_types::now_ms());
        let objective = first_words.unwrap_or("(the user's first request is not in the record)");
        let text = format!(
            "## Objective\n{objective}\n\n## Important details\n(see the user's messages below)\n\n## Next move\n1. \
             Check the work state below, then continue the task.\n\n## Relevant files\n(see the work state)"
        );
        let part = Part::new(
            self.session.id.clone(),
            info.id.clone(),
            PartKind::Text(codeloop_types::TextPart { text, ..Default::default() }),
        );
        self.services.journal.save_message(&Message::Assistant(info.clone()));
        self.services.journal.save_part(&part);
        MessageWithParts { info: Message::Assistant(info), parts: vec![part] }
    }

    /// Records the summary with what is carried beside it: the model's own work state dropped from its
    /// text, codeloop's work state after it, and the user's words (placed after the summary, as a user
    /// message, by the projection).
    fn carry(
        &mut self,
        mut summary: MessageWithParts,
        state: &str,
        words: &[String],
        files: Option<crate::compaction::RestoredFiles>,
        nonce: &str,
    ) {
        for part in &mut summary.parts {
            if let PartKind::Text(text) = &mut part.kind
                && !text.synthetic
            {
                let kept = drop_model_work_state(&text.text);
                if kept != text.text {
                    text.text = kept;
                    self.services.journal.save_part(part);
                }
            }
        }
        let id = summary.info.id().clone();
        let state = Part::synthetic_text(self.session.id.clone(), id.clone(), format!("\n\n{state}"));
        self.services.journal.save_part(&state);
        summary.parts.push(state);
        let words = user_words_block(words, nonce)
            .map(|block| (block, serde_json::json!({ CARRIED_KEY: "user_words", "count": words.len() })));
        let files = files.map(|f| {
            let meta = serde_json::json!({ CARRIED_KEY: "files", "shown": f.shown, "left_out": f.left_out });
            (f.text, meta)
        });
        for (block, meta) in [words, files].into_iter().flatten() {
            let mut part = Part::synthetic_text(self.session.id.clone(), id.clone(), block);
            if let PartKind::Text(text) = &mut part.kind {
                text.metadata = Some(meta);
            }
            self.services.journal.save_part(&part);
            summary.parts.push(part);
        }
        self.record_assistant(summary);
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

/// How one summary request ended.
enum Attempt {
    /// The run stops (an error of the request, or an interruption); the message is recorded.
    Failed(Flow),
    /// Cut off or repeating itself: not carried.
    Unusable(&'static str),
    Done(Box<MessageWithParts>),
}

/// Added to the summary request when the first summary was cut off or repeated itself.
const BRIEF_RETRY: &str = "Your previous summary was cut off or repeated itself. Write it again, briefly: a few \
terse bullets under each heading, each line said once.";

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
